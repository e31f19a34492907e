"""The job backend end to end: each prediction is a batch/v1 Job that really runs ``advisor predict-job``.

The controller is the real one against the API emulator; ``JobRunner`` plays the Job controller
and the kubelet, running each Job's container command as a subprocess with its environment
(the token from the Secret), so the pod fetches its input from the controller's HTTP API, runs
the real simulation and sends its answer back over a real socket.
"""

from __future__ import annotations

import base64
import json
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from advisor.controller.app import Controller
from advisor.controller.pipeline.job_client import EXIT_FINAL, run_prediction_job
from advisor.controller.pipeline.predictions import PredictionInputError
from advisor.controller.settings import ControllerSettings
from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    JOB_IMAGE, NS, annotations, create_tfjob, job_settings_for, phase, profiling_jobs, start_controller,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator
from tests.kube_emulator.job_runner import JobRunner

SLOW = 90  # s: a first prediction in a fresh process may compile the simulator (numba caches it after)




def prediction_jobs(emu: KubeEmulator) -> list[dict[str, Any]]:
    return emu.list("jobs.batch", NS, label_selector=f"{PREFIX}role=prediction")


def profile_and_wait_for_the_job(emu: KubeEmulator, body: bytes, name: str) -> dict[str, Any]:
    create_tfjob(emu, tfjob(name, workers=2))
    pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
    assert upload_as_profiling_pod(emu, pj, body).status == 202
    return wait_for("the prediction Job", lambda: prediction_jobs(emu))[0]


@contextmanager
def held_pods(emu: KubeEmulator, settings: ControllerSettings) -> Iterator[tuple[JobRunner, Controller]]:
    """A running controller whose prediction Jobs' pods wait for ``runner.release()`` (or for the
    test to play the pod itself)."""
    with JobRunner(emu, NS) as runner:
        runner.hold()
        controller = start_controller(emu, settings)
        try:
            yield runner, controller
        finally:
            controller.stop()


def token_of(emu: KubeEmulator, job: dict[str, Any]) -> str:
    secret = wait_for("the token Secret", lambda: emu.get("secrets", NS, f"{job['metadata']['name']}-token"))
    return base64.b64decode(secret["data"]["token"]).decode()


