"""The fast engine: lays out the compiled loop's state (``loop.py``), runs it, shapes results.

``simulate_fast`` is a plain simulation: every worker runs its ``steps``, as ``simulate``
promises. ``FastRun`` is one endless run looked at step by step: ``advance(n)`` continues it
until the first worker has finished n steps (``loop.py``: pause and resume). A curve point
that needs more steps thus continues its run instead of starting over, and the extended run
is exactly the longer run from the start with the same seed. ``Compiled`` is what all runs
of one profile on one network share (the merged graph), built once per curve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettingsError, TimelineEvent
from advisor.core.models.ps_des.simulator.inputs import SimInputs, check_replicas, prepare_graph, with_steps
from advisor.core.models.ps_des.simulator.heaps import E_OP_BITS, E_Q_BITS, E_Q_OFFSET, E_W_BITS
from advisor.core.models.ps_des.simulator.jit import call, quantize
from advisor.core.models.ps_des.simulator.kernel import GENERAL, PROPORTIONAL, UNIFORM, new_links
from advisor.core.models.ps_des.simulator.loop import EVENTS, LIMIT, PAUSED, RESUMABLE, RESUME, STALLED, TL_LEN, run
from advisor.core.models.ps_des.simulator.plan import FastPlan, build_plan


@dataclass(frozen=True)
class Compiled:
    """One profile on one network, laid out for the loop; independent of workers and seed."""

    profile: Profile
    inputs: SimInputs  # prepare_graph's, or any inputs of this profile and network
    plan: FastPlan
    fifo: np.ndarray  # int8 per slot, see fifo_slots

    @classmethod
    def build(cls, profile: Profile, inputs: SimInputs, compress: bool = True) -> Compiled:
        plan = build_plan(profile, inputs, compress=compress)
        return cls(profile, inputs, plan, fifo_slots(plan, inputs))


@dataclass(frozen=True)
class Observed:
    """A ``FastRun`` up to ``until_s``: every step end by then, per worker, and no later one."""

    step_ends_s: tuple[np.ndarray, ...]  # per worker, the ends of its finished steps
    until_s: float  # when the first worker finished its ``steps``-th step
    steps: int
    events: int  # op-events processed since the run began
    batch_size: int
    updates_s: np.ndarray | None = None  # synchronous PS: every update applied by until_s


def simulate_fast(
    profile: Profile, inputs: SimInputs, record_timeline: bool = False, compress: bool = True
) -> SimulationResult:
    """Run the compiled engine on prepared inputs (``compress`` merges exact compute chains)."""
    c = Compiled.build(profile, inputs, compress)
    state = _new_state(c, inputs, inputs.steps, record_timeline)
    ctr, tl = state[5], state[6]
    call(run, _graph(c, inputs), _ipar(c, inputs, inputs.steps, record_timeline), _fpar(inputs), *state)
    ends = state[0][4]
    return SimulationResult(
        workers=inputs.workers,
        batch_size=profile.job.batch_size,
        # NaN: steps a synchronous worker never ran (it waited for an update that never came)
        step_ends_s=tuple(tuple(row[~np.isnan(row)].tolist()) for row in ends),
        events=int(ctr[EVENTS]),
        timeline=_timeline(profile, inputs, c.plan, tl, int(ctr[TL_LEN])) if record_timeline else None,
        updates_s=_updates(state, inputs),
    )


def _updates(state: tuple, inputs: SimInputs) -> tuple[float, ...] | None:
    """The synchronous PS's update times so far (None when asynchronous)."""
    ws = state[0]
    return tuple(ws[10][: int(ws[9][3])].tolist()) if inputs.sync_replicas else None


