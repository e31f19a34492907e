"""The whole controller over real HTTP: the API emulator, the official client, the real HTTP ingest.

Each test starts the real ``Controller`` against ``tests.kube_emulator.KubeEmulator`` and plays the
parts no cluster component here plays: the user (creating TFJobs with the official client), the
profiling pod (reading its env and mounted token and uploading a real recorded trace with
``advisor.profiling``'s uploader) and, where needed, the training operator (setting status).
"""

from __future__ import annotations

import json
import time


from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    pod_token,
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller,
    reconciles, upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator




def events(emu: KubeEmulator, name: str) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in emu.list("events", NS)
            if e.get("involvedObject", {}).get("name") == name]


def test_whole_flow_with_the_real_predictor(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False), canned=False)
    try:
        create_tfjob(emu, tfjob("mlp", workers=2))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert pj["metadata"]["name"] == "mlp-prof-g1"
        # the phase patch follows the run's creation: under load the run can be seen first
        wait_for("Profiling", lambda: phase(emu, "mlp") == "Profiling")
        result = upload_as_profiling_pod(emu, pj, body)
        assert result.ok and result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "mlp") == "Predicted", timeout_s=180)
        notes = annotations(emu, "mlp")
        curve = json.loads(notes[PREFIX + "curve"])
        assert [p[0] for p in curve] == [1, 2, 3, 4]
        # Invariants, not copied numbers: each point's throughput lies in its own interval, and no
        # point exceeds W x the one-worker throughput (upper ends, to allow for simulation noise).
        for w, thr, low, high in curve:
            assert low <= thr <= high
            assert thr <= w * curve[0][3] * 1.001
        rec = json.loads(notes[PREFIX + "recommendation"])
        assert rec["lowerBound"] <= rec["target"] <= rec["upperBound"] and 1 <= rec["target"] <= 4
        assert notes[PREFIX + "recommended-workers"] == str(rec["target"])
        assert json.loads(notes[PREFIX + "throughput-at-current"])["value"] == curve[1][1]
        assert notes[PREFIX + "profile"].startswith("sha256:")
        # the uploaded trace records the testbed's shaping (ADVISOR_BANDWIDTH_MBIT=100)
        assert json.loads(notes[PREFIX + "bandwidth"]) == {"bps": 1e8, "source": "recorded"}
        wait_for("events", lambda: {"ProfilingStarted", "Predicted"} <= {r for _, r in events(emu, "mlp")})
        text = controller.metrics.exposition()[0].decode()
        assert f'advisor_recommended_workers{{job_namespace="{NS}",tfjob="mlp"}} {float(rec["target"])}' in text
        current = controller.metrics.predicted_current_throughput.labels(NS, "mlp")._value.get()
        assert round(current, 2) == curve[1][1]  # the job runs 2 workers: the curve's W = 2 point
    finally:
        controller.stop()


