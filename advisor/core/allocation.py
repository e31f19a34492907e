"""Share a cluster: how many workers each job gets when the quota cannot hold every job's own choice.

Each job alone would run at its own cost-optimal W (``cost.cost_optimal``, the same function
``advise`` uses). With many jobs and a capacity (a worker count, or resource quantities such as
cpu, memory and ``nvidia.com/gpu``), the allocator decides who gets the workers. It takes curves
already predicted (plain data); it predicts nothing itself.

**Objective.** Maximise the cluster's priority-weighted goodput per cost. A job's goodput at W
is its predicted throughput in units of its own one-worker rate (the curve's first point's
throughput per worker), so examples of different jobs are never compared. Between jobs, a worker
is priced at the job's worker price per hour: the parameter servers' price is a cost of the job,
not of its next worker, and enters through the job's own cost-optimal W (its upper bound).

**Bounds.** Each job gets 0 workers (it waits) or a W between
``lower = max(min_workers, the least W that meets its deadline at the interval's low end)`` and
``upper = its own cost-optimal W`` (``cost_optimal`` over the curve's points from
``min_workers`` to ``max_workers``, with its deadline and examples left). Beyond ``upper`` a
worker raises the job's cost per example: it is worth nothing, so with unlimited capacity every
job ends at exactly its own cost-optimal W, by the objective and not by a special case.

**Algorithm.** For each job, the upper concave hull of its points (W, priority x goodput) from
the origin (0 workers) through every W in [lower, upper]. Each hull segment is a *step*: so many
workers more, at a gain per worker (divided by the worker price: per unit cost) that falls from
one step of the job to the next. On a concave curve the first step starts the job at ``lower``
and every later step adds one point of the curve; where the curve is not concave, a step skips
the points under the hull.
All jobs' steps are put in one order: first the first step of every job with a deadline it can
meet (higher priority, then earlier deadline, first), then every other step by gain per cost
(ties by job name, so the order never depends on the input's order). The allocator walks that
order and takes each step that fits in the capacity left; a step that does not fit is skipped,
and with it the job's later steps. Allocations are always hull vertices, which are points of
the curve: a job whose curve rises late (W = 2 barely better than W = 1, W = 3 much better)
starts at the vertex, or waits.

**When more capacity never lowers the total goodput.** When the capacity is a worker count,
every job pays the same worker price and none has a deadline: the walks at capacities C and
C + 1 agree up to the first step that fits only at C + 1, of d workers at gain g per worker;
at C, fewer than d workers remain and every later step gains at most g per worker, so C + 1
gains at least d x g where C gains less. This needs every step's gain to be >= 0: the throughput
at a job's cost-optimal W must be the highest of its curve up to that W. With point estimates
that always holds (a W with less cost and more throughput would be cheaper per example), and
also with intervals of one relative width at every W. It does not hold in general when
capacity is several resources (no greedy is monotone for a knapsack in several dimensions), nor
with deadlines: a deadline-bound job that fits only at C + 1 is placed first, on purpose, even
when it displaces more goodput.

**Stability.** Given the previous allocation, the allocator also computes the allocation that
moves no placed job (their W fixed, the rest of the capacity filled in the same order) and keeps
it unless the new allocation's goodput exceeds it by more than ``stability`` (a fraction).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

from advisor.core.cost import SECONDS_PER_HOUR, Constraints, CostError, Prices, cost_optimal
from advisor.errors import AdvisorError

WORKERS = "workers"  # the capacity dimension that counts workers


class AllocationError(AdvisorError, ValueError):
    """A job or capacity the allocator cannot take (names the job and the field)."""


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One predicted W: throughput (examples/s) and its interval."""

    workers: int
    throughput: float
    low: float
    high: float


