"""The controller's online refit (controller/pipeline/refit.py) without a cluster: the decisions it makes.

A ``Refitter`` with a hand-driven clock, an in-memory store of predictions, a recorder of
events and a real HTTP stand-in for Prometheus (fake_prometheus.py). The prediction it is
compared with is hand-made: 100 and 190 examples/s at W = 1 and 2, 260 at W = 3. What must
hold: a bad setting or a Prometheus that cannot answer changes nothing but says so; a job is
looked at only after it trained long enough at one W; a W not observed before, or a gap beyond
the tolerance, adds the point to the parameters (a new prediction key); the outcome is counted;
a failed refit falls back to the curve before it; a restart finds the points again in the
annotation; a window with a restarted counter or a missing series is not used, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from advisor.controller.pipeline import annotations as ann
from advisor.controller.pipeline.deadline import DEADLINE, DECISION, EXAMPLES, Progress
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.predictions import PredictionParams, prediction_key, prediction_params
from advisor.controller.pipeline.refit import Refitter, points_json
from advisor.controller.jobs.tfjob import TFJobView, parse_rfc3339, parse_tfjob
from advisor.core.advice import ModelChoice
from advisor.core.cost import Prices
from tests.controller.fake_prometheus import FakePrometheus, Pod
from tests.controller.harness import settings_for
from tests.controller.tfjobs import tfjob, with_uid

SHA = "ab" * 32
MIN_OBSERVATION, INTERVAL = 600.0, 1800.0


def prediction(thr: tuple[float, ...] = (100.0, 190.0, 260.0)) -> str:
    curve = [{"workers": w, "throughput": t, "low": t * 0.98, "high": t * 1.02, "cost_per_example": 1.0}
             for w, t in enumerate(thr, 1)]
    return json.dumps({"schema": "advisor-prediction/1", "model": "li2020-des+contention",
                       "job": {"parameter_servers": 1}, "curve": curve, "saturation_workers": 3})


class Rig:
    """A Refitter and everything it talks to; ``now`` is the clock."""

    def __init__(self, tmp_path: Any, prom: FakePrometheus, **settings: Any) -> None:
        self.now = 1_000_000.0
        self.settings = settings_for(tmp_path, refit_enabled=True, refit_prometheus_url=prom.url,
                                     refit_min_observation_s=MIN_OBSERVATION, refit_interval_s=INTERVAL,
                                     refit_tolerance=0.1, **settings)
        self.predictions: dict[str, str] = {}
        self.running: set[str] = set()
        self.events: list[tuple[str, str, str]] = []
        self.wakes: list[float] = []
        self.metrics = Metrics()
        self.refitter = Refitter(settings=lambda: self.settings, store=self, running=self.running.__contains__,
                                 metrics=self.metrics, enqueue_after=lambda key, delay: self.wakes.append(delay),
                                 clock=lambda: self.now)
        self.base = prediction_params(1e8, Prices(1.0, 1.0), bandwidth_bps=None, max_workers=3, target=0.05,
                                      seed=0, saturation_threshold=0.05, model=ModelChoice("li2020-des+contention"))
        self.predictions[prediction_key(SHA, self.base)] = prediction()

    def prediction(self, sha: str, key: str) -> str | None:  # the store's one method the refit reads
        assert sha == SHA
        return self.predictions.get(key)

    def params(self, view: TFJobView, base: PredictionParams | None = None) -> PredictionParams:
        return self.refitter.params(view, SHA, base or self.base, self.event)

    def event(self, view: TFJobView, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def outcomes(self) -> dict[str, float]:
        return {s.labels["outcome"]: s.value for s in self.metrics.refits.collect()[0].samples
                if s.name.endswith("_total") and s.value}


def running_job(workers: int = 2, annotations: dict[str, str] | None = None) -> TFJobView:
    obj = with_uid(tfjob("mnist", workers=workers, annotations=annotations))
    obj["status"] = {"startTime": "2026-01-01T00:00:00Z",
                     "conditions": [{"type": "Running", "status": "True"}]}
    return parse_tfjob(obj)


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as p:
        yield p


def observed(prom: FakePrometheus, *rates: float) -> None:
    prom.jobs[("ml", "mnist")] = [Pod(f"mnist-worker-{i}", r, 40) for i, r in enumerate(rates)]


def test_nothing_is_asked_before_the_job_trained_long_enough_at_one_worker_count(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    observed(prom, 76.0, 76.0)
    assert rig.params(job) == rig.base
    assert prom.queries == [] and rig.wakes == [MIN_OBSERVATION]  # it asks to be woken when it is due
    rig.now += MIN_OBSERVATION - 1
    assert rig.params(job) == rig.base and prom.queries == []
    resized = running_job(3)  # the worker count changed: the clock starts again
    rig.now += 10
    assert rig.params(resized) == rig.base and prom.queries == []


def test_a_job_not_running_is_never_observed_and_one_worker_is(tmp_path, prom) -> None:
    rig = Rig(tmp_path, prom)
    not_started = parse_tfjob(with_uid(tfjob("mnist", workers=2)))
    rig.params(not_started)
    rig.now += 10 * INTERVAL
    assert rig.params(not_started) == rig.base and prom.queries == []
    # one worker informs the link's goodput (a calibration parameter of every model with a link)
    observed(prom, 70.0)
    one = running_job(1)
    rig.params(one)
    rig.now += MIN_OBSERVATION
    assert json.loads(rig.params(one).refit)["points"][0]["workers"] == 1


def test_observed_20_percent_below_adds_the_point_and_counts_the_refit(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    observed(prom, 76.0, 76.0)  # 152 examples/s where 190 were predicted: 20 % below, beyond 10 %
    rig.params(job)
    rig.now += MIN_OBSERVATION
    refit = rig.params(job)
    assert refit != rig.base and refit.refit
    doc = json.loads(refit.refit)
    points = doc["points"]
    assert points == [{"workers": 2, "observed": 152.0, "predicted": 190.0, "window_s": MIN_OBSERVATION,
                       "samples": 80, "noise": 0.03, "at": ann.rfc3339(rig.now)}]
    assert doc["rule"] == "posterior"  # the setting's default
    assert refit.model == rig.base.model and refit.model_params == rig.base.model_params
    key = prediction_key(SHA, refit)
    assert key != prediction_key(SHA, rig.base)  # a prediction of its own
    assert rig.events[-1][:2] == ("Normal", "Refitting") and "(-20%; a worker count not observed" in rig.events[-1][2]
    rig.running.add(key)  # the reconcile submitted it; while it runs the same parameters are given
    rig.now += 5
    assert rig.params(job) == refit
    rig.running.discard(key)
    section = {"outcome": "refitted", "points": points, "rule": "posterior", "notes": [],
               "parameters": {"share_sigma": {"before": 1.0, "after": 0.5},
                              "multi_flow_goodput": {"before": 0.85, "after": 0.7},
                              "goodput": {"before": 0.95, "after": 0.95}}}
    rig.predictions[key] = json.dumps({**json.loads(prediction((100.0, 152.0, 200.0))), "refit": section})
    assert rig.params(job) == refit
    assert rig.outcomes() == {"refitted": 1.0}
    # the values that moved, the point, and the new interval there (152 x 0.98 .. 152 x 1.02)
    assert rig.events[-1] == ("Normal", "Refitted", "share_sigma 1.0 -> 0.5, multi_flow_goodput 0.85 -> 0.7 from "
                              "W=2 at 152 examples/s; W=2 now 149-155 examples/s")
    # it now agrees (152 observed, 152 predicted): nothing more to refit
    rig.now += INTERVAL
    assert rig.params(job) == refit and rig.outcomes() == {"refitted": 1.0, "agrees": 1.0}


def test_a_new_worker_count_is_observed_even_when_it_agrees_and_then_only_a_gap_counts(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    observed(prom, 90.0, 90.0)  # 180 where 190 were predicted: 5 % below, within 10 %, but W = 2 is new
    rig.params(job)
    rig.now += MIN_OBSERVATION
    refit = rig.params(job)
    assert [p["observed"] for p in json.loads(refit.refit)["points"]] == [180.0]
    key = prediction_key(SHA, refit)
    rig.predictions[key] = json.dumps({**json.loads(prediction((100.0, 181.0, 240.0))),
                                       "refit": {"outcome": "refitted", "parameters": {}, "notes": []}})
    rig.params(job)
    rig.now += INTERVAL
    observed(prom, 92.0, 92.0)  # 184 against the new curve's 181: within the tolerance, W = 2 is known
    assert rig.params(job) == refit
    assert rig.outcomes() == {"refitted": 1.0, "agrees": 1.0}
    rig.now += INTERVAL - 1  # looked at again only after the interval
    rig.params(job)
    assert len(prom.queries) == 6  # two looks, three queries each


def test_a_restarted_counter_or_a_missing_series_is_not_used_and_says_so(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    prom.jobs[("ml", "mnist")] = [Pod("mnist-worker-0", 60.0, 40, resets=1), Pod("mnist-worker-1", 76.0, 40)]
    rig.params(job)
    rig.now += MIN_OBSERVATION
    assert rig.params(job) == rig.base
    assert rig.events[-1][:2] == ("Warning", "ObservedCounterReset")
    assert "went back 1 time(s)" in rig.events[-1][2] and "stays at 2 workers" in rig.events[-1][2]
    prom.jobs[("ml", "mnist")] = [Pod("mnist-worker-1", 76.0, 40)]  # one pod's series is gone
    rig.now += INTERVAL
    assert rig.params(job) == rig.base
    assert rig.events[-1][:2] == ("Warning", "ObservedSeriesMissing") and "series of 1 pod(s)" in rig.events[-1][2]
    observed(prom, 90.0, 90.0)  # both back: used
    rig.now += INTERVAL
    assert rig.params(job).refit
    assert rig.outcomes() == {"counter_reset": 1.0, "series_missing": 1.0}


def test_series_that_disappear_after_being_seen_are_a_warning(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    observed(prom, 95.0, 95.0)
    rig.params(job)
    rig.now += MIN_OBSERVATION
    refit = rig.params(job)
    rig.predictions[prediction_key(SHA, refit)] = json.dumps(
        {**json.loads(prediction((100.0, 190.0, 260.0))), "refit": {"outcome": "refitted", "notes": []}})
    rig.params(job)
    prom.jobs.clear()  # the job's series vanish
    rig.now += INTERVAL
    assert rig.params(job) == refit  # the last good curve stays
    assert rig.events[-1][:2] == ("Warning", "ObservedSeriesMissing") and "are gone" in rig.events[-1][2]


def test_a_failed_refit_falls_back_to_the_curve_before_it(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    observed(prom, 76.0, 76.0)
    rig.params(job)
    rig.now += MIN_OBSERVATION
    assert rig.params(job).refit
    # the prediction ended without a result (neither stored nor running): back to the profile's curve
    assert rig.params(job) == rig.base
    assert rig.outcomes() == {"failed": 1.0}
    assert rig.events[-1][:2] == ("Warning", "RefitFailed")


def test_prometheus_unreachable_or_empty_changes_nothing_and_is_asked_again_later(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    prom.status = 503
    rig.params(job)
    rig.now += MIN_OBSERVATION
    assert rig.params(job) == rig.base
    assert rig.outcomes() == {"unavailable": 1.0}
    assert rig.events == [("Warning", "ObservedThroughputUnavailable",
                           f"Prometheus at {prom.url} answered 503: the fake is down; asked again in 1800 s")]
    assert rig.wakes[-1] == INTERVAL
    prom.status = 200  # up again, but without the job's series
    rig.now += INTERVAL
    assert rig.params(job) == rig.base
    assert rig.outcomes() == {"unavailable": 1.0, "no_data": 1.0}
    assert rig.events[-1][:2] == ("Normal", "NoObservedThroughput") and "ADVISOR_METRICS_PORT" in rig.events[-1][2]


@pytest.mark.parametrize("bad", [{"refit_prometheus_url": "prometheus:9090"}, {"refit_min_observation_s": 0},
                                 {"refit_interval_s": "soon"}, {"refit_rule": "guess"},
                                 {"refit_observation_noise": 1.5}, {"refit_misstated": 0},
                                 {"refit_misstated": "often"}])
def test_a_setting_that_cannot_work_warns_once_per_job_and_keeps_the_previous_behaviour(tmp_path, prom, bad) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    rig.settings = rig.settings.model_copy(update=bad)
    observed(prom, 76.0, 76.0)
    for _ in range(3):
        assert rig.params(job) == rig.base
        rig.now += 10 * INTERVAL
    assert prom.queries == []
    assert [(t, r) for t, r, _ in rig.events] == [("Warning", "RefitSettingsInvalid")]
    assert rig.events[0][2].startswith("online refit is off: ") and next(iter(bad)) in rig.events[0][2]


def test_a_model_without_calibration_parameters_is_not_refitted(tmp_path, prom) -> None:
    rig, job = Rig(tmp_path, prom), running_job(2)
    equal = prediction_params(1e8, Prices(1.0, 1.0), bandwidth_bps=None, max_workers=3, target=0.05, seed=0,
                              saturation_threshold=0.05, model=ModelChoice("dts"))
    rig.params(job, equal)
    rig.now += MIN_OBSERVATION
    assert rig.params(job, equal) == equal and prom.queries == []


def test_a_restart_finds_the_points_in_the_annotation(tmp_path, prom) -> None:
    points = [{"workers": 2, "observed": 152.0, "predicted": 190.0, "window_s": 600.0, "samples": 80,
               "at": "2026-01-01T01:00:00Z"}]
    section = {"outcome": "refitted", "points": points, "profile": f"sha256:{SHA}"}
    rig = Rig(tmp_path, prom)
    job = running_job(2, {ann.REFIT: ann.compact(section)})
    restored = rig.params(job)
    assert restored.refit == points_json(points)  # the same parameters, so the same stored prediction
    # a refit annotation of another profile is not this one's
    other = running_job(2, {ann.REFIT: ann.compact({**section, "profile": "sha256:" + "cd" * 32})})
    assert Rig(tmp_path / "b", prom).params(other) == rig.base
    # the restored refit is re-predicted if the store lost it; its failure falls back, uncounted
    assert rig.params(job) == rig.base and rig.outcomes() == {}


def test_a_deadlines_progress_is_read_with_each_look_and_found_again_after_a_restart(tmp_path, prom) -> None:
    """A job with a deadline, started 2026-01-01T00:00:00Z: each look also asks for the examples
    its pods trained since then; a new leader finds the last read in the decision annotation
    (the start must be the job's current one), and a job without a deadline is not asked."""
    notes = {EXAMPLES: "1e7", DEADLINE: "48h"}
    rig, job = Rig(tmp_path, prom), running_job(2, notes)
    start = parse_rfc3339("2026-01-01T00:00:00Z")
    assert start is not None
    rig.now = start + 5 * 3600.0
    prom.jobs[("ml", "mnist")] = [Pod(f"mnist-worker-{i}", 76.0, 40, trained=5000.0) for i in range(2)]
    rig.params(job)
    assert rig.refitter.progress(job) is None  # not read yet
    rig.now += MIN_OBSERVATION
    rig.params(job)
    assert rig.refitter.progress(job) == Progress(10_000.0, rig.now, start)
    assert prom.queries[-1]["query"] == (f'increase(advisor_training_examples_total{{job_namespace="ml",'
                                         f'tfjob="mnist"}}[{int(rig.now - start)}s])')
    decision = json.dumps({"workers": 2, "progress": {"examplesTrained": 10000.0, "at": ann.rfc3339(rig.now)}})
    again = running_job(2, {**notes, DECISION: decision})
    fresh = Rig(tmp_path / "b", prom)
    fresh.params(again)
    assert fresh.refitter.progress(again) == Progress(10_000.0, float(int(rig.now)), start)
    for broken in ("{", json.dumps({"progress": {"examplesTrained": "x", "at": ann.rfc3339(rig.now)}}),
                   json.dumps({"progress": {"examplesTrained": 1.0, "at": "2025-12-31T00:00:00Z"}})):
        other = Rig(tmp_path / "c", prom)
        view = running_job(2, {**notes, DECISION: broken})
        other.params(view)
        assert other.refitter.progress(view) is None  # unreadable, or read before this start
    plain, quiet = Rig(tmp_path / "d", prom), running_job(2)
    plain.now = rig.now
    plain.params(quiet)
    plain.now += MIN_OBSERVATION
    asked = len(prom.queries)
    plain.params(quiet)
    assert not any(q["query"].startswith("increase(") for q in prom.queries[asked:])
    assert plain.refitter.progress(quiet) is None


# --- in the prediction worker --------------------------------------------------------------------------


def test_the_prior_probability_of_wrong_values_travels_with_the_points_to_the_update(tmp_path, prom) -> None:
    """``refit_misstated`` reaches the prediction worker's posterior through the points' text
    (written only where it is not the default, so that existing keys stay), and the update says
    what it used: with every prior on wrong values, the stated ones keep no probability."""
    from advisor.controller.pipeline.predictions import build_request
    from advisor.controller.pipeline.refit import with_points
    from advisor.controller.pipeline.refit_worker import read_refit, refit_request
    from advisor.core.online_calibration import MISSTATED, Rule
    from tests.factories import one_layer

    from advisor.core.advice import advise

    base = Rig(tmp_path, prom).base
    at2 = advise(one_layer(), build_request(base)).point(2).throughput  # what the stated values predict
    point = {"workers": 2, "observed": round(at2, 3), "predicted": round(at2, 3), "window_s": 600.0, "samples": 40,
             "at": "2026-01-01T01:00:00Z"}
    assert "misstated" not in points_json([point]) and read_refit(points_json([point]), "x").misstated == MISSTATED
    text = points_json([point], Rule.POSTERIOR, 1.0)
    assert read_refit(text, "x").misstated == 1.0
    assert with_points(base, [point], Rule.POSTERIOR, 1.0).refit == text
    _, section = refit_request(one_layer(), build_request(base), text)
    assert section["misstated"] == 1.0 and section["stated_values_probability"] == 0.0
    _, default = refit_request(one_layer(), build_request(base), points_json([point]))
    # observed where the stated values predict it: they keep most of the default's probability
    assert default["misstated"] == MISSTATED and default["stated_values_probability"] > 0.5


def test_points_off_the_curve_keep_the_request_and_say_why(tmp_path, prom) -> None:
    from advisor.controller.pipeline.predictions import build_request
    from advisor.controller.pipeline.refit_worker import refit_request
    from tests.factories import one_layer

    request = build_request(Rig(tmp_path, prom).base)  # W = 1..3
    beyond = points_json([{"workers": 5, "observed": 50.0, "predicted": 60.0, "window_s": 600.0,
                           "samples": 40, "at": "2026-01-01T01:00:00Z"}])
    same, section = refit_request(one_layer(), request, beyond)
    assert same == request
    assert section["outcome"] == "unchanged" and "W=5 is outside the curve" in section["notes"][0]


@pytest.mark.parametrize(("text", "problem"), [
    ('{"points": []}', "no observed points"),
    ('{"points": [3]}', "a point must be an object"),
    ('{"points": [{"workers": 0, "observed": 5}]}', "workers must be an integer >= 1"),
    ('{"points": [{"workers": 2, "observed": -5}]}', "observed examples/s must be a number > 0"),
    ('{"points": [{"workers": 2, "observed": "fast"}]}', "observed examples/s must be a number > 0"),
    ('{"points": [{"workers": 2, "observed": 5, "noise": 1.5}]}', "noise must be a fraction in"),
    ('{"points": [{"workers": 2, "observed": 5}], "rule": "guess"}', "rule must be one of refit, condition"),
    ('{"points": [{"workers": 2, "observed": 5}], "misstated": 0}', "misstated must be a probability in"),
    ('{"points": [{"workers": 2, "observed": 5}], "misstated": true}', "misstated must be a probability in"),
])
def test_unreadable_points_are_refused_with_the_reason(text: str, problem: str) -> None:
    from advisor.controller.pipeline.refit_worker import read_points

    with pytest.raises(ValueError, match=problem):
        read_points(text, "here")