def test_initial_mode_holds_the_job_then_resumes_it_with_the_recommendation(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, mode="initial"))
    try:
        create_tfjob(emu, tfjob("held", workers=1))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        job = emu.get("tfjobs", NS, "held")
        assert job["spec"]["runPolicy"]["suspend"] is True  # held while profiling
        assert upload_as_profiling_pod(emu, pj, body).ok
        resumed = wait_for("resume", lambda: (emu.get("tfjobs", NS, "held")["spec"]["runPolicy"]["suspend"] is False
                                              and emu.get("tfjobs", NS, "held")))
        # canned curve: W = 3 is the cheapest (see harness.canned_prediction).
        assert resumed["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3
        assert PREFIX + "suspended-by-advisor" not in resumed["metadata"]["annotations"]
        # The resize bumped the generation but not the templates: no second profiling run.
        wait_for("Predicted", lambda: phase(emu, "held") == "Predicted")
        assert len(profiling_jobs(emu)) == 1
    finally:
        controller.stop()


def test_initial_mode_releases_the_job_when_profiling_fails(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, mode="initial",
                                                    profiling_max_attempts=1))
    try:
        create_tfjob(emu, tfjob("unlucky", workers=2))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert emu.get("tfjobs", NS, "unlucky")["spec"]["runPolicy"]["suspend"] is True
        failed = {"type": "Failed", "status": "True", "reason": "TFJobFailed", "message": "worker 0 OOMKilled"}
        emu.patch("tfjobs", NS, pj["metadata"]["name"], {"status": {"conditions": [failed]}}, subresource="status")
        wait_for("Failed", lambda: phase(emu, "unlucky") == "Failed")
        released = wait_for("release", lambda: (emu.get("tfjobs", NS, "unlucky")["spec"]["runPolicy"]["suspend"]
                                                is False and emu.get("tfjobs", NS, "unlucky")))
        # the user's job runs as they wrote it: same workers, no advisor hold left behind
        assert released["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2
        assert PREFIX + "suspended-by-advisor" not in released["metadata"]["annotations"]
        time.sleep(0.5)  # a few more reconciles (the release and the phase patch each wake one)
        assert annotations(emu, "unlucky")[PREFIX + "reason"] == "ProfilingFailed: worker 0 OOMKilled"
        assert events(emu, "unlucky").count(("Warning", "ProfilingFailed")) == 1
        assert len(profiling_jobs(emu)) == 1 and controller.metrics.profiling_runs.labels("failed")._value.get() == 1
    finally:
        controller.stop()


def test_restart_mid_profiling_neither_duplicates_the_run_nor_loses_the_trace(emu, body, tmp_path) -> None:
    settings = settings_for(tmp_path, leader_election=False)
    first = start_controller(emu, settings)
    create_tfjob(emu, tfjob("r"))
    pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
    first.stop()  # maybe between creating the run and writing the job's Profiling phase
    second = start_controller(emu, settings)
    try:
        # the second adopts the run (or finds it announced) before it accepts the run's upload; a pod
        # that uploads earlier gets 403 (a restart's window, tests/profiling covers the uploader). The
        # Profiling phase may be the first's. The Service routes uploads only to a ready replica (a
        # synced job cache: /readyz); once ready, the second accepts the first's token as soon as it
        # knows the run (from the job's annotations, or by adopting it in its first reconcile).
        wait_for("Profiling", lambda: phase(emu, "r") == "Profiling")
        wait_for("the second ready", lambda: second.ready()[0])
        wait_for("the upload accepted", lambda: upload_as_profiling_pod(emu, pj, body).ok)
        wait_for("Predicted", lambda: phase(emu, "r") == "Predicted")
        assert len(profiling_jobs(emu)) == 1
        assert len(emu.calls(verb="create", resource="tfjobs")) == 2  # the user's job and one profiling run
    finally:
        second.stop()
    third = start_controller(emu, settings)  # a third start re-applies the stored prediction, predicts nothing
    try:
        wait_for("resync", lambda: third.jobs.has_synced())
        wait_for("reconciled", lambda: reconciles(third) >= 1)
        assert third.metrics.predictions.labels("succeeded")._value.get() == 0
        assert phase(emu, "r") == "Predicted"
    finally:
        third.stop()


def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(emu, body, tmp_path) -> None:
    # Both replicas share one store file, as two pods share the chart's volume during a rollout.
    a = start_controller(emu, settings_for(tmp_path, identity="a"))
    b = start_controller(emu, settings_for(tmp_path, identity="b"))
    try:
        wait_for("a leader", lambda: a.leading != b.leading)
        leader, standby = (a, b) if a.leading else (b, a)
        create_tfjob(emu, tfjob("ha"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        env = {e["name"]: e["value"]
               for e in pj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]}
        assert env["ADVISOR_INGEST_URL"].startswith(leader.settings.ingest_url)  # the leader made it
        wait_for("standby synced", standby.jobs.has_synced)
        # readiness is "able to serve", not "leading": the standby takes uploads too
        assert standby.ready() == (True, "ok (standing by: another replica holds the leader lease)")
        assert leader.ready()[0] is True
        assert reconciles(standby) == 0  # the standby saw the job but did nothing with it
        leader.stop()  # releases the lease: the standby takes over and finishes the job
        wait_for("takeover", lambda: standby.leading)
        result = upload_as_profiling_pod(emu, pj, body, port=standby.http.port)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "ha") == "Predicted")
        assert len(profiling_jobs(emu)) == 1
        assert len(emu.calls(verb="create", resource="tfjobs")) == 2  # the user's job and one profiling run
    finally:
        for c in (a, b):
            c.stop()


