"""The fast engine: builds the compiled loop's arrays, runs it, and shapes the result."""

from __future__ import annotations

import numpy as np

from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationResult, TimelineEvent
from advisor.core.simulator.inputs import SimInputs
from advisor.core.simulator.jit import quantize
from advisor.core.simulator.loop import run
from advisor.core.simulator.plan import FastPlan, build_plan


def simulate_fast(
    profile: Profile, inputs: SimInputs, record_timeline: bool = False, compress: bool = True
) -> SimulationResult:
    """Run the compiled engine on prepared inputs (``compress`` merges exact compute chains)."""
    plan = build_plan(profile, inputs, compress=compress)
    W, G, R = inputs.workers, len(plan.members), inputs.slots_per_worker
    rand_keys = inputs.random_keys if inputs.random_keys is not None else np.zeros((1, 1, 1), np.float32)
    graph = (
        plan.slot, plan.bits, plan.instant, plan.count, plan.n_deps, plan.dep_ptr, plan.dep_idx,
        plan.roots, inputs.durations_s, inputs.sampled, plan.priority, plan.transfer_index, rand_keys,
        plan.member_ptr, plan.member_idx,
    )  # fmt: skip
    ipar = np.array([W, R, inputs.n_ps, inputs.steps, inputs.random_keys is not None, record_timeline, G], np.int64)
    fpar = np.array([inputs.link_bps, inputs.nic_bps, inputs.win_bits, inputs.queue_delay_s], np.float64)
    ws = (
        np.zeros((W, G), np.int64), np.zeros(W, np.int64), np.zeros(W, np.int64),
        np.zeros((W, G), np.int8), np.zeros((W, inputs.steps), np.float64),
        np.array([inputs.start_of(w) for w in range(W)], np.float64),
    )  # fmt: skip
    nq = W * R
    ch = (np.zeros(nq, np.int8), np.zeros(nq, np.int64), np.zeros(nq, np.int8), np.zeros(nq, np.int64), np.zeros(nq))
    cap = int(np.bincount(plan.slot, minlength=R).max()) + 1
    qs = (np.zeros((nq, cap), np.int8), np.zeros((nq, cap)), np.zeros((nq, cap), np.int64),
          np.zeros((nq, cap), np.int64), np.zeros(nq, np.int64))  # fmt: skip
    ecap = nq + W * G + W + 1  # queues (compute or waiting link chunks), zero-byte ops, starts
    ev = (np.zeros(ecap), np.zeros(ecap, np.int64), np.zeros(ecap, np.int64), np.zeros(ecap, np.int64),
          np.zeros(ecap, np.int64), np.zeros(1, np.int64))  # fmt: skip
    nflow = W * inputs.n_ps
    links = (
        np.zeros((2, nflow), np.int64), np.zeros(2, np.int64), np.zeros(nq, np.int64), np.zeros(2),
        np.zeros(nq), np.zeros(nq), np.zeros(nq), np.zeros(2), np.zeros(2, np.int8),
        np.zeros(2, np.int64), np.zeros(2, np.int64),
        np.zeros(inputs.n_ps), np.zeros(W), np.zeros(inputs.n_ps, np.int64), np.zeros(W, np.int64),
        np.zeros(max(nflow, 1), np.bool_),
        np.zeros((2, inputs.n_ps), np.int64), np.zeros(nq, np.int8),
    )  # fmt: skip
    ctr = np.zeros(3, np.int64)
    tcap = W * inputs.steps * (G + int((plan.slot % 3 != 0).sum())) if record_timeline else 1
    tl = (np.zeros(tcap, np.int64), np.zeros(tcap, np.int64), np.zeros(tcap, np.int64), np.zeros(tcap), np.zeros(tcap))
    run(graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl)
    return SimulationResult(
        workers=W,
        batch_size=profile.job.batch_size,
        step_ends_s=tuple(tuple(row) for row in ws[4].tolist()),
        events=int(ctr[1]),
        timeline=_timeline(profile, inputs, plan, tl, int(ctr[2])) if record_timeline else None,
    )


def _timeline(profile: Profile, inputs: SimInputs, plan: FastPlan, tl: tuple, n: int) -> tuple[TimelineEvent, ...]:
    """Timeline events, a merged chain expanded into its operations back to back."""
    out: list[TimelineEvent] = []
    for w, k, g, start, end in zip(*(col[:n].tolist() for col in tl)):
        members = plan.members[g]
        t = start
        for pos, op_i in enumerate(members):
            op = profile.ops[op_i]
            stop = end if pos == len(members) - 1 else quantize(t + float(inputs.durations_s[inputs.sampled[w, k], op_i]))
            out.append(TimelineEvent(w, k, op.name, op.resource.value, op.ps, t, stop))
            t = stop
    return tuple(out)
