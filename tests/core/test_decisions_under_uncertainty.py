"""Choosing W when the throughput is uncertain (core/belief.py, core/cost.py): the probability of
meeting a rate, mixtures of outcomes, the cheapest W that meets the deadline and budget with the
confidence asked, and the answer when none does. Expected values are derived beside each test
from the normal distribution (statistics.NormalDist), not from the code under test."""

from __future__ import annotations

from statistics import NormalDist

import pytest

from advisor.core.belief import Belief, BeliefError, Outcome, Spread
from advisor.core.cost import Constraints, CostError, Prices, cost_optimal, decide, expected_cost_per_example

Z95 = 1.959963984540054  # Phi^-1(0.975)
PHI = NormalDist().cdf


def test_a_symmetric_interval_is_a_normal_with_its_ends_at_the_tails() -> None:
    s = Spread.from_interval(100.0, 90.0, 110.0, 0.95)
    # low = mode - z sigma, so P(T >= low) = Phi(z) = 0.975; the mode splits the mass in half
    assert s.p_at_least(90.0) == pytest.approx(0.975)
    assert s.p_at_least(100.0) == pytest.approx(0.5)
    assert s.p_at_least(110.0) == pytest.approx(0.025)
    # sigma = 10 / z: 95 is half an interval below the mode, P(T >= 95) = Phi(5 / (10 / z)) = Phi(0.98) = 0.836
    assert s.p_at_least(95.0) == pytest.approx(PHI(5 * Z95 / 10)) == pytest.approx(0.8365, abs=1e-4)


def test_an_asymmetric_interval_splits_its_mass_by_the_sigmas() -> None:
    s = Spread.from_interval(100.0, 90.0, 130.0, 0.95)
    # sigma below 10/z, above 30/z: the upper side carries 2 x 30 / (2 x 40) = 3/4 of the mass
    assert s.p_at_least(100.0) == pytest.approx(0.75)
    # its end is its own 97.5 % point: P(T >= 130) = 3/4 x 2 x 0.025 = 0.0375
    assert s.p_at_least(130.0) == pytest.approx(0.0375)


def test_a_mixture_weighs_each_outcomes_probability() -> None:
    drifting = Outcome("drifting", 150.0, 140.0, 160.0, 0.25)
    alternating = Outcome("alternating", 200.0, 180.0, 220.0, 0.75)
    b = Belief.of([drifting, alternating], 0.95)
    # P(T >= 170) = 0.25 (1 - Phi(20 / (10 / z))) + 0.75 Phi(30 / (20 / z))
    expected = 0.25 * (1 - PHI(2 * Z95)) + 0.75 * PHI(1.5 * Z95)
    assert b.p_at_least(170.0) == pytest.approx(expected) == pytest.approx(0.7488, abs=1e-4)
    # between the outcomes' ranges only the alternating one can be met: about 0.75
    assert 0.74 < b.p_at_least(172.0) < 0.75
    # E[1 / T] weighs each outcome's own (Jensen: above 1 / E[T])
    parts = [Spread.from_interval(150.0, 140.0, 160.0), Spread.from_interval(200.0, 180.0, 220.0)]
    assert b.mean_inverse() == pytest.approx(0.25 * parts[0].mean_inverse() + 0.75 * parts[1].mean_inverse())
    assert b.low == 140.0
    # the level-p lower bound inverts the probability
    assert b.p_at_least(b.quantile_at_least(0.9)) == pytest.approx(0.9, abs=1e-6)
    assert Belief.interval(100.0, 90.0, 110.0, 0.95).quantile_at_least(0.975) == pytest.approx(90.0, abs=1e-6)


def test_outcome_probabilities_must_be_a_distribution() -> None:
    with pytest.raises(BeliefError, match="sum to 1"):
        Belief.of([Outcome("a", 1.0, 1.0, 1.0, 0.5), Outcome("b", 2.0, 2.0, 2.0, 0.6)], 0.95)


