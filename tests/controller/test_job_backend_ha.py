"""Two replicas with the job backend: the leader launches a prediction Job and stops while its pod
is predicting; the standby takes the lease, adopts that Job (no second one) and the answer lands.

As in a cluster, both replicas share the store (the chart's volume) and the pods reach them
through one address, ``Service``: a stand-in for the controller's Service that forwards each
request to a ready replica (readiness: leading with a synced cache, ``Controller.ready``).
``Service.hold_results`` keeps the pod's answer (``PUT .../result``) waiting at the Service, so
the leader can be stopped at a known point: after its pod fetched the input, before the answer.

Then the race inside a takeover, on two JobPredictors sharing a store: the old leader's create of
the Job lands after the new leader adopted the attempt; and a Job a lost store left behind.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from advisor.controller.app import Controller
from advisor.controller.pipeline.job_predictor import JobPredictor
from advisor.controller.kube.client import Kube
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.prediction_job import PredictionJobSpec, build_prediction_job
from advisor.controller.pipeline.predictions import prediction_params
from advisor.controller.state.store import Store
from advisor.controller.jobs.tfjob import PREFIX
from advisor.core.cost import Prices
from tests.controller.harness import (
    NS, annotations, create_tfjob, job_settings_for, phase, profiling_jobs, start_controller, trace_body,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.controller.stand_in_service import StandInService
from tests.kube_emulator import KubeEmulator
from tests.kube_emulator.job_runner import JobRunner

SLOW = 90  # s: a first prediction in a fresh process may compile the simulator


def in_process_service() -> StandInService[Controller]:
    """The Service in front of in-process controllers: each request to the first ready one."""
    return StandInService(lambda c: c.ready()[0], lambda c: c.http.port, lambda c: c.settings.identity)


def answered(service: StandInService[Controller]) -> list[tuple[str, str, str]]:
    """(method, path, identity of the replica that answered) of every request the Service passed on."""
    return [(method, path, who) for method, path, _, who in service.served]


def prediction_jobs(emu: KubeEmulator) -> list[dict[str, Any]]:
    return emu.list("jobs.batch", NS, label_selector=f"{PREFIX}role=prediction")


def test_the_standby_adopts_the_leaders_running_prediction_job(emu: KubeEmulator, tmp_path) -> None:
    with in_process_service() as service, JobRunner(emu, NS) as runner:
        # One store file, one address for the pods, leader election with the harness's fast lease.
        a, b = (start_controller(emu, job_settings_for(tmp_path, identity=name, leader_election=True,
                                                       ingest_url=service.url)) for name in ("a", "b"))
        service.replicas = [a, b]
        try:
            wait_for("a leader", lambda: a.leading != b.leading)
            leader, standby = (a, b) if a.leading else (b, a)
            wait_for("the standby's cache", standby.jobs.has_synced)
            service.hold_results()
            create_tfjob(emu, tfjob("ha", workers=2))
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
            assert upload_as_profiling_pod(emu, pj, trace_body("mlp_bw100")).status == 202
            (job,) = wait_for("the prediction Job", lambda: prediction_jobs(emu))
            name, key = job["metadata"]["name"], job["metadata"]["labels"][PREFIX + "prediction-key"]

            # Mid-prediction: the pod got its input from the leader and computed; its answer waits.
            wait_for("the pod's answer", service.held.is_set, timeout_s=SLOW)
            assert ("GET", f"/v1/predictions/{key}/input", leader.settings.identity) in answered(service)
            assert phase(emu, "ha") == "Predicting"
            assert leader.predictor.tracked_jobs() == {name} and standby.predictor.tracked_jobs() == set()

            leader.stop()  # releases the lease
            service.replicas = [standby]
            wait_for("the takeover", lambda: standby.leading)
            wait_for("the standby to adopt the Job", lambda: standby.predictor.tracked_jobs() == {name})
            # The standby asked for the same Job (409: it exists) and took it; nothing else was created.
            assert [c.code for c in emu.calls(verb="create", resource="jobs")] == [201, 409]
            assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == [name]

            service.release_results()
            wait_for("Predicted", lambda: phase(emu, "ha") == "Predicted", timeout_s=30)
            assert ("PUT", f"/v1/predictions/{key}/result", standby.settings.identity) in answered(service)
            notes = annotations(emu, "ha")
            assert notes[PREFIX + "recommended-workers"] and notes[PREFIX + "curve"]
            (run,) = wait_for("the pod's exit", lambda: runner.runs)
            assert run.job == name and run.exit_code == 0, run.output
            assert standby.metrics.predictions.labels("succeeded")._value.get() == 1
            assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == [name]  # still one Job
        finally:
            for c in (a, b):
                c.stop()


class _SlowCreate:
    """The old leader's view of the API server: its create of the Job lands late (a slow or
    partitioned API server), after the standby has taken over."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.sent, self.go = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)

    def create_job(self, namespace: str, body: Any) -> Any:
        self.sent.set()
        assert self.go.wait(20)
        return self._kube.create_job(namespace, body)


