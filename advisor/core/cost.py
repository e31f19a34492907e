"""From a throughput curve to decisions: the saturation point and the cheapest worker count.

Definitions (also in the README):

- **Saturation point**: the smallest W from which one more worker adds less than
  ``threshold`` (default 5 %) of the one-worker throughput. Gaps in the curve (W = 1, 2, 4,
  8) are handled per added worker: the gain from W_i to W_j counts as (T_j - T_i) / (W_j - W_i).
- **Cost per example**: (W x worker price + M x PS price) per hour / (3600 x throughput).
- **Cost-optimal W**: the W of least cost per example among those that satisfy every given
  constraint: at most ``max_workers``; ``examples`` done within ``deadline_hours``; the
  whole run of ``examples`` within ``budget``. Ties go to fewer workers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from advisor.errors import AdvisorError

SECONDS_PER_HOUR = 3600.0


class CostError(AdvisorError, ValueError):
    """Impossible prices or constraints, or no worker count satisfies them."""


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices per instance-hour, in any one currency."""

    worker_per_hour: float = 1.0
    ps_per_hour: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("worker price", self.worker_per_hour), ("PS price", self.ps_per_hour)):
            if not (math.isfinite(value) and value >= 0):
                raise CostError(f"{name} must be a finite number >= 0 per hour, got {value!r}")
        if self.worker_per_hour == 0 and self.ps_per_hour == 0:
            raise CostError("at least one price must be > 0 to compare costs")


@dataclass(frozen=True, slots=True)
class Constraints:
    """Optional limits on the choice of W."""

    max_workers: int | None = None
    examples: float | None = None  # the job's total examples (epochs x dataset size)
    deadline_hours: float | None = None
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.max_workers is not None and self.max_workers < 1:
            raise CostError(f"max workers must be >= 1, got {self.max_workers}")
        for name, value in (("examples", self.examples), ("deadline", self.deadline_hours), ("budget", self.budget)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise CostError(f"{name} must be a finite number > 0, got {value!r}")
        if (self.deadline_hours or self.budget) and not self.examples:
            raise CostError("a deadline or budget needs the job's size in examples")


@dataclass(frozen=True, slots=True)
class Choice:
    workers: int
    throughput: float
    cost_per_example: float
    hours: float | None  # to finish ``examples``, when given
    total_cost: float | None


def cost_per_example(prices: Prices, workers: int, parameter_servers: int, throughput: float) -> float:
    """Price of one example at ``throughput`` examples/s."""
    if throughput <= 0:
        return math.inf
    hourly = workers * prices.worker_per_hour + parameter_servers * prices.ps_per_hour
    return hourly / (SECONDS_PER_HOUR * throughput)


def saturation_point(workers: Sequence[int], throughput: Sequence[float], threshold: float = 0.05) -> int:
    """The smallest W from which one more worker adds less than ``threshold`` x T(first W)."""
    _check_curve(workers, throughput)
    if not 0 < threshold < 1:
        raise CostError(f"saturation threshold must be in (0, 1), got {threshold!r}")
    floor = threshold * throughput[0] / workers[0]  # per-worker gain at the start of the curve
    for i in range(len(workers) - 1):
        gain = (throughput[i + 1] - throughput[i]) / (workers[i + 1] - workers[i])
        if gain < floor:
            return workers[i]
    return workers[-1]


def cost_optimal(
    workers: Sequence[int],
    throughput: Sequence[float],
    prices: Prices,
    *,
    parameter_servers: int = 1,
    constraints: Constraints = Constraints(),
) -> Choice:
    """The cheapest W per example that meets every constraint; ``CostError`` if none does."""
    _check_curve(workers, throughput)
    feasible = []
    for w, thr in zip(workers, throughput):
        choice = _evaluate(w, thr, prices, parameter_servers, constraints)
        if choice is not None:
            feasible.append(choice)
    if not feasible:
        raise CostError(_why_none(workers, throughput, prices, parameter_servers, constraints))
    return min(feasible, key=lambda c: (c.cost_per_example, c.workers))


def _hours(h: float) -> str:
    return f"{h:,.0f} h" if h >= 100 else f"{h:.3g} h"


def _why_none(workers: Sequence[int], throughput: Sequence[float], prices: Prices, ps: int, c: Constraints) -> str:
    """Which constraint no worker count meets, and the best the curve offers against it."""
    none = f"no worker count in {workers[0]}..{workers[-1]}"
    allowed = [(w, t) for w, t in zip(workers, throughput) if c.max_workers is None or w <= c.max_workers]
    if not allowed:
        return f"{none} is within the limit of {c.max_workers} worker(s): the curve starts at W = {workers[0]}"
    capped = "" if len(allowed) == len(workers) else f" with at most {c.max_workers} worker(s)"
    examples = c.examples or 0.0  # a deadline or budget comes with examples (Constraints)

    def hours(t: float) -> float:
        return examples / t / SECONDS_PER_HOUR if t > 0 else math.inf

    def total(w: int, t: float) -> float:
        return cost_per_example(prices, w, ps, t) * examples

    fastest = max(allowed, key=lambda p: (p[1], -p[0]))
    cheapest = min(allowed, key=lambda p: (total(*p), p[0]))
    job = f" for {examples:,.0f} examples"
    if fastest[1] <= 0:
        return f"{none} meets the constraints: the predicted throughput is 0 at every worker count{capped}"
    if c.deadline_hours is not None and hours(fastest[1]) > c.deadline_hours:
        return (f"{none} meets the deadline of {c.deadline_hours:g} h{job}: the fastest{capped}, "
                f"W = {fastest[0]} at {fastest[1]:,.1f} examples/s, takes {_hours(hours(fastest[1]))}")
    if c.budget is not None and total(*cheapest) > c.budget:
        return (f"{none} meets the budget of {c.budget:g}{job}: the cheapest{capped}, W = {cheapest[0]}, "
                f"costs {total(*cheapest):,.2f}")
    # each can be met alone, so both are set and the workers that meet one miss the other
    assert c.deadline_hours is not None and c.budget is not None
    deadline, budget = c.deadline_hours, c.budget
    on_time = min((p for p in allowed if hours(p[1]) <= deadline), key=lambda p: (total(*p), p[0]))
    affordable = max((p for p in allowed if total(*p) <= budget), key=lambda p: (p[1], -p[0]))
    return (f"{none} meets both the deadline of {deadline:g} h and the budget of {budget:g}{job}: "
            f"the cheapest within the deadline{capped}, W = {on_time[0]}, costs {total(*on_time):,.2f}; "
            f"the fastest within the budget, W = {affordable[0]}, takes {_hours(hours(affordable[1]))}")


def _evaluate(w: int, thr: float, prices: Prices, ps: int, c: Constraints) -> Choice | None:
    if c.max_workers is not None and w > c.max_workers:
        return None
    per_example = cost_per_example(prices, w, ps, thr)
    hours = c.examples / thr / SECONDS_PER_HOUR if c.examples and thr > 0 else None
    total = per_example * c.examples if c.examples else None
    if c.deadline_hours is not None and (hours is None or hours > c.deadline_hours):
        return None
    if c.budget is not None and (total is None or total > c.budget):
        return None
    return Choice(w, thr, per_example, hours, total)


def _check_curve(workers: Sequence[int], throughput: Sequence[float]) -> None:
    if not workers or len(workers) != len(throughput):
        raise CostError("the curve needs as many throughputs as worker counts, and at least one")
    if any(b <= a for a, b in zip(workers, workers[1:])) or workers[0] < 1:
        raise CostError(f"worker counts must be increasing and >= 1, got {list(workers)}")