def test_conflicts_and_server_errors_are_retried(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        emu.fail_next(verb="patch", resource="tfjobs", status=409, times=2)
        create_tfjob(emu, tfjob("flaky"))
        emu.fail_next(verb="create", resource="tfjobs", status=500, times=1)  # the controller's create
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu), timeout_s=30)[0]
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Predicted", lambda: phase(emu, "flaky") == "Predicted", timeout_s=30)
        errors = controller.metrics.reconcile_errors
        assert errors.labels("conflict")._value.get() + errors.labels("api")._value.get() >= 1
    finally:
        controller.stop()


def test_watch_expiry_relists_and_the_flow_goes_on(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False,
                                                         watch_pytorchjobs=False))  # the TFJobs' watch only
    try:
        wait_for("synced", controller.jobs.has_synced)
        wait_for("the TFJob watch", lambda: emu.open_watches("tfjobs") == 1)  # synced comes before the watch opens
        emu.close_watches()  # the watch drops; the informer backs off (>= 0.8 s) before it resumes,
        create_tfjob(emu, tfjob("after-410"))  # so it misses this job's ADDED event
        emu.expire_history()  # and its resourceVersion is compacted away: only a relist finds the job
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu), timeout_s=30)[0]
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Predicted", lambda: phase(emu, "after-410") == "Predicted", timeout_s=30)
        restarts = controller.metrics.watch_restarts  # the dropped stream, then the 410: both exported
        assert restarts.labels("error")._value.get() >= 1 and restarts.labels("expired")._value.get() == 1
    finally:
        controller.stop()


def test_malformed_jobs_and_annotations_get_a_status_and_an_event_and_nothing_stops(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        no_ps = tfjob("no-ps")  # PS replicas and nothing to profile (a PS-less job is MWMS: supported)
        del no_ps["spec"]["tfReplicaSpecs"]["Worker"]
        create_tfjob(emu, no_ps)
        create_tfjob(emu, tfjob("bad-note", annotations={PREFIX + "max-workers": "lots"}))
        emu.inject_raw_event("tfjobs", b'{"type":"ADDED","object":{"kind":"TFJob","metadata":7}}', namespace=NS)
        create_tfjob(emu, tfjob("good"))
        wait_for("InvalidSpec", lambda: phase(emu, "no-ps") == "Failed")
        assert annotations(emu, "no-ps")[PREFIX + "reason"].startswith("InvalidSpec: ")
        assert "no Worker (or Chief) replicas" in annotations(emu, "no-ps")[PREFIX + "reason"]
        wait_for("InvalidPolicy", lambda: phase(emu, "bad-note") == "Failed")
        assert "not an integer" in annotations(emu, "bad-note")[PREFIX + "reason"]
        wait_for("a Warning event on each", lambda: ("Warning", "InvalidSpec") in events(emu, "no-ps")
                 and ("Warning", "InvalidPolicy") in events(emu, "bad-note"))  # the event follows the patch
        pj = wait_for("the good job's profiling run", lambda: profiling_jobs(emu))[0]
        assert pj["metadata"]["labels"][PREFIX + "profiling-for"] == "good"
        assert controller.healthy()[0]
    finally:
        controller.stop()


def test_forged_and_oversize_uploads_are_rejected(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, ingest_max_bytes=len(body) + 10))
    try:
        create_tfjob(emu, tfjob("a"))
        create_tfjob(emu, tfjob("b"))
        wait_for("two profiling runs", lambda: len(profiling_jobs(emu)) == 2)
        pa, pb = sorted(profiling_jobs(emu), key=lambda o: o["metadata"]["name"])
        forged = upload_as_profiling_pod(emu, pa, body, token="not-the-token")
        assert forged.status == 403
        other = upload_as_profiling_pod(emu, pa, body, token=pod_token(pb))
        assert other.status == 403  # b's token is not valid for a
        assert upload_as_profiling_pod(emu, pa, body + b"x" * 100).status == 413
        assert upload_as_profiling_pod(emu, pa, b"\x1f\x8b garbage").status == 400
        assert phase(emu, "a") == "Profiling"  # nothing above was accepted
        rejected = controller.metrics.ingest_rejections
        assert rejected.labels("unauthorized")._value.get() == 2
        assert upload_as_profiling_pod(emu, pa, body).status == 202
    finally:
        controller.stop()



