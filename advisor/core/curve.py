"""The throughput curve of any model: one run per worker count, each with a confidence interval.

This module knows only the model protocol (``core/models/protocol.py``): a model's ``Run`` is
continued (``advance``) until the interval is narrow enough, and the same code serves every
model. Throughput is a time average over the window in which every worker is past its warm-up
and the samples last (``Samples.until_s``: until the first worker finishes the step count, or, for
a synchronous model, until every worker has ended that step). Its confidence interval comes from **batch means**:
the window is cut into ``batches`` equal slices, the throughput of each slice (measured on the
workers' progress, see ``batch_means``) is one observation, and the interval is the Student-t
interval of their mean. With ``target_rel_halfwidth`` set, a point is first run to
``min_steps`` steps per worker, then continued to the step count the interval's width says is
needed (at least a quarter more, at most double), until the half-width is within the target or
``max_steps`` is reached, so easy points cost little and hard ones get the steps they need.
A run continued to n steps gives what a run of n steps from the start with the same seed gives
(``CurvePoint.events`` counts the run once). A closed-form model answers at once (``Exact``):
its point has no interval.

The W points of a curve are independent (each run is seeded with ``CurveSettings.seed`` alone),
so ``predict_curve`` may hand them to a ``Mapper``, a ``map``-like callable that an adapter
backs with a process pool (``advisor/parallel.py``); the core starts no process itself, and
the curve is the same whichever mapper computes it and in whatever order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from advisor.core.models.protocol import Exact, ModelInputs, ModelParams, Run, ThroughputModel
from advisor.core.sim_types import SimulationResult, SimulationSettingsError
from advisor.errors import ModelInputError

Progress = Callable[[int, int], None]  # (points done, points in all)
CONTINUED_GROWTH = 1.25  # least growth of a continued run's step count (module docstring)
CONTINUED_MAX_GROWTH = 2.0  # most growth of a continued run's step count in one look


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
    min_steps: int = 150  # benchmarks/stopping_rule.py: as honest as 200 steps, 18 % fewer events
    max_steps: int = 4000

    def __post_init__(self) -> None:
        """Refuses what no run can do. A fixed run simulates ``steps`` per worker, so its warm-up
        must be shorter than that; an adaptive run starts at ``min_steps`` and stops by
        ``max_steps``, so its warm-up must be shorter than ``min_steps``."""
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
        if self.seed < 0:
            raise SimulationSettingsError(
                f"seed must be >= 0 (numpy seeds its random generators with integers >= 0), got {self.seed}")
        if self.warmup_steps < 0:
            raise SimulationSettingsError(f"warm-up steps must be >= 0, got {self.warmup_steps}")
        if self.steps < 1:
            raise SimulationSettingsError(f"steps per worker must be >= 1, got {self.steps}")
        if self.target_rel_halfwidth is None:
            if self.warmup_steps >= self.steps:
                raise SimulationSettingsError(
                    f"the warm-up ({self.warmup_steps} steps) must be shorter than the {self.steps} steps simulated "
                    "per worker: it is part of them and not measured")
        elif not self.warmup_steps < self.min_steps <= self.max_steps:
            raise SimulationSettingsError(
                "an adaptive curve needs warm-up steps < min_steps <= max_steps, got "
                f"{self.warmup_steps} < {self.min_steps} <= {self.max_steps}")


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
    return batch_means(result.step_ends_s, start, stop, result.batch_size, batches, confidence)


def batch_means(
    step_ends_s: Sequence[Sequence[float]] | Sequence[np.ndarray],
    start: float,
    stop: float,
    batch_size: int,
    batches: int = 10,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(mean, low, high) examples/s of the steps that end in (start, stop], by batch means.

    The mean counts whole steps, as ``SimulationResult.throughput`` does. The spread of the
    slices is measured on each worker's *progress* (steps done, the step in flight counted by
    the fraction of it that has elapsed), not on whole-step counts: a slice holds about the
    same whole number of steps however much the step times vary, so counts would report a
    width of 0 for a single worker whose steps vary by several per cent.
    """
    edges = np.linspace(start, stop, batches + 1)
    done = 0
    progress = np.zeros(batches)
    for worker_ends in step_ends_s:
        progress += np.diff(_progress_at(np.asarray(worker_ends, dtype=np.float64), edges, stop))
        t = np.asarray(worker_ends)
        done += int(np.count_nonzero((t > start) & (t <= stop)))
    per_batch = progress * batch_size / np.diff(edges)
    mean = done * batch_size / (stop - start)
    from advisor.core.numeric import student_t_quantile

    half = float(student_t_quantile(0.5 + confidence / 2, batches - 1) * per_batch.std(ddof=1) / math.sqrt(batches))
    return mean, max(mean - half, 0.0), mean + half


def _progress_at(ends: np.ndarray, times: np.ndarray, stop: float) -> np.ndarray:
    """Steps a worker has done at each of ``times`` (all <= ``stop``): k at its k-th step end,
    linear in between (its first step starts at 0). Only the ends up to ``stop`` are read, so a
    continued run, which knows nothing later, measures what a longer plain run measures; after
    the last of them, the step in flight counts the fraction of a mean step that has elapsed
    (at most one)."""
    ends = ends[ends <= stop]
    if len(ends) == 0:
        return np.zeros(len(times))
    done = np.interp(times, np.concatenate(([0.0], ends)), np.arange(len(ends) + 1, dtype=np.float64))
    mean_step = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ends[0]
    after = times > ends[-1]
    if mean_step > 0:
        done[after] += np.minimum((times[after] - ends[-1]) / mean_step, 1.0)
    return done


