"""Limits, the recommendation, the auto-resize rule and the annotations, on hand-made curves."""

from __future__ import annotations

import json

import pytest

from advisor.controller.pipeline import annotations as ann
from advisor.controller.pipeline.policy import Limits, job_limits, job_model, job_prices, recommend, resize_target
from advisor.core.advice import ModelChoice
from advisor.controller.settings import Mode, load_settings
from advisor.controller.jobs.tfjob import parse_tfjob
from advisor.core.cost import Prices
from advisor.errors import TFJobError
from tests.controller.tfjobs import pytorchjob, tfjob, with_uid


def prediction(thr: dict[int, float], ps: int = 1, saturation: int = 4) -> dict:
    prices = Prices(1.0, 0.0)
    return {
        "model": "li2020-des",
        "job": {"parameter_servers": ps},
        "saturation_workers": saturation,
        "curve": [{"workers": w, "throughput": t, "low": 0.98 * t, "high": 1.02 * t,
                   "cost_per_example": (w * prices.worker_per_hour) / 3600 / t} for w, t in sorted(thr.items())],
    }


# Throughput that grows by 100 up to W = 4, then 10 per worker: cost per example (price 1/h per
# worker, PS free) is W / thr: 1/100, 2/200, 3/300, 4/400 are equal; 5/410 = 0.0122 is worse.
# The optimum is therefore a tie among W = 1..4, broken toward fewer workers: W = 1.
FLAT_THEN_SATURATED = {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0, 5: 410.0, 6: 420.0}


def test_recommendation_bounds_cover_the_flat_bottom_of_the_cost_curve() -> None:
    rec = recommend(prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.ADVISE))
    assert rec.target == 1 and (rec.lower, rec.upper) == (1, 4) and rec.uncapped == 1


def test_a_ps_price_moves_the_optimum_to_more_workers() -> None:
    # With the PS at 1/h too, cost is (W + 1) / thr: W=1: 2/100 = 0.020, W=4: 5/400 = 0.0125,
    # W=5: 6/410 = 0.0146. So W = 4.
    rec = recommend(prediction(FLAT_THEN_SATURATED), Prices(1.0, 1.0), Limits(1, 6, Mode.ADVISE))
    assert rec.target == 4 and rec.uncapped == 4


def test_limits_cap_the_target_but_not_the_uncapped_target() -> None:
    rec = recommend(prediction(FLAT_THEN_SATURATED), Prices(1.0, 1.0), Limits(1, 3, Mode.ADVISE))
    assert rec.target == 3 and rec.uncapped == 4


def test_budget_per_hour_caps_the_workers() -> None:
    # Budget 5.5/h, PS 1.5/h, worker 1/h: floor((5.5 - 1.5) / 1) = 4 workers.
    settings = load_settings(budget_per_hour=5.5, prices={"worker_per_hour": 1.0, "ps_per_hour": 1.5})
    view = parse_tfjob(with_uid(tfjob()))
    assert job_limits(settings, view, job_prices(settings, view)).max_workers == 4


def test_node_type_prices_apply() -> None:
    settings = load_settings(prices={"worker_per_hour": 1.0, "ps_per_hour": 0.5,
                                     "node_types": {"p3.2xlarge": {"worker_per_hour": 3.06, "ps_per_hour": 3.06}}})
    view = parse_tfjob(with_uid(tfjob(node_type="p3.2xlarge")))
    assert job_prices(settings, view) == Prices(3.06, 3.06)


@pytest.mark.parametrize(("notes", "problem"), [
    ({"training-advisor.io/max-workers": "many"}, "not an integer"),
    ({"training-advisor.io/max-workers": "100"}, "outside the controller's policy"),
    ({"training-advisor.io/min-workers": "5", "training-advisor.io/max-workers": "3"}, "reversed"),
    ({"training-advisor.io/mode": "yolo"}, "is not one of advise, initial, auto"),
])
def test_bad_job_annotations_are_named(notes: dict[str, str], problem: str) -> None:
    settings = load_settings(max_workers=16)
    view = parse_tfjob(with_uid(tfjob(annotations=notes)))
    with pytest.raises(TFJobError, match=problem):
        job_limits(settings, view, job_prices(settings, view))


