"""Deadline decisions that count on one correction: start at a W, observe it, resize once if short.

A one-shot decision (``core/cost.decide``) must pick a W that meets the deadline *by itself*
with probability P. With a model error of 5-10 % and a deadline close to what the curve can
give, that is often a W well past the cheapest one that would do (docs/decisions.md,
"Deadlines that count on one resize"). A controller in ``auto`` mode with the closed loop
does not have to be right at once: after ``Correction.window_hours`` at the starting W it has
observed the job, and it can resize it once for the rest of the deadline, losing
``restart_hours`` of progress. So the starting W needs the *plan* to meet the deadline with
probability P, not itself:

- start at W = a; after the window, with a's throughput T_a observed,
- stay if T_a finishes the examples in time (T_a x deadline >= examples),
- else move to the cheapest W whose throughput finishes the rest, examples - T_a x window, in
  what is left, deadline - window - restart (and within the budget, when one is given).

What one observation says of the other W is the model of this module: **one quantile for the
whole curve**. If the job runs at the u-quantile of its belief at a, it runs at the u-quantile
of its belief at every W (the beliefs' comonotone coupling): a model that is 8 % optimistic at
W = 3 is as far into its error at W = 6. That is what the closed loop's update does in the large
(its calibration parameters move every W together), and it is checked where it matters, on
held-out measured curves (``python -m benchmarks.deadline_decisions``, the "with one
correction" lines). A start with several outcomes (W = 2's drifting and alternating) is read
per outcome: the arrangement is the start's own, so an observation is placed in the outcome it
most likely came from (probability x density) and its quantile there is every W's; read as a
quantile of the mixture, a drifting W = 2 a little above its prediction would look like a low
draw and make every other W look slow.

So each starting W is a function of one number u in (0, 1) (and of its outcome, when it has
several), integrated on ``GRID`` midpoints of each outcome weighted by its probability:
P(plan meets) is the start's own probability plus the share of u for which it falls short and
the resize finishes in time; its expected cost the mean of the total cost (the window at a,
then the rest at a or at the corrected W, the restart priced at the new W).
The decision is the cheapest plan (least expected cost per example) with P >= the confidence,
else the likeliest, as ``decide``. A correction that cannot come in time (window + restart >=
deadline) leaves the one-shot decision, which a plan without a resize is; so does a start the
job has already been observed at (``Correction.observed``): a plan learns by starting somewhere
new, and once the loop has seen a W, its belief there is the observation's; and so does a start
less likely to meet the deadline alone than the confidence lets a decision miss (P(alone) < 1 -
P): that is a detour through a cheap W, not a trial of an answer, and a loop that plans detours
wanders (the closed loop's CNN went 8, 3, 4, 5, 6, 2, 1, 7 with them).

What it leaves out: a second correction (the controller decides again after each observation,
with its updated beliefs, ``core/online_calibration.py``, and plans again from there). It plans
the examples and hours it is given from now: for a job already running, the controller gives it
what is left (``controller/pipeline/deadline.remaining``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from advisor.core.belief import Belief, Spread
from advisor.core.cost import (SECONDS_PER_HOUR, Choice, Constraints, CostError, Prices, choose, decide,
                               meet_probabilities)

__all__ = ["GRID", "Correction", "Fallback", "Plan", "best_plan", "plan_shortfall", "plan_with_correction", "plans",
           "resize_after"]

GRID = 400  # quantile levels u per plan: the probabilities are multiples of 1 / GRID


@dataclass(frozen=True, slots=True)
class Correction:
    """When the job can be corrected: after ``window_hours`` at its first W (observed by then),
    at the price of ``restart_hours`` of lost progress. A start in ``observed`` (worker counts the
    job has already been observed at) has nothing left to learn there: it is planned alone."""

    window_hours: float
    restart_hours: float = 0.0
    observed: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not (isinstance(self.window_hours, (int, float)) and math.isfinite(self.window_hours)
                and self.window_hours > 0):
            raise CostError(f"the correction's window must be a finite number of hours > 0, got {self.window_hours!r}")
        if not (isinstance(self.restart_hours, (int, float)) and math.isfinite(self.restart_hours)
                and self.restart_hours >= 0):
            raise CostError(f"the restart time of a resize must be a finite number of hours >= 0, "
                            f"got {self.restart_hours!r}")
        if any(not isinstance(w, int) or w < 1 for w in self.observed):
            raise CostError(f"observed worker counts must be integers >= 1, got {sorted(self.observed, key=str)}")


@dataclass(frozen=True, slots=True)
class Fallback:
    """Observed throughput at the starting W from ``at_least`` (examples/s) up to the previous
    fallback's: resize to ``workers`` (``in_time`` False: no W finishes in time there, and
    ``workers`` is the fastest, the start itself when nothing is faster)."""

    at_least: float
    workers: int
    in_time: bool = True


@dataclass(frozen=True, slots=True)
class Plan:
    """A starting W and what to do after the window. ``choice``'s ``p_meet`` and
    ``expected_cost_per_example`` are the plan's; ``confident`` compares the plan's probability
    with the confidence."""

    choice: Choice
    alone: float  # the starting W's probability of meeting the constraints without a correction
    stay_at_least: float  # observed throughput at the start from which the job stays there
    fallbacks: tuple[Fallback, ...]  # below ``stay_at_least``: by observed throughput, highest first
    correction: Correction

    @property
    def workers(self) -> int:
        return self.choice.workers


def plans(workers: Sequence[int], throughput: Sequence[float], prices: Prices, beliefs: Sequence[Belief], *,
          parameter_servers: int = 1, constraints: Constraints, correction: Correction) -> list[Plan]:
    """Every starting W within ``max_workers`` as a plan (module docstring). ``CostError`` for
    constraints without a deadline (a correction is for a deadline) and input ``decide`` refuses."""
    c = constraints
    if c.deadline_hours is None or not c.examples:
        raise CostError("a correction plans for a deadline: give the job's examples and its deadline")
    alone = meet_probabilities(workers, throughput, prices, beliefs, parameter_servers=parameter_servers,
                               constraints=c)
    allowed = [i for i, w in enumerate(workers) if c.max_workers is None or w <= c.max_workers]
    if not allowed:
        decide(workers, throughput, prices, parameter_servers=parameter_servers, constraints=c, beliefs=beliefs)
    levels = [(k + 0.5) / GRID for k in range(GRID)]
    table = {workers[i]: [quantile(beliefs[i], u) for u in levels] for i in allowed}
    hourly = {w: prices.hourly(w, parameter_servers) for w in table}
    return [_plan(workers[i], beliefs[i], alone[i], table, hourly, c, correction) for i in allowed]


def plan_with_correction(workers: Sequence[int], throughput: Sequence[float], prices: Prices,
                         beliefs: Sequence[Belief], *, parameter_servers: int = 1, constraints: Constraints,
                         correction: Correction) -> Plan:
    """The cheapest plan whose probability of meeting the constraints is at least the
    confidence; when none reaches it, the likeliest (``confident`` False), as ``decide``."""
    return best_plan(plans(workers, throughput, prices, beliefs, parameter_servers=parameter_servers,
                           constraints=constraints, correction=correction))


def best_plan(found: Sequence[Plan]) -> Plan:
    """Of ``plans``' answer, the cheapest confident plan, else the likeliest (``confident`` False):
    ``decide``'s rule (``cost.choose``) over the plans' choices."""
    chosen = choose([p.choice for p in found])
    return replace(next(p for p in found if p.workers == chosen.workers), choice=chosen)


def resize_after(plan: Plan, observed: float) -> int:
    """The W the plan moves to when the starting W is observed at ``observed`` examples/s (its own W: stay)."""
    if observed >= plan.stay_at_least:
        return plan.workers
    for f in plan.fallbacks:
        if observed >= f.at_least:
            return f.workers
    return plan.fallbacks[-1].workers if plan.fallbacks else plan.workers


def plan_shortfall(plan: Plan, c: Constraints, workers: Sequence[int]) -> str:
    """The one line that says no start reaches the confidence even with the resize, and what the likeliest offers."""
    budget = f" and the budget of {c.budget:g}" if c.budget is not None else ""
    return (f"no start in {workers[0]}..{workers[-1]} meets the deadline of {c.deadline_hours:g} h{budget} for "
            f"{c.examples or 0:,.0f} examples with confidence {c.confidence:.0%}, even resized once after "
            f"{plan.correction.window_hours:g} h: the likeliest, W = {plan.workers}, meets it with probability "
            f"{plan.choice.p_meet or 0:.1%} this way ({plan.alone:.1%} without the resize; it needs "
            f"{plan.choice.needed_throughput or 0:,.1f} examples/s)")


def quantile(belief: Belief, u: float) -> float:
    """The throughput T with P(T <= value) = ``u``: closed form for one outcome, else bisection."""
    if len(belief.parts) == 1:
        return _spread_quantile(belief.parts[0][1], u)
    return belief.quantile_at_least(1 - u)


def _spread_quantile(s: Spread, u: float) -> float:
    """The split normal's u-quantile: the lower half holds a / (a + b) of the mass."""
    a, b = s.sigma_low, s.sigma_high
    if a + b == 0:
        return s.mode
    lower = a / (a + b)
    if u <= lower:
        return s.mode + a * NormalDist().inv_cdf(u / (2 * lower))
    return s.mode + b * NormalDist().inv_cdf(1 - (1 - u) / (2 * (1 - lower)))