def test_expected_inverse_throughput() -> None:
    assert Spread(100.0, 0.0, 0.0).mean_inverse() == 1 / 100  # no spread: the point
    # symmetric sigma 5 around 100: E[1/T] = (1/mu)(1 + s^2/mu^2 + 3 s^4/mu^4 + ...) (Taylor, normal moments)
    s = Spread.from_interval(100.0, 100 - 5 * Z95, 100 + 5 * Z95)
    assert s.mean_inverse() == pytest.approx(0.01 * (1 + 0.0025 + 3 * 0.0025**2), rel=2e-5)
    # wider costs more on average (Jensen)
    assert Spread.from_interval(100.0, 80.0, 120.0).mean_inverse() > s.mean_inverse() > 0.01


def test_expected_cost_is_the_point_cost_without_spread() -> None:
    prices = Prices(3.0, 1.0)
    # (2 x 3 + 1 x 1) per hour / (3600 x 50 ex/s)
    assert expected_cost_per_example(prices, 2, 1, 50.0, 50.0, 50.0) == pytest.approx(7 / 3600 / 50)


# W = 1..3, +-10 % intervals at 95 %, worker 1/h, no PS: cost per example is W / T
WORKERS = [1, 2, 3]
THR = [100.0, 190.0, 270.0]
LOWS = [90.0, 171.0, 243.0]
HIGHS = [110.0, 209.0, 297.0]
EXAMPLES = 180 * 3600.0  # a deadline of 1 h then needs 180 ex/s


def _decide(confidence: float, need: float, budget: float | None = None, **kw: object):
    c = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / need / 3600, budget=budget, confidence=confidence)
    beliefs = [Belief.interval(t, lo, hi, 0.95) for t, lo, hi in zip(THR, LOWS, HIGHS)]
    return decide(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, beliefs=beliefs, **kw)


def test_the_cheapest_w_that_meets_the_deadline_with_the_confidence_asked() -> None:
    # P(W = 2 meets 180) = Phi(10 / (19 / z)) = Phi(1.03) = 0.849; W = 3: 90 / (27 / z) = 6.5 sigma: about 1
    p2 = PHI(10 * Z95 / 19)
    choice = _decide(0.9, 180.0)
    assert choice.workers == 3 and choice.confident and choice.p_meet == pytest.approx(1.0, abs=1e-9)
    # asking for 0.8 admits W = 2, which is cheaper per example (2 / 190 < 3 / 270)
    choice = _decide(0.8, 180.0)
    assert choice.workers == 2 and choice.confident
    assert choice.p_meet == pytest.approx(p2) == choice.p_deadline and choice.needed_throughput == pytest.approx(180)
    assert choice.p_budget is None


def test_no_w_reaching_the_confidence_still_gets_an_answer() -> None:
    # 285 ex/s is above every mode: W = 3 meets it with 1 - Phi(15 / (27 / z)) = 0.138, W = 2 with about 0
    choice = _decide(0.9, 285.0)
    assert (choice.workers, choice.confident) == (3, False)
    assert choice.p_meet == pytest.approx(1 - PHI(15 * Z95 / 27)) == pytest.approx(0.138, abs=1e-3)
    assert choice.needed_throughput == pytest.approx(285.0)
    # cost_optimal, for callers that need a W meeting the constraints, says the same as an error
    c = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / 285 / 3600, confidence=0.9)
    with pytest.raises(CostError, match=r"no worker count in 1\.\.3 meets the deadline of 0\.632 h for 648,000 "
                                        r"examples with confidence 90%: the likeliest, W = 3, meets it with "
                                        r"probability 14% \(it needs 285\.0 examples/s; predicted 270\.0\)"):
        cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, lows=LOWS, highs=HIGHS)