@dataclass(frozen=True)
class JobDemand:
    """One job as the allocator sees it: its predicted curve and what it asks for."""

    name: str
    curve: tuple[CurvePoint, ...]
    priority: float = 1.0
    min_workers: int = 1
    max_workers: int | None = None
    deadline_hours: float | None = None  # from now, for ``examples`` (examples left)
    examples: float | None = None
    request: Mapping[str, float] = field(default_factory=dict)  # per worker pod: cpu, memory, nvidia.com/gpu...
    overhead: Mapping[str, float] = field(default_factory=dict)  # its other pods (PS, chief), once per job
    prices: Prices = Prices()
    parameter_servers: int = 0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        where = f"job {self.name!r}"
        if not self.name:
            raise AllocationError("every job needs a name")
        if not self.curve:
            raise AllocationError(f"{where}: the curve has no points")
        ws = [p.workers for p in self.curve]
        if ws[0] < 1 or any(b <= a for a, b in zip(ws, ws[1:])):
            raise AllocationError(f"{where}: the curve's worker counts must be increasing and >= 1, got {ws}")
        for p in self.curve:
            if not (math.isfinite(p.throughput) and 0 <= p.low <= p.throughput <= p.high):
                raise AllocationError(f"{where}: at W = {p.workers} the interval must hold the throughput "
                                      f"(0 <= low <= throughput <= high), got {p.low}, {p.throughput}, {p.high}")
        if not (math.isfinite(self.priority) and self.priority > 0):
            raise AllocationError(f"{where}: priority must be a number > 0, got {self.priority!r}")
        if self.min_workers < 1:
            raise AllocationError(f"{where}: min_workers must be >= 1, got {self.min_workers}")
        if self.max_workers is not None and self.max_workers < self.min_workers:
            raise AllocationError(f"{where}: max_workers ({self.max_workers}) is below min_workers "
                                  f"({self.min_workers})")
        if self.deadline_hours is not None and not self.examples:
            raise AllocationError(f"{where}: a deadline needs the examples left")
        for kind, amounts in (("request", self.request), ("overhead", self.overhead)):
            for resource, amount in amounts.items():
                if not (math.isfinite(amount) and amount >= 0):
                    raise AllocationError(f"{where}: {kind} of {resource} must be >= 0, got {amount!r}")
        try:
            Constraints(self.max_workers, self.examples, self.deadline_hours)
        except CostError as exc:
            raise AllocationError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Capacity:
    """What the jobs may use in all: workers, and resource quantities (summed over flavors).
    A dimension not given is unlimited."""

    workers: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 0:
            raise AllocationError(f"capacity must be >= 0 workers, got {self.workers}")
        for resource, amount in self.resources.items():
            if not (math.isfinite(amount) and amount >= 0):
                raise AllocationError(f"capacity of {resource} must be >= 0, got {amount!r}")

    def limits(self) -> dict[str, float]:
        found = dict(self.resources)
        if self.workers is not None:
            found[WORKERS] = float(self.workers)
        return found


class Status(str, Enum):
    PLACED = "placed"  # runs with ``workers``
    WAITING = "waiting"  # 0 workers: the capacity ran out before its turn
    UNTOUCHED = "untouched"  # its minimum alone exceeds the capacity, or its curve misses its limits


@dataclass(frozen=True, slots=True)
class JobAllocation:
    name: str
    workers: int  # 0 when waiting; the minimum request when untouched (left as asked)
    status: Status
    own_optimum: int | None  # its cost-optimal W alone (None when untouched)
    throughput: float  # predicted at ``workers`` (0 when not placed)
    reason: str


@dataclass(frozen=True)
class Allocation:
    jobs: tuple[JobAllocation, ...]  # in the order of the input
    capacity: Capacity
    used: Mapping[str, float]  # by placed jobs, per dimension ("workers" and the resources)
    goodput: float  # priority-weighted, in one-worker units, summed over placed jobs
    kept: bool = False  # the previous allocation was kept (stability)

    def workers(self) -> dict[str, int]:
        return {j.name: j.workers for j in self.jobs}


@dataclass(frozen=True, slots=True)
class _Step:
    job: str
    start: int  # workers before (0: the job's first step)
    end: int
    gain_per_cost: float
    first_for_deadline: bool


@dataclass(frozen=True)
class _Plan:
    job: JobDemand
    lower: int
    upper: int
    unit: float  # one-worker throughput (examples/s)
    steps: tuple[_Step, ...]
    note: str  # why the bounds are what they are


def own_optimum(job: JobDemand) -> int:
    """The job's cost-optimal W alone (``cost.cost_optimal`` over its curve from ``min_workers``
    to ``max_workers``, with its deadline); without a W that meets the deadline, on cost alone.
    ``CostError`` when no point of the curve lies within its limits."""
    pts = [p for p in job.curve if p.workers >= job.min_workers]
    if not pts:
        raise CostError(f"the curve ends at W = {job.curve[-1].workers}, below min_workers {job.min_workers}")
    constraints = Constraints(job.max_workers, job.examples, job.deadline_hours)
    try:
        return _optimum(tuple(pts), job.prices, job.parameter_servers, constraints, job.confidence)
    except CostError:
        if job.deadline_hours is None:
            raise
        return _optimum(tuple(pts), job.prices, job.parameter_servers, Constraints(job.max_workers, job.examples),
                        job.confidence)


