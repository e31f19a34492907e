"""A running job's deadline: decided for what is left (controller/pipeline/deadline.py
``remaining``: the hours count from the job's ``status.startTime``, the examples trained since then
come from the pods' counters in Prometheus, ``observed.trained``, read by the refit), a move to
another W paying the time a resize loses, a riskier W taken only with half the risk asked (the
hysteresis of ``policy.resize_target``), and a deadline that has passed keeping the last decision
with a Warning event. Checks by hand, then the controller over the API emulator and an HTTP
stand-in for Prometheus."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator

import pytest

from advisor.controller.jobs.pytorchjob import parse_pytorchjob
from advisor.controller.jobs.tfjob import PREFIX, parse_tfjob, start_time
from advisor.controller.pipeline.deadline import (
    DEADLINE, DECISION, EXAMPLES, DeadlineOver, JobDeadline, Progress, deadline_json, remaining,
)
from advisor.controller.pipeline.observed import ObservedQueryError, PrometheusClient, trained
from advisor.controller.pipeline.policy import Limits, recommend, resize_target
from advisor.controller.settings import Mode
from advisor.core.cost import Choice, Prices
from tests.controller.fake_prometheus import FakePrometheus, Pod
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.test_deadline import PHI, Z95, need, planned_prediction, view
from tests.controller.test_end_to_end import events
from tests.controller.test_policy_and_annotations import FLAT_THEN_SATURATED, prediction
from tests.controller.tfjobs import pytorchjob, tfjob, with_uid

HOUR = 3600.0


def test_the_deadline_left_is_the_examples_not_trained_in_the_hours_not_spent() -> None:
    """1e6 examples in 20 h; 4e5 trained in the first 8 h: 6e5 left in 12 h."""
    whole = JobDeadline(1e6, 20.0, 0.9)
    left = remaining(whole, Progress(4e5, at=1000 + 8 * HOUR, started_at=1000))
    assert (left.examples, left.hours, left.confidence) == (pytest.approx(6e5), pytest.approx(12.0), 0.9)
    assert left.progress == Progress(4e5, 1000 + 8 * HOUR, 1000)
    assert remaining(whole, None) is whole  # not read yet: the whole job, from now


def test_a_passed_deadline_and_a_trained_job_are_not_decided_again() -> None:
    whole = JobDeadline(1e6, 20.0, 0.9)
    with pytest.raises(DeadlineOver, match="deadline, 20 h from its start at 1970-01-01T00:00:00Z, has passed") as e:
        remaining(whole, Progress(9e5, at=20 * HOUR + 1, started_at=0))
    assert e.value.passed
    with pytest.raises(DeadlineOver, match="has trained 1e\\+06 of its 1e\\+06 examples") as e:
        remaining(whole, Progress(1e6, at=10 * HOUR, started_at=0))
    assert not e.value.passed


def test_the_decision_annotation_says_what_was_left() -> None:
    left = remaining(JobDeadline(1e6, 20.0, 0.9), Progress(4e5, at=8 * HOUR, started_at=0))
    choice = Choice(workers=2, throughput=20.0, cost_per_example=1.0, hours=8.3, total_cost=1.0, p_meet=0.95,
                    confident=True, needed_throughput=6e5 / (12 * HOUR))
    doc = json.loads(deadline_json(choice, 0.9, decided=left))
    assert doc["progress"] == {"examplesTrained": 400000.0, "examplesLeft": 600000.0, "hoursLeft": 12.0,
                               "at": "1970-01-01T08:00:00Z"}
    assert "progress" not in json.loads(deadline_json(choice, 0.9, decided=JobDeadline(1e6, 20.0, 0.9)))


@pytest.mark.parametrize("text, expected", [
    ("2026-01-01T00:00:00Z", dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()),
    ("2026-01-01T01:00:00.5+01:00", dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() + 0.5),
    ("yesterday", None), (12, None), (None, None),
])
def test_the_start_time_is_read_from_the_status(text, expected) -> None:
    assert start_time({"startTime": text} if text is not None else {}) == expected
    obj = with_uid(tfjob())
    obj["status"] = {"startTime": text} if text is not None else {}
    assert parse_tfjob(obj).started_at == expected  # an unreadable one is no error: planned from now
    ddp = with_uid(pytorchjob())
    ddp["status"] = obj["status"]
    assert parse_pytorchjob(ddp).started_at == expected


def test_the_examples_trained_are_every_pods_increase_since_the_start() -> None:
    with FakePrometheus() as prom:
        prom.jobs[(NS, "job")] = [Pod("job-worker-0", 10.0, 12, trained=1500.0), Pod("job-worker-1", 10.0, 12,
                                                                                        trained=2500.0)]
        client = PrometheusClient(prom.url)
        assert trained(client, NS, "job", since_s=7200.9, at=1e9) == 4000.0
        assert prom.queries[-1]["query"] == ('increase(advisor_training_examples_total{job_namespace="ml",'
                                             'tfjob="job"}[7200s])')
        assert trained(client, NS, "other", since_s=7200, at=1e9) is None  # no series: not known
        with pytest.raises(ObservedQueryError, match="at least 1 s"):
            trained(client, NS, "job", since_s=0.5, at=1e9)
        prom.status = 503
        with pytest.raises(ObservedQueryError, match="503"):
            trained(client, NS, "job", since_s=7200, at=1e9)


def test_the_global_step_progress_comes_before_the_pods_counts() -> None:
    """Two pods restarted from the checkpoint at 3000 examples after counting 2500 each: their
    counters' increase says 5000 + what they counted since (here 1000); the global step they read
    says 4000, the furthest pod's; a pod that exports no gauge (an older image) changes nothing."""
    with FakePrometheus() as prom:
        prom.jobs[(NS, "job")] = [Pod("job-worker-0", 10.0, 12, trained=3000.0, progress=3990.0),
                                  Pod("job-worker-1", 10.0, 12, trained=3000.0, progress=4000.0),
                                  Pod("job-worker-2", 10.0, 12, trained=50.0)]
        client = PrometheusClient(prom.url)
        assert trained(client, NS, "job", since_s=7200, at=1e9) == 4000.0
        assert prom.queries[-1]["query"] == ('max(advisor_training_progress_examples{job_namespace="ml",'
                                             'tfjob="job"})')
        prom.jobs[(NS, "job")] = [Pod("job-worker-0", 10.0, 12, trained=3000.0)]  # no pod exports it: the counts
        assert trained(client, NS, "job", since_s=7200, at=1e9) == 3000.0
        prom.jobs[(NS, "job")] = [Pod("job-worker-0", 10.0, 12, trained=3000.0, progress=float("inf"))]
        with pytest.raises(ObservedQueryError, match="inf examples trained by the global step of ml/job"):
            trained(client, NS, "job", since_s=7200, at=1e9)


