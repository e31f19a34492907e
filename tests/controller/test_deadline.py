"""A job's deadline in the controller (controller/pipeline/deadline.py): the annotations it reads,
the decision with a stated confidence, the annotation it writes, and, over the API emulator, the
Warning event for a deadline no W meets with that confidence (the job is never failed for it)."""

from __future__ import annotations

import json
from statistics import NormalDist

import pytest

from advisor.controller.pipeline import annotations as ann
from advisor.controller.pipeline.deadline import CONFIDENCE, DEADLINE, DECISION, EXAMPLES, JobDeadline, job_deadline
from advisor.controller.pipeline.policy import Limits, recommend, resize_target
from advisor.controller.settings import Mode, load_settings
from advisor.controller.jobs.tfjob import PREFIX, parse_tfjob
from advisor.core.cost import Prices
from advisor.errors import TFJobError
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.test_end_to_end import events, reconciles
from tests.controller.test_policy_and_annotations import FLAT_THEN_SATURATED, prediction
from tests.controller.tfjobs import tfjob, with_uid

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PHI = NormalDist().cdf
Z95 = NormalDist().inv_cdf(0.975)


def view(notes: dict[str, str], workers: int = 2, dynamic: bool | None = None):
    return parse_tfjob(with_uid(tfjob(workers=workers, annotations=notes, dynamic=dynamic)))


def need(rate: float, confidence: float = 0.9) -> JobDeadline:
    """A deadline of 1 h for ``rate`` x 3600 examples: it needs ``rate`` examples/s."""
    return JobDeadline(rate * 3600, 1.0, confidence)


def test_the_annotations_ask_for_a_deadline_and_a_confidence() -> None:
    settings = load_settings(decision_confidence=0.8)
    assert job_deadline(settings, view({}), NOW) is None
    asked = job_deadline(settings, view({EXAMPLES: "1e7", DEADLINE: "36h"}), NOW)
    assert asked == JobDeadline(1e7, 36.0, 0.8)  # the setting's confidence
    assert job_deadline(settings, view({EXAMPLES: "1e7", DEADLINE: "12", CONFIDENCE: "0.95"}), NOW) == \
        JobDeadline(1e7, 12.0, 0.95)


def test_a_deadline_at_a_time_counts_from_the_jobs_start_or_from_now_before_it() -> None:
    settings, notes = load_settings(), {EXAMPLES: "1e7", DEADLINE: "2026-01-02T12:00:00Z"}
    assert job_deadline(settings, view(notes), NOW) == JobDeadline(1e7, 36.0, 0.9)  # not started: from now
    obj = with_uid(tfjob(workers=2, annotations={**notes, DEADLINE: "2026-01-02T14:00:00+02:00"}))
    obj["status"] = {"startTime": "2025-12-31T12:00:00Z"}
    assert job_deadline(settings, parse_tfjob(obj), NOW) == JobDeadline(1e7, 48.0, 0.9)  # from its start (12:00Z)
    obj["status"] = {"startTime": "2026-01-03T00:00:00Z"}  # started after the time asked
    with pytest.raises(TFJobError, match="is not after the job's start \\(2026-01-03T00:00:00Z\\)"):
        job_deadline(settings, parse_tfjob(obj), NOW)


@pytest.mark.parametrize(("notes", "problem"), [
    ({EXAMPLES: "1e7"}, "needs training-advisor.io/deadline too"),
    ({DEADLINE: "12h"}, "needs training-advisor.io/examples too"),
    ({EXAMPLES: "1e7", DEADLINE: "0"}, "deadline='0' must be a number of hours > 0"),
    ({EXAMPLES: "1e7", DEADLINE: "-5h"}, "must be a number of hours > 0"),
    ({EXAMPLES: "1e7", DEADLINE: "tomorrow"}, "is neither a number of hours .* nor a time"),
    ({EXAMPLES: "1e7", DEADLINE: "2025-12-31T23:00:00Z"}, "is not after now \\(2026-01-01T00:00:00Z\\)"),
    ({EXAMPLES: "lots", DEADLINE: "12"}, "examples='lots' must be a number of examples > 0"),
    ({EXAMPLES: "1e7", DEADLINE: "12", CONFIDENCE: "1"}, "confidence='1' must be a probability strictly between"),
    ({EXAMPLES: "1e7", DEADLINE: "12", CONFIDENCE: "0"}, "strictly between 0 and 1"),
    ({CONFIDENCE: "high"}, "confidence='high' must be a probability"),
])
def test_deadline_annotations_that_cannot_work_are_named(notes: dict[str, str], problem: str) -> None:
    with pytest.raises(TFJobError, match=problem):
        job_deadline(load_settings(), view(notes), NOW)