def test_a_bad_annotation_names_the_kind_of_job_it_is_on() -> None:
    """A PyTorchJob's bad annotation is reported as the PyTorchJob's, not as a TFJob's."""
    from advisor.controller.jobs.kinds import parse_job

    settings = load_settings(max_workers=16)
    view = parse_job(with_uid(pytorchjob(name="ddp", annotations={"training-advisor.io/mode": "yolo"})))
    with pytest.raises(TFJobError, match=r"^PyTorchJob ml/ddp: annotation training-advisor.io/mode"):
        job_limits(settings, view, job_prices(settings, view))
    bad_model = parse_job(with_uid(pytorchjob(annotations={"training-advisor.io/predict-model": "oracle"})))
    with pytest.raises(TFJobError, match=r"^PyTorchJob ml/ddp: annotation training-advisor.io/predict-model"):
        job_model(settings, bad_model)


def test_a_job_annotation_chooses_its_model_and_parameters() -> None:
    settings = load_settings(model_params={"share_sigma": 0.5})
    plain = parse_tfjob(with_uid(tfjob()))
    defaults = {"congestion_control": "unknown", "multi_flow_goodput": 0.85}  # the contention settings' defaults
    assert job_model(settings, plain) == ModelChoice("li2020-des+contention", {**defaults, "share_sigma": 0.5})
    same = parse_tfjob(with_uid(tfjob(annotations={"training-advisor.io/predict-model-params": '{"queue_s": 0.02}'})))
    assert job_model(settings, same) == ModelChoice("li2020-des+contention",
                                                    {**defaults, "share_sigma": 0.5, "queue_s": 0.02})
    other = parse_tfjob(with_uid(tfjob(annotations={"training-advisor.io/predict-model": "lin2018-mva"})))
    assert job_model(settings, other) == ModelChoice("lin2018-mva", {})  # the settings' parameters are not its own


@pytest.mark.parametrize(("notes", "problem"), [
    ({"training-advisor.io/predict-model": "oracle"}, "predict-model: model 'oracle': no such model; the models are"),
    ({"training-advisor.io/predict-model-params": "{share_sigma: 1}"}, "predict-model-params is not JSON"),
    ({"training-advisor.io/predict-model-params": "[1]"}, "must be a JSON object of parameters, not list"),
    ({"training-advisor.io/predict-model-params": '{"share_sigma": -1}'}, "parameter share_sigma: Input should be"),
])
def test_bad_model_annotations_are_named(notes: dict[str, str], problem: str) -> None:
    with pytest.raises(TFJobError, match=problem):
        job_model(load_settings(), parse_tfjob(with_uid(tfjob(annotations=notes))))


def auto(view_workers: int, **kw):
    view = parse_tfjob(with_uid(tfjob(workers=view_workers, dynamic=True)))
    pred = prediction(FLAT_THEN_SATURATED)
    prices = Prices(1.0, 1.0)
    rec = recommend(pred, prices, Limits(1, 6, Mode.AUTO))
    args = dict(last_resize=None, now=10_000.0, min_gain=0.10, cooldown_s=600.0) | kw
    return resize_target(Limits(1, 6, Mode.AUTO), view, rec, pred, prices, **args)


def test_auto_resizes_only_for_a_real_gain_and_not_within_the_cooldown() -> None:
    # Current W=1: cost 2/100 = 0.02; target W=4: 0.0125 -> gain 37.5 % > 10 %: resize to 4.
    assert auto(1) == 4
    # Current W=5: 6/410 = 0.01463; gain 1 - 0.0125/0.01463 = 14.6 % > 10 %: resize; with a 20 % threshold: keep.
    assert auto(5) == 4 and auto(5, min_gain=0.20) is None
    assert auto(1, last_resize=9_900.0) is None  # 100 s ago, cooldown 600 s
    assert auto(4) is None  # already at the target


