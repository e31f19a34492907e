"""From a throughput curve to decisions: the saturation point and the cheapest worker count.

Definitions (also in the README):

- **Saturation point**: the smallest W from which one more worker adds less than
  ``threshold`` (default 5 %) of the one-worker throughput. Gaps in the curve (W = 1, 2, 4,
  8) are handled per added worker: the gain from W_i to W_j counts as (T_j - T_i) / (W_j - W_i).
- **Cost per example**: (W x worker price + M x PS price) per hour / (3600 x throughput).
- **Cost-optimal W**: the W of least cost per example among those that satisfy every given
  constraint: at most ``max_workers``; ``examples`` done within ``deadline_hours``; the
  whole run of ``examples`` within ``budget``. Ties go to fewer workers.

Under uncertainty (``cost_optimal`` given each W's interval ``lows``/``highs`` at ``confidence``):

- the throughput at W is taken as a **split normal** with its mode at the prediction and each
  side's sigma set so that the interval's end is that side's (1 + confidence) / 2 quantile:
  sigma_low = (T - low) / z, sigma_high = (high - T) / z, z = Phi^-1((1 + confidence) / 2);
- a **deadline** is met by W only if it is met at the interval's **low end** (examples /
  (3600 low) <= deadline): with a symmetric interval that is a chance of at least
  (1 + confidence) / 2 (97.5 % for a 95 % interval); ``Choice.p_deadline`` is that chance under
  the split normal, at the W chosen;
- W is chosen on **expected** cost per example, hourly price x E[1 / T] / 3600 (E[1 / T] >= 1 /
  T: an uncertain throughput costs more on average than its point estimate says); the budget
  is checked on the expected total cost. Without intervals, the point estimates decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

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
    cost_per_example: float  # at the point estimate
    hours: float | None  # to finish ``examples``, when given (at the point estimate)
    total_cost: float | None  # likewise
    expected_cost_per_example: float | None = None  # over the interval (module docstring); what decides
    hours_at_low: float | None = None  # to finish ``examples`` at the interval's low end
    p_deadline: float | None = None  # chance of meeting the deadline (split normal), when one is given


@dataclass(frozen=True, slots=True)
class Spread:
    """The throughput at one W as a split normal: mode ``mode``, sigma below and above."""

    mode: float
    sigma_low: float
    sigma_high: float

    @classmethod
    def from_interval(cls, throughput: float, low: float, high: float, confidence: float = 0.95) -> Spread:
        z = NormalDist().inv_cdf((1 + confidence) / 2)
        return cls(throughput, max(throughput - low, 0.0) / z, max(high - throughput, 0.0) / z)

    def p_at_least(self, value: float) -> float:
        """P(T >= value)."""
        m, a, b = self.mode, self.sigma_low, self.sigma_high
        if a + b == 0:
            return 1.0 if m >= value else 0.0
        if value <= m:
            below = 2 * a / (a + b) * NormalDist().cdf((value - m) / a) if a > 0 else 0.0
            return 1.0 - below
        return 2 * b / (a + b) * (1 - NormalDist().cdf((value - m) / b)) if b > 0 else 0.0

    def mean_inverse(self, points: int = 400) -> float:
        """E[1 / T], over T within 6 sigma of the mode on each side and above 2 % of the mode
        (the split normal puts mass on T <= 0, which no run has: it is cut off and the rest
        renormalised). Midpoint rule on each side."""
        m, a, b = self.mode, self.sigma_low, self.sigma_high
        if m <= 0:
            return math.inf
        if a + b == 0:
            return 1 / m
        norm = NormalDist()
        total = weight = 0.0
        for sigma, sign in ((a, -1.0), (b, 1.0)):
            if sigma == 0:
                continue
            side = 2 * sigma / (a + b)  # this side's probability mass
            span = 6.0 if sign > 0 else min(6.0, (m - 0.02 * m) / sigma)
            for i in range(points):
                u = (i + 0.5) * span / points  # in sigmas from the mode
                t = m + sign * u * sigma
                w = side * norm.pdf(u) / sigma * (span / points * sigma)
                total += w / t
                weight += w
        return total / weight


def cost_per_example(prices: Prices, workers: int, parameter_servers: int, throughput: float) -> float:
    """Price of one example at ``throughput`` examples/s."""
    if throughput <= 0:
        return math.inf
    hourly = workers * prices.worker_per_hour + parameter_servers * prices.ps_per_hour
    return hourly / (SECONDS_PER_HOUR * throughput)


def expected_cost_per_example(prices: Prices, workers: int, parameter_servers: int, throughput: float, low: float,
                              high: float, confidence: float = 0.95) -> float:
    """Expected price of one example when the throughput lies in [low, high] at ``confidence``
    (split normal, module docstring); ``cost_per_example`` when low = high = throughput."""
    if throughput <= 0:
        return math.inf
    hourly = workers * prices.worker_per_hour + parameter_servers * prices.ps_per_hour
    return hourly * Spread.from_interval(throughput, low, high, confidence).mean_inverse() / SECONDS_PER_HOUR


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
    lows: Sequence[float] | None = None,
    highs: Sequence[float] | None = None,
    confidence: float = 0.95,
) -> Choice:
    """The cheapest W per example that meets every constraint; ``CostError`` if none does.
    With ``lows`` and ``highs`` (each W's interval at ``confidence``), a deadline must hold at
    the low end and the cost is the expected one (module docstring)."""
    _check_curve(workers, throughput)
    if (lows is None) != (highs is None) or (lows is not None and highs is not None and
                                              not len(lows) == len(highs) == len(workers)):
        raise CostError("intervals need a low and a high end for every worker count")
    if lows is None or highs is None:
        spreads = [Spread(t, 0.0, 0.0) for t in throughput]
    else:
        spreads = [Spread.from_interval(t, lo, hi, confidence) for t, lo, hi in zip(throughput, lows, highs)]
    feasible = []
    for w, thr, spread, low in zip(workers, throughput, spreads, lows or throughput):
        choice = _evaluate(w, thr, prices, parameter_servers, constraints, spread, low)
        if choice is not None:
            feasible.append(choice)
    if not feasible:
        why = _why_none(workers, lows or throughput, prices, parameter_servers, constraints, at_low=lows is not None)
        if lows is not None and constraints.deadline_hours is not None and constraints.examples:
            why += _likeliest(workers, spreads, constraints)
        raise CostError(why)
    return min(feasible, key=lambda c: (round(c.expected_cost_per_example or c.cost_per_example, 15), c.workers))


def _likeliest(workers: Sequence[int], spreads: Sequence[Spread], c: Constraints) -> str:
    """The W most likely to meet the deadline (within ``max_workers``), as a sentence to add."""
    need = (c.examples or 0.0) / ((c.deadline_hours or math.inf) * SECONDS_PER_HOUR)
    chances = [(s.p_at_least(need), -w) for w, s in zip(workers, spreads)
               if c.max_workers is None or w <= c.max_workers]
    if not chances:
        return ""
    p, w = max(chances)
    return f"; the likeliest to meet it is W = {-w}, with probability {p:.0%}"


def _hours(h: float) -> str:
    return f"{h:,.0f} h" if h >= 100 else f"{h:.3g} h"


def _why_none(workers: Sequence[int], throughput: Sequence[float], prices: Prices, ps: int, c: Constraints,
              at_low: bool = False) -> str:
    """Which constraint no worker count meets, and the best the curve offers against it
    (``at_low``: ``throughput`` are the intervals' low ends, and the message says so)."""
    none = f"no worker count in {workers[0]}..{workers[-1]}"
    low = " at the low end of its interval" if at_low else ""
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
                f"W = {fastest[0]} at {fastest[1]:,.1f} examples/s{low}, takes {_hours(hours(fastest[1]))}")
    if c.budget is not None and total(*cheapest) > c.budget:
        return (f"{none} meets the budget of {c.budget:g}{job}: the cheapest{capped}, W = {cheapest[0]}, "
                f"costs {total(*cheapest):,.2f}")
    # each can be met alone, so both are set and the workers that meet one miss the other
    assert c.deadline_hours is not None and c.budget is not None
    deadline, budget = c.deadline_hours, c.budget
    on_time = min((p for p in allowed if hours(p[1]) <= deadline), key=lambda p: (total(*p), p[0]), default=None)
    affordable = max((p for p in allowed if total(*p) <= budget), key=lambda p: (p[1], -p[0]), default=None)
    if on_time is None or affordable is None:  # under uncertainty the budget is on the expected cost
        return (f"{none} meets both the deadline of {deadline:g} h{low} and the budget of {budget:g} "
                f"(expected cost){job}{capped}")
    return (f"{none} meets both the deadline of {deadline:g} h and the budget of {budget:g}{job}: "
            f"the cheapest within the deadline{capped}, W = {on_time[0]}, costs {total(*on_time):,.2f}; "
            f"the fastest within the budget, W = {affordable[0]}, takes {_hours(hours(affordable[1]))}")


def _evaluate(w: int, thr: float, prices: Prices, ps: int, c: Constraints, spread: Spread | None = None,
              low: float | None = None) -> Choice | None:
    """``w`` as a Choice, or None when it breaks a constraint: the deadline at ``low`` (the
    interval's low end; the point without one), the budget on the expected cost."""
    if c.max_workers is not None and w > c.max_workers:
        return None
    spread = spread or Spread(thr, 0.0, 0.0)
    low = thr if low is None else low
    per_example = cost_per_example(prices, w, ps, thr)
    hourly = w * prices.worker_per_hour + ps * prices.ps_per_hour
    expected = hourly * spread.mean_inverse() / SECONDS_PER_HOUR if thr > 0 else math.inf
    hours = c.examples / thr / SECONDS_PER_HOUR if c.examples and thr > 0 else None
    hours_low = c.examples / low / SECONDS_PER_HOUR if c.examples and low > 0 else None
    total = per_example * c.examples if c.examples else None
    p_deadline = None
    if c.deadline_hours is not None:
        if hours_low is None or hours_low > c.deadline_hours or c.examples is None:
            return None
        p_deadline = spread.p_at_least(c.examples / (c.deadline_hours * SECONDS_PER_HOUR))
    if c.budget is not None and (not c.examples or expected * c.examples > c.budget):
        return None
    return Choice(w, thr, per_example, hours, total, expected, hours_low, p_deadline)


def _check_curve(workers: Sequence[int], throughput: Sequence[float]) -> None:
    if not workers or len(workers) != len(throughput):
        raise CostError("the curve needs as many throughputs as worker counts, and at least one")
    if any(b <= a for a, b in zip(workers, workers[1:])) or workers[0] < 1:
        raise CostError(f"worker counts must be increasing and >= 1, got {list(workers)}")
