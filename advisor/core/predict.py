"""The throughput curve: one simulation per worker count, each with a confidence interval.

Throughput is a time average over the window in which every worker is past its warm-up
(``SimulationResult.throughput``). Its confidence interval comes from **batch means**: the
window is cut into ``batches`` equal slices, the throughput of each slice is one observation,
and the interval is the Student-t interval of their mean. With ``target_rel_halfwidth`` set,
a point is first simulated with ``min_steps`` steps per worker, then with the step count the
interval's width says is needed (at least double), until the half-width is within the target
or ``max_steps`` is reached, so easy points cost little and hard ones get the steps they need.

The simulation function is a parameter so that callers (and tests) can swap engines.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings, SimulationSettingsError

Simulate = Callable[[Profile, NetworkModel, SimulationSettings], SimulationResult]
Progress = Callable[[int, int], None]  # (points done, points in all)


@dataclass(frozen=True, slots=True)
class CurveSettings:
    """How to compute a curve; the defaults follow Li et al. (1000 steps, 50 warm-up)."""

    workers: tuple[int, ...]
    steps: int = 1000  # per worker, when target_rel_halfwidth is None
    warmup_steps: int = 50
    seed: int = 0
    confidence: float = 0.95
    batches: int = 10
    target_rel_halfwidth: float | None = None  # e.g. 0.02 for +-2 %
    min_steps: int = 200
    max_steps: int = 4000

    def __post_init__(self) -> None:
        if not self.workers or any(w < 1 for w in self.workers):
            raise SimulationSettingsError(f"worker counts must be >= 1, got {list(self.workers)}")
        if list(self.workers) != sorted(set(self.workers)):
            raise SimulationSettingsError("worker counts must be increasing and distinct")
        if not 0 < self.confidence < 1:
            raise SimulationSettingsError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.batches < 2:
            raise SimulationSettingsError("batch means need at least 2 batches")
        if self.target_rel_halfwidth is not None and not 0 < self.target_rel_halfwidth < 1:
            raise SimulationSettingsError(f"target half-width must be in (0, 1), got {self.target_rel_halfwidth}")
        if not self.warmup_steps < self.min_steps <= self.max_steps:
            raise SimulationSettingsError("need warmup_steps < min_steps <= max_steps")


@dataclass(frozen=True, slots=True)
class CurvePoint:
    workers: int
    throughput: float  # examples/s
    low: float  # confidence interval
    high: float
    steps: int  # simulated per worker
    events: int  # op-events the simulation processed

    @property
    def rel_halfwidth(self) -> float:
        return (self.high - self.low) / 2 / self.throughput if self.throughput > 0 else math.inf


def throughput_interval(
    result: SimulationResult, warmup_steps: int, batches: int = 10, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high) examples/s over the measurement window, by batch means."""
    start, stop = result.measurement_window(warmup_steps)
    edges = np.linspace(start, stop, batches + 1)
    done = np.zeros(batches)
    for worker_ends in result.step_ends_s:
        t = np.asarray(worker_ends)
        t = t[(t > start) & (t <= stop)]
        # slice i holds the steps with edges[i] < t <= edges[i + 1], as throughput() counts
        done += np.bincount(np.searchsorted(edges, t, side="left") - 1, minlength=batches)[:batches]
    per_batch = done * result.batch_size / np.diff(edges)
    mean = float(per_batch.mean())
    half = float(stats.t.ppf(0.5 + confidence / 2, batches - 1) * per_batch.std(ddof=1) / math.sqrt(batches))
    return mean, max(mean - half, 0.0), mean + half


def predict_point(
    profile: Profile, network: NetworkModel, workers: int, cfg: CurveSettings, simulate: Simulate
) -> CurvePoint:
    """One point of the curve, doubling the steps until the interval is narrow enough."""
    steps = cfg.steps if cfg.target_rel_halfwidth is None else cfg.min_steps
    while True:
        settings = SimulationSettings(workers=workers, steps=steps, warmup_steps=cfg.warmup_steps, seed=cfg.seed)
        result = simulate(profile, network, settings)
        mean, low, high = throughput_interval(result, cfg.warmup_steps, cfg.batches, cfg.confidence)
        point = CurvePoint(workers, mean, low, high, steps, result.events)
        target = cfg.target_rel_halfwidth
        if target is None or point.rel_halfwidth <= target or steps >= cfg.max_steps:
            return point
        steps = next_step_count(steps, cfg.warmup_steps, point.rel_halfwidth, target, cfg.max_steps)


def next_step_count(steps: int, warmup: int, halfwidth: float, target: float, max_steps: int) -> int:
    """Steps for the next try: the half-width shrinks as 1/sqrt(measured steps), so aim there
    with 20 % to spare; at least double (the estimate from a short run is itself noisy)."""
    measured = steps - warmup
    needed = warmup + math.ceil(measured * (halfwidth / target) ** 2 * 1.2)
    return min(max(needed, 2 * steps), max_steps)


def predict_curve(
    profile: Profile,
    network: NetworkModel,
    cfg: CurveSettings,
    simulate: Simulate,
    progress: Progress | None = None,
) -> tuple[CurvePoint, ...]:
    """The curve over ``cfg.workers``; ``progress`` is told after each point."""
    points = []
    for i, w in enumerate(cfg.workers):
        points.append(predict_point(profile, network, w, cfg, simulate))
        if progress is not None:
            progress(i + 1, len(cfg.workers))
    return tuple(points)