def test_the_deadline_picks_the_cheapest_w_that_meets_it_with_the_confidence() -> None:
    # Curve 100, 200, 300, 400, 410, 420 (+-2 % at 95 %: sigma = 0.02 T / z), worker 1/h, PS free.
    pred, prices, limits = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.ADVISE)
    assert recommend(pred, prices, limits).target == 1  # without a deadline the cost optimum (a tie, to fewer)
    # 350 ex/s: W = 4 meets it (50 / (8 / z) = 12 sigma), W = 3 cannot; W = 4 is the cheapest that does
    rec = recommend(pred, prices, limits, need(350.0))
    assert (rec.target, rec.lower, rec.upper) == (4, 4, 4) and rec.deadline is not None
    assert rec.deadline.choice.confident
    # 405 ex/s: W = 5 meets it with Phi(5 / (8.2 / z)) = 0.884 < 0.9; W = 6 with Phi(15 / (8.4 / z)) = 0.9998
    p5 = PHI(5 * Z95 / 8.2)
    rec = recommend(pred, prices, limits, need(405.0))
    assert rec.target == 6 and rec.deadline is not None
    assert rec.deadline.p_meet[5] == pytest.approx(p5) == pytest.approx(0.884, abs=1e-3)
    # asking for 0.85 admits the cheaper W = 5
    assert recommend(pred, prices, limits, need(405.0, confidence=0.85)).target == 5


def test_a_deadline_no_w_meets_with_the_confidence_gets_the_likeliest_and_says_so() -> None:
    pred, prices = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0)
    # 430 ex/s is above every point: W = 6 is the likeliest, with 1 - Phi(10 / (8.4 / z)) = 1 %
    rec = recommend(pred, prices, Limits(1, 6, Mode.ADVISE), need(430.0))
    assert rec.target == 6 and rec.deadline is not None and not rec.deadline.choice.confident
    assert rec.deadline.choice.p_meet == pytest.approx(1 - PHI(10 * Z95 / 8.4))
    out = ann.prediction_annotations(view({}), pred, rec, profile_sha="ab" * 32, predicted_at=0.0,
                                     profiled_generation=1)
    doc = json.loads(out[DECISION])
    assert doc == {"workers": 6, "confident": False, "confidence": 0.9, "neededThroughput": 430.0,
                   "probability": round(1 - PHI(10 * Z95 / 8.4), 4)}
    # without a deadline no decision is written, and an old one is cleared
    plain = recommend(pred, prices, Limits(1, 6, Mode.ADVISE))
    assert DECISION not in ann.prediction_annotations(view({}), pred, plain, profile_sha="ab" * 32, predicted_at=0.0,
                                                      profiled_generation=1)
    had = view({DECISION: out[DECISION]})
    assert ann.prediction_annotations(had, pred, plain, profile_sha="ab" * 32, predicted_at=0.0,
                                      profiled_generation=1)[DECISION] == "null"


def test_auto_resizes_to_meet_a_deadline_even_when_cost_would_not() -> None:
    # At W = 2 (cost 2 / 200 = 0.01) the target W = 4 costs the same per example (4 / 400): no cost gain, but
    # W = 2 cannot make 350 ex/s and W = 4 can
    pred, prices, limits = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.AUTO)
    job = view({}, workers=2, dynamic=True)
    args = dict(last_resize=None, now=10_000.0, min_gain=0.10, cooldown_s=600.0)
    assert resize_target(limits, job, recommend(pred, prices, limits), pred, prices, **args) is None
    assert resize_target(limits, job, recommend(pred, prices, limits, need(350.0)), pred, prices, **args) == 4
    assert resize_target(limits, job, recommend(pred, prices, limits, need(350.0)), pred, prices,
                         **{**args, "last_resize": 9_900.0}) is None  # the cooldown still holds


# Curve 100, 190, 260, 300 ex/s with a model error of +-12 % (at 95 %): sigma = 0.12 T / z
WIDE = {1: 100.0, 2: 190.0, 3: 260.0, 4: 300.0}


