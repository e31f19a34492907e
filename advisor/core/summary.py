"""What a profile says at a glance: the figures ``advisor profile inspect`` prints.

For a parameter-server trace, per step: how many operations on each resource, bytes each way
per parameter server, compute time on the worker and the PS, and the critical path of the step
graph under the mean recorded durations (the step time if only dependencies, not resources,
held it back). An all-reduce trace has no parameter server and no timed transfers, so it is
told in its own terms (``summarize_allreduce``): the program's kind, its gradients and how the
framework bucketed them, the link rate recorded with it, and per step the time of forward,
backward, the optimizer and the rest of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.profile import (
    BACKWARD_PREFIX, FORWARD_OP, OPTIMIZER_OP, Profile, ProgramKind, Resource,
)


@dataclass(frozen=True, slots=True)
class Spread:
    """Mean, median and 10th/90th percentiles of a quantity over the recorded steps (us)."""

    mean: float
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: np.ndarray) -> Spread:
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        return cls(float(values.mean()), float(median), float(p10), float(p90))


@dataclass(frozen=True, slots=True)
class CriticalPath:
    length_us: float
    ops: tuple[str, ...]
    by_resource_us: dict[str, float]


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    ops_by_resource: dict[str, int]
    bytes_per_step: dict[str, int]  # e.g. "downlink ps0" -> bytes
    transfers_per_step: dict[str, int]
    compute_us: dict[str, Spread]  # "worker", "ps": summed op durations per step
    step_us: Spread  # first op start to last op end
    wall_us: Spread | None  # as the client saw it, when recorded
    untraced_wall_us: Spread | None  # steps the client timed untraced after the traced ones, when recorded
    critical_path: CriticalPath
    steps: int
    skipped_steps: int


def durations(profile: Profile) -> np.ndarray:
    """Recorded durations as an array [step, op] in microseconds."""
    return np.array([s.duration_us for s in profile.steps], dtype=float)


def tracing_cost(profile: Profile) -> float | None:
    """How much longer the traced steps' mean client wall was than that of the steps the
    profiling run timed untraced after them (0.05: 5 % longer); None where either is not recorded."""
    walls = [s.wall_us for s in profile.steps if s.wall_us is not None]
    untraced = profile.job.untraced_walls_us
    if not walls or not untraced:
        return None
    return float(np.mean(walls) / np.mean(untraced) - 1)


def summarize(profile: Profile) -> ProfileSummary:
    """Compute the inspection figures for a profile."""
    dur = durations(profile)
    ops_by_resource = {r.value: sum(1 for op in profile.ops if op.resource is r) for r in Resource}
    bytes_per_step: dict[str, int] = {}
    transfers: dict[str, int] = {}
    for op in profile.ops:
        if op.resource.is_transfer:
            key = f"{op.resource.value} ps{op.ps}"
            bytes_per_step[key] = bytes_per_step.get(key, 0) + op.bytes
            transfers[key] = transfers.get(key, 0) + 1
    compute = {}
    for res in (Resource.WORKER, Resource.PS):
        cols = [i for i, op in enumerate(profile.ops) if op.resource is res]
        compute[res.value] = Spread.of(dur[:, cols].sum(axis=1) if cols else np.zeros(len(dur)))
    walls = [s.wall_us for s in profile.steps if s.wall_us is not None]
    return ProfileSummary(
        ops_by_resource=ops_by_resource,
        bytes_per_step=bytes_per_step,
        transfers_per_step=transfers,
        compute_us=compute,
        step_us=Spread.of(np.array([s.end_us for s in profile.steps])),
        wall_us=Spread.of(np.array(walls)) if walls else None,
        untraced_wall_us=Spread.of(np.array(profile.job.untraced_walls_us)) if profile.job.untraced_walls_us else None,
        critical_path=critical_path(profile, dur.mean(axis=0)),
        steps=len(profile.steps),
        skipped_steps=profile.job.skipped_steps,
    )


def critical_path(profile: Profile, op_durations_us: np.ndarray) -> CriticalPath:
    """Longest dependency chain when each op takes ``op_durations_us[i]``."""
    finish = np.zeros(len(profile.ops))
    via = [-1] * len(profile.ops)
    for i in profile.topological_order:
        deps = profile.dep_indices[i]
        if deps:
            j = max(deps, key=lambda d: finish[d])
            via[i] = j
            finish[i] = finish[j]
        finish[i] += op_durations_us[i]
    end = int(np.argmax(finish)) if len(finish) else -1
    chain: list[int] = []
    while end >= 0:
        chain.append(end)
        end = via[end]
    chain.reverse()
    by_resource: dict[str, float] = {}
    for i in chain:
        res = profile.ops[i].resource.value
        by_resource[res] = by_resource.get(res, 0.0) + float(op_durations_us[i])
    return CriticalPath(float(finish.max(initial=0.0)), tuple(profile.ops[i].name for i in chain), by_resource)


FRAMEWORKS = {
    ProgramKind.PYTORCH_DDP: "PyTorch DistributedDataParallel",
    ProgramKind.TF_MWMS: "TensorFlow MultiWorkerMirroredStrategy",
}
PHASES = ("forward", "backward", "optimizer", "other")  # AllReduceSummary.phases_us keys, in step order


@dataclass(frozen=True, slots=True)
class AllReduceSummary:
    kind: str  # ProgramKind value
    framework: str  # for people
    gradients: int  # tensors all-reduced per step
    gradient_bytes: int  # their bytes per step
    buckets: tuple[int, ...] | None  # bytes per bucket in reduce order, as recorded; None: not recorded
    link_bps: float | None  # the link rate recorded with the profile
    link_source: str | None  # where it came from (JobInfo.recorded_bandwidth_source)
    phases_us: dict[str, Spread]  # PHASES -> per-step time
    step_us: Spread  # as the client saw it (wall) where recorded, else the recorded span
    step_is_wall: bool
    steps: int
    skipped_steps: int


def phase_of(name: str) -> str:
    """The step phase of an all-reduce profile's worker op, by the importer's names: ``forward``,
    ``backward/...``, ``optimizer``; any other worker op counts as ``other`` (the loop's rest)."""
    if name == FORWARD_OP:
        return "forward"
    if name.startswith(BACKWARD_PREFIX):
        return "backward"
    if name == OPTIMIZER_OP:
        return "optimizer"
    return "other"  # OTHER_OP and any worker op the importer did not name


def summarize_allreduce(profile: Profile) -> AllReduceSummary:
    """The inspection figures of an all-reduce profile (module docstring)."""
    job = profile.job
    dur = durations(profile)
    grads = [op for op in profile.ops if op.resource is Resource.UPLINK and op.bytes > 0]
    size = {op.name: op.bytes for op in grads}
    columns: dict[str, list[int]] = {phase: [] for phase in PHASES}
    for i, op in enumerate(profile.ops):
        if op.resource is Resource.WORKER:
            columns[phase_of(op.name)].append(i)
    walls = [s.wall_us for s in profile.steps]
    step_is_wall = all(w is not None for w in walls)
    step = np.array(walls if step_is_wall else [s.end_us for s in profile.steps], dtype=float)
    return AllReduceSummary(
        kind=job.kind.value,
        framework=FRAMEWORKS.get(job.kind, job.kind.value),
        gradients=len(grads),
        gradient_bytes=sum(size.values()),
        buckets=None if job.buckets is None else tuple(sum(size[name] for name in b) for b in job.buckets),
        link_bps=job.recorded_bandwidth_bps,
        link_source=job.recorded_bandwidth_source,
        phases_us={phase: Spread.of(dur[:, cols].sum(axis=1) if cols else np.zeros(len(dur)))
                   for phase, cols in columns.items()},
        step_us=Spread.of(step),
        step_is_wall=step_is_wall,
        steps=len(profile.steps),
        skipped_steps=job.skipped_steps,
    )
