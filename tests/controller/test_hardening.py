"""Issue 15's controller items, each against the API emulator: optimistic concurrency on every
write to a user's job, profiling retries with backoff and why each try ended, timeouts told by
the condition's reason, failed predictions retried with backoff, the informer's trimmed cache
and settings reloads that are applied or said to need a restart."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from advisor.controller.pipeline import annotations as ann
from advisor.controller.app import Controller
from advisor.controller.kube.informer import slim
from advisor.controller.kube.client import Kube
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.reconcile import Reconciler
from advisor.controller.settings import load_settings
from advisor.controller.state.store import Store
from tests.controller.harness import (
    FAST_LEASE, NS, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator


@pytest.fixture
def quiet_emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=[NS]) as e:
        yield e


class RecordingKube:
    """The real adapter; remembers the keyword arguments of each TFJob patch."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)

    def patch_tfjob(self, namespace: str, name: str, patch: Mapping[str, Any], **kwargs: Any) -> Any:
        self.patches.append((name, kwargs))
        return self._kube.patch_tfjob(namespace, name, patch, **kwargs)


class NoPredictions:
    backend = "none"

    def submit(self, *args: Any) -> bool:
        raise AssertionError("nothing to predict here")

    def running(self, key: str) -> bool:
        return False


def test_the_initial_mode_suspend_does_not_overwrite_a_concurrent_change(quiet_emu: KubeEmulator,
                                                                          tmp_path: Path) -> None:
    """The cache shows the job before the user's edit: the hold (a write to the user's object)
    carries that resourceVersion, so it fails with 409 instead of landing on the edited job; the
    reconcile counts the conflict and retries with backoff, and the retry on the re-read job holds it."""
    quiet_emu.seed(tfjob("edited", workers=2))
    stale = copy.deepcopy(quiet_emu.get("tfjobs", NS, "edited"))
    quiet_emu.patch("tfjobs", NS, "edited", {"metadata": {"labels": {"team": "b"}}})  # the user, meanwhile
    kube = RecordingKube(Kube(kubernetes.client.ApiClient(quiet_emu.configuration())))
    retried: list[Any] = []
    view = {"edited": stale}
    reconciler = Reconciler(settings=settings_for(tmp_path, mode="initial"), kube=kube,
                            cache=lambda ns, name: view.get(name) or quiet_emu.get("tfjobs", ns, name),
                            store=Store(tmp_path / "advisor.db"), predictor=NoPredictions(), metrics=Metrics(),
                            enqueue_after=lambda key, delay: None, requeue=retried.append, forget=lambda key: None)
    reconciler.reconcile((NS, "edited"))
    assert reconciler.metrics.reconcile_errors.labels("conflict")._value.get() == 1
    assert retried == [(NS, "edited")]  # rate-limited requeue
    assert quiet_emu.get("tfjobs", NS, "edited")["spec"].get("runPolicy", {}).get("suspend") is not True
    del view["edited"]  # the watch caught up: the re-read object
    reconciler.reconcile((NS, "edited"))
    job = quiet_emu.get("tfjobs", NS, "edited")
    assert job["spec"]["runPolicy"]["suspend"] is True and job["metadata"]["labels"] == {"team": "b"}
    # every write to the user's job had a precondition
    assert kube.patches and all(kw.get("resource_version") for name, kw in kube.patches if name == "edited")


def fail_run(emu: KubeEmulator, name: str, reason: str, message: str) -> None:
    failed = {"type": "Failed", "status": "True", "reason": reason, "message": message}
    emu.patch("tfjobs", NS, name, {"status": {"conditions": [failed]}}, subresource="status")


