"""What a profile says at a glance: the figures ``advisor profile inspect`` prints.

Per step: how many operations on each resource, bytes each way per parameter server,
compute time on the worker and the PS, and the critical path of the step graph under the
mean recorded durations (the step time if only dependencies, not resources, held it back).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.profile import Profile, Resource


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
    critical_path: CriticalPath
    steps: int
    skipped_steps: int


def durations(profile: Profile) -> np.ndarray:
    """Recorded durations as an array [step, op] in microseconds."""
    return np.array([s.duration_us for s in profile.steps], dtype=float)


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
