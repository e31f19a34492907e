"""The Kubernetes adapter over real HTTP against the emulator: plain dicts in and out, and every
failure as the project's own KubeError subclass, named with the verb, the object and the server's
words."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from advisor.controller.kube.client import MALFORMED, Kube, truncate
from advisor.errors import (
    KubeAlreadyExists,
    KubeConfigError,
    KubeConflict,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnavailable,
)
from tests.kube_emulator import KubeEmulator


def tfjob(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=["ml", "team"], bookmark_interval_s=0.2) as server:
        yield server


@pytest.fixture
def kube(emu: KubeEmulator) -> Iterator[Kube]:
    adapter = Kube(client.ApiClient(emu.configuration()), request_timeout_s=5)
    yield adapter
    adapter.close()


def test_from_config_reads_a_kubeconfig(emu: KubeEmulator, tmp_path: Path) -> None:
    kube = Kube.from_config(emu.write_kubeconfig(tmp_path / "config", context="lab"), context="lab")
    kube.create_tfjob("ml", tfjob("a"))
    assert [i["metadata"]["name"] for i in kube.list_tfjobs("ml")[0]] == ["a"]
    with pytest.raises(KubeConfigError, match="missing"):
        Kube.from_config(tmp_path / "missing")
    with pytest.raises(KubeConfigError):
        Kube.from_config(tmp_path / "config", context="no-such-context")
    (tmp_path / "broken").write_text("clusters: [unclosed")
    with pytest.raises(KubeConfigError):
        Kube.from_config(tmp_path / "broken")


def test_tfjob_round_trip(emu: KubeEmulator, kube: Kube) -> None:
    made = kube.create_tfjob("ml", tfjob("a", {"team": "x"}))
    assert (made["apiVersion"], made["kind"]) == ("kubeflow.org/v1", "TFJob")  # filled in by the adapter
    kube.create_tfjob("team", tfjob("b"))
    items, rv = kube.list_tfjobs(None)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == str(emu.resource_version)
    assert [i["metadata"]["name"] for i in kube.list_tfjobs("ml", "team=x")[0]] == ["a"]
    patched = kube.patch_tfjob("ml", "a", {"metadata": {"annotations": {"advisor/workers": "4"}}})
    assert patched["metadata"]["annotations"] == {"advisor/workers": "4"}
    removed = kube.patch_tfjob("ml", "a", {"metadata": {"annotations": {"advisor/workers": None}}})  # null removes
    assert not removed["metadata"].get("annotations")
    kube.delete_tfjob("ml", "a")
    assert emu.get("tfjobs", "ml", "a") is None
    with pytest.raises(KubeNotFound, match=r'patch TFJob ml/a: tfjobs.kubeflow.org "a" not found \(404 NotFound\)'):
        kube.patch_tfjob("ml", "a", {"spec": {}})


def test_patch_with_resource_version_is_a_precondition(emu: KubeEmulator, kube: Kube) -> None:
    made = kube.create_tfjob("ml", tfjob("a"))
    rv = made["metadata"]["resourceVersion"]
    kube.patch_tfjob("ml", "a", {"metadata": {"labels": {"x": "1"}}}, resource_version=rv)
    with pytest.raises(KubeConflict, match="the object has been modified") as stale:
        kube.patch_tfjob("ml", "a", {"metadata": {"labels": {"x": "2"}}}, resource_version=rv)
    assert (stale.value.status, stale.value.reason) == (409, "Conflict")
    stored = emu.get("tfjobs", "ml", "a")
    assert stored is not None and stored["metadata"]["labels"] == {"x": "1"}  # the stale write did nothing


def test_list_pages_through_large_collections(emu: KubeEmulator, kube: Kube) -> None:
    for i in range(1200):
        emu.seed({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": f"j{i:04d}", "namespace": "ml"}})
    emu.clear_calls()
    items, _ = kube.list_tfjobs("ml")
    assert len(items) == 1200 and len({i["metadata"]["name"] for i in items}) == 1200
    assert len(emu.calls(verb="list")) == 3  # pages of 500, as client-go's reflector: 500 + 500 + 200


def test_list_restarts_whole_when_its_continue_token_expires(emu: KubeEmulator, kube: Kube) -> None:
    for i in range(600):
        emu.seed({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": f"j{i:04d}", "namespace": "ml"}})
    emu.fail_next(verb="list", path_contains="continue=", status=410)
    items, _ = kube.list_tfjobs("ml")
    assert len(items) == 600  # page 1, a 410 on page 2, then one unpaged list (client-go's pager does the same)
    assert [c.code for c in emu.calls(verb="list")] == [200, 410, 200]


@pytest.mark.parametrize(("status", "error", "reason"), [
    (500, KubeUnavailable, "InternalError"),
    (503, KubeUnavailable, "ServiceUnavailable"),
    (403, KubeForbidden, "Forbidden"),
    (409, KubeConflict, "Conflict"),
    (404, KubeNotFound, "NotFound"),
])
def test_error_translation(emu: KubeEmulator, kube: Kube, status: int, error: type[Exception], reason: str) -> None:
    kube.create_tfjob("ml", tfjob("a"))
    emu.fail_next(verb="patch", status=status)
    with pytest.raises(error) as raised:
        kube.patch_tfjob("ml", "a", {"spec": {}})
    assert str(raised.value).startswith("patch TFJob ml/a: ") and str(raised.value).endswith(f"({status} {reason})")


def test_server_refusals_are_typed(emu: KubeEmulator, kube: Kube) -> None:
    kube.create_tfjob("ml", tfjob("a"))
    with pytest.raises(KubeAlreadyExists, match='create TFJob ml/a: tfjobs.kubeflow.org "a" already exists'):
        kube.create_tfjob("ml", tfjob("a"))
    with pytest.raises(KubeInvalid, match="Required value: name or generateName is required") as invalid:
        kube.create_tfjob("ml", {"metadata": {}})
    assert invalid.value.status == 422
    emu.fail_next(verb="patch", status=429, retry_after_s=4)
    with pytest.raises(KubeUnavailable) as throttled:
        kube.patch_tfjob("ml", "a", {"spec": {}})
    assert throttled.value.retry_after_s == 4.0  # from the Retry-After header


def test_unreachable_server_is_unavailable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kube = Kube(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), request_timeout_s=1)
    with pytest.raises(KubeUnavailable, match="list tfjobs in ml: .*(refused|Max retries)"):
        kube.list_tfjobs("ml")


def test_every_call_has_a_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        cfg = client.Configuration(host=f"http://127.0.0.1:{silent.getsockname()[1]}")
        cfg.retries = False
        kube = Kube(client.ApiClient(cfg), request_timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(KubeUnavailable, match="patch TFJob ml/a: .*timed out"):
            kube.patch_tfjob("ml", "a", {"spec": {}})
        assert time.monotonic() - started < 2.0


def test_watch_yields_events_and_bookmarks(emu: KubeEmulator, kube: Kube) -> None:
    made = kube.create_tfjob("ml", tfjob("a"))
    kube.patch_tfjob("ml", "a", {"spec": {"x": 1}})
    kube.create_tfjob("team", tfjob("elsewhere"))  # moves the RV, not in the watched namespace
    stream = kube.watch_tfjobs("ml", made["metadata"]["resourceVersion"], timeout_s=1)
    seen = [(t, o["metadata"]["resourceVersion"]) for t, o in stream]
    assert seen[0] == ("MODIFIED", str(int(made["metadata"]["resourceVersion"]) + 1))
    # after the modification only bookmarks come, at the server's current RV: the caller may resume there
    assert {t for t, _ in seen[1:]} == {"BOOKMARK"} and seen[-1][1] == str(emu.resource_version)


def test_watch_from_compacted_history_is_gone(emu: KubeEmulator, kube: Kube) -> None:
    old = kube.create_tfjob("ml", tfjob("a"))["metadata"]["resourceVersion"]
    kube.create_tfjob("ml", tfjob("b"))
    emu.expire_history()  # history now starts after b: a's RV is older than anything kept
    with pytest.raises(KubeGone, match="too old resource version") as gone:
        list(kube.watch_tfjobs("ml", old, timeout_s=5))
    assert (gone.value.status, gone.value.reason) == (410, "Expired")


def test_watch_survives_nothing_but_reports_everything(emu: KubeEmulator, kube: Kube) -> None:
    kube.create_tfjob("ml", tfjob("a"))
    stream = iter(kube.watch_tfjobs("ml", "0", timeout_s=5))
    assert next(stream)[0] == "ADDED"
    emu.inject_raw_event("tfjobs", b"this is not json")
    assert next(stream) == (MALFORMED, {"line": "this is not json"})
    emu.close_watches()  # the server goes away mid-stream
    with pytest.raises(KubeUnavailable, match="watch tfjobs in ml"):
        next(stream)


def test_watch_can_be_closed_from_another_thread(kube: Kube) -> None:
    stream = kube.watch_tfjobs("ml", "0", timeout_s=30)
    threading.Timer(0.2, stream.close).start()
    started = time.monotonic()
    # closing ends the iteration quietly (only bookmarks came), long before the 30 s timeout
    assert {t for t, _ in stream} <= {"BOOKMARK"}
    assert time.monotonic() - started < 2.0


def test_secrets_carry_bytes(emu: KubeEmulator, kube: Kube) -> None:
    owner = kube.create_tfjob("ml", tfjob("a"))
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "a", "uid": owner["metadata"]["uid"]}
    body = {"metadata": {"name": "profile", "labels": {"app": "advisor"}, "ownerReferences": [ref]}}
    kube.create_secret("ml", body, {"trace": b"\x00\xffbinary"})
    wire = emu.get("secrets", "ml", "profile")
    assert wire is not None and wire["data"] == {"trace": "AP9iaW5hcnk="}  # base64 of the bytes on the wire


def test_configmaps_round_trip(emu: KubeEmulator, kube: Kube) -> None:
    kube.create_configmap("ml", {"metadata": {"name": "p"}, "binaryData": {"x": "AP9iaW5hcnk="}})
    got = kube.get_configmap("ml", "p")
    assert got is not None and got["binaryData"] == {"x": "AP9iaW5hcnk="} and got["kind"] == "ConfigMap"
    assert kube.get_configmap("ml", "absent") is None
    kube.delete_configmap("ml", "p")
    assert emu.get("configmaps", "ml", "p") is None


def test_delete_with_a_uid_deletes_only_that_object(emu: KubeEmulator, kube: Kube) -> None:
    """A name seen in a cache that lags may be another object's by now: the uid precondition says."""
    old = kube.create_configmap("ml", {"metadata": {"name": "s"}, "data": {"v": "old"}})
    kube.delete_configmap("ml", "s", uid=old["metadata"]["uid"])
    new = kube.create_configmap("ml", {"metadata": {"name": "s"}, "data": {"v": "new"}})
    with pytest.raises(KubeConflict, match="Precondition failed: UID"):
        kube.delete_configmap("ml", "s", uid=old["metadata"]["uid"])
    assert emu.get("configmaps", "ml", "s")["metadata"]["uid"] == new["metadata"]["uid"]
    job = kube.create_tfjob("ml", tfjob("a"))
    with pytest.raises(KubeConflict):
        kube.delete_tfjob("ml", "a", uid="someone-else")
    kube.delete_tfjob("ml", "a", uid=job["metadata"]["uid"])
    assert emu.get("tfjobs", "ml", "a") is None


