"""The online refit of one job's contention constants (core/models/ps_des/refit.py).

Truths used: observations the model itself produced with known constants (the same seed and
steps as the fit: common random numbers, so the true pair explains them exactly); the rule
that neither constant acts on one worker (one flow per link), so the W = 1 point never moves;
the bounds the module states; and the direction a 20 % shortfall must move the curve.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from advisor.core.advice import AdviceRequest, Advice, advise
from advisor.core.curve import CurveSettings
from advisor.core.models.ps_des.contention import CongestionControl, Contention
from advisor.core.models.ps_des.fit_contention import Observation
from advisor.core.models.ps_des.refit import ETA_BOUNDS, SIGMA_BOUNDS, TIE_TOLERANCE, refit_contention
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from advisor.importers.loader import load_profile
from tests.conftest import ps_async_data
from tests.factories import des_choice

STEPS = 300  # per worker, for the fit and for the observations it must reproduce
WORKERS = (1, 2, 3, 4, 6)


@cache
def mlp() -> Profile:
    """The testbed's MLP at 100 Mbit/s: its PS links are contended from W = 2 on."""
    return load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))


def request(sigma: float = 1.0, eta: float = 0.85) -> AdviceRequest:
    return AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), goodput=0.95,
                         curve=CurveSettings(workers=WORKERS, steps=STEPS, warmup_steps=50),
                         model=des_choice(Contention(CongestionControl.UNKNOWN, None, sigma, eta)))


@cache
def curve(sigma: float = 1.0, eta: float = 0.85) -> Advice:
    return advise(mlp(), request(sigma, eta))


def test_constants_that_made_the_observations_are_recovered() -> None:
    # the model's own throughput at W = 2, 3, 4, 6 with sigma 0.5, eta 0.75 (both on the grid):
    # that pair explains them exactly, so the refit's error is at most TIE_TOLERANCE and the
    # constants land near it, starting from the defaults (1.0, 0.85)
    truth = curve(0.5, 0.75)
    observed = tuple(Observation(p.workers, p.throughput) for p in truth.points if p.workers > 1)
    refit = refit_contention(mlp(), request(), observed, steps=STEPS)
    assert refit.changed
    assert refit.error_after <= TIE_TOLERANCE < refit.error_before
    assert abs(refit.params.share_sigma - 0.5) <= 0.25 and abs(refit.params.multi_flow_goodput - 0.75) <= 0.05
    # only the two constants moved: the other parameters are the job's own
    assert refit.params.model_dump(exclude={"share_sigma", "multi_flow_goodput"}) == refit.before.model_dump(
        exclude={"share_sigma", "multi_flow_goodput"})


def test_a_job_observed_20_percent_below_its_prediction_gets_a_lower_curve() -> None:
    before = curve()
    observed = Observation(3, 0.8 * before.point(3).throughput)
    refit = refit_contention(mlp(), request(), (observed,), steps=STEPS)
    assert refit.changed and refit.error_before == pytest.approx(0.25)  # 1/0.8 - 1
    after = advise(mlp(), replace(request(), model=refit.choice()))
    # at the observed W the new curve is close to the observation (well within the old 25 %)
    assert abs(after.point(3).throughput / observed.throughput - 1) <= 0.05
    # the curve beyond one worker is lower; at W = 1 neither constant acts (one flow per link)
    assert after.point(1).throughput == before.point(1).throughput
    assert all(after.point(w).throughput < before.point(w).throughput for w in (3, 4, 6))


def test_an_observation_within_noise_keeps_the_constants() -> None:
    observed = Observation(3, 1.01 * curve().point(3).throughput)  # 1 % off: within TIE_TOLERANCE
    refit = refit_contention(mlp(), request(), (observed,), steps=STEPS)
    assert not refit.changed
    assert (refit.params.share_sigma, refit.params.multi_flow_goodput) == (1.0, 0.85)


def test_one_absurd_point_cannot_give_absurd_constants() -> None:
    # a tenth of the prediction (a scrape of a job that was mostly stalled): the constants stay
    # inside the bounds and the refit says the gap is more than sharing explains
    observed = Observation(4, 0.1 * curve().point(4).throughput)
    refit = refit_contention(mlp(), request(), (observed,), steps=STEPS)
    assert SIGMA_BOUNDS[0] <= refit.params.share_sigma <= SIGMA_BOUNDS[1]
    assert ETA_BOUNDS[0] <= refit.params.multi_flow_goodput <= ETA_BOUNDS[1]
    assert refit.error_after > 0.5
    assert any("more than link sharing explains" in n for n in refit.notes), refit.notes


def test_a_one_worker_observation_cannot_inform_a_refit() -> None:
    with pytest.raises(SimulationSettingsError, match="no observation can inform"):
        refit_contention(mlp(), request(), (Observation(1, 50.0),), steps=STEPS)


def test_impossible_requests_are_refused() -> None:
    with pytest.raises(SimulationSettingsError, match="at least one observed"):
        refit_contention(mlp(), request(), (), steps=STEPS)
    equal = replace(request(), model=des_choice(equal_shares=True))
    with pytest.raises(SimulationSettingsError, match="only the contention model"):
        refit_contention(mlp(), equal, (Observation(3, 100.0),), steps=STEPS)
    with pytest.raises(SimulationSettingsError, match="tie_tolerance"):
        refit_contention(mlp(), request(), (Observation(3, 100.0),), steps=STEPS, tie_tolerance=-0.1)
