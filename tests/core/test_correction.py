"""Deadline plans that count on one correction (core/correction.py). The cases are built so that
the answer follows by hand from the normal distribution: W = 1 believed N(100, 10) examples/s,
W = 2 believed N(160, 16) (the same quantile at both: T2 = 1.6 T1), a job of 110 x 3600
examples due in one hour (it needs 110 examples/s), observed after 0.1 h. The grid puts the
quantile levels at (k + 0.5) / 400."""

from __future__ import annotations

from statistics import NormalDist

import pytest

from advisor.core.belief import Belief, Outcome
from advisor.core.correction import GRID, Correction, plan_with_correction, plans, quantile, resize_after
from advisor.core.cost import Constraints, CostError, Prices, decide

Z95 = NormalDist().inv_cdf(0.975)
PRICES = Prices(worker_per_hour=1.0)
EXAMPLES = 110 * 3600.0


def normal(mean: float, sd: float) -> Belief:
    return Belief.interval(mean, mean - Z95 * sd, mean + Z95 * sd, 0.95)


BELIEFS = [normal(100.0, 10.0), normal(160.0, 16.0)]


def test_a_start_that_may_fall_short_is_planned_with_its_correction() -> None:
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    # alone, W = 1 meets 110/s when z >= 1: 1 - Phi(1) = 0.159; W = 2 when 160 + 16 z >= 110: 0.999
    alone = decide([1, 2], [100.0, 160.0], PRICES, constraints=c, beliefs=BELIEFS)
    assert alone.workers == 2 and alone.p_meet == pytest.approx(1 - NormalDist().cdf(-50 / 16))
    plan = plan_with_correction([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c,
                                correction=Correction(window_hours=0.1))
    # short at W = 1, the rest (396000 - 360 T1) must fit 3240 s at T2 = 1.6 T1:
    # (160 + 16 z) 3240 + (100 + 10 z) 360 >= 396000  <=>  z >= -158400 / 55440 = -2.857
    assert plan.workers == 1 and plan.choice.confident
    assert plan.choice.p_meet == pytest.approx(1 - NormalDist().cdf(-158400 / 55440), abs=1 / GRID)
    assert plan.alone == pytest.approx(1 - NormalDist().cdf(1.0), abs=1e-9)
    # stay from the rate the deadline needs; below it, move to W = 2, in time down to the grid's
    # second level (z = Phi^-1(1.5 / 400) = -2.67 > -2.857), too late at its first (-3.02)
    assert plan.stay_at_least == pytest.approx(110.0)
    second = 100 + 10 * NormalDist().inv_cdf(1.5 / GRID)
    assert [(f.at_least, f.workers, f.in_time) for f in plan.fallbacks] == [(pytest.approx(second), 2, True),
                                                                           (0.0, 2, False)]
    assert resize_after(plan, 111.0) == 1 and resize_after(plan, 109.0) == 2 and resize_after(plan, 60.0) == 2


def test_the_plans_expected_cost_is_the_mean_over_its_branches() -> None:
    """Integrated apart, over 20 000 normal quantiles: stay at W = 1 when z >= 1 (1 h x N / T1
    per example), else 0.1 h at W = 1 and the rest at W = 2 (2 x rest / T2)."""
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    [start, _] = plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.1))
    n, total = 20_000, 0.0
    for k in range(n):
        z = NormalDist().inv_cdf((k + 0.5) / n)
        t1, t2 = 100 + 10 * z, 160 + 16 * z
        total += EXAMPLES / t1 / 3600 if z >= 1 else 0.1 + 2 * (EXAMPLES - 360 * t1) / t2 / 3600
    assert start.choice.expected_cost_per_example == pytest.approx(total / n / EXAMPLES, rel=2e-3)