def test_a_budget_is_a_rate_too_and_the_joint_probability_is_of_the_larger_rate() -> None:
    # budget 2.4 for 648,000 examples: W costs W x 648000 / (3600 T) <= 2.4 when T >= 75 W: 75, 150, 225
    alone = Constraints(examples=EXAMPLES, budget=2.4, confidence=0.9)
    beliefs = [Belief.interval(t, lo, hi, 0.95) for t, lo, hi in zip(THR, LOWS, HIGHS)]
    choice = decide(WORKERS, THR, Prices(), parameter_servers=0, constraints=alone, beliefs=beliefs)
    # W = 1 meets 75 with Phi(25 / (10 / z)) = Phi(4.9): certain, and it is the cheapest
    assert choice.workers == 1 and choice.p_budget == pytest.approx(PHI(2.5 * Z95))
    # with the 180 ex/s deadline: W = 2 needs max(180, 150) = 180 (0.849 < 0.9), W = 3 needs max(180, 225) = 225:
    # P = Phi(45 / (27 / z)) = Phi(3.27) = 0.9995
    choice = _decide(0.9, 180.0, budget=2.4)
    assert choice.workers == 3 and choice.needed_throughput == pytest.approx(225.0)
    assert choice.p_meet == pytest.approx(PHI(45 * Z95 / 27)) == choice.p_budget
    assert choice.p_deadline == pytest.approx(1.0, abs=1e-9)


def test_point_estimates_decide_with_probabilities_of_zero_or_one() -> None:
    c = Constraints(examples=EXAMPLES, deadline_hours=1.0)
    # 180 ex/s: W = 2 (190) is the cheapest that meets it on the point estimates
    assert decide(WORKERS, THR, Prices(), parameter_servers=0, constraints=c).workers == 2
    # 500 ex/s: none meets it; the answer is the nearest (W = 3 at 270), with probability 0
    far = Constraints(examples=500 * 3600.0, deadline_hours=1.0)
    choice = decide(WORKERS, THR, Prices(), parameter_servers=0, constraints=far)
    assert (choice.workers, choice.confident, choice.p_meet) == (3, False, 0.0)


def test_expected_cost_prefers_the_certain_of_two_equal_point_costs() -> None:
    # W = 2 at 100 and W = 4 at 200 cost the same per example at the point estimates: the tie goes to fewer
    assert cost_optimal([2, 4], [100.0, 200.0], Prices(), parameter_servers=0).workers == 2
    # W = 2 is uncertain (60-140), W = 4 nearly certain: W = 4 is cheaper on average
    choice = cost_optimal([2, 4], [100.0, 200.0], Prices(), parameter_servers=0, lows=[60.0, 198.0],
                          highs=[140.0, 202.0])
    assert choice.workers == 4
    assert choice.expected_cost_per_example > choice.cost_per_example


def test_exact_intervals_decide_as_the_point_estimates() -> None:
    for c in (Constraints(), Constraints(examples=EXAMPLES, deadline_hours=1.0), Constraints(max_workers=2)):
        plain = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c)
        exact = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, lows=THR, highs=THR)
        assert exact.workers == plain.workers
        assert exact.expected_cost_per_example == pytest.approx(plain.cost_per_example)


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_a_confidence_outside_zero_one_is_refused(confidence: float) -> None:
    with pytest.raises(CostError, match="confidence must be a probability strictly between 0 and 1"):
        Constraints(confidence=confidence)


def test_mismatched_intervals_are_refused() -> None:
    with pytest.raises(CostError, match="low and a high end"):
        cost_optimal(WORKERS, THR, Prices(), lows=LOWS)
    with pytest.raises(CostError, match="low and a high end"):
        cost_optimal(WORKERS, THR, Prices(), lows=LOWS[:2], highs=HIGHS[:2])
    with pytest.raises(CostError, match="within the limit of 1 worker"):
        decide([2, 3], [1.0, 2.0], Prices(), constraints=Constraints(max_workers=1))