# Curve 100, 200, 300, 400, 410, 420 ex/s (+-2 % at 95 %: sigma = 0.02 T / z), a worker 1/h, the PS free:
# cost per example W / T, W = 4 the cheapest (0.0100; W = 5 0.0122, W = 6 0.0143)
def sigma(t: float) -> float:
    return 0.02 * t / Z95


def test_a_running_job_moves_only_if_the_move_makes_it_after_what_a_resize_loses() -> None:
    """392 ex/s for 1 h: W = 4 meets it with Phi(8 / sigma(400)) = 0.975, W = 5 with ~1. A job
    running at 5 that moves loses 0.05 h, and then needs 392 / 0.95 = 412.6 ex/s: W = 4 meets that
    with Phi(-12.6 / sigma(400)) ~ 0, W = 6 with 0.957 at a higher cost than staying: it stays at 5."""
    pred, prices, limits = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.AUTO)
    fresh = recommend(pred, prices, limits, need(392.0))
    assert fresh.target == 4 and fresh.deadline is not None
    assert fresh.deadline.p_meet[4] == pytest.approx(PHI(8 / sigma(400)))
    at5 = recommend(pred, prices, limits, need(392.0), running=5, switch_hours=0.05)
    assert at5.target == 5 and at5.deadline is not None and at5.deadline.choice.confident
    assert at5.deadline.p_meet[4] == pytest.approx(PHI((400 - 392 / 0.95) / sigma(400)))
    assert at5.deadline.p_meet[6] == pytest.approx(PHI((420 - 392 / 0.95) / sigma(420)))
    assert at5.deadline.p_meet[5] == pytest.approx(PHI((410 - 392) / sigma(410)))  # staying loses nothing
    at4 = recommend(pred, prices, limits, need(392.0), running=4, switch_hours=0.05)
    assert at4.target == 4  # running at the cheapest that makes it: no loss there
    # a loss as long as the deadline: no move can make it, each W is evaluated as it stands
    assert recommend(pred, prices, limits, need(392.0), running=5, switch_hours=1.0).target == 4


