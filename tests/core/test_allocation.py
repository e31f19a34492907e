"""The allocator of workers across jobs: hand-computed cases, then its properties over random jobs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from advisor.core.allocation import (
    AllocationError, Capacity, CurvePoint, JobDemand, Status, allocate, deadline_floor, own_optimum,
)
from advisor.core.cost import Constraints, Prices, cost_optimal

PS_PRICED = Prices(worker_per_hour=1.0, ps_per_hour=3.0)


def curve(*throughput: float, rel: float = 0.0, start: int = 1) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint(w, t, t * (1 - rel), t * (1 + rel)) for w, t in enumerate(throughput, start))


def job(name: str, *throughput: float, **kw: object) -> JobDemand:
    kw.setdefault("prices", PS_PRICED)
    kw.setdefault("parameter_servers", 1)
    return JobDemand(name, curve(*throughput), **kw)  # type: ignore[arg-type]


# a: cost per example ~ (W + 3) / T: 4/100, 5/200, 6/290, 7/370, 8/440 = .040 .025 .0207 .0189 .0182 -> W* = 5
A = job("a", 100, 200, 290, 370, 440)
# b: 4/100, 5/190, 6/240, 7/260, 8/270 = .040 .0263 .0250 .0269 .0296 -> W* = 3
B = job("b", 100, 190, 240, 260, 270)


def test_own_optimum_is_cost_optimal_by_hand() -> None:
    assert own_optimum(A) == 5
    assert own_optimum(B) == 3


def test_unlimited_capacity_gives_each_job_its_own_optimum() -> None:
    result = allocate([A, B], Capacity())
    assert result.workers() == {"a": 5, "b": 3}
    assert all(j.status is Status.PLACED for j in result.jobs)


@pytest.mark.parametrize("capacity, expected", [
    # goodput in one-worker units; gains per worker: a 1, 1, .9, .8, .7; b 1, .9, .5.
    # Order (gain, then name): a0-1 (1), a1-2 (1), b0-1 (1), a2-3 (.9), b1-2 (.9), a3-4 (.8), a4-5 (.7), b2-3 (.5)
    (1, {"a": 1, "b": 0}),
    (2, {"a": 2, "b": 0}),
    (3, {"a": 2, "b": 1}),
    (4, {"a": 3, "b": 1}),
    (5, {"a": 3, "b": 2}),
    (6, {"a": 4, "b": 2}),
    (7, {"a": 5, "b": 2}),
    (8, {"a": 5, "b": 3}),
    (20, {"a": 5, "b": 3}),  # nobody beyond their own optimum: 12 workers stay free
])
def test_marginal_gain_order_by_hand(capacity: int, expected: dict[str, int]) -> None:
    assert allocate([A, B], Capacity(workers=capacity)).workers() == expected


def test_waiting_job_says_why() -> None:
    result = allocate([A, B], Capacity(workers=2))
    b = result.jobs[1]
    assert b.status is Status.WAITING and b.workers == 0 and "capacity ran out" in b.reason


def test_priority_weights_the_gain() -> None:
    # b at priority 3: gains 3, 2.7, 1.5 beat a's 1, 1, .9...: b takes its 3 workers first
    result = allocate([A, job("b", 100, 190, 240, 260, 270, priority=3)], Capacity(workers=4))
    assert result.workers() == {"a": 1, "b": 3}


def test_deadline_minimum_comes_first() -> None:
    # c must run 250 ex/s: 900,000 examples in 1 h; the least W with T >= 250 is 3. Its first step (0 -> 3)
    # goes before every gain, so with 4 workers a gets only 1.
    c = job("c", 100, 200, 300, 350, examples=900_000, deadline_hours=1.0, priority=0.5)
    assert deadline_floor(c) == 3
    assert allocate([A, c], Capacity(workers=4)).workers() == {"a": 1, "c": 3}


def test_deadline_at_the_low_end_of_the_interval() -> None:
    # with +-20 %, W = 3's low end is 240 < 250: W = 4 (low 280) is the least that meets it
    c = JobDemand("c", curve(100, 200, 300, 350, rel=0.2), prices=PS_PRICED, parameter_servers=1,
                  examples=900_000, deadline_hours=1.0)
    assert deadline_floor(c) == 4


def test_minimum_above_the_capacity_is_left_untouched() -> None:
    big = job("big", 100, 200, 300, 400, 500, 600, min_workers=6)
    result = allocate([A, big], Capacity(workers=4))
    assert result.workers() == {"a": 4, "big": 6}
    untouched = result.jobs[1]
    assert untouched.status is Status.UNTOUCHED and "exceeds the capacity" in untouched.reason
    assert result.used["workers"] == 4  # the untouched job is not counted: the allocator did not place it


def test_resources_limit_the_workers() -> None:
    # 2 GPUs per worker, 6 GPUs: 3 workers in all; the PS (1 cpu) counts once per job
    gpu_a = job("a", 100, 200, 290, 370, 440, request={"nvidia.com/gpu": 2, "cpu": 1}, overhead={"cpu": 1})
    result = allocate([gpu_a, B], Capacity(resources={"nvidia.com/gpu": 6, "cpu": 100}))
    assert result.workers() == {"a": 3, "b": 3}  # b asks for no GPU: only a is held by them
    assert result.used["nvidia.com/gpu"] == 6 and result.used["cpu"] == 4


def test_stability_keeps_an_allocation_that_is_as_good() -> None:
    # at 4 workers a=2,b=2 gives 2 + 1.9 = 3.9, as much as the fresh a=3,b=1 (2.9 + 1): kept
    kept = allocate([A, B], Capacity(workers=4), previous={"a": 2, "b": 2})
    assert kept.workers() == {"a": 2, "b": 2} and kept.kept
    # a=1,b=1 gives 2: the fresh 3.9 is far more than 5 % better: moved
    moved = allocate([A, B], Capacity(workers=4), previous={"a": 1, "b": 1})
    assert moved.workers() == {"a": 3, "b": 1} and not moved.kept


def test_stability_still_places_a_newcomer_in_free_capacity() -> None:
    # a kept at 5 (its optimum); the newcomer b takes 2 of the 3 free workers without moving a... and its third
    result = allocate([A, B], Capacity(workers=8), previous={"a": 5})
    assert result.workers() == {"a": 5, "b": 3}


def test_a_previous_allocation_that_no_longer_fits_is_not_kept() -> None:
    result = allocate([A, B], Capacity(workers=3), previous={"a": 5, "b": 3})
    assert result.workers() == {"a": 2, "b": 1}


def test_non_concave_curve_is_allocated_on_its_hull() -> None:
    # flat then a jump: value 1, 1.1, 3.3 at W = 1, 2, 3 (PS free: W* = argmax T/W = 3, 330/3 > 100/1). The
    # chord from the origin to W = 3 has slope 1.1 > 1 (W = 1) and > 0.55 (W = 2): one step, 0 -> 3
    j = JobDemand("j", curve(100, 110, 330))
    assert own_optimum(j) == 3
    waits = allocate([j], Capacity(workers=2)).jobs[0]
    assert waits.workers == 0 and "starts with 3 worker(s)" in waits.reason
    assert allocate([j], Capacity(workers=3)).workers() == {"j": 3}


@pytest.mark.parametrize("bad, message", [
    (dict(priority=0), "priority"),
    (dict(min_workers=3, max_workers=2), "below min_workers"),
    (dict(deadline_hours=1.0), "needs the examples"),
    (dict(request={"cpu": -1}), "request of cpu"),
])
def test_bad_job_is_refused_naming_the_field(bad: dict[str, object], message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        job("x", 100, 200, **bad)


def test_bad_capacity_and_duplicate_names_are_refused() -> None:
    with pytest.raises(AllocationError, match="capacity must be >= 0"):
        Capacity(workers=-1)
    with pytest.raises(AllocationError, match="unique"):
        allocate([A, A], Capacity())


# ---- properties over random jobs ----

@st.composite
def jobs_strategy(draw: st.DrawFn, deadlines: bool = True) -> list[JobDemand]:
    """2-5 jobs; curves of any shape (increments may be negative: not concave, not increasing), their
    intervals of one relative width per job (the module docstring's condition), optional deadlines."""
    out = []
    for i in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 8))
        first = draw(st.floats(10, 1000))
        steps = draw(st.lists(st.floats(-0.3, 1.3), min_size=n - 1, max_size=n - 1))
        thr = [first]
        for s in steps:
            thr.append(max(thr[-1] + s * first, 1.0))
        rel = draw(st.sampled_from([0.0, 0.05, 0.2]))
        lo = draw(st.integers(1, n))
        hi = draw(st.one_of(st.none(), st.integers(lo, n + 2)))
        ps = draw(st.integers(0, 2))
        prices = Prices(1.0, draw(st.floats(0, 5)))
        deadline = draw(st.one_of(st.none(), st.floats(0.1, 10))) if deadlines else None
        examples = draw(st.floats(1e4, 1e7)) if deadline is not None else None
        out.append(JobDemand(f"j{i}", curve(*thr, rel=rel), priority=draw(st.integers(1, 4)), min_workers=lo,
                             max_workers=hi, prices=prices, parameter_servers=ps, deadline_hours=deadline,
                             examples=examples, request={"cpu": draw(st.sampled_from([0.5, 1.0, 2.0]))}))
    return out