KEY = "0123456789abcdef01234567"
PARAMS = prediction_params(1e8, Prices(1.0, 1.0), bandwidth_bps=None, max_workers=4, target=0.05, seed=0,
                           saturation_threshold=0.05)
SPEC = PredictionJobSpec(namespace=NS, image="advisor:test", controller_url="http://127.0.0.1:9", timeout_s=600)


def kube(emu: KubeEmulator) -> Kube:
    return Kube(kubernetes.client.ApiClient(emu.configuration()))


def job_predictor(kube: Any, store_path: Path, done: list[Any]) -> JobPredictor:
    """A replica's predictor on the shared store; nothing runs the Jobs (the answer is not the point)."""
    return JobPredictor(kube=kube, store=Store(store_path), metrics=Metrics(), spec=SPEC,
                        on_done=lambda *a: done.append(a), start_timeout_s=60, poll_s=0.1)


def test_a_launch_overtaken_by_the_new_leaders_adoption_joins_it(emu: KubeEmulator, tmp_path: Path) -> None:
    """The old leader recorded the attempt and sent its create; before that create lands, the new
    leader adopts the attempt (creating its Job). The old create's 409 is then the same attempt's
    Job, made by the other replica: not a stranger's to be skipped for a second Job (which left
    the new leader waiting for an attempt the store had ended)."""
    slow, done = _SlowCreate(kube(emu)), []
    old = job_predictor(slow, tmp_path / "advisor.db", done)
    new = job_predictor(kube(emu), tmp_path / "advisor.db", done)
    try:
        launch = threading.Thread(target=old.submit, args=(KEY, {"steps": []}, PARAMS))
        launch.start()
        assert slow.sent.wait(10)  # the attempt is in the store; the old leader's create is on its way
        assert new.submit(KEY, {"steps": []}, PARAMS)  # the takeover: adopts the running attempt
        slow.go.set()
        launch.join(10)
        name = f"advisor-predict-{KEY}-1"
        assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == [name]  # one Job, not a second attempt
        assert [c.code for c in emu.calls(verb="create", resource="jobs")] == [201, 409]
        assert old.tracked_jobs() == new.tracked_jobs() == {name}
        row = Store(tmp_path / "advisor.db").prediction_job(KEY)
        assert row is not None and (row.attempt, row.state) == (1, "running") and done == []
    finally:
        old.shutdown()
        new.shutdown()


@pytest.mark.parametrize("made_for", [None, "1700000000.000000"], ids=["unannotated", "another-record"])
def test_a_job_left_by_a_lost_store_is_skipped_for_the_next_attempt(emu: KubeEmulator, tmp_path: Path,
                                                                    made_for: str | None) -> None:
    stale = build_prediction_job(KEY, 1, SPEC, attempt_id=made_for or "")
    emu.seed({**stale, "metadata": {**stale["metadata"], "uid": "stale-uid"}})  # its pod holds another token
    done: list[Any] = []
    predictor = job_predictor(kube(emu), tmp_path / "advisor.db", done)
    try:
        assert predictor.submit(KEY, {"steps": []}, PARAMS)
        assert predictor.tracked_jobs() == {f"advisor-predict-{KEY}-2"}
        # the list of the key's Jobs showed attempt 1 taken (not adoptable: no owner of ours), so
        # the next attempt's name was created at once, without a 409 first
        assert [c.code for c in emu.calls(verb="create", resource="jobs")] == [201]
        assert sorted(j["metadata"]["name"] for j in prediction_jobs(emu)) == [
            f"advisor-predict-{KEY}-1", f"advisor-predict-{KEY}-2"]  # garbage collection deletes the stale one
        row = Store(tmp_path / "advisor.db").prediction_job(KEY)
        assert row is not None and (row.attempt, row.state) == (2, "running")
    finally:
        predictor.shutdown()