def test_a_riskier_w_is_taken_only_with_half_the_risk_asked() -> None:
    """393.5 ex/s: W = 4 meets it with Phi(6.5 / sigma(400)) = 0.944, confident at 0.9 but below
    1 - 0.1 / 2 = 0.95. A job at W = 6 (sure to make it) is not moved there, though W = 4 costs
    30 % less per example; at 392 ex/s (0.975) it is. A job at W = 2, which cannot make it, is."""
    pred, prices, limits = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.AUTO)
    args = dict(last_resize=None, now=10_000.0, min_gain=0.05, cooldown_s=600.0)
    rec = recommend(pred, prices, limits, need(393.5))
    assert rec.target == 4 and rec.deadline is not None
    assert rec.deadline.p_meet[4] == pytest.approx(PHI(6.5 / sigma(400))) == pytest.approx(0.944, abs=1e-3)
    assert resize_target(limits, view({}, workers=6, dynamic=True), rec, pred, prices, **args) is None
    assert resize_target(limits, view({}, workers=2, dynamic=True), rec, pred, prices, **args) == 4
    sure = recommend(pred, prices, limits, need(392.0))
    assert resize_target(limits, view({}, workers=6, dynamic=True), sure, pred, prices, **args) == 4


def test_a_job_that_meets_its_deadline_is_not_moved_to_a_trial() -> None:
    """test_deadline's planned case: 250 ex/s for 10 h on 100, 190, 260, 300 (+-12 %); the plan
    starts at W = 3, which alone meets it with Phi(10 / (31.2 / z)) = 0.74 and is rescued by the
    resize. A job at W = 4, which meets it, is not moved there: a trial risks a deadline it is
    on course for. A job at W = 1, which cannot meet it, is."""
    from advisor.core.correction import Correction
    from tests.controller.test_deadline import wide_prediction

    pred, prices, limits = wide_prediction(), Prices(1.0, 0.0), Limits(1, 4, Mode.AUTO)
    planned = recommend(pred, prices, limits, JobDeadline(250 * 3600 * 10, 10.0, 0.9), Correction(0.5, 0.1))
    assert planned.target == 3 and planned.deadline is not None and planned.deadline.plan is not None
    assert planned.deadline.p_meet[3] >= 0.95 and planned.deadline.plan.alone == pytest.approx(PHI(10 * Z95 / 31.2))
    args = dict(last_resize=None, now=10_000.0, min_gain=0.05, cooldown_s=600.0)
    assert planned.deadline.p_meet[4] >= 0.9
    assert resize_target(limits, view({}, workers=4, dynamic=True), planned, pred, prices, **args) is None
    assert planned.deadline.p_meet[1] < 0.9
    assert resize_target(limits, view({}, workers=1, dynamic=True), planned, pred, prices, **args) == 3