def cost_optimal_alone(j: JobDemand) -> int:
    """The W a single job gets from the product: cost_optimal over its curve from its minimum (deadline
    dropped when no W meets it)."""
    pts = [p for p in j.curve if p.workers >= j.min_workers]
    args = ([p.workers for p in pts], [p.throughput for p in pts], j.prices)
    kw = dict(parameter_servers=j.parameter_servers, lows=[p.low for p in pts], highs=[p.high for p in pts])
    if deadline_floor(j) is not None or j.deadline_hours is None:
        return cost_optimal(*args, constraints=Constraints(j.max_workers, j.examples, j.deadline_hours), **kw).workers
    return cost_optimal(*args, constraints=Constraints(j.max_workers, j.examples), **kw).workers


@given(jobs_strategy())
def test_unlimited_capacity_gives_each_its_cost_optimal_w(jobs: list[JobDemand]) -> None:
    result = allocate(jobs, Capacity())
    assert {j.name: j.workers for j in result.jobs} == {j.name: cost_optimal_alone(j) for j in jobs}


@given(jobs_strategy(), st.integers(0, 30), st.floats(0, 40))
def test_capacity_is_never_exceeded_and_minimums_hold(jobs: list[JobDemand], workers: int, cpu: float) -> None:
    result = allocate(jobs, Capacity(workers=workers, resources={"cpu": cpu}))
    placed = [a for a in result.jobs if a.status is Status.PLACED]
    assert sum(a.workers for a in placed) <= workers
    by_name = {j.name: j for j in jobs}
    assert sum(a.workers * by_name[a.name].request["cpu"] for a in placed) <= cpu + 1e-9
    for a in placed:
        j = by_name[a.name]
        assert a.workers >= j.min_workers and (j.max_workers is None or a.workers <= j.max_workers)
        assert any(p.workers == a.workers for p in j.curve)  # a predicted point, never an interpolation


@given(jobs_strategy(deadlines=False))
def test_goodput_never_falls_when_capacity_grows(jobs: list[JobDemand]) -> None:
    """The module docstring's condition: a worker capacity, one worker price, no deadline (the curves
    may still be non-concave and fall)."""
    goodputs = [allocate(jobs, Capacity(workers=c)).goodput for c in range(0, 30)]
    assert all(b >= a - 1e-9 for a, b in zip(goodputs, goodputs[1:])), goodputs


@given(jobs_strategy(), st.integers(0, 20), st.randoms(use_true_random=False))
def test_same_input_same_output_whatever_the_order(jobs: list[JobDemand], workers: int, rnd) -> None:
    first = allocate(jobs, Capacity(workers=workers))
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    again = allocate(shuffled, Capacity(workers=workers))
    assert first.workers() == again.workers()
    assert first == allocate(jobs, Capacity(workers=workers))