def _window_start(step_ends_s: Sequence[np.ndarray], warmup_steps: int) -> float:
    """When the last worker finished its warm-up (as ``SimulationResult.measurement_window``)."""
    if any(len(ends) < warmup_steps for ends in step_ends_s):
        raise SimulationSettingsError("the measurement window is empty: simulate more steps")
    return max(float(ends[warmup_steps - 1]) if warmup_steps else 0.0 for ends in step_ends_s)


def next_step_count(
    steps: int, warmup: int, halfwidth: float, target: float, max_steps: int, min_growth: float = 2.0,
    max_growth: float = math.inf,
) -> int:
    """Steps for the next try: the half-width shrinks as 1/sqrt(measured steps), so aim there
    with 20 % to spare; at least ``min_growth`` times as many (the estimate from a short run is
    itself noisy, and a restarted run pays for every step again), at most ``max_growth`` times
    (a continued run can look again cheaply, so one noisy early estimate must not send it far
    past what it needs)."""
    measured = steps - warmup
    needed = warmup + math.ceil(measured * (halfwidth / target) ** 2 * 1.2)
    if math.isfinite(max_growth):
        needed = min(needed, math.ceil(max_growth * steps))
    return min(max(needed, math.ceil(min_growth * steps)), max_steps)


@dataclass(frozen=True)
class PointTask:
    """One W point of a curve, as a picklable value: the model by its registered name (another
    process looks it up in its own registry), what it reads, and how to run it."""

    model: str
    inputs: ModelInputs
    params: ModelParams
    workers: int
    cfg: CurveSettings


def compute_point(task: PointTask) -> CurvePoint:
    """The point ``task`` asks for; a module-level function, so a process pool can call it."""
    from advisor.core.models import registry  # the registry imports the models, which import this module

    return run_point(registry.get(task.model).start(task.inputs, task.params, task.workers, task.cfg.seed),
                     task.workers, task.cfg)


# ``map(fn, tasks)``: fn's results in the order of ``tasks`` (as the builtin ``map``); an adapter
# may compute them anywhere (advisor/parallel.py)
Mapper = Callable[[Callable[[PointTask], CurvePoint], Sequence[PointTask]], Iterable[CurvePoint]]


def predict_curve(
    model: ThroughputModel,
    inputs: ModelInputs,
    params: ModelParams,
    cfg: CurveSettings,
    progress: Progress | None = None,
    mapper: Mapper | None = None,
) -> tuple[CurvePoint, ...]:
    """The curve of ``model`` over ``cfg.workers`` (``model.check`` must have passed);
    ``progress`` is told after each point. With ``mapper``, the points are computed by it
    (``compute_point`` on one ``PointTask`` per W), for a model registered under its name;
    the result is the same as without."""
    points: list[CurvePoint] = []
    if mapper is not None and _registered(model):
        tasks = [PointTask(model.name, inputs, params, w, cfg) for w in cfg.workers]
        found: Iterable[CurvePoint] = mapper(compute_point, tasks)
    else:
        found = (run_point(model.start(inputs, params, w, cfg.seed), w, cfg) for w in cfg.workers)
    for point in found:
        points.append(point)
        if progress is not None:
            progress(len(points), len(cfg.workers))
    if [p.workers for p in points] != list(cfg.workers):
        raise SimulationSettingsError(f"the mapper returned the points for W = {[p.workers for p in points]}, "
                                      f"not for W = {list(cfg.workers)}")
    return tuple(points)


def _registered(model: ThroughputModel) -> bool:
    """Whether another process finds this very model under its name (a model built elsewhere,
    e.g. in a test, is computed in this process)."""
    from advisor.core.models import registry

    try:
        return registry.get(model.name) is model
    except ModelInputError:
        return False


def run_point(run: Run, workers: int, cfg: CurveSettings) -> CurvePoint:
    """One point from one run, continued until the interval is narrow enough; a closed form's
    answer is the point itself, with no interval."""
    steps = cfg.steps if cfg.target_rel_halfwidth is None else cfg.min_steps
    while True:
        seen = run.advance(steps)
        if isinstance(seen, Exact):
            return CurvePoint(workers, seen.throughput, seen.throughput, seen.throughput, 0, seen.events)
        start = _window_start(seen.step_ends_s, cfg.warmup_steps)
        if seen.until_s <= start:
            raise SimulationSettingsError("the measurement window is empty: simulate more steps")
        mean, low, high = batch_means(seen.step_ends_s, start, seen.until_s, seen.batch_size, cfg.batches, cfg.confidence)
        point = CurvePoint(len(seen.step_ends_s), mean, low, high, steps, seen.events)
        target = cfg.target_rel_halfwidth
        if target is None or point.rel_halfwidth <= target or steps >= cfg.max_steps:
            return point
        steps = next_step_count(steps, cfg.warmup_steps, point.rel_halfwidth, target, cfg.max_steps, CONTINUED_GROWTH,
                                CONTINUED_MAX_GROWTH)