@lru_cache(maxsize=4096)  # a reallocation asks again for every job it already saw
def _optimum(pts: tuple[CurvePoint, ...], prices: Prices, parameter_servers: int, constraints: Constraints,
             confidence: float) -> int:
    return cost_optimal([p.workers for p in pts], [p.throughput for p in pts], prices,
                        parameter_servers=parameter_servers, constraints=constraints,
                        lows=[p.low for p in pts], highs=[p.high for p in pts], confidence=confidence).workers


def deadline_floor(job: JobDemand) -> int | None:
    """The least W (within its limits) whose interval's low end meets the deadline; None
    without a deadline or when no W meets it."""
    if job.deadline_hours is None or not job.examples:
        return None
    need = job.examples / (job.deadline_hours * SECONDS_PER_HOUR)
    for p in job.curve:
        if p.workers >= job.min_workers and (job.max_workers is None or p.workers <= job.max_workers) \
                and p.low >= need:
            return p.workers
    return None


def allocate(jobs: Sequence[JobDemand], capacity: Capacity, previous: Mapping[str, int] | None = None,
             stability: float = 0.05) -> Allocation:
    """Workers for every job (module docstring); ``previous``: the allocation in force, kept
    unless the new one's goodput is higher by more than ``stability``."""
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise AllocationError(f"job names must be unique, got {', '.join(twice)} more than once")
    if not (math.isfinite(stability) and stability >= 0):
        raise AllocationError(f"stability must be a fraction >= 0, got {stability!r}")
    limits = capacity.limits()
    plans: dict[str, _Plan] = {}
    untouched: dict[str, str] = {}
    for job in jobs:
        plan = _plan(job)
        if isinstance(plan, str):
            untouched[job.name] = plan
        elif not _fits(_use(job, 0, _least(plan)), {}, limits):
            untouched[job.name] = (f"its minimum of {_least(plan)} worker(s) exceeds the capacity "
                                   f"({_describe(limits)}): left at its request, untouched")
        else:
            plans[job.name] = plan
    order = sorted((s for p in plans.values() for s in p.steps), key=_step_key)
    fresh = _walk(order, plans, limits, fixed={})
    chosen, kept = fresh, False
    if previous is not None:
        fixed = {n: w for n, w in previous.items() if n in plans and w > 0}
        if _valid(fixed, plans, limits):
            held = _walk(order, plans, limits, fixed)
            if held != fresh and _goodput(fresh, plans) <= (1 + stability) * _goodput(held, plans):
                chosen, kept = held, True
    return _result(jobs, plans, untouched, chosen, capacity, kept)


def _plan(job: JobDemand) -> _Plan | str:
    """The job's bounds and hull steps, or why it is left untouched."""
    try:
        upper = own_optimum(job)
    except CostError as exc:
        return f"no worker count fits its limits ({exc}): left at its request, untouched"
    floor = deadline_floor(job)
    lower = max(job.min_workers, floor or job.min_workers)
    note = f"own cost-optimal W = {upper}"
    if job.deadline_hours is not None and floor is None:
        note += f"; no W meets its deadline of {job.deadline_hours:g} h at the low end: sized on cost alone"
    elif floor is not None:
        note += f"; W >= {floor} meets its deadline"
    lower = min(lower, upper)  # upper meets the deadline whenever some W does, so this changes nothing then
    first = job.curve[0]
    unit = first.throughput / first.workers
    if unit <= 0:
        return "its predicted throughput is 0: left at its request, untouched"
    pts = [(0, 0.0)] + [(p.workers, job.priority * p.throughput / unit)
                        for p in job.curve if lower <= p.workers <= upper]
    hull = _upper_hull(pts)
    steps = tuple(_Step(job.name, a[0], b[0], _per_cost(job, (b[1] - a[1]) / (b[0] - a[0])),
                        first_for_deadline=floor is not None and a[0] == 0)
                  for a, b in zip(hull, hull[1:]))
    return _Plan(job, lower, upper, unit, steps, note)


def _least(plan: _Plan) -> int:
    """The fewest workers the job can start with: its first point at or above ``lower``."""
    return next(p.workers for p in plan.job.curve if p.workers >= plan.lower)


def _per_cost(job: JobDemand, gain_per_worker: float) -> float:
    """A step's gain per unit cost: per worker-hour price (per worker when workers are free)."""
    price = job.prices.worker_per_hour
    return gain_per_worker / price if price > 0 else gain_per_worker