def test_auto_compares_expected_costs_so_an_uncertain_target_must_win_by_more() -> None:
    # W=5 -> 4 wins 14.6 % on point costs (above). Stored expected costs (per example, over each
    # point's interval) of 0.01463 at W=5 (a narrow interval: as the point) and 0.0140 at W=4 (a
    # wide one: E[1/T] above 1/T) make the expected gain 1 - 0.0140 / 0.01463 = 4.3 %: below 10 %.
    view = parse_tfjob(with_uid(tfjob(workers=5, dynamic=True)))
    pred, prices = prediction(FLAT_THEN_SATURATED), Prices(1.0, 1.0)
    for point in pred["curve"]:
        point["expected_cost_per_example"] = {4: 0.0140, 5: 0.01463}.get(point["workers"], 1.0)
    rec = recommend(pred, prices, Limits(1, 6, Mode.AUTO))
    assert rec.target == 4
    assert resize_target(Limits(1, 6, Mode.AUTO), view, rec, pred, prices, last_resize=None, now=0.0,
                         min_gain=0.10, cooldown_s=0.0) is None
    assert resize_target(Limits(1, 6, Mode.AUTO), view, rec, pred, prices, last_resize=None, now=0.0,
                         min_gain=0.04, cooldown_s=0.0) == 4


def test_auto_never_touches_jobs_without_dynamic_workers() -> None:
    view = parse_tfjob(with_uid(tfjob(workers=1, dynamic=False)))
    pred, prices = prediction(FLAT_THEN_SATURATED), Prices(1.0, 1.0)
    rec = recommend(pred, prices, Limits(1, 6, Mode.AUTO))
    assert resize_target(Limits(1, 6, Mode.AUTO), view, rec, pred, prices, last_resize=None, now=0.0,
                         min_gain=0.1, cooldown_s=0.0) is None


def test_prediction_annotations_carry_the_curve_and_vpa_recommendation() -> None:
    view = parse_tfjob(with_uid(tfjob(workers=2)))
    pred = prediction(FLAT_THEN_SATURATED)
    rec = recommend(pred, Prices(1.0, 1.0), Limits(1, 6, Mode.ADVISE))
    out = ann.prediction_annotations(view, pred, rec, profile_sha="ab" * 32, predicted_at=0.0, profiled_generation=1)
    assert json.loads(out[ann.RECOMMENDATION]) == {"target": 4, "lowerBound": 4, "upperBound": 4,
                                                   "uncappedTarget": 4}
    assert json.loads(out[ann.CURVE])[0] == [1, 100.0, 98.0, 102.0]
    assert json.loads(out[ann.THROUGHPUT_CURRENT]) == {"value": 200.0, "lower": 196.0, "upper": 204.0}
    assert out[ann.PREDICTED_AT] == "1970-01-01T00:00:00Z"
    assert all(len(v) < 4096 for v in out.values())


def test_annotation_patch_is_empty_when_nothing_changed_and_keeps_transition_times() -> None:
    view = parse_tfjob(with_uid(tfjob()))
    first = ann.status_annotations(view, "Profiling", "ProfilingStarted", now=100.0)
    view2 = parse_tfjob(with_uid(tfjob(annotations=first)))
    again = ann.status_annotations(view2, "Profiling", "ProfilingStarted", now=500.0)
    assert ann.annotation_patch(view2.annotations, again) is None  # same state later: nothing to write
    predicted = ann.status_annotations(view2, "Predicted", "Predicted", now=900.0)
    conditions = {c["type"]: c for c in json.loads(predicted[ann.CONDITIONS])}
    assert conditions["RecommendationProvided"]["lastTransitionTime"] == ann.rfc3339(900.0)
    patch = ann.annotation_patch(view2.annotations, predicted)
    assert patch is not None and set(patch["metadata"]["annotations"]) == {ann.PHASE, ann.REASON, ann.CONDITIONS}