class FastRun:
    """An endless run of ``workers`` workers that ``advance`` continues (module docstring)."""

    def __init__(
        self, compiled: Compiled, workers: int, seed: int = 0, start_s: np.ndarray | None = None, sync_replicas: int = 0
    ) -> None:
        self._c = compiled
        replicas = check_replicas(sync_replicas, workers)
        self._base = replace(compiled.inputs, workers=workers, start_s=start_s, sync_replicas=replicas)
        self._seed = seed
        self._state: tuple | None = None
        self.steps = 0

    def advance(self, steps: int) -> Observed:
        """Continue until the first worker has finished ``steps`` steps (more than so far)."""
        if steps <= self.steps:
            raise SimulationSettingsError(f"a run only goes forward: at {self.steps} steps, asked for {steps}")
        cap = steps + 1  # workers that finish at the pause instant may begin one more step
        inputs = with_steps(self._base, self._seed, cap)
        if self._state is None or self._state[5][STALLED]:
            self._state = _new_state(self._c, inputs, cap, False)
            resume = 0
        else:
            self._state = _grown(self._state, cap)
            resume = 1
        ipar = _ipar(self._c, inputs, cap, False)
        ipar[LIMIT], ipar[RESUMABLE], ipar[RESUME] = steps, 1, resume
        ws, ctr = self._state[0], self._state[5]
        ctr[PAUSED] = 0
        call(run, _graph(self._c, inputs), ipar, _fpar(inputs), *self._state)
        self.steps = steps
        ends = ws[4]
        return Observed(
            step_ends_s=tuple(row[: int(np.count_nonzero(~np.isnan(row)))] for row in ends),
            until_s=float(ws[6][0]) if ctr[PAUSED] else float(np.nanmax(ends)),
            steps=steps,
            events=int(ctr[EVENTS]),
            batch_size=self._c.profile.job.batch_size,
            updates_s=None if not inputs.sync_replicas else ws[10][: int(ws[9][3])].copy(),
        )


def _graph(c: Compiled, inputs: SimInputs) -> tuple:
    plan = c.plan
    rand_keys = inputs.random_keys if inputs.random_keys is not None else np.zeros((1, 1, 1), np.float32)
    key_index = plan.transfer_index
    if inputs.recorded_keys is not None:  # every group keyed by its first member, per recorded step
        rand_keys = np.ascontiguousarray(inputs.recorded_keys[None, :, [m[0] for m in plan.members]])
        key_index = np.arange(len(plan.members), dtype=np.int64)
    return (
        plan.slot, plan.bits, plan.instant, plan.count, plan.n_deps, plan.dep_ptr, plan.dep_idx,
        plan.roots, inputs.durations_s, inputs.sampled, plan.priority, key_index, rand_keys,
        plan.member_ptr, plan.member_idx, plan.spans, _shares(inputs),
    )  # fmt: skip


def _shares(inputs: SimInputs) -> np.ndarray:
    """``inputs.share_weights`` as one row per queue ``w * R + slot`` (1 for non-link slots)."""
    R = inputs.slots_per_worker
    weights = inputs.share_weights
    k = 1 if weights is None else weights.shape[3]
    out = np.ones((inputs.workers * R, k))
    if weights is not None:
        for ps in range(inputs.n_ps):
            for d in range(2):
                out[1 + 3 * ps + d :: R] = weights[:, ps, d]
    return out


def _rate_mode(inputs: SimInputs) -> int:
    """How the engine keeps link rates (``kernel.py``): ``UNIFORM`` with one PS, equal weights
    and NICs (every flow of a direction has the same rate); ``PROPORTIONAL`` with one PS, NICs
    no slower than the link and any weights (no NIC can bind: each flow's rate is its weight
    times the direction's level); else ``GENERAL`` (water-filling), as with window caps, whose
    rates depend on the other direction's flows."""
    if inputs.n_ps != 1 or _hetnic(inputs) or inputs.window_gain > 0:
        return GENERAL
    if inputs.share_weights is None or bool((inputs.share_weights == 1.0).all()):
        return UNIFORM
    return PROPORTIONAL if inputs.nic_bps >= inputs.link_bps else GENERAL


def _hetnic(inputs: SimInputs) -> bool:
    """Do the workers' NIC rates differ from ``nic_bps``?"""
    return any(inputs.nic_of(w) != inputs.nic_bps for w in range(inputs.workers))


def _ipar(c: Compiled, inputs: SimInputs, cap: int, record: bool) -> np.ndarray:
    W, G, R = inputs.workers, len(c.plan.members), inputs.slots_per_worker
    keys = 2 if inputs.recorded_keys is not None else int(inputs.random_keys is not None)
    return np.array([W, R, inputs.n_ps, cap, keys, record, G, cap, 0, 0, _rate_mode(inputs),
                     inputs.sync_replicas, _hetnic(inputs)], np.int64)  # fmt: skip


def _fpar(inputs: SimInputs) -> np.ndarray:
    return np.array([inputs.link_bps, inputs.nic_bps, inputs.win_bits, inputs.request_queue_s,
                     inputs.multi_flow_goodput, inputs.window_gain, inputs.two_way_efficiency], np.float64)


