"""Choosing W when the throughput is an interval (core/cost.py): deadlines at the low end,
expected cost, and the chance of meeting the deadline."""

from __future__ import annotations

import pytest

from advisor.core.cost import Constraints, CostError, Prices, Spread, cost_optimal, expected_cost_per_example

Z95 = 1.959963984540054  # Phi^-1(0.975)


def test_a_symmetric_interval_low_end_is_met_with_the_upper_tail_probability() -> None:
    s = Spread.from_interval(100.0, 90.0, 110.0, 0.95)
    # low = mode - z sigma, so P(T >= low) = Phi(z) = 0.975; the mode splits the mass in half
    assert s.p_at_least(90.0) == pytest.approx(0.975)
    assert s.p_at_least(100.0) == pytest.approx(0.5)
    assert s.p_at_least(110.0) == pytest.approx(0.025)


def test_an_asymmetric_interval_splits_its_mass_by_the_sigmas() -> None:
    s = Spread.from_interval(100.0, 90.0, 130.0, 0.95)
    # sigma below 10/z, above 30/z: the upper side carries 2 x 30 / (2 x 40) = 3/4 of the mass
    assert s.p_at_least(100.0) == pytest.approx(0.75)
    # its end is its own 97.5 % point: P(T >= 130) = 3/4 x 2 x 0.025 = 0.0375
    assert s.p_at_least(130.0) == pytest.approx(0.0375)


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


WORKERS = [1, 2, 3]
THR = [100.0, 190.0, 270.0]
LOWS = [95.0, 150.0, 250.0]
HIGHS = [105.0, 230.0, 290.0]
# a deadline that needs 180 ex/s for one hour
NEED = Constraints(examples=180 * 3600.0, deadline_hours=1.0)


def test_the_deadline_is_met_at_the_low_end() -> None:
    # by the point estimates W = 2 (190 >= 180) is the cheapest that meets it: 2/190 < 3/270 per example
    assert cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=NEED).workers == 2
    # at the low ends W = 2 gives 150 < 180: only W = 3 (250) meets it
    choice = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=NEED, lows=LOWS, highs=HIGHS)
    assert choice.workers == 3
    assert choice.hours_at_low == pytest.approx(180 / 250)
    # 180 is (270 - 180) / (20 / z) = 8.8 sigmas below the mode: certain to the printed digits
    assert choice.p_deadline == pytest.approx(1.0, abs=1e-9)


def test_the_chance_of_meeting_the_deadline_is_reported() -> None:
    # needs 252 ex/s: W = 3's low end 250 misses it; with a 260 low end it is met
    c = Constraints(examples=252 * 3600.0, deadline_hours=1.0)
    # none meets it at the low end; W = 3 (mode 270, sigma below 20/z) meets 252 with probability
    # 1 - (2 x 20 / 40) Phi(-18 / (20 / z)) = 1 - Phi(-1.764) = 96 %
    with pytest.raises(CostError, match=r"at the low end of its interval.*likeliest to meet it is W = 3, with "
                                        r"probability 96%"):
        cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, lows=LOWS, highs=HIGHS)
    choice = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, lows=[95, 150, 260],
                          highs=HIGHS)
    # sigma below 270 is 10 / z; 252 is 1.8 z... = 18/10 x z sigmas below: P = 1 - (2 x 10 / 30) Phi(-1.8 z)
    from statistics import NormalDist

    expected = 1 - (2 * (10 / Z95) / (10 / Z95 + 20 / Z95)) * NormalDist().cdf(-18 / (10 / Z95))
    assert choice.workers == 3 and choice.p_deadline == pytest.approx(expected)
    assert choice.p_deadline > 0.975


def test_expected_cost_prefers_the_certain_of_two_equal_point_costs() -> None:
    # W = 2 at 100 and W = 4 at 200 cost the same per example at the point estimates: the tie goes to fewer
    assert cost_optimal([2, 4], [100.0, 200.0], Prices(), parameter_servers=0).workers == 2
    # W = 2 is uncertain (60-140), W = 4 nearly certain: W = 4 is cheaper on average
    choice = cost_optimal([2, 4], [100.0, 200.0], Prices(), parameter_servers=0, lows=[60.0, 198.0],
                          highs=[140.0, 202.0])
    assert choice.workers == 4
    assert choice.expected_cost_per_example > choice.cost_per_example


def test_exact_intervals_decide_as_the_point_estimates() -> None:
    for c in (Constraints(), NEED, Constraints(max_workers=2)):
        plain = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c)
        exact = cost_optimal(WORKERS, THR, Prices(), parameter_servers=0, constraints=c, lows=THR, highs=THR)
        assert exact.workers == plain.workers
        assert exact.expected_cost_per_example == pytest.approx(plain.cost_per_example)


def test_mismatched_intervals_are_refused() -> None:
    with pytest.raises(CostError, match="low and a high end"):
        cost_optimal(WORKERS, THR, Prices(), lows=LOWS)
    with pytest.raises(CostError, match="low and a high end"):
        cost_optimal(WORKERS, THR, Prices(), lows=LOWS[:2], highs=HIGHS[:2])