def test_a_failed_profiling_run_is_retried_with_backoff_and_each_try_says_why_it_ended(emu, body, tmp_path) -> None:
    settings = settings_for(tmp_path, leader_election=False, profiling_max_attempts=3, profiling_retry_backoff_s=1)
    controller = start_controller(emu, settings)
    try:
        create_tfjob(emu, tfjob("bumpy"))
        first = wait_for("try 1", lambda: emu.get("tfjobs", NS, "bumpy-prof-g1"))
        fail_run(emu, "bumpy-prof-g1", "TFJobFailed", "pod evicted: node drained")
        # The job says it waits for try 2 during the 1 s backoff; under load the poll may only see
        # try 2 already started, so either is accepted here (the attempts record below says why try 1 ended).
        waiting = "ProfilingRetryWaiting: try 2 of 3 starts in"
        wait_for("waiting for try 2", lambda: emu.get("tfjobs", NS, "bumpy-prof-g1-r2") is not None or emu.get(
            "tfjobs", NS, "bumpy")["metadata"].get("annotations", {}).get(ann.REASON, "").startswith(waiting))
        second = wait_for("try 2 after its backoff (1 s)", lambda: emu.get("tfjobs", NS, "bumpy-prof-g1-r2"))
        assert first["metadata"]["name"] != second["metadata"]["name"]
        fail_run(emu, "bumpy-prof-g1-r2", "DeadlineExceeded", "the run was active longer than its deadline")
        third = wait_for("try 3 after 2 s", lambda: emu.get("tfjobs", NS, "bumpy-prof-g1-r3"), timeout_s=30)
        notes = emu.get("tfjobs", NS, "bumpy")["metadata"]["annotations"]
        tries = yaml.safe_load(notes[ann.PROFILING_ATTEMPTS])
        assert [(t["attempt"], t["run"], t["reason"]) for t in tries] == [
            (1, "bumpy-prof-g1", "ProfilingFailed: pod evicted: node drained"),
            # a timeout, told by the condition's reason (the next test: a message saying "deadline" is not)
            (2, "bumpy-prof-g1-r2", "ProfilingTimedOut: the run was active longer than its deadline")]
        assert notes[ann.PROFILING_RUN] == "bumpy-prof-g1-r3"
        # the third try uploads: the job is predicted from it
        result = upload_as_profiling_pod(emu, third, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "bumpy") == "Predicted")
    finally:
        controller.stop()


def _two_failed_tries(emu, name: str, first: str, second: str,  # type: ignore[no-untyped-def]
                      before_second: Callable[[], None] = lambda: None) -> dict[str, str]:
    """Opt ``name`` in, fail its first profiling try with ``first`` and, once the job names the
    second, run ``before_second`` and fail that one with ``second`` (TFJobFailed messages); the
    job's annotations once it is Failed."""
    create_tfjob(emu, tfjob(name))
    wait_for("try 1", lambda: emu.get("tfjobs", NS, f"{name}-prof-g1"))
    fail_run(emu, f"{name}-prof-g1", "TFJobFailed", first)
    wait_for("try 2", lambda: emu.get("tfjobs", NS, f"{name}-prof-g1-r2"), timeout_s=30)
    wait_for("try 2 noted", lambda: emu.get("tfjobs", NS, name)["metadata"]["annotations"].get(
        ann.PROFILING_RUN) == f"{name}-prof-g1-r2")
    before_second()
    fail_run(emu, f"{name}-prof-g1-r2", "TFJobFailed", second)
    wait_for("Failed", lambda: phase(emu, name) == "Failed", timeout_s=30)
    return emu.get("tfjobs", NS, name)["metadata"]["annotations"]


def test_the_last_try_failing_fails_the_job_and_a_deadline_word_is_no_timeout(emu, tmp_path) -> None:
    settings = settings_for(tmp_path, leader_election=False, profiling_max_attempts=2, profiling_retry_backoff_s=1)
    controller = start_controller(emu, settings)
    try:
        # a message that mentions a deadline is not a timeout: the reason says what happened
        notes = _two_failed_tries(emu, "doomed", "OOMKilled before the deadline", "OOMKilled again")
        assert notes[ann.REASON] == "ProfilingFailed: OOMKilled again (try 2 of 2)"
        tries = yaml.safe_load(notes[ann.PROFILING_ATTEMPTS])
        assert [t["reason"] for t in tries] == ["ProfilingFailed: OOMKilled before the deadline",
                                                "ProfilingFailed: OOMKilled again"]
        assert controller.metrics.profiling_runs.labels("timed_out")._value.get() == 0
        assert len(profiling_jobs(emu)) == 2  # no third try
    finally:
        controller.stop()