def test_emit_event_points_at_the_object(emu: KubeEmulator, kube: Kube) -> None:
    job = kube.create_tfjob("ml", tfjob("a"))
    event = kube.emit_event(job, "Warning", "ProfilingFailed", "é" * 1000)
    assert event["involvedObject"] == {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "a", "namespace": "ml",
                                       "uid": job["metadata"]["uid"], "resourceVersion": job["metadata"]["resourceVersion"]}
    assert event["metadata"]["namespace"] == "ml" and event["source"] == {"component": "advisor"}
    # "é" is 2 bytes in UTF-8: 2000 bytes cut to 510 characters (1020 bytes) + "..." = 1023 bytes <= 1 kB
    assert len(event["message"].encode()) <= 1024 and event["message"] == "é" * 510 + "..."
    assert truncate("short") == "short"


def test_leases(kube: Kube) -> None:
    assert kube.get_lease("ml", "advisor") is None
    spec = {"holderIdentity": "a", "renewTime": "2024-01-01T00:00:00.000000Z", "leaseDurationSeconds": 15}
    made = kube.create_lease("ml", {"metadata": {"name": "advisor"}, "spec": spec})
    renewed = kube.replace_lease("ml", "advisor", {**made, "spec": {**spec, "renewTime": "2024-01-01T00:00:02.000000Z"}})
    with pytest.raises(KubeConflict):  # `made` carries the resourceVersion before the renewal
        kube.replace_lease("ml", "advisor", {**made, "spec": {**spec, "holderIdentity": "b"}})
    got = kube.get_lease("ml", "advisor")
    assert got is not None and got["spec"] == renewed["spec"]


def test_jobs_and_pods(emu: KubeEmulator, kube: Kube) -> None:
    pod_spec = {"containers": [{"name": "profiler", "image": "advisor"}], "restartPolicy": "Never"}
    job = kube.create_job("ml", {"metadata": {"name": "prof", "labels": {"app": "advisor"}},
                                 "spec": {"template": {"spec": pod_spec}}})
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "prof", "uid": job["metadata"]["uid"]}
    emu.seed({"apiVersion": "v1", "kind": "Pod", "spec": pod_spec,
              "metadata": {"name": "prof-x1", "namespace": "ml", "labels": {"job-name": "prof"}, "ownerReferences": [ref]}})
    assert kube.get_job("ml", "prof")["kind"] == "Job"
    assert [j["metadata"]["name"] for j in kube.list_jobs("ml", "app=advisor")] == ["prof"]
    pods = kube.list_pods("ml", "job-name=prof")
    assert [(p["kind"], p["metadata"]["name"]) for p in pods] == [("Pod", "prof-x1")]  # kind filled in
    kube.delete_job("ml", "prof")
    assert kube.list_pods("ml") == []  # Background propagation, not batch/v1's default Orphan
