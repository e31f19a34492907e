"""The closed loop's arithmetic (core/posterior.py), checked against values derived by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from advisor.core.advice import observed_outcomes
from advisor.core.belief import Outcome
from advisor.core.posterior import CurvePosterior, Discrepancy, condition, mixture_quantiles, normalised, posterior_table


def test_one_observation_shrinks_its_own_point_to_about_its_noise_and_its_neighbours_in_proportion() -> None:
    # s = 0.1 at every W, rho = 0.5, one observation at W = 2 with noise sigma = 0.03.
    # Gaussian conditioning: v(W) = s^2 - (s^2 rho^|W-2|)^2 / (s^2 + sigma^2).
    # s^2 = 0.01, s^2 + sigma^2 = 0.0109.
    # W = 2: 0.01 - 0.0001 / 0.0109 = 0.000825688 (sd 0.02873: about sigma, 0.03)
    # W = 1, 3: 0.01 - (0.005)^2 / 0.0109 = 0.007706 (sd 0.0878)
    # W = 4: 0.01 - (0.0025)^2 / 0.0109 = 0.009427 (sd 0.0971)
    prior = Discrepancy((1, 2, 3, 4), (0.1, 0.1, 0.1, 0.1), 0.5)
    log_mu = np.log([[100.0, 180.0, 240.0, 280.0]])
    observed = [(2, 180.0 * math.exp(-0.2), 0.03)]  # 20 % (in log) below the curve
    cond = condition(prior, log_mu, observed)
    assert cond.var == pytest.approx([0.007706422, 0.000825688, 0.007706422, 0.009426606], rel=1e-6)
    # mean shift m(W) = k_W (s^2 + sigma^2)^-1 r, r = -0.2: at W = 2, -0.2 x 0.01 / 0.0109 = -0.183486;
    # at W = 1, 3: half of it (rho); at W = 4: a quarter
    assert cond.mean[0] == pytest.approx([-0.0917431, -0.1834862, -0.0917431, -0.0458716], rel=1e-6)
    # log marginal likelihood of r = -0.2 under Normal(0, 0.0109)
    expected = -0.5 * (0.04 / 0.0109 + math.log(0.0109) + math.log(2 * math.pi))
    assert cond.loglik[0] == pytest.approx(expected, rel=1e-9)


def test_without_observations_nothing_moves() -> None:
    prior = Discrepancy((1, 2), (0.1, 0.2), 0.7)
    cond = condition(prior, np.log([[100.0, 150.0]]), [])
    assert cond.mean.tolist() == [[0.0, 0.0]] and cond.var == pytest.approx([0.01, 0.04])


def test_two_observations_at_one_worker_count_count_as_one_with_less_noise() -> None:
    # two independent looks at W = 1, each with noise 0.05, tell as much as one with 0.05 / sqrt(2)
    prior = Discrepancy((1, 2), (0.1, 0.1), 0.6)
    log_mu = np.log([[100.0, 150.0]])
    twice = condition(prior, log_mu, [(1, 90.0, 0.05), (1, 90.0, 0.05)])
    once = condition(prior, log_mu, [(1, 90.0, 0.05 / math.sqrt(2))])
    assert twice.var == pytest.approx(once.var) and twice.mean == pytest.approx(once.mean)


def test_mixture_quantiles_of_one_component_are_the_normal_ones() -> None:
    # Normal(0, 1): the 2.5 %, 50 %, 97.5 % quantiles are -1.95996, 0, 1.95996
    q = mixture_quantiles(np.array([1.0]), np.array([0.0]), 1.0, (0.025, 0.5, 0.975))
    assert q == pytest.approx([-1.959964, 0.0, 1.959964], abs=1e-5)


def test_the_median_of_a_two_component_mixture() -> None:
    # equal weights at -1 and 1 (sd 0.1): the CDF is 0.5 all across the gap, any point there is a median
    (q,) = mixture_quantiles(np.array([0.5, 0.5]), np.array([-1.0, 1.0]), 0.1, (0.5,))
    assert -0.6 < q < 0.6
    # weights 0.3 and 0.7: 0.3 + 0.7 Phi((m - 1) / 0.1) = 0.5, Phi = 0.285714, z = -0.565949, m = 0.943405
    (q,) = mixture_quantiles(np.array([0.3, 0.7]), np.array([-1.0, 1.0]), 0.1, (0.5,))
    assert q == pytest.approx(0.943405, abs=1e-5)


def test_weights_sum_to_one_even_far_below_underflow() -> None:
    w = normalised(np.array([-2000.0, -2000.0 + math.log(3)]))
    assert w.tolist() == pytest.approx([0.25, 0.75])


def test_the_table_gives_examples_per_second_and_replaces_only_its_points() -> None:
    prior = Discrepancy((1, 2), (0.1, 0.1), 0.5)
    log_mu = np.log([[100.0, 180.0]])
    cond = condition(prior, log_mu, [(2, 180.0, 0.03)])
    table = posterior_table((1, 2), np.array([1.0]), log_mu, cond, np.zeros(2), 0.95)
    point, low, high = table[2]
    # at the observation itself (the curve agreed): median 180, half-width 1.96 x 0.02873 in log
    assert point == pytest.approx(180.0)
    assert (low, high) == pytest.approx((180 * math.exp(-1.959964 * 0.0287348), 180 * math.exp(1.959964 * 0.0287348)),
                                        rel=1e-4)
    before = [(Outcome("predicted", 100.0, 90.0, 110.0),), (Outcome("predicted", 170.0, 150.0, 190.0),),
              (Outcome("predicted", 200.0, 180.0, 220.0),)]
    after = observed_outcomes([1, 2, 3], before, CurvePosterior({2: table[2]}))
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1] == (Outcome("observed", point, low, high),)


def test_a_discrepancy_that_cannot_be_is_refused() -> None:
    with pytest.raises(ValueError, match="rho"):
        Discrepancy((1,), (0.1,), 1.0)
    with pytest.raises(ValueError, match="finite and > 0"):
        Discrepancy((1,), (0.0,), 0.5)


def test_observed_points_replace_every_outcome_of_their_worker_count() -> None:
    """Where the posterior has a point it is the one outcome (the observation says which
    arrangement ran); elsewhere the model's outcomes stay, W = 2's two included."""
    drifting = Outcome("drifting", 150.0, 130.0, 170.0, 0.5, "stated congestion control", True)
    alternating = Outcome("alternating", 200.0, 170.0, 230.0, 0.5, "stated congestion control", True)
    predicted = (Outcome("predicted", 160.0, 140.0, 180.0),)
    posterior = CurvePosterior(table={2: (190.0, 185.0, 196.0)})
    out = observed_outcomes([2, 3], [(drifting, alternating), predicted], posterior)
    assert out[0] == (Outcome("observed", 190.0, 185.0, 196.0),)
    assert out[1] == predicted