def test_the_tries_survive_a_conflict_on_the_write_that_fails_the_job(emu, tmp_path) -> None:
    # The write that marks the job Failed meets a 409 (someone else changed the job meanwhile):
    # the reconcile that retries it reports the run from the store, which must still know both
    # tries, so the annotation is not left with the first alone beside a reason naming the second.
    settings = settings_for(tmp_path, leader_election=False, profiling_max_attempts=2, profiling_retry_backoff_s=1)
    controller = start_controller(emu, settings)
    try:
        notes = _two_failed_tries(emu, "clash", "image pull backoff", "OOMKilled", before_second=lambda: emu.fail_next(
            method="PATCH", resource="tfjobs", path_contains="/tfjobs/clash", status=409, times=1))
        assert notes[ann.REASON] == "ProfilingFailed: OOMKilled (try 2 of 2)"
        tries = yaml.safe_load(notes[ann.PROFILING_ATTEMPTS])
        assert [(t["attempt"], t["reason"]) for t in tries] == [(1, "ProfilingFailed: image pull backoff"),
                                                               (2, "ProfilingFailed: OOMKilled")]
    finally:
        controller.stop()


class FlakyPredictor:
    """Fails the first prediction, then answers with the canned curve."""

    backend = "process"

    def __init__(self, controller: list[Controller]) -> None:
        self.controller, self.calls = controller, 0

    def submit(self, key: str, profile_doc: Mapping[str, Any], params: Any) -> bool:
        from tests.controller.harness import canned_prediction

        self.calls += 1
        done = self.controller[0].reconciler.prediction_done
        if self.calls == 1:
            done(key, None, "the prediction worker process died (killed by SIGKILL)")
        else:
            done(key, canned_prediction(profile_doc, {}), None)
        return True

    def running(self, key: str) -> bool:
        return False


