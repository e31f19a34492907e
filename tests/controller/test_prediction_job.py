"""The prediction Job as built and as read back (advisor/controller/pipeline/prediction_job.py), on literal objects."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from advisor.controller.pipeline.job_client import EXIT_FINAL
from advisor.controller.pipeline.prediction_job import (
    Found, PredictionJobSpec, adoptable, assess, attempt_of, build_prediction_job, build_token_secret, parse_time,
    prediction_job_name,
)
from tests.kube_emulator.batch import job_causes
from tests.kube_emulator.job_runner import EndedPod, policy_action

KEY = "0123456789abcdef01234567"
SPEC = PredictionJobSpec(namespace="advisor-system", image="registry.example/advisor:0.1.0",
                         controller_url="http://advisor.advisor-system.svc:8080", timeout_s=900,
                         requests={"cpu": "1"}, limits={"memory": "2Gi"}, image_pull_secrets=("regcred",))
TOLERATIONS = ({"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
               {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 60})
SCHEDULED = replace(SPEC, node_selector={"pool.example.com/name": "batch"}, tolerations=TOLERATIONS,
                    priority_class_name="batch-low", run_as_user=1000680000, run_as_group=0)
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


@pytest.mark.parametrize("spec", [SPEC, SCHEDULED], ids=["defaults", "scheduling-settings"])
def test_the_job_is_valid_for_current_kubernetes(spec: PredictionJobSpec) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    job = build_prediction_job(KEY, 1, spec)
    try:
        kv.validate(job, kv.latest_version(), strict=True)  # strict: a misspelt field is an error too
    except kv.ValidationError as exc:
        pytest.fail(f"invalid for Kubernetes {kv.latest_version()}: {exc.message} at {'/'.join(map(str, exc.path))}")
    # The schema checks shapes only; the apiserver's own rules (batch validation.go) as the emulator has them:
    assert job_causes(job, None) == []
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"  # what podFailurePolicy forbids
    assert [path for path, _ in job_causes(job, None)] == ["spec.template.spec.restartPolicy"]


def test_scheduling_and_identity_settings_reach_the_pod_and_nothing_when_unset() -> None:
    pod = build_prediction_job(KEY, 1, SCHEDULED)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool.example.com/name": "batch"}
    assert pod["tolerations"] == [dict(t) for t in TOLERATIONS]
    assert pod["priorityClassName"] == "batch-low"
    assert pod["securityContext"]["runAsUser"] == 1000680000 and pod["securityContext"]["runAsGroup"] == 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    plain = build_prediction_job(KEY, 1, SPEC)["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "priorityClassName", "serviceAccountName"} & set(plain)
    assert (plain["securityContext"]["runAsUser"], plain["securityContext"]["runAsGroup"]) == (65532, 65532)
    # Any UID can start it: the working directory is the pod's own emptyDir, not the image's WORKDIR.
    (container,) = plain["containers"]
    (mount,) = container["volumeMounts"]
    assert container["workingDir"] == mount["mountPath"] == "/tmp"
    assert {"name": mount["name"], "emptyDir": {}} in plain["volumes"]


@pytest.mark.parametrize(("exit_code", "conditions", "container", "action"), [
    (EXIT_FINAL, (), "predict", "FailJob"),  # the controller refused the pod: a new one would be refused too
    (1, (), "predict", "Count"),  # a crash: one more pod (backoffLimit)
    (2, (), "predict", "Count"),  # the controller stayed unreachable: may pass
    (137, (), "predict", "Count"),  # OOM-killed
    (143, ("DisruptionTarget",), "predict", "Ignore"),  # evicted, preempted, node drained
    (EXIT_FINAL, (), "sidecar", "Count"),  # only the prediction container's code counts
])
def test_the_pod_failure_policy_fails_at_once_only_on_a_refusal(exit_code: int, conditions: tuple[str, ...],
                                                                 container: str, action: str) -> None:
    policy = build_prediction_job(KEY, 1, SPEC)["spec"]["podFailurePolicy"]
    pod = EndedPod("advisor-system", "p", container, exit_code, conditions)
    assert policy_action(policy, pod)[0] == action  # the first matching rule, as the Job controller applies them
    assert (build_prediction_job(KEY, 1, SPEC)["spec"]["template"]["spec"]["containers"][0]["name"]) == "predict"


def test_the_job_names_the_store_record_it_was_made_for() -> None:
    job = build_prediction_job(KEY, 1, SPEC, attempt_id="1735689600.250000")
    assert job["metadata"]["annotations"] == {"training-advisor.io/prediction-attempt": "1735689600.250000"}
    assert "annotations" not in build_prediction_job(KEY, 1, SPEC)["metadata"]
    assert "annotations" not in job["spec"]["template"]["metadata"]  # the Job's, not its pods'


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


# --- what a new leader adopts ------------------------------------------------------------------

OWNER = "advisor-system/advisor-leader"


def made(attempt: int, *, owner: str = OWNER, started: str = "2025-01-01T00:05:00Z",
         condition: str | None = None) -> dict[str, Any]:
    """A prediction Job as the cluster shows it: made by this code, started at ``started``."""
    job = build_prediction_job(KEY, attempt, replace(SPEC, owner=owner), attempt_id=f"{1735689900 + attempt}.000000")
    job["metadata"]["creationTimestamp"] = started
    job["status"] = {"startTime": started}
    if condition:
        job["status"]["conditions"] = [{"type": condition, "status": "True"}]
    return job


def test_a_running_job_of_this_controller_is_adopted_the_latest_first() -> None:
    found = adoptable([made(1, condition="Failed"), made(3), made(2)], KEY, owner=OWNER, now=NOW)
    assert found.job is not None and found.job["metadata"]["name"] == prediction_job_name(KEY, 3)
    assert found.highest_attempt == 3


@pytest.mark.parametrize(("job", "why"), [
    (made(1, condition="Complete"), "its answer went to a replica that is gone"),
    (made(1, condition="Failed"), "failed"),
    (made(1, started="2025-01-01T00:10:00Z", condition="FailureTarget"), "failing"),
    (made(1, started="2024-12-31T23:54:59Z"), "past activeDeadlineSeconds (900 s) at NOW"),
    (made(1, owner="other-ns/advisor-leader"), "another controller's"),
    (made(1, owner=""), "no owner: made before tokens were derived"),
])
def test_a_job_that_cannot_be_adopted_is_replaced_under_a_free_name(job: dict[str, Any], why: str) -> None:
    found = adoptable([job], KEY, owner=OWNER, now=NOW)
    assert found.job is None, why
    assert found.highest_attempt == 1  # the next attempt is 2: its name is free


def test_a_job_within_its_deadline_is_adopted() -> None:
    # NOW is 00:10:00; started at 23:55:00 the day before, the Job is 900 s old: at its
    # activeDeadlineSeconds (900), not past it; a second earlier it is past it
    assert adoptable([made(1, started="2024-12-31T23:55:00Z")], KEY, owner=OWNER, now=NOW).job is not None
    assert adoptable([made(1, started="2024-12-31T23:54:59Z")], KEY, owner=OWNER, now=NOW).job is None


def test_jobs_of_other_keys_and_names_count_for_nothing() -> None:
    other = build_prediction_job("f" * 24, 7, replace(SPEC, owner=OWNER), attempt_id="1.000000")
    assert adoptable([other], KEY, owner=OWNER, now=NOW) == Found(None, 0)
    assert attempt_of(prediction_job_name(KEY, 12), KEY) == 12 and attempt_of("advisor-predict-x-1", KEY) is None
