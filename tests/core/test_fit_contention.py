"""Fitting share_sigma and multi_flow_goodput to measured throughput (core/models/ps_des/fit_contention.py).

Truths used: observations the model itself produced with known parameters must be recovered
exactly (same seed, same steps: common random numbers); the testbed's measurements in
tests/data/ps-async, fitted on one congestion control, must predict the other's within the
accuracy target; and the data's own account of which runs alternate at W = 2.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from functools import cache

import pytest

from advisor.core.advice import AdviceRequest, advise
from advisor.core.models.ps_des.contention import CongestionControl, Contention
from advisor.core.models.ps_des.fit_contention import FitCase, Observation, fit_contention
from advisor.core.curve import CurveSettings
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from advisor.importers.loader import load_profile
from tests.factories import des_choice
from tests.conftest import ps_async_data

SIGMAS, ETAS = (0.5, 1.0, 1.5), (0.8, 0.85, 0.9)


@cache
def trace(cc: str, model: str) -> Profile:
    return load_profile(ps_async_data("condensed", cc, f"{model}_bw100.json.gz"))


def request(cc: str, queue_s: float | None, sigma: float = 1.0, eta: float = 0.85,
            workers: tuple[int, ...] = (1,)) -> AdviceRequest:
    return AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), goodput=0.95,
                         curve=CurveSettings(workers=workers, steps=1000, warmup_steps=50),
                         model=des_choice(Contention(CongestionControl(cc), queue_s, sigma, eta)))


def measured(name: str) -> tuple[Observation, ...]:
    doc = json.loads(ps_async_data("measured", name).read_text())
    return tuple(Observation(r["W"], r["thr_window"]) for r in doc["results"])


def case(cc: str, model: str, run: str, queue_s: float = 0.1) -> FitCase:
    return FitCase(run, trace(cc, model), request(cc, queue_s), measured(run))


def test_parameters_that_made_the_observations_are_recovered() -> None:
    # the model's own throughput with sigma 0.5, eta 0.8, simulated exactly as the fit simulates
    profile, steps = trace("cubic", "mlp"), 300
    truth = request("cubic", 0.1, sigma=0.5, eta=0.8, workers=(1, 2, 3, 4, 6))
    truth = replace(truth, curve=replace(truth.curve, steps=steps))
    made = advise(profile, truth)
    observed = tuple(Observation(p.workers, p.throughput) for p in made.points if p.workers > 1)
    fit = fit_contention([FitCase("made", profile, request("cubic", 0.1), observed)],
                         sigmas=SIGMAS, etas=ETAS, steps=steps)
    assert (fit.share_sigma, fit.multi_flow_goodput) == (0.5, 0.8)
    assert fit.best.mean_error == pytest.approx(0, abs=1e-12)
    assert fit.before.mean_error > 0.01  # the defaults (1.0, 0.85) do not reproduce them: the fit did work
    assert len(fit.grid) == 9 and {(g.share_sigma, g.multi_flow_goodput) for g in fit.grid} == {
        (s, e) for s in SIGMAS for e in ETAS}


def test_the_fit_is_the_best_of_its_grid_and_no_worse_than_the_defaults_on_it() -> None:
    fit = fit_contention([case("cubic", "mlp", "cubic/mlp_bw100.json")], sigmas=SIGMAS, etas=ETAS, steps=300)
    assert fit.best.mean_error == min(g.mean_error for g in fit.grid)
    assert fit.best.mean_error <= fit.before.mean_error  # (1.0, 0.85) is on the grid
    errors = [abs(o.error_after) for o in fit.observations if o.scored]
    assert statistics.mean(errors) == pytest.approx(fit.best.mean_error)
    assert max(errors) == pytest.approx(fit.best.max_error)


def test_fitted_on_cubic_predicts_bbr_within_the_accuracy_target() -> None:
    # one pair for the cluster, fitted on both models under cubic, predicting both under BBR
    fit_on = [case("cubic", "mlp", "cubic/mlp_bw100.json"), case("cubic", "mlp", "cubic/mlp_bw100_repeat.json"),
              case("cubic", "cnn", "cubic/cnn_bw100.json")]
    fit = fit_contention(fit_on, sigmas=SIGMAS, etas=ETAS)
    errors = []
    for model, run in (("mlp", "bbr/mlp_bw100.json"), ("cnn", "bbr/cnn_bw100.json")):
        by_w: dict[int, list[float]] = {}
        for o in measured(run):
            by_w.setdefault(o.workers, []).append(o.throughput)
        req = request("bbr", 0.1, fit.share_sigma, fit.multi_flow_goodput, workers=tuple(sorted(by_w)))
        advice = advise(trace("bbr", model), req)
        errors += [abs(advice.point(w).throughput / statistics.mean(v) - 1) for w, v in by_w.items()]
    assert statistics.median(errors) <= 0.06 and max(errors) <= 0.15, errors


def test_w1_and_an_alternating_w2_are_reported_but_not_scored() -> None:
    # tests/data/ps-async/README.md: with cubic and a 20 ms queue the two workers alternate (197 ex/s)
    fit = fit_contention([case("cubic", "mlp", "cubic_q20ms/mlp_bw100.json", queue_s=0.02)],
                         sigmas=SIGMAS, etas=ETAS, steps=300)
    unscored = {o.observation.workers: o.why_not_scored for o in fit.observations if not o.scored}
    assert set(unscored) == {1, 2}
    assert "one flow" in unscored[1] and "alternating" in unscored[2]
    assert all(o.scored for o in fit.observations if o.observation.workers > 2)


def test_nothing_to_fit_is_an_error_that_says_what_to_observe() -> None:
    only_w1 = FitCase("j", trace("cubic", "mlp"), request("cubic", 0.1), (Observation(1, 100.0),))
    with pytest.raises(SimulationSettingsError, match="no observation can inform the fit.*2 or more workers"):
        fit_contention([only_w1], sigmas=SIGMAS, etas=ETAS, steps=300)


@pytest.mark.parametrize(("change", "message"), [
    ({"request": AdviceRequest(network=NetworkModel(bandwidth_bps=1e8), curve=CurveSettings(workers=(1,)),
                               model=des_choice(equal_shares=True))}, "needs the contention model"),
    ({"observed": ()}, "no observed throughput"),
])
def test_impossible_cases_are_refused(change: dict, message: str) -> None:
    bad = replace(case("cubic", "mlp", "cubic/mlp_bw100.json"), **change)
    with pytest.raises(SimulationSettingsError, match=message):
        fit_contention([bad], sigmas=SIGMAS, etas=ETAS)


def test_empty_grids_and_no_cases_are_refused() -> None:
    with pytest.raises(SimulationSettingsError, match="at least one job"):
        fit_contention([])
    with pytest.raises(SimulationSettingsError, match="grid needs"):
        fit_contention([case("cubic", "mlp", "cubic/mlp_bw100.json")], sigmas=())


@pytest.mark.parametrize(("workers", "throughput"), [(0, 100.0), (2, 0.0), (2, -5.0), (2, math.nan), (2, math.inf)])
def test_an_impossible_observation_is_refused(workers: int, throughput: float) -> None:
    with pytest.raises(SimulationSettingsError):
        Observation(workers, throughput)


def test_a_job_with_several_ps_fits_the_goodput_it_reads_and_a_mix_is_refused() -> None:
    """A 2-PS job reads ``multi_ps_flow_goodput``: observations the model made with it at 0.8 are
    recovered as that parameter (not ``multi_flow_goodput``, which would move nothing), and a 1-PS
    and a 2-PS job in one fit are refused naming both parameters."""
    from tests.conftest import REPO

    two = load_profile(REPO / "tests" / "data" / "ps-traces" / "mlp_ps2_bw100.trace.json.gz")
    steps = 300
    truth = request("cubic", 0.1, sigma=0.5, workers=(1, 2, 3, 4, 6))
    params = {**truth.model.params, "multi_ps_flow_goodput": 0.8}
    truth = replace(truth, curve=replace(truth.curve, steps=steps), model=replace(truth.model, params=params))
    made = advise(two, truth)
    observed = tuple(Observation(p.workers, p.throughput) for p in made.points if p.workers > 1)
    fit = fit_contention([FitCase("two", two, request("cubic", 0.1), observed)], sigmas=SIGMAS, etas=ETAS,
                         steps=steps)
    assert fit.goodput_param == "multi_ps_flow_goodput"
    assert (fit.share_sigma, fit.multi_flow_goodput) == (0.5, 0.8)
    assert fit.best.mean_error == pytest.approx(0, abs=1e-12)
    one = case("cubic", "mlp", "cubic/mlp_bw100.json")
    assert fit_contention([one], sigmas=(1.0,), etas=(0.85,), steps=steps).goodput_param == "multi_flow_goodput"
    with pytest.raises(SimulationSettingsError, match=r"multi_flow_goodput: cubic/mlp_bw100.json; "
                                                      r"multi_ps_flow_goodput: two\): fit them separately"):
        fit_contention([one, FitCase("two", two, request("cubic", 0.1), observed)], steps=steps)