def test_a_failed_prediction_is_retried_with_backoff_without_a_restart(emu, body, tmp_path) -> None:
    holder: list[Controller] = []
    controller = Controller(settings_for(tmp_path, leader_election=False),
                            Kube(kubernetes.client.ApiClient(emu.configuration())),
                            predictor=FlakyPredictor(holder), lease_timing=FAST_LEASE)
    holder.append(controller)
    controller.reconciler.prediction_retry_s = (0.5, 1000.0)
    controller.start()
    try:
        create_tfjob(emu, tfjob("second-chance"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Failed", lambda: phase(emu, "second-chance") == "Failed")
        wait_for("Predicted after the backoff", lambda: phase(emu, "second-chance") == "Predicted")
        assert controller.predictor.calls == 2
    finally:
        controller.stop()


def test_the_informer_caches_only_what_the_controller_reads() -> None:
    obj = tfjob("big", uid="u-1")
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{" + "x" * 10_000 + "}"
    obj["status"] = {"conditions": [{"type": "Running", "status": "True"}], "startTime": "2024-01-01T00:00:00Z",
                     "replicaStatuses": {"Worker": {"active": 4}}, "lastReconcileTime": "2024-01-01T00:00:00Z"}
    trimmed = slim(obj)
    assert "managedFields" not in trimmed["metadata"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in trimmed["metadata"]["annotations"]
    assert trimmed["status"] == {"conditions": [{"type": "Running", "status": "True"}],
                                 "startTime": "2024-01-01T00:00:00Z"}
    assert trimmed["spec"] == obj["spec"] and trimmed["metadata"]["uid"] == "u-1"  # what a profiling run clones
    assert "managedFields" in obj["metadata"]  # the event's object itself is left alone


def _controller_from_file(emu, tmp_path):  # type: ignore[no-untyped-def]
    """A controller whose settings come from a file the test rewrites: (file, its settings, controller)."""
    config = tmp_path / "advisor.yaml"
    base = settings_for(tmp_path, leader_election=False).model_dump(mode="json")
    base["ingest_key"] = "test-ingest-key-shared-by-replicas"
    config.write_text(yaml.safe_dump(base))
    controller = Controller(load_settings(config), Kube(kubernetes.client.ApiClient(emu.configuration())),
                            settings_file=config, lease_timing=FAST_LEASE)
    return config, base, controller


def test_a_settings_reload_applies_what_it_can_and_names_what_needs_a_restart(emu, tmp_path, caplog) -> None:
    config, base, controller = _controller_from_file(emu, tmp_path)
    try:
        controller.reload_settings()  # the same file: nothing changes, nothing said
        config.write_text(yaml.safe_dump({**base, "profiling_steps": 250, "namespaces": ["ml", "other"],
                                          "http_port": base["http_port"] + 1}))
        with caplog.at_level(logging.INFO, logger="advisor.controller.app"):
            controller.reload_settings()
        assert controller.settings.profiling_steps == 250  # applied: the next profiling run uses it
        assert controller.reconciler.settings.profiling_steps == 250
        assert controller.settings.namespaces == ["ml"]  # kept until a restart...
        warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        assert "http_port, namespaces" in warning and "restart" in warning  # ...and said so
    finally:
        controller.stop()


def test_reload_of_only_restart_settings_applies_nothing(emu, tmp_path, caplog) -> None:
    config, base, controller = _controller_from_file(emu, tmp_path)
    try:
        config.write_text(yaml.safe_dump({**base, "prediction_processes": 3}))
        with caplog.at_level(logging.INFO, logger="advisor.controller.app"):
            controller.reload_settings()
            controller.reload_settings()  # the next look: the same pending change is not said again
        assert controller.settings.prediction_processes == 1
        assert len([r for r in caplog.records if "prediction_processes" in r.getMessage()
                    and r.levelno == logging.WARNING]) == 1
        assert not any("applied" in r.getMessage() for r in caplog.records)
    finally:
        controller.stop()


def test_the_profile_record_survives_in_the_cluster_and_is_refused_when_too_large(quiet_emu) -> None:
    from advisor.controller.state.records import ProfileRecords, ProfileTooLarge
    records = ProfileRecords(Kube(kubernetes.client.ApiClient(quiet_emu.configuration())))
    owner = quiet_emu.seed(tfjob("rec"))
    uid = owner["metadata"]["uid"]
    assert records.put(NS, "rec", uid, 1, '{"a": 1}') == "stored"
    assert records.put(NS, "rec", uid, 1, '{"a": 1}') == "duplicate"
    assert records.put(NS, "rec", uid, 1, '{"a": 2}') == "conflict"
    got = records.get(NS, "rec", uid, 1)
    assert got is not None and got.profile_json == '{"a": 1}'
    assert records.get(NS, "rec", "another-uid", 1) is None  # an earlier job's record is not this job's
    assert records.get(NS, "rec", uid, 2) is None
    incompressible = os.urandom(800_000).hex()  # 1.6 MB of text, ~0.8 MB gzipped: over 1 MiB in base64
    with pytest.raises(ProfileTooLarge, match="1048576"):
        records.put(NS, "rec", uid, 3, f'"{incompressible}"')


def test_the_longest_namespace_and_job_names_go_through_the_whole_flow(body, tmp_path) -> None:
    """63-character namespace and TFJob names (the limits Kubernetes and the training operator
    allow): every object the controller creates is valid in the emulator, which checks names and
    label values as the API server does, and the Services the operator would derive from the
    profiling run's name (``<run>-worker-0``, ``<run>-ps-0``) are DNS-1035 labels."""
    import re

    namespace, name = "n" * 62 + "s", "j" * 62 + "b"
    with KubeEmulator(namespaces=[namespace], bookmark_interval_s=0.5) as emu:
        controller = start_controller(emu, settings_for(tmp_path, leader_election=False, namespaces=[namespace],
                                                        lease_namespace=namespace))
        try:
            api = kubernetes.client.CustomObjectsApi(kubernetes.client.ApiClient(emu.configuration()))
            api.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "tfjobs",
                                                tfjob(name, namespace=namespace))
            pj = wait_for("the profiling run", lambda: emu.list(
                "tfjobs", namespace, label_selector="training-advisor.io/role=profiling"))[0]
            run = pj["metadata"]["name"]
            for derived in (f"{run}-worker-0", f"{run}-ps-0"):
                assert len(derived) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", derived), derived
            assert upload_as_profiling_pod(emu, pj, body).status == 202
            wait_for("Predicted", lambda: emu.get("tfjobs", namespace, name)["metadata"]["annotations"].get(
                "training-advisor.io/phase") == "Predicted")
            assert emu.get("configmaps", namespace, f"{name}-advisor-g1") is not None
            # no request was refused (a name or label the API server would reject is a 422); a 404
            # (a lookup before create) and a 409 (a write that lost a race with another write of the
            # same job, which the reconcile retries by design) say nothing about names
            refused = [c for c in emu.calls() if c.code >= 400 and c.code not in (404, 409) and c.resource]
            assert not refused, refused
        finally:
            controller.stop()