def _plan(start: int, belief: Belief, alone: Choice, table: dict[int, list[float]], hourly: dict[int, float],
          c: Constraints, k: Correction) -> Plan:
    """One starting W over every quantile level of each of its outcomes: its probability,
    expected cost and fallbacks. The probability is the start's own (exact, ``alone``) plus the
    grid's share of the levels a resize rescues, so that a correction never reads as lowering it."""
    examples, deadline = float(c.examples or 0.0), float(c.deadline_hours or 0.0)
    left = (deadline - k.window_hours - k.restart_hours) * SECONDS_PER_HOUR  # seconds for the rest after a resize
    if start in k.observed or (alone.p_meet or 0.0) < 1 - c.confidence:
        # observed already: a window there shows what is known; or too unlikely to be the answer
        # itself (less likely to meet it than the confidence lets a decision miss): a detour, not a trial
        left = 0.0
    parts = [(weight, spread) for weight, spread in belief.parts if weight > 0]
    rescued, total, moves = 0.0, 0.0, []
    for weight, spread in parts:
        # the outcome (an arrangement of the start's own) is the start's; the model's error level is every W's
        starts = table[start] if len(parts) == 1 else [_spread_quantile(spread, (i + 0.5) / GRID) for i in range(GRID)]
        mine = []
        for i, t_start in enumerate(starts):
            stay_cost = hourly[start] * examples / t_start / SECONDS_PER_HOUR if t_start > 0 else math.inf
            if t_start * deadline * SECONDS_PER_HOUR >= examples or left <= 0:
                total += weight * stay_cost
                continue
            target, ok, cost = _resize(start, i, t_start, table, hourly, c, k, left, stay_cost)
            rescued += weight * ok
            total += weight * cost
            mine.append((t_start, target, ok))
        moves.append((weight, spread, sorted(mine)))
    p = min(1.0, (alone.p_meet or 0.0) + rescued / GRID)
    choice = replace(alone, p_meet=p, expected_cost_per_example=total / GRID / examples, p_deadline=None,
                     p_budget=None, confident=p >= c.confidence - 1e-12)
    stay = examples / (deadline * SECONDS_PER_HOUR)
    return Plan(choice, alone.p_meet or 0.0, stay if left > 0 else 0.0, _fallbacks(moves), k)