def test_a_correction_that_comes_too_late_leaves_the_one_shot_decision() -> None:
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    late = plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.95, 0.1))
    # no time left after the window and restart: each start meets it alone or not at all
    assert [p.choice.p_meet for p in late] == [p.alone for p in late]
    assert all(not p.fallbacks for p in late)
    assert plan_with_correction([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c,
                                correction=Correction(0.95, 0.1)).workers == 2


def test_a_resize_the_budget_cannot_pay_for_does_not_count() -> None:
    """A budget of 1.05: staying at W = 1 costs N / T1 / 3600 <= 1.05 when T1 >= 104.8 (the
    deadline's 110 binds); moving costs 0.1 + 2 x rest / T2 / 3600, about 1.35: never within it."""
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, budget=1.05, confidence=0.9)
    plan = plan_with_correction([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c,
                                correction=Correction(0.1))
    assert plan.workers == 1 and not plan.choice.confident
    assert plan.choice.p_meet == pytest.approx(1 - NormalDist().cdf(1.0))
    assert all(not f.in_time for f in plan.fallbacks)


def test_exact_beliefs_plan_as_the_point_estimates_decide() -> None:
    exact = [Belief.exact(100.0), Belief.exact(160.0)]
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    found = plans([1, 2], [100.0, 160.0], PRICES, exact, constraints=c, correction=Correction(0.1))
    # W = 1 runs 100/s for sure, short of 110: not a trial but a detour, planned alone; W = 2 meets it
    assert [p.choice.p_meet for p in found] == [0.0, 1.0] and not found[0].fallbacks
    assert found[0].choice.expected_cost_per_example == pytest.approx(1 / 100 / 3600)
    assert found[1].choice.expected_cost_per_example == pytest.approx(2 / 160 / 3600)


def test_a_start_less_likely_to_meet_it_than_the_confidence_lets_a_decision_miss_is_no_trial() -> None:
    """W = 1 believed N(100, 10): at 112/s it meets the deadline alone with 1 - Phi(1.2) = 0.115,
    at 114/s with 1 - Phi(1.4) = 0.081. At confidence 0.9 a decision may miss with 0.1: the
    first start is still a trial the resize can rescue, the second is planned alone."""
    for rate, trial in ((112.0, True), (114.0, False)):
        c = Constraints(examples=rate * 3600, deadline_hours=1.0, confidence=0.9)
        start = plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.1))[0]
        assert (start.choice.p_meet > start.alone + 0.5) == trial and bool(start.fallbacks) == trial


def test_a_correction_never_lowers_a_starts_chance_without_a_budget() -> None:
    c = Constraints(examples=EXAMPLES, deadline_hours=1.3, confidence=0.9)
    three = BELIEFS + [normal(190.0, 25.0)]
    for k in (Correction(0.05), Correction(0.2, 0.05), Correction(0.6, 0.3)):
        for p in plans([1, 2, 3], [100.0, 160.0, 190.0], PRICES, three, constraints=c, correction=k):
            assert p.choice.p_meet >= p.alone


def test_the_quantile_inverts_the_belief() -> None:
    mixture = Belief.of([Outcome("drifting", 150.0, 140.0, 170.0, 0.6),
                         Outcome("alternating", 200.0, 180.0, 210.0, 0.4)], 0.95)
    for b in (BELIEFS[0], Belief.interval(100.0, 80.0, 130.0, 0.95), mixture):
        for u in (0.01, 0.2, 0.5, 0.77, 0.99):
            assert 1 - b.p_at_least(quantile(b, u)) == pytest.approx(u, abs=1e-7)


@pytest.mark.parametrize("window, restart, words", [(0.0, 0.0, "window"), (float("nan"), 0.0, "window"),
                                                    (1.0, -0.1, "restart")])
def test_a_correction_that_cannot_work_is_refused_by_name(window: float, restart: float, words: str) -> None:
    with pytest.raises(CostError, match=words):
        Correction(window, restart)


def test_a_plan_without_a_deadline_is_refused() -> None:
    with pytest.raises(CostError, match="deadline"):
        plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=Constraints(examples=1e6, budget=10.0),
              correction=Correction(0.1))