def test_a_job_that_did_not_opt_in_is_no_reconcile_error_however_often_it_is_resynced(emu, tmp_path) -> None:
    """A MultiWorkerMirrored job (no PS replicas) that never opted in is not the advisor's to
    judge: no error counted, nothing written on it. One that opted in is reported once, not
    again on every resync (else ``AdvisorReconcileErrors`` would fire for good)."""
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        mirrored = tfjob("mirrored", opted_in=False)
        del mirrored["spec"]["tfReplicaSpecs"]["PS"]
        create_tfjob(emu, mirrored)
        broken = tfjob("broken")
        del broken["spec"]["tfReplicaSpecs"]["Worker"]
        create_tfjob(emu, broken)
        wait_for("InvalidSpec", lambda: phase(emu, "broken") == "Failed")
        for _ in range(3):  # resyncs reconcile every TFJob, opted in or not
            before = reconciles(controller)
            controller.resync()
            wait_for("a resync's reconciles", lambda: reconciles(controller) >= before + 2)
        assert controller.metrics.reconcile_errors.labels("invalid_object")._value.get() == 1  # "broken", once
        assert annotations(emu, "mirrored") == {}
        assert events(emu, "mirrored") == []
        assert events(emu, "broken").count(("Warning", "InvalidSpec")) == 1
    finally:
        controller.stop()


def test_a_jobs_model_annotation_chooses_the_model_end_to_end(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    # The real predictor in its worker process, over real HTTP: the job names lin2018-mva (a closed
    # form) with no parameters, so its curve has no interval and its MODEL annotation says so.
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False), canned=False)
    try:
        create_tfjob(emu, tfjob("lin", workers=2, annotations={PREFIX + "predict-model": "lin2018-mva"}))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Predicted", lambda: phase(emu, "lin") == "Predicted", timeout_s=180)
        notes = annotations(emu, "lin")
        assert notes[PREFIX + "model"] == "lin2018-mva"
        assert all(low == thr == high for _, thr, low, high in json.loads(notes[PREFIX + "curve"]))
        # a model the registry does not know fails the job at once (no profiling run is spent on
        # it), with a reason naming the annotation
        create_tfjob(emu, tfjob("bad", workers=2, annotations={PREFIX + "predict-model": "oracle"}))
        wait_for("Failed", lambda: phase(emu, "bad") == "Failed", timeout_s=60)
        reason = annotations(emu, "bad")[PREFIX + "reason"]
        assert reason.startswith("InvalidPolicy") and "predict-model" in reason and "no such model" in reason
        assert not [p for p in profiling_jobs(emu) if p["metadata"]["name"].startswith("bad-")]
    finally:
        controller.stop()
