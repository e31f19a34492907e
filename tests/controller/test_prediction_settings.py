"""The controller's network-model settings reach the predictor, its cache key and its fingerprint."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from advisor.controller.pipeline.predictions import PredictionParams, build_request, prediction_key, prediction_params
from advisor.controller.settings import load_settings
from advisor.core.advice import ModelChoice, model_inputs
from advisor.core.cost import Prices
from advisor.core.models.ps_des.contention import SHORT_QUEUE_S
from benchmarks.synthetic import tiny_mlp


def _params(**settings: object) -> PredictionParams:
    s = load_settings(**settings)
    return prediction_params(tiny_mlp().job.recorded_bandwidth_bps, Prices(), bandwidth_bps=1e8, max_workers=4, target=0.02, seed=0,
                             saturation_threshold=0.05, model=s.model_choice())


def _queue(params: PredictionParams) -> float:
    """The request-queue bound the predictor's network will use."""
    request = build_request(params)
    model, checked = request.model.resolve()
    return model.network(model_inputs(None, request), checked).request_queue_s  # type: ignore[attr-defined]


def test_congestion_control_and_queue_reach_the_simulation() -> None:
    assert _queue(_params(congestion_control="cubic", queue="20ms")) == pytest.approx(0.02)
    assert build_request(_params(congestion_control="cubic", queue="20ms")).model.name == "li2020-des+contention"
    assert _queue(_params()) == SHORT_QUEUE_S
    assert build_request(_params(equal_shares=True)).model.name == "li2020-des"
    assert _queue(_params(equal_shares=True)) == 0.0  # Li et al.'s model: no request queueing


def test_each_model_setting_changes_the_cache_key_and_the_fingerprint() -> None:
    base = load_settings()
    changes = [dict(congestion_control="cubic"), dict(queue="20ms"), dict(share_sigma=0.5),
               dict(multi_flow_goodput=0.9), dict(equal_shares=True), dict(model="cynthia"),
               dict(model_params={"share_sigma": 0.25})]
    keys = {prediction_key("sha", _params())}
    for change in changes:
        keys.add(prediction_key("sha", _params(**change)))
        assert load_settings(**change).prediction_fingerprint() != base.prediction_fingerprint()
    assert len(keys) == len(changes) + 1


def test_parameters_stored_before_the_contention_rules_still_read() -> None:
    old = dict(bandwidth_bps=1e8, max_workers=4, target_rel_halfwidth=0.02, seed=0, worker_price=1.0, ps_price=0.0,
               saturation_threshold=0.05)
    assert PredictionParams(**old).choice() == ModelChoice("li2020-des+contention", {
        "congestion_control": "unknown", "queue_s": None, "share_sigma": 1.0, "multi_flow_goodput": 0.85})
    assert PredictionParams(**old, equal_shares=True).choice() == ModelChoice("li2020-des")


def test_the_model_setting_and_its_parameters_reach_the_predictor() -> None:
    params = _params(model="li2020-des+contention", model_params={"share_sigma": 0.3}, share_sigma=0.9)
    assert build_request(params).model == ModelChoice("li2020-des+contention", {
        "congestion_control": "unknown", "engine": "compiled", "multi_flow_goodput": 0.85,
        "multi_ps_flow_goodput": 1.0, "queue_s": None, "ps_placement": "round-robin",
        "share_sigma": 0.3, "two_way_loss": False, "window_gain": 0.0})  # model_params win over the contention setting
    assert build_request(_params(model="lin2018-mva", share_sigma=0.5)).model == ModelChoice("lin2018-mva", {})


@pytest.mark.parametrize(("settings", "match"), [
    (dict(model="nonesuch"), "no such model; the models are: li2020-des"),
    (dict(model_params={"sigma": 1}), "parameter sigma: Extra inputs are not permitted"),
    (dict(model="cynthia", model_params={"share_sigma": 1}), "parameter share_sigma"),
])
def test_a_bad_model_setting_is_refused_at_load_naming_it(settings: dict, match: str) -> None:
    with pytest.raises(Exception, match=match):
        load_settings(**settings)


@pytest.mark.parametrize(("field", "value"), [("queue", "soon"), ("congestion_control", "vegas"),
                                              ("share_sigma", -1), ("multi_flow_goodput", 0)])
def test_bad_model_settings_name_the_field(field: str, value: object) -> None:
    with pytest.raises((ValidationError, ValueError), match=field):
        load_settings(**{field: value})


def test_the_contention_settings_default_to_the_models_own_defaults() -> None:
    from advisor.core.models import registry

    fields = registry.get("li2020-des+contention").Params.model_fields
    s = load_settings()
    assert (s.congestion_control, s.share_sigma, s.multi_flow_goodput) == (
        fields["congestion_control"].default.value, fields["share_sigma"].default, fields["multi_flow_goodput"].default)