def wide_prediction(model: str = "li2020-des") -> dict:
    pred = prediction(WIDE)
    for p in pred["curve"]:
        p["low"], p["high"] = 0.88 * p["throughput"], 1.12 * p["throughput"]
    return {**pred, "model": model}


def test_a_decision_counting_on_one_resize_starts_where_the_resize_covers_a_shortfall() -> None:
    """250 ex/s for 10 h. Alone, W = 3 (260) meets it with Phi(10 / (31.2 / z)) = 0.74 < 0.9, so
    one-shot takes W = 4. Planned, W = 3 observed after 0.5 h and short moves to W = 4 for the
    9.4 h left after a 0.1 h restart, at the same quantile z: T3 = 260 (1 + 0.12 z / Z95),
    T4 = 300 (1 + 0.12 z / Z95); it makes it when 1800 T3 + 33840 T4 >= 9e6, a bound on z."""
    from advisor.core.correction import GRID, Correction

    pred, prices, limits = wide_prediction(), Prices(1.0, 0.0), Limits(1, 4, Mode.AUTO)
    deadline = JobDeadline(250 * 3600 * 10, 10.0, 0.9)
    alone = recommend(pred, prices, limits, deadline)
    assert alone.target == 4 and alone.deadline is not None and alone.deadline.p_meet[3] == \
        pytest.approx(PHI(10 * Z95 / 31.2))
    planned = recommend(pred, prices, limits, deadline, Correction(0.5, 0.1))
    k = 0.12 / Z95
    z = (9e6 - 1800 * 260 - 33840 * 300) / (k * (1800 * 260 + 33840 * 300))
    assert planned.target == 3 and planned.deadline is not None and planned.deadline.plan is not None
    assert planned.deadline.p_meet[3] == pytest.approx(1 - PHI(z), abs=1 / GRID)
    out = ann.prediction_annotations(view({}), pred, planned, profile_sha="ab" * 32, predicted_at=0.0,
                                     profiled_generation=1)
    doc = json.loads(out[DECISION])
    assert doc["workers"] == 3 and doc["confident"] is True
    plan = doc["plan"]
    assert (plan["afterHours"], plan["lossHours"], plan["stayAtLeast"]) == (0.5, 0.1, 250.0)
    assert plan["alone"] == pytest.approx(PHI(10 * Z95 / 31.2), abs=1e-4)
    assert [w for _, w in plan["then"]] == [4]  # short, it moves to the one faster W
    # once W = 3 has been observed (a refit point), a window there shows nothing new: planned alone
    seen = recommend(pred, prices, limits, deadline, Correction(0.5, 0.1, frozenset({3})))
    assert seen.target == 4 and seen.deadline is not None
    assert seen.deadline.p_meet[3] == pytest.approx(PHI(10 * Z95 / 31.2))


def test_the_observed_worker_counts_come_from_the_refit_and_a_bad_entry_is_passed_over() -> None:
    from advisor.controller.pipeline.deadline import observed_workers

    assert observed_workers({"curve": []}) == frozenset()
    assert observed_workers({"refit": {"points": [{"workers": 2, "observed": 90.0}, {"workers": 5}]}}) == {2, 5}
    assert observed_workers({"refit": {"points": [{"workers": "3"}, {"workers": 0}, {"workers": True}, "x",
                                                  {"observed": 1.0}, {"workers": 4}]}}) == {4}
    assert observed_workers({"refit": "garbled"}) == frozenset()


def planned_prediction(profile_doc, params) -> str:
    """``canned_prediction``'s curve with +-12 % intervals, from a model the closed loop can update."""
    from tests.controller.harness import canned_prediction

    doc = json.loads(canned_prediction(profile_doc, params))
    for p in doc["curve"]:
        p["low"], p["high"] = 0.88 * p["throughput"], 1.12 * p["throughput"]
    return json.dumps({**doc, "model": "li2020-des+contention"})


