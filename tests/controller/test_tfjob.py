"""TFJob reading and the objects the controller writes, on literal objects."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

from advisor.controller.jobs.tfjob import (
    PROFILING_FOR_LABEL, ROLE_LABEL, ProfilingSpec, build_profiling_tfjob, parse_tfjob, profiling_job_name,
    profiling_run_owner, resize_patch, suspend_patch,
)
from advisor.controller.state.tokens import run_token, token_matches
from advisor.errors import TFJobError
from tests.controller.tfjobs import tfjob, with_uid

SPEC = ProfilingSpec("http://advisor.advisor-system.svc:8080/", steps=100, warmup_steps=5, timeout_s=900,
                     token="tok-1")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_view_counts_chief_as_a_worker() -> None:
    # TF's chief computes gradients like any worker, so 3 Worker + 1 Chief = 4 workers.
    view = parse_tfjob(with_uid(tfjob(workers=3, chief=1)))
    assert view.workers == 4 and view.parameter_servers == 1
    assert view.opted_in() and not view.suspended and not view.is_profiling_run


def test_template_hash_ignores_replica_counts_but_not_the_image() -> None:
    base = with_uid(tfjob(workers=4))
    resized = with_uid(tfjob(workers=9))
    other_image = copy.deepcopy(base)
    other_image["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "x:2"
    assert parse_tfjob(base).template_hash == parse_tfjob(resized).template_hash
    assert parse_tfjob(base).template_hash != parse_tfjob(other_image).template_hash


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda o: o["spec"].pop("tfReplicaSpecs"), "spec.tfReplicaSpecs"),
        (lambda o: o["spec"]["tfReplicaSpecs"].pop("PS"), "no PS replicas"),
        (lambda o: o["spec"]["tfReplicaSpecs"].pop("Worker"), "no Worker"),
        (lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="4"), "Worker.replicas"),
        (lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=-1), "Worker.replicas"),
        (lambda o: o["spec"]["tfReplicaSpecs"].update(Gpu={"template": {}}), "unknown replica type 'Gpu'"),
        (lambda o: o["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"].update(containers=[]), "containers"),
        (lambda o: o["spec"].update(runPolicy={"suspend": "yes"}), "runPolicy.suspend"),
        (lambda o: o["metadata"].update(annotations={"a": 1}), "metadata.annotations"),
    ],
)
def test_malformed_jobs_name_the_field(mutate, named: str) -> None:
    obj = with_uid(tfjob())
    mutate(obj)
    with pytest.raises(TFJobError, match=named.replace(".", r"\.").replace("(", r"\(")):
        parse_tfjob(obj)


def test_replica_types_match_case_insensitively_and_patches_use_the_users_key() -> None:
    obj = with_uid(tfjob(workers=2))
    specs = obj["spec"]["tfReplicaSpecs"]
    specs["ps"], specs["worker"] = specs.pop("PS"), specs.pop("Worker")
    view = parse_tfjob(obj)
    assert view.workers == 2
    # A merge patch on "Worker" would add a second spec next to "worker": the patch must reuse "worker".
    assert resize_patch(view, 5) == {"spec": {"tfReplicaSpecs": {"worker": {"replicas": 5}}}}


def test_resize_counts_the_chief() -> None:
    view = parse_tfjob(with_uid(tfjob(workers=3, chief=1)))
    patch = resize_patch(view, 8, resume=True)
    assert patch["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 7  # 7 workers + 1 chief = 8
    assert patch["spec"]["runPolicy"] == {"suspend": False}


def test_profiling_job_is_one_ps_one_worker_owned_labelled_bounded_and_traced() -> None:
    obj = with_uid(tfjob(workers=6, ps=2, chief=1), uid="u-42", generation=3)
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "ADVISOR_PROFILE", "value": "0"}, {"name": "KEEP", "value": "me"},
        {"name": "ADVISOR_METRICS_PORT", "value": "9464"}]
    view = parse_tfjob(obj)
    job = build_profiling_tfjob(obj, view, SPEC)
    meta, spec = job["metadata"], job["spec"]
    assert meta["name"] == "mnist-prof-g3" and meta["namespace"] == "ml"
    assert meta["labels"][ROLE_LABEL] == "profiling" and meta["labels"][PROFILING_FOR_LABEL] == "mnist"
    assert meta["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist",
                                        "uid": "u-42", "controller": False}]
    assert set(spec["tfReplicaSpecs"]) == {"PS", "Worker"}  # the chief is not profiled: 1 PS + 1 worker
    assert all(r["replicas"] == 1 and r["restartPolicy"] == "Never" for r in spec["tfReplicaSpecs"].values())
    assert spec["runPolicy"]["activeDeadlineSeconds"] == 900
    env = {e["name"]: e["value"] for e in spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ADVISOR_PROFILE"] == "1" and env["KEEP"] == "me"  # ours replace the user's, the rest stay
    assert env["ADVISOR_METRICS_PORT"] == ""  # the profiling run's steps are not the job's observed throughput
    assert env["ADVISOR_INGEST_URL"] == "http://advisor.advisor-system.svc:8080/v1/traces/ml/mnist/3"
    assert env["ADVISOR_TOKEN_FILE"] == "/var/run/secrets/advisor/token"
    template = spec["tfReplicaSpecs"]["PS"]["template"]
    # No Secret: the token is an annotation of the pod template, projected as a file by the downward API.
    assert template["metadata"]["annotations"]["training-advisor.io/ingest-token"] == "tok-1"
    assert template["spec"]["volumes"] == [{"name": "advisor-token", "downwardAPI": {"defaultMode": 0o440, "items": [
        {"path": "token", "fieldRef": {"fieldPath": "metadata.annotations['training-advisor.io/ingest-token']"}}]}}]
    # The user's job object is not modified by building its clone.
    assert obj["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 6
    # The clone is not itself opted in (it must not be profiled in turn).
    assert not parse_tfjob(with_uid(job)).opted_in()


def test_profiling_job_names_stay_within_63_characters_and_distinct() -> None:
    a, b = profiling_job_name("a" * 60 + "x", 1), profiling_job_name("a" * 60 + "y", 1)
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert profiling_job_name("short", 12) == "short-prof-g12"
    assert profiling_job_name("short", 12, attempt=2) == "short-prof-g12-r2"


@pytest.mark.parametrize("generation", [1, 12, 10**9])
@pytest.mark.parametrize("attempt", [1, 3])
def test_names_the_training_operator_derives_are_valid_for_the_longest_names(generation: int, attempt: int) -> None:
    """A TFJob name is a DNS-1035 label of at most 63 characters (the training operator validates
    it), a namespace a DNS-1123 label of 63. The operator names each replica's Service and pod
    ``<job>-<replica type>-<index>`` and labels them with the job name: for the profiling run
    (PS and Worker, index 0) ``<run>-worker-0`` and ``<run>-ps-0`` must be DNS-1035 labels (<= 63)."""
    namespace = "n" * 63
    for name in ("j" * 63, "a" + "-b" * 31, "x"):
        obj = with_uid(tfjob(name=name, namespace=namespace), generation=generation)
        run = build_profiling_tfjob(obj, parse_tfjob(obj), dataclasses.replace(SPEC, attempt=attempt))
        run_name = run["metadata"]["name"]
        assert DNS1035.match(run_name) and len(run_name) <= 63, run_name
        for derived in (f"{run_name}-worker-0", f"{run_name}-ps-0"):
            assert DNS1035.match(derived) and len(derived) <= 63, derived
        assert all(len(v) <= 63 for v in run["metadata"]["labels"].values())
    # distinct per job, generation and try
    names = {profiling_job_name("j" * 62 + c, generation, t) for c in "ab" for t in (1, 2)}
    assert len(names) == 4


def test_profiling_run_keeps_what_queueing_systems_read() -> None:
    obj = with_uid(tfjob(workers=8))
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "low",
                                 "team": "vision", "app": "x"}
    obj["metadata"]["annotations"].update({"kueue.x-k8s.io/queue-name": "team-a", "cost-center": "42",
                                           "unrelated": "no"})
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "q", "priorityClass": "high", "minAvailable": 9,
                                                     "minResources": {"cpu": "90"}, "scheduleTimeoutSeconds": 60}}
    spec = dataclasses.replace(SPEC, labels=("team",), annotations=("cost-center",))
    run = build_profiling_tfjob(obj, parse_tfjob(obj), spec)
    labels, notes = run["metadata"]["labels"], run["metadata"]["annotations"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a" and labels["kueue.x-k8s.io/priority-class"] == "low"
    assert labels["team"] == "vision" and "app" not in labels  # the setting extends the list; nothing else
    assert notes["kueue.x-k8s.io/queue-name"] == "team-a" and notes["cost-center"] == "42"
    assert "unrelated" not in notes and "training-advisor.io/enabled" not in notes  # the run does not opt in
    # the job's queue and priority, for a gang of the run's own 2 pods (1 PS + 1 worker), not the job's 9
    assert run["spec"]["runPolicy"]["schedulingPolicy"] == {"queue": "q", "priorityClass": "high",
                                                            "minAvailable": 2, "scheduleTimeoutSeconds": 60}
    plain = build_profiling_tfjob(with_uid(tfjob()), parse_tfjob(with_uid(tfjob())), SPEC)
    assert "schedulingPolicy" not in plain["spec"]["runPolicy"]


def test_run_tokens_are_scoped_to_one_job_and_generation_and_need_the_key() -> None:
    key = b"k" * 32
    token = run_token(key, "uid-1", 3)
    assert token == run_token(key, "uid-1", 3)  # every replica with the key derives the same token
    assert token_matches(key, "uid-1", 3, token)
    assert not token_matches(key, "uid-1", 4, token)  # another generation
    assert not token_matches(key, "uid-2", 3, token)  # another job (or one recreated under the same name)
    assert not token_matches(b"x" * 32, "uid-1", 3, token)  # another key
    # HMAC-SHA256 gives 32 bytes: 43 characters of unpadded base64url
    assert len(token) == 43 and re.fullmatch(r"[A-Za-z0-9_-]+", token)


def test_suspend_patch_marks_who_suspended() -> None:
    assert suspend_patch()["spec"] == {"runPolicy": {"suspend": True}}


def test_profiling_run_owner_is_the_uid_it_was_built_for() -> None:
    view = parse_tfjob(with_uid(tfjob(), uid="uid-7"))
    assert profiling_run_owner(build_profiling_tfjob(with_uid(tfjob(), uid="uid-7"), view, SPEC)) == "uid-7"
    assert profiling_run_owner(with_uid(tfjob())) is None