def _upper_hull(pts: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Upper concave hull of (workers, value) points sorted by workers, from the first point to
    the last (monotone chain); points on a chord stay, so equal gains come in the smallest steps."""
    hull: list[tuple[int, float]] = []
    for p in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) > 0:  # hull[-1] below the chord
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _step_key(s: _Step) -> tuple[int, float, str, int]:
    """Deadline-bound first steps first, then gain per cost, then name (never the input's order)."""
    if s.first_for_deadline:
        return (0, 0.0, s.job, s.start)
    return (1, -round(s.gain_per_cost, 12) if math.isfinite(s.gain_per_cost) else -math.inf, s.job, s.start)


def _use(job: JobDemand, start: int, end: int) -> dict[str, float]:
    """What going from ``start`` to ``end`` workers takes from the capacity."""
    added = end - start
    use = {WORKERS: float(added)}
    for resource, amount in job.request.items():
        use[resource] = use.get(resource, 0.0) + amount * added
    if start == 0:
        for resource, amount in job.overhead.items():
            use[resource] = use.get(resource, 0.0) + amount
    return use


def _fits(use: Mapping[str, float], used: Mapping[str, float], limits: Mapping[str, float]) -> bool:
    return all(used.get(k, 0.0) + v <= limits[k] + 1e-9 for k, v in use.items() if k in limits)


def _add(used: dict[str, float], use: Mapping[str, float]) -> None:
    for k, v in use.items():
        used[k] = used.get(k, 0.0) + v


def _walk(order: Sequence[_Step], plans: Mapping[str, _Plan], limits: Mapping[str, float],
          fixed: Mapping[str, int]) -> dict[str, int]:
    """Take each step in order that fits (a skipped step skips the job's later ones: they start
    where it ends); jobs in ``fixed`` are placed first at their W and take no step."""
    at = {n: 0 for n in plans}
    used: dict[str, float] = {}
    for name, w in fixed.items():
        at[name] = w
        _add(used, _use(plans[name].job, 0, w))
    for s in order:
        if s.job in fixed or at[s.job] != s.start:
            continue
        use = _use(plans[s.job].job, s.start, s.end)
        if not _fits(use, used, limits):
            continue
        _add(used, use)
        at[s.job] = s.end
    return at


def _valid(fixed: Mapping[str, int], plans: Mapping[str, _Plan], limits: Mapping[str, float]) -> bool:
    """The previous W of each job is still a point of its curve within its bounds, and all fit."""
    used: dict[str, float] = {}
    for name, w in fixed.items():
        plan = plans[name]
        if not plan.lower <= w <= plan.upper or all(p.workers != w for p in plan.job.curve):
            return False
        use = _use(plan.job, 0, w)
        if not _fits(use, used, limits):
            return False
        _add(used, use)
    return True


def _throughput(job: JobDemand, workers: int) -> float:
    return next((p.throughput for p in job.curve if p.workers == workers), 0.0)


def _goodput(at: Mapping[str, int], plans: Mapping[str, _Plan]) -> float:
    return sum(p.job.priority * _throughput(p.job, at[n]) / p.unit for n, p in plans.items() if at[n] > 0)


def _result(jobs: Sequence[JobDemand], plans: Mapping[str, _Plan], untouched: Mapping[str, str],
            at: Mapping[str, int], capacity: Capacity, kept: bool) -> Allocation:
    used: dict[str, float] = {WORKERS: 0.0}
    out = []
    for job in jobs:
        if job.name in untouched:
            out.append(JobAllocation(job.name, job.min_workers, Status.UNTOUCHED, None, 0.0, untouched[job.name]))
            continue
        plan, w = plans[job.name], at[job.name]
        if w == 0:
            why = (f"waits: the capacity ran out before its turn (it starts with {plan.steps[0].end} worker(s)); "
                   f"{plan.note}")
            out.append(JobAllocation(job.name, 0, Status.WAITING, plan.upper, 0.0, why))
            continue
        _add(used, _use(job, 0, w))
        why = plan.note if w == plan.upper else f"{plan.note}; held at {w} by the capacity"
        if kept:
            why += "; previous allocation kept (a move would gain too little)"
        out.append(JobAllocation(job.name, w, Status.PLACED, plan.upper, _throughput(job, w), why))
    return Allocation(tuple(out), capacity, used, _goodput(at, plans), kept)


def _describe(limits: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(limits.items())) or "unlimited"
