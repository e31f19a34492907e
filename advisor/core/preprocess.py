"""Preprocessing of a recorded profile before simulation (Li et al. 2020, sections 3.2.1 and 3.4).

A recorded transfer lasts from "sender starts responding" to "receiver has parsed the
tensor", so it includes parsing (deserialisation, copies), which costs about
``alpha * bytes + beta`` and does not use the network. ``split_parsing_overhead`` moves that
cost out of the transfer into a computation on the receiver that the transfer's consumers
wait for; ``retime_transfers`` then gives every transfer the duration it would have on a
link of another bandwidth. Both return new profiles; nothing is modified in place.
"""

from __future__ import annotations

import math

from advisor.core.profile import JobInfo, Operation, Profile, Resource, StepTiming, build_profile
from advisor.errors import ProfileError

PARSE_OP_TYPE = "ParseOverhead"
PARSE_PREFIX = "parse:"
GAP_OP_TYPE = "ClientGap"
GAP_NAME = "worker:client-gap"


def parsing_overhead_us(nbytes: int, alpha_us_per_byte: float, beta_us: float) -> float:
    """The linear overhead model op.overhead = alpha * op.size + beta (section 3.2.1)."""
    return alpha_us_per_byte * nbytes + beta_us


def split_parsing_overhead(profile: Profile, alpha_us_per_byte: float, beta_us: float) -> Profile:
    """Move each transfer's parsing overhead into a new op on the receiver.

    For transfer T with overhead o and recorded duration d, T keeps ``max(d - o, 0)`` and a new
    op ``parse:T`` (on the worker for a pull, on its PS for a push) takes the rest, starting
    when T's network part ends; everything that waited for T now waits for ``parse:T``. The
    recorded span of each step is unchanged.
    """
    _check_coefficients(alpha_us_per_byte, beta_us)
    if any(op.op_type == PARSE_OP_TYPE for op in profile.ops):
        raise ProfileError("the profile's parsing overhead is already split out")
    parse_of = {op.name: PARSE_PREFIX + op.name for op in profile.ops if op.resource.is_transfer}
    ops: list[Operation] = []
    for op in profile.ops:
        deps = tuple(parse_of.get(d, d) for d in op.deps)
        ops.append(op.model_copy(update={"deps": deps}))
        if op.resource.is_transfer:
            on_worker = op.resource is Resource.DOWNLINK
            ops.append(
                Operation(
                    name=parse_of[op.name],
                    resource=Resource.WORKER if on_worker else Resource.PS,
                    ps=None if on_worker else op.ps,
                    deps=(op.name,),
                    op_type=PARSE_OP_TYPE,
                )
            )
    steps = tuple(_split_step(profile, s, alpha_us_per_byte, beta_us) for s in profile.steps)
    return build_profile(job=profile.job, ops=tuple(ops), steps=steps)


def _split_step(profile: Profile, step: StepTiming, alpha: float, beta: float) -> StepTiming:
    starts: list[float] = []
    durs: list[float] = []
    for op, start, dur in zip(profile.ops, step.start_us, step.duration_us):
        if not op.resource.is_transfer:
            starts.append(start)
            durs.append(dur)
            continue
        network = max(dur - parsing_overhead_us(op.bytes, alpha, beta), 0.0)
        starts += [start, start + network]
        durs += [network, dur - network]
    return step.model_copy(update={"start_us": tuple(starts), "duration_us": tuple(durs)})


def transfer_time_us(nbytes: int, bandwidth_bps: float, efficiency: float = 1.0) -> float:
    """Time to send ``nbytes`` alone on a link of ``bandwidth_bps`` at the given goodput fraction."""
    return nbytes * 8 / (bandwidth_bps * efficiency) * 1e6


def retime_transfers(profile: Profile, bandwidth_bps: float, *, efficiency: float = 1.0) -> Profile:
    """Give each transfer the duration it takes alone on a link of ``bandwidth_bps``.

    ``efficiency`` is the goodput fraction of the nominal rate (TCP and framing overhead).
    Compute durations stay as recorded. Start times are re-derived per step as the earliest
    time every dependency has finished, since recorded starts no longer hold.
    """
    if not (math.isfinite(bandwidth_bps) and bandwidth_bps > 0):
        raise ProfileError(f"bandwidth must be a finite number > 0 bit/s, got {bandwidth_bps!r}")
    if not (math.isfinite(efficiency) and 0 < efficiency <= 1):
        raise ProfileError(f"efficiency must be in (0, 1], got {efficiency!r}")
    new_time = [
        transfer_time_us(op.bytes, bandwidth_bps, efficiency) if op.resource.is_transfer else None
        for op in profile.ops
    ]
    steps = []
    for step in profile.steps:
        durs = tuple(d if t is None else t for d, t in zip(step.duration_us, new_time))
        steps.append(step.model_copy(update={"duration_us": durs, "start_us": _earliest_starts(profile, durs)}))
    job: JobInfo = profile.job.model_copy(update={"recorded_bandwidth_bps": bandwidth_bps,
                                                  "recorded_bandwidth_source": None})
    return build_profile(job=job, ops=profile.ops, steps=tuple(steps))


def _earliest_starts(profile: Profile, durations: tuple[float, ...]) -> tuple[float, ...]:
    start = [0.0] * len(profile.ops)
    for i in profile.topological_order:
        start[i] = max((start[d] + durations[d] for d in profile.dep_indices[i]), default=0.0)
    return tuple(start)


def _check_coefficients(alpha: float, beta: float) -> None:
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not (math.isfinite(value) and value >= 0):
            raise ProfileError(f"overhead coefficient {name} must be a finite number >= 0, got {value!r}")


def add_client_gap(profile: Profile) -> Profile:
    """Make the time between steps part of the step: a worker op after everything else.

    The client's ``session.run`` takes ``wall_us``, longer than the span of the step's records
    (request set-up, fetching results, the Python loop). A worker is idle for the difference
    between steps, so replaying only the records over-predicts throughput. This adds
    ``worker:client-gap`` (duration ``wall_us - end_us``, at least 0) depending on every op
    that nothing depends on. Steps without ``wall_us`` get a zero gap.
    """
    if any(op.op_type == GAP_OP_TYPE for op in profile.ops):
        raise ProfileError("the profile already has its client gap")
    has_dependents = {d for op in profile.ops for d in op.deps}
    sinks = tuple(op.name for op in profile.ops if op.name not in has_dependents)
    gap = Operation(name=GAP_NAME, resource=Resource.WORKER, deps=sinks, op_type=GAP_OP_TYPE)
    steps = []
    for step in profile.steps:
        end = step.end_us
        length = max((step.wall_us or end) - end, 0.0)
        steps.append(step.model_copy(update={"start_us": step.start_us + (end,), "duration_us": step.duration_us + (length,)}))
    return build_profile(job=profile.job, ops=profile.ops + (gap,), steps=tuple(steps))
