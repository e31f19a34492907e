"""The prediction Job as built and as read back (advisor/controller/prediction_job.py), on literal objects."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.controller.prediction_job import (
    PredictionJobSpec, assess, build_prediction_job, build_token_secret, parse_time, prediction_job_name,
)

KEY = "0123456789abcdef01234567"
SPEC = PredictionJobSpec(namespace="advisor-system", image="registry.example/advisor:0.1.0",
                         controller_url="http://advisor.advisor-system.svc:8080", timeout_s=900,
                         requests={"cpu": "1"}, limits={"memory": "2Gi"}, image_pull_secrets=("regcred",))
NOW = parse_time("2025-01-01T00:10:00Z") or 0.0


def test_the_job_runs_advisor_predict_job_without_api_credentials() -> None:
    job = build_prediction_job(KEY, 2, SPEC)
    assert job["metadata"]["name"] == prediction_job_name(KEY, 2) == f"advisor-predict-{KEY}-2"
    assert len(job["metadata"]["name"]) <= 63  # a Job name becomes a label value on its pods
    assert job["metadata"]["namespace"] == "advisor-system"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert [*container["command"], *container["args"]] == [
        "advisor", "predict-job", "--controller", "http://advisor.advisor-system.svc:8080", "--key", KEY]
    assert container["env"] == [{"name": "ADVISOR_PREDICTION_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": f"advisor-predict-{KEY}-2-token", "key": "token"}}}]
    assert container["resources"] == {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["ttlSecondsAfterFinished"] > 0
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["training-advisor.io/prediction-job"] == job["metadata"]["name"]


def test_the_token_secret_is_owned_by_the_job() -> None:
    job = build_prediction_job(KEY, 1, SPEC)
    job["metadata"]["uid"] = "job-uid"
    secret = build_token_secret(job)
    assert secret["metadata"]["name"] == f"{job['metadata']['name']}-token"
    assert secret["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "job-uid"}]


def job(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "status": {"conditions": [
        {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions]}}


def pod(name: str, created: str, *, phase: str = "Pending", state: dict[str, Any] | None = None,
        conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if state is not None:
        status["containerStatuses"] = [{"name": "predict", "state": state}]
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_a_running_job_is_left_alone() -> None:
    running = pod("j-a", "2025-01-01T00:09:00Z", phase="Running", state={"running": {}})
    assert assess(job(), [running], name="j", now=NOW, known_since=NOW - 60, start_timeout_s=30).failure is None


def test_a_failed_job_names_its_reason_and_the_pods_last_words() -> None:
    crashed = pod("j-b", "2025-01-01T00:09:00Z", phase="Failed", state={"terminated": {
        "exitCode": 1, "reason": "Error", "message": "Traceback ...\nMemoryError: " + "x" * 2000}})
    verdict = assess(job(("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                         ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")),
                     [crashed], name="j", now=NOW, known_since=NOW - 60, start_timeout_s=30)
    assert verdict.failure is not None and not verdict.delete
    assert verdict.failure.startswith("prediction Job j failed: BackoffLimitExceeded: Job has reached the specified")
    assert "pod j-b exited with code 1: ..." in verdict.failure  # the tail of a long message, marked as cut
    assert verdict.failure.endswith("x" * 100) and len(verdict.failure) < 800


def test_complete_without_an_answer_is_a_failure() -> None:
    verdict = assess(job(("Complete", "CompletionsReached", "")), [], name="j", now=NOW, known_since=NOW - 1,
                     start_timeout_s=30)
    assert verdict.failure == "prediction Job j completed without sending a result"


def test_a_vanished_job_fails_only_when_the_list_is_newer_than_its_creation() -> None:
    assert assess(None, [], name="j", now=NOW, known_since=NOW - 1, start_timeout_s=30).failure == (
        "prediction Job j was deleted before it sent a result")
    assert assess(None, [], name="j", now=NOW, known_since=NOW + 1, start_timeout_s=30).failure is None


@pytest.mark.parametrize(("age_s", "failed"), [(29, False), (31, True)])
def test_a_pod_stuck_pulling_its_image_fails_after_the_start_timeout(age_s: int, failed: bool) -> None:
    created = "2025-01-01T00:%02d:%02dZ" % divmod(600 - age_s, 60)
    stuck = pod("j-c", created, state={"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "x"'}})
    verdict = assess(job(), [stuck], name="j", now=NOW, known_since=NOW - 60, start_timeout_s=30)
    assert verdict.note == 'pod j-c is waiting: ImagePullBackOff: Back-off pulling "x"'
    assert (verdict.failure is not None, verdict.delete) == (failed, failed)


def test_an_unschedulable_pod_is_noted_but_left_to_the_jobs_deadline() -> None:
    # A cluster autoscaler may still add a node: only activeDeadlineSeconds ends this wait.
    waiting = pod("j-d", "2020-01-01T00:00:00Z", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}])
    verdict = assess(job(), [waiting], name="j", now=NOW, known_since=NOW - 60, start_timeout_s=30)
    assert verdict.failure is None
    assert verdict.note == "pod j-d is not scheduled: Unschedulable: 0/3 nodes are available"
    late = assess(job(("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")), [],
                  name="j", now=NOW, known_since=NOW - 60, start_timeout_s=30)
    assert late.failure == "prediction Job j failed: DeadlineExceeded: Job was active longer than specified deadline"


def test_parse_time() -> None:
    assert parse_time("1970-01-01T00:01:00Z") == 60.0
    assert parse_time(None) is None and parse_time("yesterday") is None
