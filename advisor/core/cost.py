"""From a throughput curve to decisions: the saturation point and the cheapest worker count.

Definitions (also in the README and docs/decisions.md):

- **Saturation point**: the smallest W from which one more worker adds less than
  ``threshold`` (default 5 %) of the one-worker throughput. Gaps in the curve (W = 1, 2, 4,
  8) are handled per added worker: the gain from W_i to W_j counts as (T_j - T_i) / (W_j - W_i).
- **Cost per example**: (W x worker price + M x PS price) per hour / (3600 x throughput).
- **Cost-optimal W**: the W of least cost per example among those that satisfy every given
  constraint: at most ``max_workers``; ``examples`` done within ``deadline_hours``; the
  whole run of ``examples`` within ``budget``. Ties go to fewer workers.

Under uncertainty (each W's throughput a ``Belief``, ``core/belief.py``: a split normal over
its interval, or a mixture of outcomes), the decision is taken with a stated **confidence** P
(``Constraints.confidence``):

- a deadline needs T >= r_d = examples / (3600 deadline_hours); a budget needs the run's cost
  hourly(W) x examples / (3600 T) <= budget, that is T >= r_b(W) = hourly(W) x examples /
  (3600 budget). Both ask for a throughput at least some rate, so W meets both with
  probability **P(W) = P(T_W >= max(r_d, r_b(W)))**;
- the recommended W is the **cheapest** (least **expected** cost per example, hourly price x
  E[1 / T] / 3600: an uncertain throughput costs more on average than its point estimate says)
  among those with **P(W) >= P**;
- when no W reaches P, ``decide`` still answers: the W of the highest P(W) (``Choice.confident``
  False), with that probability and the throughput it needs; ``shortfall`` says it in one line.
  ``cost_optimal`` raises ``CostError`` instead (a caller that must have a W meeting the
  constraints, e.g. the allocator). Without intervals the point estimates decide (P(W) is 1 or 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from advisor.core.belief import Belief
from advisor.errors import AdvisorError

__all__ = ["DEFAULT_CONFIDENCE", "SECONDS_PER_HOUR", "Choice", "Constraints", "CostError", "Prices", "choose",
           "cost_optimal", "cost_per_example", "decide", "expected_cost_per_example", "saturation_point",
           "shortfall"]

SECONDS_PER_HOUR = 3600.0
# The confidence a decision is taken with when none is stated. Checked on held-out jobs
# (benchmarks/deadline_decisions.py, docs/decisions.md): the answers confident at 0.9 met their
# deadline 11 times in 12; a point's level-0.9 lower bound held for 82 % of the points (0.8's for
# 68 %), so a lower default would promise more than the data back.
DEFAULT_CONFIDENCE = 0.9


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

    def hourly(self, workers: int, parameter_servers: int) -> float:
        """What ``workers`` workers and ``parameter_servers`` PS cost per hour together."""
        return workers * self.worker_per_hour + parameter_servers * self.ps_per_hour


@dataclass(frozen=True, slots=True)
class Constraints:
    """Optional limits on the choice of W, and the confidence they must be met with."""

    max_workers: int | None = None
    examples: float | None = None  # the job's total examples (epochs x dataset size)
    deadline_hours: float | None = None
    budget: float | None = None
    confidence: float = DEFAULT_CONFIDENCE  # the least probability of meeting the deadline and budget

    def __post_init__(self) -> None:
        if self.max_workers is not None and self.max_workers < 1:
            raise CostError(f"max workers must be >= 1, got {self.max_workers}")
        for name, value in (("examples", self.examples), ("deadline", self.deadline_hours), ("budget", self.budget)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise CostError(f"{name} must be a finite number > 0, got {value!r}")
        if (self.deadline_hours or self.budget) and not self.examples:
            raise CostError("a deadline or budget needs the job's size in examples")
        if not (isinstance(self.confidence, (int, float)) and 0 < self.confidence < 1):
            raise CostError(f"confidence must be a probability strictly between 0 and 1 (e.g. 0.9), "
                            f"got {self.confidence!r}")

    @property
    def binding(self) -> bool:
        """Whether a deadline or a budget asks for a throughput (else every W meets them)."""
        return bool(self.examples) and (self.deadline_hours is not None or self.budget is not None)


@dataclass(frozen=True, slots=True)
class Choice:
    workers: int
    throughput: float
    cost_per_example: float  # at the point estimate
    hours: float | None  # to finish ``examples``, when given (at the point estimate)
    total_cost: float | None  # likewise
    expected_cost_per_example: float | None = None  # over the belief (module docstring); what decides
    hours_at_low: float | None = None  # to finish ``examples`` at the lowest end of the interval(s)
    p_deadline: float | None = None  # P(T >= r_d), when a deadline is given
    p_budget: float | None = None  # P(cost <= budget), when a budget is given
    p_meet: float | None = None  # P(meets both): what is compared with the confidence; None without either
    needed_throughput: float | None = None  # max(r_d, r_b(W)): examples/s W must reach; None without either
    confident: bool = True  # p_meet >= the confidence (always True without a deadline or budget)


def cost_per_example(prices: Prices, workers: int, parameter_servers: int, throughput: float) -> float:
    """Price of one example at ``throughput`` examples/s."""
    if throughput <= 0:
        return math.inf
    return prices.hourly(workers, parameter_servers) / (SECONDS_PER_HOUR * throughput)


def expected_cost_per_example(prices: Prices, workers: int, parameter_servers: int, throughput: float, low: float,
                              high: float, confidence: float = 0.95, belief: Belief | None = None) -> float:
    """Expected price of one example when the throughput lies in [low, high] at ``confidence``
    (split normal), or follows ``belief`` when given; ``cost_per_example`` when low = high =
    throughput."""
    if throughput <= 0:
        return math.inf
    hourly = prices.hourly(workers, parameter_servers)
    belief = belief or Belief.interval(throughput, low, high, confidence)
    return hourly * belief.mean_inverse() / SECONDS_PER_HOUR


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
    beliefs: Sequence[Belief] | None = None,
) -> Choice:
    """The cheapest W (per example, expected) that meets every constraint with probability at
    least ``constraints.confidence``; ``CostError`` if none does. Each W's throughput is its
    belief: ``beliefs``, else the interval ``lows``-``highs`` at ``confidence``, else the point."""
    options = _options(workers, throughput, prices, parameter_servers, constraints, lows, highs, confidence, beliefs)
    met = [c for c in options if c.confident]
    if met:
        return _cheapest(met)
    if lows is None and beliefs is None:
        raise CostError(_why_none(workers, throughput, prices, parameter_servers, constraints))
    raise CostError(shortfall(_likeliest(options), constraints, workers))


def decide(
    workers: Sequence[int],
    throughput: Sequence[float],
    prices: Prices,
    *,
    parameter_servers: int = 1,
    constraints: Constraints = Constraints(),
    beliefs: Sequence[Belief] | None = None,
) -> Choice:
    """As ``cost_optimal``, but when no W reaches the confidence, the W most likely to meet the
    constraints (``confident`` False) rather than an error: a question that has an answer gets
    one. ``CostError`` only for input no answer fits (no W within ``max_workers``)."""
    return choose(_options(workers, throughput, prices, parameter_servers, constraints, None, None, 0.95, beliefs))


def choose(options: Sequence[Choice]) -> Choice:
    """``decide``'s rule over evaluated ``options`` (e.g. ``meet_probabilities``' answer, each W
    evaluated under its own constraints): the cheapest confident one, else the likeliest."""
    met = [c for c in options if c.confident]
    return _cheapest(met) if met else _likeliest(options)


def meet_probabilities(workers: Sequence[int], throughput: Sequence[float], prices: Prices, beliefs: Sequence[Belief],
                       *, parameter_servers: int = 1, constraints: Constraints = Constraints()) -> list[Choice]:
    """Every W of the curve evaluated as a choice (``p_meet`` and the rest), the limit
    ``max_workers`` aside: what a table or a JSON shows beside the recommendation."""
    _check_curve(workers, throughput)
    return [_evaluate(w, t, b, prices, parameter_servers, constraints) for w, t, b in zip(workers, throughput, beliefs)]


def shortfall(choice: Choice, c: Constraints, workers: Sequence[int],
              outcomes: Sequence[tuple[str, float]] = ()) -> str:
    """The one line that says no W reaches the confidence, and what the likeliest ``choice`` offers
    (``outcomes``: its W's outcomes as (name, throughput), when it has several)."""
    what = " and ".join(part for part in (
        f"the deadline of {_hours(c.deadline_hours)}" if c.deadline_hours is not None else "",
        f"the budget of {c.budget:g}" if c.budget is not None else "") if part)
    capped = f" with at most {c.max_workers} worker(s)" if c.max_workers is not None else ""
    predicted = " or ".join(f"{t:,.1f} ({name})" for name, t in outcomes) if len(outcomes) > 1 else \
        f"{choice.throughput:,.1f}"
    return (f"no worker count in {workers[0]}..{workers[-1]}{capped} meets {what} for {c.examples or 0:,.0f} examples "
            f"with confidence {_percent(c.confidence)}: the likeliest, W = {choice.workers}, meets it with probability "
            f"{_percent(choice.p_meet or 0.0)} (it needs {choice.needed_throughput or 0:,.1f} examples/s; "
            f"predicted {predicted})")


def _percent(p: float) -> str:
    """A probability as people read it: 62%, 99.5%; never 0% or 100% for what is merely unlikely or likely."""
    if 0 < p < 0.001:
        return "<0.1%"
    if 0.999 < p < 1:
        return ">99.9%"
    return f"{p:.0%}" if p == round(p, 2) or 0.01 < p < 0.99 else f"{p:.1%}"


def _options(workers: Sequence[int], throughput: Sequence[float], prices: Prices, ps: int, c: Constraints,
             lows: Sequence[float] | None, highs: Sequence[float] | None, confidence: float,
             beliefs: Sequence[Belief] | None) -> list[Choice]:
    """Every W within ``max_workers`` as a Choice; ``CostError`` when the input cannot work."""
    _check_curve(workers, throughput)
    if (lows is None) != (highs is None) or (lows is not None and highs is not None and
                                              not len(lows) == len(highs) == len(workers)):
        raise CostError("intervals need a low and a high end for every worker count")
    if beliefs is not None and len(beliefs) != len(workers):
        raise CostError("a belief is needed for every worker count")
    if beliefs is None:
        beliefs = [Belief.exact(t) for t in throughput] if lows is None or highs is None else \
            [Belief.interval(t, lo, hi, confidence) for t, lo, hi in zip(throughput, lows, highs)]
    options = [_evaluate(w, t, b, prices, ps, c) for w, t, b in zip(workers, throughput, beliefs)
               if c.max_workers is None or w <= c.max_workers]
    if not options:
        raise CostError(f"no worker count in {workers[0]}..{workers[-1]} is within the limit of {c.max_workers} "
                        f"worker(s): the curve starts at W = {workers[0]}")
    return options


def _cheapest(choices: Sequence[Choice]) -> Choice:
    """Least expected cost per example; ties (to 15 digits) go to fewer workers."""
    return min(choices, key=lambda c: (round(c.expected_cost_per_example or c.cost_per_example, 15), c.workers))


def _likeliest(choices: Sequence[Choice]) -> Choice:
    """The highest probability of meeting the constraints; among equals (e.g. all 0 on point
    estimates) the nearest to the rate it needs, then fewer workers."""
    def key(c: Choice) -> tuple[float, float, int]:
        margin = c.throughput / c.needed_throughput if c.needed_throughput else math.inf
        return round(c.p_meet or 0.0, 12), margin, -c.workers
    return replace(max(choices, key=key), confident=False)


def _hours(h: float) -> str:
    return f"{h:,.0f} h" if h >= 100 else f"{h:.3g} h"


def _why_none(workers: Sequence[int], throughput: Sequence[float], prices: Prices, ps: int, c: Constraints) -> str:
    """Which constraint no worker count meets on the point estimates, and the best the curve
    offers against it."""
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


def _evaluate(w: int, thr: float, belief: Belief, prices: Prices, ps: int, c: Constraints) -> Choice:
    """``w`` as a Choice: its costs, and the probability that it meets the deadline and budget."""
    hourly = prices.hourly(w, ps)
    per_example = cost_per_example(prices, w, ps, thr)
    expected = hourly * belief.mean_inverse() / SECONDS_PER_HOUR if thr > 0 else math.inf
    examples = c.examples or 0.0
    hours = examples / thr / SECONDS_PER_HOUR if examples and thr > 0 else None
    hours_low = examples / belief.low / SECONDS_PER_HOUR if examples and belief.low > 0 else None
    total = per_example * examples if examples else None
    need_d = examples / (c.deadline_hours * SECONDS_PER_HOUR) if examples and c.deadline_hours is not None else None
    need_b = hourly * examples / (SECONDS_PER_HOUR * c.budget) if examples and c.budget is not None else None
    needs = [r for r in (need_d, need_b) if r is not None]
    need = max(needs) if needs else None
    p_meet = belief.p_at_least(need) if need is not None else None
    return Choice(w, thr, per_example, hours, total, expected, hours_low,
                  p_deadline=belief.p_at_least(need_d) if need_d is not None else None,
                  p_budget=belief.p_at_least(need_b) if need_b is not None else None,
                  p_meet=p_meet, needed_throughput=need,
                  confident=p_meet is None or p_meet >= c.confidence - 1e-12)


def _check_curve(workers: Sequence[int], throughput: Sequence[float]) -> None:
    if not workers or len(workers) != len(throughput):
        raise CostError("the curve needs as many throughputs as worker counts, and at least one")
    if any(b <= a for a, b in zip(workers, workers[1:])) or workers[0] < 1:
        raise CostError(f"worker counts must be increasing and >= 1, got {list(workers)}")
