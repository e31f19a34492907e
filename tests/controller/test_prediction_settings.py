"""The controller's network-model settings reach the predictor, its cache key and its fingerprint."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from advisor.controller.predictions import PredictionParams, build_request, prediction_key, prediction_params
from advisor.controller.settings import load_settings
from advisor.core.models.ps_des.contention import SHORT_QUEUE_S
from advisor.core.cost import Prices
from benchmarks.synthetic import tiny_mlp


def _params(**settings: object) -> PredictionParams:
    s = load_settings(**settings)
    return prediction_params(tiny_mlp().job.recorded_bandwidth_bps, Prices(), bandwidth_bps=1e8, max_workers=4, target=0.02, seed=0,
                             saturation_threshold=0.05, contention=s.contention())


def test_congestion_control_and_queue_reach_the_simulation() -> None:
    request = build_request(_params(congestion_control="cubic", queue="20ms"))
    assert request.contention is not None and request.contention.request_queue_s == pytest.approx(0.02)
    assert request.model == "li2020-des+contention"
    assert build_request(_params()).contention.request_queue_s == SHORT_QUEUE_S  # type: ignore[union-attr]
    assert build_request(_params(equal_shares=True)).contention is None


def test_each_model_setting_changes_the_cache_key_and_the_fingerprint() -> None:
    base = load_settings()
    changes = [dict(congestion_control="cubic"), dict(queue="20ms"), dict(share_sigma=0.5),
               dict(multi_flow_goodput=0.9), dict(equal_shares=True)]
    keys = {prediction_key("sha", _params())}
    for change in changes:
        keys.add(prediction_key("sha", _params(**change)))
        assert load_settings(**change).prediction_fingerprint() != base.prediction_fingerprint()
    assert len(keys) == len(changes) + 1


def test_parameters_stored_before_the_contention_rules_still_read() -> None:
    old = dict(bandwidth_bps=1e8, max_workers=4, target_rel_halfwidth=0.02, seed=0, worker_price=1.0, ps_price=0.0,
               saturation_threshold=0.05)
    assert PredictionParams(**old).contention() is not None  # read with today's default model


@pytest.mark.parametrize(("field", "value"), [("queue", "soon"), ("congestion_control", "vegas"),
                                              ("share_sigma", -1), ("multi_flow_goodput", 0)])
def test_bad_model_settings_name_the_field(field: str, value: object) -> None:
    with pytest.raises((ValidationError, ValueError), match=field):
        load_settings(**{field: value})