def _new_state(c: Compiled, inputs: SimInputs, cap: int, record: bool) -> tuple:
    """``(ws, ch, qs, ev, links, ctr, tl)`` for ``loop.run``, zeroed; step ends NaN until known."""
    W, G, R = inputs.workers, len(c.plan.members), inputs.slots_per_worker
    starts = np.array([inputs.start_of(w) for w in range(W)], np.float64)
    ws = (np.zeros((W, G), np.int64), np.zeros(W, np.int64), np.zeros(W, np.int64), np.zeros((W, G), np.int8),
          np.full((W, cap), np.nan), starts, np.zeros(1),
          np.zeros(W, np.int64), np.zeros(W, np.int64), np.zeros(5, np.int64), np.zeros(_update_cap(inputs, W, cap)))  # fmt: skip
    nq = W * R
    ch = (np.zeros(nq, np.int8), np.zeros(nq, np.int64), np.zeros(nq, np.int8), np.zeros(nq, np.int64), np.zeros(nq))
    qcap = int(np.bincount(c.plan.slot, minlength=R).max()) + 1
    qs = (np.zeros((nq, qcap), np.int8), np.zeros((nq, qcap)), np.zeros((nq, qcap), np.int64),
          np.zeros((nq, qcap), np.int64), np.zeros(nq, np.int64), np.zeros(nq, np.int64), np.tile(c.fifo, W))  # fmt: skip
    ecap = nq + W * G + W + 1  # compute queues, zero-byte ops or deferred pulls, starts
    if G >= 1 << E_OP_BITS or W >= 1 << E_W_BITS or nq + E_Q_OFFSET >= 1 << E_Q_BITS:
        raise SimulationSettingsError(f"too large for the engine's event heap: {G} merged operations, {W} workers, "
                                      f"{nq} queues (at most {1 << E_OP_BITS}, {1 << E_W_BITS}, {(1 << E_Q_BITS) - 5})")
    ev = (np.zeros(ecap), np.zeros(ecap, np.int64), np.zeros(ecap, np.int64), np.zeros(1, np.int64))
    tcap = W * cap * (G + int((c.plan.slot % 3 != 0).sum())) if record else 1
    tl = (np.zeros(tcap, np.int64), np.zeros(tcap, np.int64), np.zeros(tcap, np.int64), np.zeros(tcap), np.zeros(tcap))
    return ws, ch, qs, ev, new_links(W, R, inputs.n_ps, inputs.nics()), np.zeros(5, np.int64), tl


def _update_cap(inputs: SimInputs, workers: int, cap: int) -> int:
    """Room for the synchronous PS's update times: at most one per step of any worker."""
    return workers * cap + 1 if inputs.sync_replicas else 1


def _grown(state: tuple, cap: int) -> tuple:
    """``state`` with room for ``cap`` step ends per worker (the rest is unchanged)."""
    ws = state[0]
    W = ws[4].shape[0]
    ends = np.full((W, cap), np.nan)
    ends[:, : ws[4].shape[1]] = ws[4]
    updates = ws[10]
    if updates.shape[0] > 1:
        updates = np.zeros(W * cap + 1)
        updates[: ws[10].shape[0]] = ws[10]
    return ((*ws[:4], ends, *ws[5:10], updates), *state[1:])


def fifo_slots(plan: FastPlan, inputs: SimInputs) -> np.ndarray:
    """Per slot: 1 where the scheduler queue's keys always arrive in increasing order
    (``heaps.py``): computation unless the recorded order keys it; links when all streams share
    one priority, none is split by an HTTP/2 window (no second-round keys) and no order is drawn
    or recorded."""
    R = inputs.slots_per_worker
    link = np.array([inputs.is_link_slot(s) for s in range(R)])
    prio = plan.priority[np.isin(plan.slot, np.flatnonzero(link))]
    keyed = inputs.recorded_keys is not None
    same = not keyed and inputs.random_keys is None and inputs.win_bits == np.inf and \
        (prio.size == 0 or bool((prio == prio[0]).all()))
    return np.where(link, np.int8(same), np.int8(not keyed)).astype(np.int8)


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


def compile_profile(
    profile: Profile,
    network: NetworkModel,
    worker_speeds: tuple[float, ...] = (),
    worker_bandwidths_bps: tuple[float, ...] = (),
) -> Compiled:
    """``Compiled`` for ``profile`` on ``network`` (and the workers' speeds and link rates, if
    they differ; ``inputs.py``): build once, then start any ``FastRun``."""
    return Compiled.build(profile, prepare_graph(profile, network, worker_speeds, worker_bandwidths_bps))