def call(url: str, token: str | None, method: str = "GET", doc: Any = None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if doc is not None:
        data, headers["Content-Type"] = json.dumps(doc).encode(), "application/json"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_tfjob_is_predicted_by_a_kubernetes_job(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    with JobRunner(emu, NS) as runner:
        controller = start_controller(emu, job_settings_for(tmp_path))
        try:
            job = profile_and_wait_for_the_job(emu, body, "mlp")
            wait_for("Predicted", lambda: phase(emu, "mlp") == "Predicted", timeout_s=SLOW)
            notes = annotations(emu, "mlp")
            curve = json.loads(notes[PREFIX + "curve"])
            assert [p[0] for p in curve] == [1, 2, 3, 4]  # max_workers 4 (harness settings)
            assert all(low <= thr <= high for _, thr, low, high in curve)
            # The Job as built: same image, the advisor command, no API credentials, hardened.
            name, key = job["metadata"]["name"], job["metadata"]["labels"][PREFIX + "prediction-key"]
            assert name == f"advisor-predict-{key}-1" and job["metadata"]["namespace"] == NS
            pod = job["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            assert container["image"] == JOB_IMAGE
            assert [*container["command"], *container["args"]] == [
                "advisor", "predict-job", "--controller", controller.settings.ingest_url, "--key", key]
            assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert job["spec"]["backoffLimit"] == 1 and job["spec"]["activeDeadlineSeconds"] == 1800
            secret = emu.get("secrets", NS, f"{name}-token")
            assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
            # The pod really ran the command, once, and finished; the Job is Complete.
            (run,) = wait_for("the pod's exit", lambda: runner.runs)
            assert run.argv[:2] == ("advisor", "predict-job") and run.exit_code == 0, run.output
            wait_for("Complete", lambda: "Complete" in [c["type"] for c in (
                emu.get("jobs.batch", NS, name) or {}).get("status", {}).get("conditions", [])])
            # One prediction, counted under the job backend; its token is dead now.
            m = controller.metrics
            assert m.predictions.labels("succeeded")._value.get() == 1
            assert m.prediction_duration.labels("job")._sum.get() > 0
            assert controller.store.verify_prediction_token(key, token_of(emu, job)) is False
            assert len(emu.calls(verb="create", resource="jobs")) == 1
        finally:
            controller.stop()


def test_a_failing_job_marks_the_tfjob_failed_with_the_reason(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    crash = [sys.executable, "-c", "import sys; print('starting'); sys.exit('simulated crash: out of memory')"]
    with JobRunner(emu, NS, command=lambda argv: crash) as runner:
        controller = start_controller(emu, job_settings_for(tmp_path))
        try:
            profile_and_wait_for_the_job(emu, body, "doomed")
            wait_for("Failed", lambda: phase(emu, "doomed") == "Failed", timeout_s=30)
            reason = annotations(emu, "doomed")[PREFIX + "reason"]
            assert reason.startswith("PredictionFailed: prediction Job advisor-predict-"), reason
            assert "BackoffLimitExceeded" in reason and "exited with code 1" in reason, reason
            assert "simulated crash: out of memory" in reason, reason  # the pod's own words (its output's tail)
            assert [r.exit_code for r in runner.runs] == [1, 1]  # backoffLimit 1: one more pod, then Failed
            assert controller.metrics.predictions.labels("failed")._value.get() == 1
            # The controller goes on: healthy, and the next job is profiled.
            assert controller.healthy() == (True, "ok")
            create_tfjob(emu, tfjob("next"))
            wait_for("the next profiling run", lambda: len(profiling_jobs(emu)) == 2)
        finally:
            controller.stop()


def test_a_pod_that_cannot_start_fails_the_prediction_and_its_job_is_deleted(emu, body, tmp_path) -> None:
    settings = job_settings_for(tmp_path, prediction_job_image="registry.invalid/advisor:gone",
                                prediction_job_start_timeout_s=1)
    with JobRunner(emu, NS):
        controller = start_controller(emu, settings)
        try:
            job = profile_and_wait_for_the_job(emu, body, "no-image")
            wait_for("Failed", lambda: phase(emu, "no-image") == "Failed", timeout_s=30)
            reason = annotations(emu, "no-image")[PREFIX + "reason"]
            assert "could not start within 1 s" in reason and "ImagePullBackOff" in reason, reason
            assert 'registry.invalid/advisor:gone' in reason
            wait_for("the Job deleted", lambda: emu.get("jobs.batch", NS, job["metadata"]["name"]) is None)
            assert emu.list("pods", NS) == []  # with its pod (Background propagation)
        finally:
            controller.stop()


def test_a_restart_while_the_job_runs_adopts_it_and_the_result_lands(emu, body, tmp_path) -> None:
    settings = job_settings_for(tmp_path)
    with JobRunner(emu, NS) as runner:
        runner.hold()  # the Job exists but its pod has not started yet
        first = start_controller(emu, settings)
        job = profile_and_wait_for_the_job(emu, body, "r")
        token_of(emu, job)  # the Secret is there too
        first.stop()
        with socket.create_server(("0.0.0.0", settings.http_port)) as down:  # the port of a controller restarting
            runner.release()
            down.settimeout(30)
            conn, _ = down.accept()  # the pod's first request...
            conn.close()  # ...finds no controller: it must retry
        second = start_controller(emu, settings)
        try:
            wait_for("Predicted", lambda: phase(emu, "r") == "Predicted", timeout_s=SLOW)
            assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == [job["metadata"]["name"]]
            creates = [c.code for c in emu.calls(verb="create", resource="jobs")]
            assert creates == [201, 409]  # the second controller adopted the Job instead of starting another
            (run,) = wait_for("the pod's exit", lambda: runner.runs)
            assert run.exit_code == 0 and "retrying" in run.output, run.output
        finally:
            second.stop()
    # Adopting took a get on the Job: granted by the chart for the same settings.
    assert ("get", "jobs") in {(c.verb, c.resource) for c in emu.calls()}
    config = {"namespaces": [NS], "prediction_backend": "job", "leader_election": False}
    assert_rbac_covers([(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls() if c.resource],
                       render_objects({"config": config}, namespace=NS))


def test_a_pod_the_controller_refuses_fails_its_job_at_once(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    with held_pods(emu, job_settings_for(tmp_path)) as (runner, _):
        job = profile_and_wait_for_the_job(emu, body, "refused")
        name = job["metadata"]["name"]
        token_of(emu, job)
        # The pod gets a token that is not its attempt's: every pod of this Job would be refused.
        emu.patch("secrets", NS, f"{name}-token", {"data": {"token": base64.b64encode(b"stale").decode()}})
        runner.release()
        wait_for("Failed", lambda: phase(emu, "refused") == "Failed", timeout_s=30)
        reason = annotations(emu, "refused")[PREFIX + "reason"]
        assert f"prediction Job {name} failed: PodFailurePolicy: Container predict for pod {NS}/" in reason, reason
        assert f"failed with exit code {EXIT_FINAL} matching FailJob rule at index 0" in reason, reason
        assert "the controller answered 403" in reason, reason  # the pod's own words
        assert [r.exit_code for r in runner.runs] == [EXIT_FINAL]  # one pod: backoffLimit's retry not used


def test_evicted_pods_are_replaced_without_using_up_the_retry(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    with held_pods(emu, job_settings_for(tmp_path)) as (runner, _):
        job = profile_and_wait_for_the_job(emu, body, "evicted")
        name = job["metadata"]["name"]
        runner.evict(name, times=2)  # two failed pods would exceed backoffLimit 1 were they counted
        runner.release()
        wait_for("Predicted", lambda: phase(emu, "evicted") == "Predicted", timeout_s=SLOW)
        wait_for("the third pod's exit", lambda: len(runner.runs) == 3)
        assert [r.exit_code for r in runner.runs] == [143, 143, 0]  # SIGTERMed twice, then done
        status = lambda: (emu.get("jobs.batch", NS, name) or {}).get("status", {})  # noqa: E731
        wait_for("Complete", lambda: status().get("succeeded") == 1)
        assert not status().get("failed")  # the evicted pods were not counted
        assert len(emu.calls(verb="create", resource="jobs")) == 1  # the same Job throughout


def test_scheduling_settings_reach_the_prediction_pods(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 60}]
    settings = job_settings_for(tmp_path, prediction_job_node_selector={"pool.example.com/name": "batch"},
                                prediction_job_tolerations=tolerations, prediction_job_priority_class_name="batch-low",
                                prediction_job_run_as_user=1000680000, prediction_job_run_as_group=0)
    with held_pods(emu, settings) as (runner, _):
        job = profile_and_wait_for_the_job(emu, body, "placed")  # as the API server stored it
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool.example.com/name": "batch"}
        assert pod["tolerations"] == tolerations and pod["priorityClassName"] == "batch-low"
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (1000680000, 0)
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert [r["action"] for r in rules] == ["FailJob", "Ignore"]
        assert job["spec"]["podReplacementPolicy"] == "Failed"  # the API server's default with a policy
        assert [c.code for c in emu.calls(verb="create", resource="jobs")] == [201]


def test_forged_and_misdirected_answers_are_refused(emu: KubeEmulator, body: bytes, tmp_path) -> None:
    with held_pods(emu, job_settings_for(tmp_path)) as (runner, controller):
        job = profile_and_wait_for_the_job(emu, body, "f")
        key, token = job["metadata"]["labels"][PREFIX + "prediction-key"], token_of(emu, job)
        base = f"{controller.settings.ingest_url}/v1/predictions"
        assert call(f"{base}/{key}/input", None)[0] == 401
        assert call(f"{base}/{key}/input", "forged")[0] == 403
        assert call(f"{base}/{'0' * 24}/input", token)[0] == 403  # the token is this prediction's only
        status, doc = call(f"{base}/{key}/input", token)
        assert status == 200 and doc["params"]["max_workers"] == 4 and doc["profile"]["steps"]
        fake = {"schema": "advisor-prediction/1", "model": "forged", "job": {"parameter_servers": 1},
                "saturation_workers": 1, "curve": []}
        assert call(f"{base}/{key}/result", "forged", "PUT", fake)[0] == 403
        status, doc = call(f"{base}/{key}/result", token, "PUT", fake)  # right token, unusable answer
        assert status == 400 and "curve must hold one point for each W = 1..4" in doc["message"]
        assert phase(emu, "f") == "Predicting"  # nothing above changed anything
        runner.release()
        wait_for("Predicted", lambda: phase(emu, "f") == "Predicted", timeout_s=SLOW)
        assert annotations(emu, "f")[PREFIX + "model"] != "forged"
        assert call(f"{base}/{key}/input", token)[0] == 403  # the token died with the attempt


def test_a_profile_the_simulator_refuses_is_reported_by_the_pod(emu: KubeEmulator, body: bytes, tmp_path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(profile: Any, params: Any) -> str:
        raise PredictionInputError("the profile holds no transfer to a parameter server")

    # the pod is held: this test plays it itself, in-process, with the real client
    with held_pods(emu, job_settings_for(tmp_path)) as (runner, controller):
        job = profile_and_wait_for_the_job(emu, body, "odd")
        key, token = job["metadata"]["labels"][PREFIX + "prediction-key"], token_of(emu, job)
        url = controller.settings.ingest_url
        assert run_prediction_job(url, key, token, runner=refuse) == 0  # an answer: the pod succeeds
        wait_for("Failed", lambda: phase(emu, "odd") == "Failed", timeout_s=30)
        reason = annotations(emu, "odd")[PREFIX + "reason"]
        assert reason.endswith("the profile holds no transfer to a parameter server"), reason
        # The attempt is over: refused for good, at once (not retried for a minute), with the final status.
        assert run_prediction_job(url, key, token, runner=refuse, retry_for_s=60) == EXIT_FINAL
        assert "answered 403" in capsys.readouterr().err


def test_garbage_collection_deletes_prediction_jobs_no_prediction_needs(emu: KubeEmulator, tmp_path) -> None:
    def job(name: str, created: str) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": NS, "creationTimestamp": created,
                             "labels": {PREFIX + "role": "prediction"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}}}}

    emu.seed(job("advisor-predict-orphan-1", "2020-01-01T00:00:00Z"))  # a lost store's Job, long ago
    emu.seed(job("advisor-predict-young-1", "2999-01-01T00:00:00Z"))  # too young to judge
    controller = start_controller(emu, job_settings_for(tmp_path, gc_period_s=60))
    try:
        wait_for("synced", controller.jobs.has_synced)  # no sweep before the cache has synced
        controller.collect_garbage()
        assert [j["metadata"]["name"] for j in prediction_jobs(emu)] == ["advisor-predict-young-1"]
    finally:
        controller.stop()