def test_over_the_emulator_only_an_auto_job_the_loop_will_observe_counts_on_a_resize(emu, body, tmp_path) -> None:
    """250 ex/s for 10 h on the curve 100, 190, 260, 300 (+-12 %), a worker and a PS at 1/h each:
    counting on one resize after max(observation 900 s, cooldown 1800 s) = 0.5 h, losing 600 s,
    the auto job starts at W = 3; the job that advises only is sized alone, W = 4."""
    settings = settings_for(tmp_path, leader_election=False, refit_enabled=True,
                            refit_prometheus_url="http://127.0.0.1:9", refit_min_observation_s=900)
    controller = start_controller(emu, settings, runner=planned_prediction)
    notes = {EXAMPLES: str(250 * 3600 * 10), DEADLINE: "10h"}
    try:
        create_tfjob(emu, tfjob("auto", workers=2, dynamic=True, annotations={**notes, PREFIX + "mode": "auto"}))
        create_tfjob(emu, tfjob("advise", workers=2, dynamic=True, annotations={**notes, PREFIX + "mode": "advise"}))
        runs = wait_for("two profiling runs", lambda: len(profiling_jobs(emu)) == 2 and profiling_jobs(emu))
        for run in runs:
            assert upload_as_profiling_pod(emu, run, body).ok
        for name in ("auto", "advise"):
            wait_for(f"{name} Predicted", lambda n=name: phase(emu, n) == "Predicted")
        auto = json.loads(annotations(emu, "auto")[DECISION])
        assert auto["workers"] == 3 and auto["confident"] is True
        assert (auto["plan"]["afterHours"], auto["plan"]["lossHours"]) == (0.5, round(600 / 3600, 4))
        advise = json.loads(annotations(emu, "advise")[DECISION])
        assert advise["workers"] == 4 and "plan" not in advise
    finally:
        controller.stop()


def test_over_the_emulator_a_deadline_at_risk_is_a_warning_never_a_failed_job(emu, body, tmp_path) -> None:
    """The canned curve (harness.canned_prediction): 100, 190, 260, 300 ex/s, +-2 %; cheapest W = 3."""
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        # 280 ex/s: W = 4 (300, sigma 6 / z: 20 / 3.06 = 6.5 sigma) meets it, W = 3 (260) cannot
        create_tfjob(emu, tfjob("on-time", workers=2, annotations={EXAMPLES: str(280 * 3600 * 10), DEADLINE: "10h"}))
        # 330 ex/s: no W; W = 4 is the likeliest, with 1 - Phi(30 / (6 / z)) = 0
        create_tfjob(emu, tfjob("too-fast", workers=2, annotations={EXAMPLES: str(330 * 3600), DEADLINE: "1"}))
        # a confidence that cannot work: a Warning, and the decision on cost alone
        create_tfjob(emu, tfjob("bad-p", workers=2, annotations={EXAMPLES: "1e6", DEADLINE: "1", CONFIDENCE: "1.5"}))
        runs = wait_for("three profiling runs", lambda: len(profiling_jobs(emu)) == 3 and profiling_jobs(emu))
        for run in runs:
            assert upload_as_profiling_pod(emu, run, body).ok
        for name in ("on-time", "too-fast", "bad-p"):
            wait_for(f"{name} Predicted", lambda n=name: phase(emu, n) == "Predicted")
        on_time = annotations(emu, "on-time")
        assert on_time[PREFIX + "recommended-workers"] == "4"
        assert json.loads(on_time[DECISION])["confident"] is True
        too_fast = annotations(emu, "too-fast")
        assert too_fast[PREFIX + "recommended-workers"] == "4"
        decision = json.loads(too_fast[DECISION])
        assert (decision["confident"], decision["workers"], decision["neededThroughput"]) == (False, 4, 330.0)
        wait_for("the Warning", lambda: ("Warning", "DeadlineAtRisk") in events(emu, "too-fast"))
        warning = next(e for e in emu.list("events", NS) if e["reason"] == "DeadlineAtRisk")
        assert "with confidence 90%: the likeliest, W = 4" in warning["message"]
        assert annotations(emu, "bad-p")[PREFIX + "recommended-workers"] == "3"
        wait_for("the Warning", lambda: ("Warning", "InvalidDeadline") in events(emu, "bad-p"))
        for _ in range(2):  # resyncs reconcile every job again: neither warning is repeated
            before = reconciles(controller)
            controller.resync()
            wait_for("a resync's reconciles", lambda: reconciles(controller) >= before + 3)
        assert events(emu, "too-fast").count(("Warning", "DeadlineAtRisk")) == 1
        assert events(emu, "bad-p").count(("Warning", "InvalidDeadline")) == 1
        assert all(phase(emu, n) == "Predicted" for n in ("on-time", "too-fast", "bad-p"))
    finally:
        controller.stop()