def test_a_move_pays_for_its_restart_from_what_is_left() -> None:
    """A job at W = 6 (6/420 = 0.01429 per example-hour) needing 390 ex/s for what is left, each
    move losing 0.05 h. With 10 h left the cheapest W that makes it, 4 (P = Phi(8.04 / sigma(400))
    = 0.976 after the loss), costs 0.01: 39.0 for the 14.04e6 examples left plus 4 x 0.05 for the
    restart, against 55.7 staying: 29.6 % less, a move. With 6 minutes' work left in 12 minutes,
    W = 3 makes it (260 ex/s after the loss) at 0.01 per example too, but 0.390 + 3 x 0.05 against
    0.557 is 3 % less, under the 5 % hysteresis: it stays (a move for the last minutes had missed
    the closed loop's deadline)."""
    pred, prices, limits = prediction(FLAT_THEN_SATURATED), Prices(1.0, 0.0), Limits(1, 6, Mode.AUTO)
    args = dict(last_resize=None, now=100_000.0, min_gain=0.05, cooldown_s=600.0)
    at6 = view({}, workers=6, dynamic=True)
    for hours, work, target in ((10.0, 10.0, 4), (0.2, 0.1, None)):  # hours left; of work at 390 ex/s
        examples = 390.0 * 3600 * work
        # as the controller has it: the job's deadline, less a third of its examples trained in as long
        left = remaining(JobDeadline(1.5 * examples, 2 * hours, 0.9), Progress(examples / 2, hours * 3600, 0.0))
        assert (left.examples, left.hours) == pytest.approx((examples, hours))
        rec = recommend(pred, prices, limits, left, running=6, switch_hours=0.05)
        assert rec.deadline is not None and rec.deadline.switch_hours == 0.05
        assert rec.target == (4 if hours > 1 else 3)
        assert resize_target(limits, at6, rec, pred, prices, **args) == target
        # a resize that loses nothing is a move at the end too (to 2, which makes 195 ex/s in the 0.2 h)
        free = recommend(pred, prices, limits, left, running=6, switch_hours=0.0)
        assert free.target < 6 and resize_target(limits, at6, free, pred, prices, **args) == free.target


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as p:
        yield p