def test_a_start_with_nothing_faster_stays_when_it_falls_short() -> None:
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    [plan] = plans([1], [100.0], PRICES, BELIEFS[:1], constraints=c, correction=Correction(0.1))
    # no other W to move to: the plan is the start alone, at the start's cost
    assert plan.choice.p_meet == plan.alone == pytest.approx(1 - NormalDist().cdf(1.0))
    assert [(f.workers, f.in_time) for f in plan.fallbacks] == [(1, False)] and resize_after(plan, 50.0) == 1
    assert plan.choice.expected_cost_per_example == pytest.approx(BELIEFS[0].mean_inverse() / 3600, rel=1e-2)


def test_an_observation_is_read_within_the_start_outcome_it_most_likely_came_from() -> None:
    """W = 2 is drifting N(120, 12) or alternating N(170, 17), even odds; W = 3 N(152, 15.2) and
    W = 4 N(190, 19) (10 % each). Observed 132 at W = 2 after 0.1 h of a 10 h job needing
    150/s: the rest needs 150.2/s. It is the drifting outcome (the alternating one puts it 2.2
    sigma low), one sigma high, so every W is one sigma high: W = 3 makes 167. Read as the
    mixture's quantile, 132 would be its 43rd percentile and W = 3 149.2, too slow."""
    two = Belief.of([Outcome("drifting", 120.0, 120 - Z95 * 12, 120 + Z95 * 12, 0.5),
                     Outcome("alternating", 170.0, 170 - Z95 * 17, 170 + Z95 * 17, 0.5)], 0.95)
    beliefs = [normal(100.0, 10.0), two, normal(152.0, 15.2), normal(190.0, 19.0)]
    c = Constraints(examples=150 * 36000.0, deadline_hours=10.0, confidence=0.9)
    found = plans([1, 2, 3, 4], [100.0, 120.0, 152.0, 190.0], PRICES, beliefs, constraints=c,
                  correction=Correction(0.1))
    start_2 = found[1]
    assert start_2.workers == 2 and resize_after(start_2, 132.0) == 3
    assert resize_after(start_2, 151.0) == 2  # in time as it runs: it stays
    # the mixture's reading, by hand: u = 0.5 Phi(1) + 0.5 Phi(-38 / 17), W = 3 at that quantile
    u = 0.5 * NormalDist().cdf(1.0) + 0.5 * NormalDist().cdf(-38 / 17)
    assert 152 + 15.2 * NormalDist().inv_cdf(u) < (150 * 36000 - 132 * 360) / 35640


def test_a_start_already_observed_is_planned_alone() -> None:
    """W = 1 observed: a window there would show what is known, so its plan is W = 1 alone (no
    fallbacks); W = 2, not observed, still counts on the resize."""
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0, confidence=0.9)
    seen = plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.1, observed=frozenset({1})))
    fresh = plans([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.1))
    assert seen[0].choice.p_meet == seen[0].alone == pytest.approx(1 - NormalDist().cdf(1.0))
    assert not seen[0].fallbacks and seen[0].stay_at_least == 0.0
    assert fresh[0].choice.p_meet > 0.99
    assert seen[1].choice.p_meet == fresh[1].choice.p_meet
    with pytest.raises(CostError, match="observed worker counts"):
        Correction(0.1, observed=frozenset({0}))


def test_when_no_plan_can_meet_it_the_likeliest_start_is_the_nearest_to_the_rate() -> None:
    """400/s: neither W nor any resize comes near (both plans 0), so, as ``decide``'s likeliest,
    the start nearest to the rate needed: W = 2 (160 of 400) before W = 1 (100 of 400)."""
    c = Constraints(examples=400 * 3600.0, deadline_hours=1.0, confidence=0.9)
    plan = plan_with_correction([1, 2], [100.0, 160.0], PRICES, BELIEFS, constraints=c, correction=Correction(0.1))
    assert plan.workers == 2 and plan.choice.p_meet == pytest.approx(0.0, abs=1e-12) and not plan.choice.confident
