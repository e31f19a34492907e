"""Failover loses nothing that matters: two controller processes, the leader killed with SIGKILL.

Each replica has its own store (its own pod and volume, or an emptyDir): what a new leader
needs is in the cluster (the job's annotations, the profile's ConfigMap, the derived token).
The leader is killed as the kubelet kills a pod that does not stop (SIGKILL, its prediction
workers too) at two moments: while the job is being profiled, and while its prediction runs.
Each time the surviving replica finishes the job, with the one profiling run the job ever had
and the token the profiling pod holds. With the job backend, the prediction Job running when the
leader dies is adopted by the survivor: one Job, its answer applied once. The in-process test shows the standby taking the upload
itself (readiness = able to serve) before it leads.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    INGEST_KEY, JOB_IMAGE, NS, create_tfjob, phase, profiling_jobs, settings_for, start_controller,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.stand_in_service import StandInService
from tests.controller.tfjobs import tfjob
from tests.deploy.controller_process import ControllerProcess, descendants, settings_for_process
from tests.kube_emulator import KubeEmulator
from tests.kube_emulator.job_runner import JobRunner

LEASE = "advisor-leader"
# A 4 s lease instead of 15 s: the survivor takes over sooner after the kill (the wait the settings'
# lease timing exists for), with renewals every 0.5 s and a 3 s deadline to spare for a loaded machine.
PROCESS_LEASE = {"lease_duration_s": 4.0, "lease_renew_deadline_s": 3.0, "lease_retry_period_s": 0.5}
REPO = Path(__file__).resolve().parents[2]


def holder(emu: KubeEmulator) -> str | None:
    lease = emu.get("leases", NS, LEASE)
    return (lease or {}).get("spec", {}).get("holderIdentity")


def kill_9(ctl: ControllerProcess) -> None:
    """SIGKILL the controller and every process it started, as a container's end kills them all."""
    pids = [ctl.pid, *descendants(ctl.pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    ctl.stop()  # reaps it (already dead: no signal sent)


def two_replicas(emu: KubeEmulator, tmp_path: Path, **overrides: Any) -> dict[str, ControllerProcess]:
    replicas = {}
    for name in ("replica-a", "replica-b"):
        settings = settings_for_process(tmp_path / name, leader_election=True, identity=name, ingest_key=INGEST_KEY,
                                        resync_period_s=5, **PROCESS_LEASE, **overrides)
        # PYTHONPATH: this checkout's code, not whichever the installed console script points at
        replicas[name] = ControllerProcess(emu, tmp_path / name, settings, env={"PYTHONPATH": str(REPO)})
    for ctl in replicas.values():
        ctl.start()
    for ctl in replicas.values():
        ctl.wait_for_probe("/readyz")  # both Ready: a standby serves too
    return replicas


def prediction_jobs(emu: KubeEmulator) -> list[dict[str, Any]]:
    return emu.list("jobs.batch", NS, label_selector=f"{PREFIX}role=prediction")


def patches_of(emu: KubeEmulator, name: str) -> int:
    return len([c for c in emu.calls(verb="patch", resource="tfjobs") if c.name == name])


def creates(emu: KubeEmulator, resource: str) -> int:
    return len([c for c in emu.calls(verb="create", resource=resource) if c.code in (200, 201)])


@pytest.mark.parametrize("moment", ["profiling", "prediction"])
def test_kill_9_of_the_leader_loses_nothing(emu: KubeEmulator, body: bytes, tmp_path: Path, moment: str) -> None:
    # max_workers 24 at 2 %: a prediction of some seconds, so the kill lands while it runs
    replicas = two_replicas(emu, tmp_path, max_workers=24 if moment == "prediction" else 4,
                            prediction_target=0.02 if moment == "prediction" else 0.05)
    try:
        leader_name = wait_for("a leader", lambda: holder(emu), timeout_s=30)
        leader = replicas[leader_name]
        survivor = next(c for n, c in replicas.items() if n != leader_name)
        create_tfjob(emu, tfjob("sturdy"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu), timeout_s=30)[0]
        wait_for("Profiling", lambda: phase(emu, "sturdy") == "Profiling", timeout_s=30)
        if moment == "profiling":
            kill_9(leader)
            # the pod's upload reaches the survivor (the Service's only Ready endpoint now) even
            # before it leads: it records the profile in the cluster
            result = upload_as_profiling_pod(emu, pj, body, port=survivor.settings["http_port"])
            assert result.status == 202, result.message
        else:
            result = upload_as_profiling_pod(emu, pj, body, port=leader.settings["http_port"])
            assert result.status == 202, result.message
            wait_for("Predicting", lambda: phase(emu, "sturdy") == "Predicting", timeout_s=30)
            kill_9(leader)
            assert phase(emu, "sturdy") == "Predicting"  # killed mid-prediction
        wait_for("the survivor leads", lambda: holder(emu) == survivor.settings["identity"], timeout_s=40)
        wait_for("Predicted", lambda: phase(emu, "sturdy") == "Predicted", timeout_s=120)
        assert creates(emu, "tfjobs") == 2  # the user's job and ONE profiling run: never profiled again
        assert len(profiling_jobs(emu)) == 1
        assert creates(emu, "secrets") == 0
        assert emu.get("configmaps", NS, "sturdy-advisor-g1") is not None  # the durable record
    finally:
        for ctl in replicas.values():
            ctl.stop()


def test_a_standby_with_its_own_store_takes_the_upload_and_the_leader_finishes(emu, body, tmp_path) -> None:
    a = start_controller(emu, settings_for(tmp_path / "a", identity="a"))
    b = start_controller(emu, settings_for(tmp_path / "b", identity="b"))
    try:
        wait_for("a leader", lambda: a.leading != b.leading)
        leader, standby = (a, b) if a.leading else (b, a)
        create_tfjob(emu, tfjob("relay"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        wait_for("the standby sees it Profiling", lambda: (standby.informer.get(NS, "relay") or {}).get(
            "metadata", {}).get("annotations", {}).get("training-advisor.io/phase") == "Profiling")
        assert standby.ready()[0] is True
        result = upload_as_profiling_pod(emu, pj, body, port=standby.http.port)
        assert result.status == 202, result.message
        # the standby wrote the record; the leader (its own store knows nothing of it) finds it
        wait_for("Predicted", lambda: phase(emu, "relay") == "Predicted", timeout_s=60)
        assert standby.store.runs() == []  # the standby reconciled nothing and recorded nothing locally
        assert leader.store.profile_sha(pj["metadata"]["annotations"]["training-advisor.io/profiling-for-uid"], 1)
        # the run is over (the leader's store says so just after the annotations): its token opens
        # nothing any more, on either replica
        wait_for("the run over", lambda: leader.store.runs(state="predicted"))
        assert upload_as_profiling_pod(emu, pj, body, port=standby.http.port).status == 403
        assert upload_as_profiling_pod(emu, pj, body, port=leader.http.port).status == 403
    finally:
        for c in (a, b):
            c.stop()


def test_a_new_leader_with_its_own_store_leaves_a_finished_job_finished(emu, body, tmp_path) -> None:
    """What the old leader concluded (predicted, or profiling failed for good) stands: a new
    leader that knows nothing of it adopts the outcome from the cluster and profiles nothing."""
    first = start_controller(emu, settings_for(tmp_path / "a", leader_election=False, profiling_max_attempts=1))
    try:
        create_tfjob(emu, tfjob("done"))
        create_tfjob(emu, tfjob("broke"))
        wait_for("two profiling runs", lambda: len(profiling_jobs(emu)) == 2)
        assert upload_as_profiling_pod(emu, emu.get("tfjobs", NS, "done-prof-g1"), body).ok
        failed = {"type": "Failed", "status": "True", "reason": "TFJobFailed", "message": "ImagePullBackOff"}
        emu.patch("tfjobs", NS, "broke-prof-g1", {"status": {"conditions": [failed]}}, subresource="status")
        wait_for("both settled", lambda: phase(emu, "done") == "Predicted" and phase(emu, "broke") == "Failed")
    finally:
        first.stop()
    patched_before = patches_of(emu, "done")
    second = start_controller(emu, settings_for(tmp_path / "b", leader_election=False, profiling_max_attempts=1))
    try:
        wait_for("both adopted", lambda: len(second.store.runs()) == 2)
        states = {r.name: r.state for r in second.store.runs()}
        assert states["broke"] == "failed"
        wait_for("applied from the record", lambda: second.store.runs(state="predicted"))
        assert phase(emu, "done") == "Predicted" and phase(emu, "broke") == "Failed"
        # the prediction recorded with the profile was applied: nothing simulated again, and the
        # job never went back to Predicting
        assert second.metrics.predictions.labels("succeeded")._value.get() == 0
        assert patches_of(emu, "done") == patched_before, "the new leader wrote on the predicted job"
        assert creates(emu, "tfjobs") == 4  # two jobs, two profiling runs: none after the new start
    finally:
        second.stop()


def process_service() -> StandInService[ControllerProcess]:
    """The Service in front of replicas that are OS processes, each request to the next ready one
    in turn (``/readyz`` answers 200)."""
    return StandInService(_ready, lambda c: c.settings["http_port"], lambda c: c.settings["identity"],
                          round_robin=True)


def predicted_events(emu: KubeEmulator, name: str) -> list[dict[str, Any]]:
    return [e for e in emu.list("events", NS) if e["involvedObject"]["name"] == name and e["reason"] == "Predicted"]


def _ready(ctl: ControllerProcess) -> bool:
    try:
        return ctl.get("/readyz", timeout_s=2)[0] == 200
    except OSError:  # killed: its port refuses
        return False


def test_kill_9_of_the_leader_mid_prediction_job_adopts_the_job(emu: KubeEmulator, body: bytes,
                                                                 tmp_path: Path) -> None:
    """Job backend, each replica its own store: the leader is SIGKILLed while its prediction Job
    runs. The new leader finds the Job in the cluster and adopts it: the pod's answer lands there,
    no second Job runs, and the prediction is applied once."""
    with process_service() as service, JobRunner(emu, NS) as runner:
        replicas = two_replicas(emu, tmp_path, prediction_backend="job", prediction_job_image=JOB_IMAGE,
                                ingest_url=service.url)
        try:
            leader_name = wait_for("a leader", lambda: holder(emu), timeout_s=30)
            leader = replicas[leader_name]
            survivor = next(c for n, c in replicas.items() if n != leader_name)
            service.replicas = [survivor, leader]  # the standby first: the pod's first request goes there
            service.hold_results()
            create_tfjob(emu, tfjob("steady"))
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu), timeout_s=30)[0]
            assert upload_as_profiling_pod(emu, pj, body, port=leader.settings["http_port"]).status == 202
            (job,) = wait_for("the prediction Job", lambda: prediction_jobs(emu), timeout_s=30)
            name, key = job["metadata"]["name"], job["metadata"]["labels"][PREFIX + "prediction-key"]
            wait_for("the pod's answer", service.held.is_set, timeout_s=90)
            # the standby, which runs no attempt, sent the pod on (503) instead of refusing it
            inputs = [(status, who) for method, path, status, who in service.served if path.endswith("/input")]
            assert inputs == [(503, survivor.settings["identity"]), (200, leader_name)]
            assert phase(emu, "steady") == "Predicting"

            kill_9(leader)  # mid-prediction: the Job runs, its answer waits at the Service
            service.replicas = [survivor]
            wait_for("the survivor leads", lambda: holder(emu) == survivor.settings["identity"], timeout_s=40)
            service.release_results()
            wait_for("Predicted", lambda: phase(emu, "steady") == "Predicted", timeout_s=120)

            (run,) = wait_for("the pod's exit", lambda: runner.runs, timeout_s=30)  # one pod ran...
            assert run.job == name and run.exit_code == 0, run.output
            assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == [name]  # ...the one Job
            assert [c.code for c in emu.calls(verb="create", resource="jobs") if c.code < 300] == [201]
            results = [(status, who) for method, path, status, who in service.served if path.endswith("/result")]
            assert results[-1] == (202, survivor.settings["identity"]) and all(s == 503 for s, _ in results[:-1])
            # applied once: one Predicted event, one prediction by the survivor, through a resync (5 s)
            wait_for("the Predicted event", lambda: predicted_events(emu, "steady"), timeout_s=10)
            time.sleep(6)
            assert len(predicted_events(emu, "steady")) == 1
            assert 'advisor_predictions_total{outcome="succeeded"} 1.0' in survivor.metrics_text()
        finally:
            for ctl in replicas.values():
                ctl.stop()