def test_over_the_emulator_the_deadline_is_decided_for_what_is_left(emu, body, prom, tmp_path) -> None:
    """The curve 100, 190, 260, 300 ex/s (+-12 %), advise mode; every job asks for 9e6 examples
    in 10 h and started 5 h ago; a worker and the PS cost 1/h each. By hand:

    - for the whole job, 250 ex/s: W = 4 (W = 3 at 260, sigma 31.2 / 1.96 = 15.9, meets it with
      1 - Phi(-0.63) = 0.74 only);
    - ahead, 6.3e6 trained: 2.7e6 left in 5 h. The job runs at 2 (150 ex/s: 190 with sigma 11.6
      meets it with 1 - Phi(-3.4) > 0.99); a move loses 600 s (``deadline_resize_loss_s``), so W = 3
      needs 2.7e6 / (5 h - 600 s) = 155.2 ex/s, which it meets too, and is the cheapest per
      example ((3 + 1) / 260 against (2 + 1) / 190);
    - behind, 2.25e6 trained: 6.75e6 in 5 h, 375 ex/s (387.9 after a move): no W, the likeliest
      W = 4, not confident;
    - late, started 11 h ago with 5e6 trained: the deadline passed; its first decision (W = 4,
      for the whole job) stays and a Warning says so, once."""
    settings = settings_for(tmp_path, leader_election=False, refit_enabled=True, refit_prometheus_url=prom.url,
                            refit_min_observation_s=1, refit_interval_s=1, refit_tolerance=0.5)
    controller = start_controller(emu, settings, runner=planned_prediction)
    notes = {EXAMPLES: "9e6", DEADLINE: "10h", PREFIX + "mode": "advise"}
    jobs = {"ahead": (5, 6.3e6), "behind": (5, 2.25e6), "late": (11, 5e6)}
    try:
        for name in jobs:
            create_tfjob(emu, tfjob(name, workers=2, annotations=notes))
        runs = wait_for("three profiling runs", lambda: len(profiling_jobs(emu)) == 3 and profiling_jobs(emu))
        for run in runs:
            assert upload_as_profiling_pod(emu, run, body).ok
        for name in jobs:
            wait_for(f"{name} Predicted", lambda n=name: phase(emu, n) == "Predicted")
        first = {name: json.loads(annotations(emu, name)[DECISION]) for name in jobs}
        assert all(d["workers"] == 4 and "progress" not in d for d in first.values())  # the whole job, from now
        started = time.time()
        for name, (hours_ago, done) in jobs.items():
            prom.jobs[(NS, name)] = [Pod(f"{name}-worker-{i}", 95.0, 12, trained=done / 2) for i in range(2)]
            stamp = dt.datetime.fromtimestamp(started - hours_ago * HOUR, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            emu.patch("tfjobs", NS, name, {"status": {"startTime": stamp, "conditions": [
                {"type": "Running", "status": "True", "reason": "TFJobRunning"}]}}, subresource="status")
        ahead = wait_for("ahead decided for what is left", lambda: (
            "progress" in (d := json.loads(annotations(emu, "ahead")[DECISION])) and d))
        assert (ahead["workers"], ahead["confident"]) == (3, True)
        assert ahead["neededThroughput"] == pytest.approx(2.7e6 / (5 * HOUR - 600), rel=2e-3)
        assert ahead["progress"]["examplesTrained"] == 6.3e6 and ahead["progress"]["examplesLeft"] == 2.7e6
        assert ahead["progress"]["hoursLeft"] == pytest.approx(5, abs=0.01)
        assert annotations(emu, "ahead")[PREFIX + "recommended-workers"] == "3"
        behind = wait_for("behind decided for what is left", lambda: (
            "progress" in (d := json.loads(annotations(emu, "behind")[DECISION])) and d))
        assert (behind["workers"], behind["confident"]) == (4, False)
        assert behind["neededThroughput"] == pytest.approx(6.75e6 / (5 * HOUR - 600), rel=2e-3)
        wait_for("the Warning", lambda: any(r == "DeadlinePassed" for _, r, *_ in events(emu, "late")))
        [passed] = [e for e in emu.list("events", NS) if e["reason"] == "DeadlinePassed"]
        assert "deadline, 10 h from its start at" in passed["message"] and "the last decision stays" in passed["message"]
        assert json.loads(annotations(emu, "late")[DECISION]) == first["late"]
        assert any(q["query"].startswith('increase(advisor_training_examples_total{job_namespace="ml",tfjob="ahead"}[')
                   for q in prom.queries)
        time.sleep(3)  # more looks and reconciles: no Warning is repeated, the decision not changed
        assert [r for _, r, *_ in events(emu, "late")].count("DeadlinePassed") == 1
        # more trained, still short: the message changes, the likeliest W stays, "at risk" is said once;
        # the pods now export their global step's progress, which a restart set back below their counts
        prom.jobs[(NS, "behind")] = [Pod(f"behind-worker-{i}", 95.0, 12, trained=2.8e6 / 2, progress=2.5e6)
                                     for i in range(2)]
        wait_for("behind's new progress", lambda: json.loads(annotations(emu, "behind")[DECISION])
                 ["progress"]["examplesTrained"] == 2.5e6)
        assert json.loads(annotations(emu, "behind")[DECISION])["workers"] == 4
        assert [r for _, r, *_ in events(emu, "behind")].count("DeadlineAtRisk") == 1
        assert json.loads(annotations(emu, "late")[DECISION]) == first["late"]
    finally:
        controller.stop()