def _resize(start: int, i: int, t_start: float, table: dict[int, list[float]], hourly: dict[int, float],
            c: Constraints, k: Correction, left: float, stay_cost: float) -> tuple[int, bool, float]:
    """At quantile level ``i``, a start short at ``t_start``: the W to move to, whether it is in
    time, and the whole run's cost. The cheapest W that does the rest in ``left`` seconds (and
    within the budget); none: the fastest, which may be the start itself (no resize then)."""
    examples = float(c.examples or 0.0)
    rest = examples - t_start * k.window_hours * SECONDS_PER_HOUR
    spent = hourly[start] * k.window_hours

    def cost_at(w: int) -> float:
        t = table[w][i]
        return spent + hourly[w] * (k.restart_hours + rest / t / SECONDS_PER_HOUR) if t > 0 else math.inf
    in_time = [w for w in table if w != start and table[w][i] * left >= rest
               and (c.budget is None or cost_at(w) <= c.budget)]
    if in_time:
        target = min(in_time, key=lambda w: (cost_at(w), w))
        return target, True, cost_at(target)
    target = max(table, key=lambda w: (table[w][i], w == start, -w))
    return target, False, stay_cost if target == start else cost_at(target)


def _density(s: Spread, t: float) -> float:
    """The split normal's density at ``t`` (each half-normal carries its side's share of the mass)."""
    sigma = s.sigma_low if t <= s.mode else s.sigma_high
    if sigma == 0:
        return math.inf if t == s.mode else 0.0
    return 2 / (s.sigma_low + s.sigma_high) * NormalDist().pdf((t - s.mode) / sigma)


def _fallbacks(moves: list[tuple[float, Spread, list[tuple[float, int, bool]]]]) -> tuple[Fallback, ...]:
    """The resize targets by observed throughput, highest first. An observation is read as the
    start's likeliest outcome at that throughput (probability x density), then as that outcome's
    nearest quantile level; ranges start at their lowest level's throughput."""
    observed = sorted({t for _, _, mine in moves for t, _, _ in mine}, reverse=True)
    outcomes = [(weight, spread, mine, [x for x, _, _ in mine]) for weight, spread, mine in moves if mine]
    found: list[Fallback] = []
    for t in observed:
        _, _, mine, keys = max(outcomes, key=lambda m: m[0] * _density(m[1], t))
        j = bisect.bisect_left(keys, t)
        near = min((x for x in (j - 1, j) if 0 <= x < len(mine)), key=lambda x: abs(mine[x][0] - t))
        _, w, ok = mine[near]
        if found and found[-1].workers == w and found[-1].in_time == ok:
            found[-1] = Fallback(t, w, ok)
        else:
            found.append(Fallback(t, w, ok))
    if found:
        found[-1] = replace(found[-1], at_least=0.0)
    return tuple(found)
