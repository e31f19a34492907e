"""The emulator behaves as a real apiserver does, seen through the official ``kubernetes`` client.

Where the expected behaviour comes from is noted per test: "conventions" is the API conventions
document (kubernetes/community contributors/devel/sig-architecture/api-conventions.md), "concepts"
the API concepts page (kubernetes.io/docs/reference/using-api/api-concepts/), otherwise the
apiserver source named (kubernetes/kubernetes, staging/src/k8s.io/...).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from tests.kube_emulator import KubeEmulator

G, V, TF = "kubeflow.org", "v1", "tfjobs"


def tfjob(name: str, namespace: str = "ml", labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": f"{G}/{V}", "kind": "TFJob", "metadata": meta, "spec": {"replicas": 1}, **extra}


def status_of(exc: client.ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=["ml", "team"], bookmark_interval_s=0.2) as server:
        yield server


@pytest.fixture
def api(emu: KubeEmulator) -> Iterator[client.ApiClient]:
    with client.ApiClient(emu.configuration()) as api_client:
        yield api_client


@pytest.fixture
def co(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create(co: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    return co.create_namespaced_custom_object(G, V, body["metadata"]["namespace"], TF, body)


def events(co: client.CustomObjectsApi, rv: str | None, *, count: int, namespace: str = "ml",
           **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` watch events (the stream is stopped after them, or after 2 s)."""
    w, seen = watch.Watch(), []
    extra = {"resource_version": rv} if rv is not None else {}
    for ev in w.stream(co.list_namespaced_custom_object, G, V, namespace, TF, timeout_seconds=2, **extra, **kwargs):
        seen.append((ev["type"], ev["raw_object"]))
        if len(seen) == count:
            w.stop()
    return seen


# --- discovery ------------------------------------------------------------------------------
def test_discovery_is_enough_for_the_client(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().major == "1"
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"kubeflow.org", "batch", "coordination.k8s.io", "events.k8s.io"} <= groups
    names = {r.name for r in client.CustomObjectsApi(api).get_api_resources(G, V).resources}
    assert names == {"tfjobs", "tfjobs/status", "pytorchjobs", "pytorchjobs/status"}
    core = {r.name: r.namespaced for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core["namespaces"] is False and core["pods/log"] is True


def test_an_absent_crd_is_neither_discovered_nor_served() -> None:
    with KubeEmulator(absent=("pytorchjobs.kubeflow.org",)) as emu:
        api = client.ApiClient(emu.configuration())
        names = {r.name for r in client.CustomObjectsApi(api).get_api_resources(G, V).resources}
        assert names == {"tfjobs", "tfjobs/status"}
        with pytest.raises(client.ApiException) as err:
            client.CustomObjectsApi(api).list_namespaced_custom_object(G, V, "default", "pytorchjobs")
        assert err.value.status == 404


# --- metadata -------------------------------------------------------------------------------
def test_create_sets_system_metadata_and_drops_status(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a", status={"conditions": [{"type": "Succeeded"}]}))
    meta = made["metadata"]
    assert len(meta["uid"]) == 36 and meta["generation"] == 1  # CRD strategy PrepareForCreate: generation 1
    assert meta["resourceVersion"].isdigit()
    assert time.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert "status" not in made  # customresource/strategy.go: "create cannot set status"


def test_resource_version_is_one_counter_across_kinds(api: client.ApiClient, co: client.CustomObjectsApi) -> None:
    a = create(co, tfjob("a"))
    cm = client.CoreV1Api(api).create_namespaced_config_map("ml", {"metadata": {"name": "c"}})
    b = create(co, tfjob("b"))
    # etcd's revision is global: each write gets the next one, whatever the resource
    assert int(a["metadata"]["resourceVersion"]) < int(cm.metadata.resource_version) < int(b["metadata"]["resourceVersion"])


def test_generate_name(co: client.CustomObjectsApi) -> None:
    made = create(co, {**tfjob(""), "metadata": {"generateName": "prof-", "namespace": "ml"}})
    # names.SimpleNameGenerator: the prefix plus 5 random characters
    assert made["metadata"]["name"].startswith("prof-") and len(made["metadata"]["name"]) == 10


def test_create_errors(co: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as missing:
        create(co, {**tfjob(""), "metadata": {"namespace": "ml"}})
    assert missing.value.status == 422
    assert status_of(missing.value)["message"] == \
        'TFJob.kubeflow.org "" is invalid: metadata.name: Required value: name or generateName is required'
    create(co, tfjob("a"))
    with pytest.raises(client.ApiException) as dup:
        create(co, tfjob("a"))
    assert (dup.value.status, status_of(dup.value)["reason"]) == (409, "AlreadyExists")
    assert status_of(dup.value)["message"] == 'tfjobs.kubeflow.org "a" already exists'
    with pytest.raises(client.ApiException) as mismatch:
        co.create_namespaced_custom_object(G, V, "team", TF, tfjob("b", namespace="ml"))
    assert mismatch.value.status == 400
    assert "does not match the namespace sent on the request" in status_of(mismatch.value)["message"]
    with pytest.raises(client.ApiException) as bad_name:
        create(co, tfjob("Bad_Name"))
    assert bad_name.value.status == 422 and "RFC 1123 subdomain" in status_of(bad_name.value)["message"]
    with pytest.raises(client.ApiException) as no_ns:
        create(co, tfjob("a", namespace="nowhere"))
    # NamespaceLifecycle admission refuses content in a namespace that does not exist
    assert no_ns.value.status == 404 and status_of(no_ns.value)["message"] == 'namespaces "nowhere" not found'


def test_label_and_annotation_validation(co: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as bad_label:
        create(co, tfjob("a", labels={"x": "not ok!"}))
    assert bad_label.value.status == 422 and "a valid label must be" in status_of(bad_label.value)["message"]
    huge = tfjob("b")
    huge["metadata"]["annotations"] = {"advisor/prediction": "x" * (256 * 1024)}
    with pytest.raises(client.ApiException) as too_big:
        create(co, huge)
    # objectmeta validation: annotations' keys and values together at most 256 KiB
    assert "must have at most 262144 bytes" in status_of(too_big.value)["message"]


def test_generation_counts_spec_changes_only(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    labelled = co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"labels": {"x": "1"}}})
    assert labelled["metadata"]["generation"] == 1  # metadata changes never bump generation
    respecced = co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"spec": {"replicas": 2}})
    assert respecced["metadata"]["generation"] == 2
    status = co.patch_namespaced_custom_object_status(G, V, "ml", TF, "a", {"status": {"phase": "Running"}})
    assert status["metadata"]["generation"] == 2 and status["status"] == {"phase": "Running"}


def test_status_subresource_separates_writes(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    co.patch_namespaced_custom_object_status(G, V, "ml", TF, "a", {"status": {"phase": "Running"}})
    main = co.patch_namespaced_custom_object(G, V, "ml", TF, "a",
                                             {"spec": {"replicas": 3}, "status": {"phase": "Hacked"}})
    assert main["status"] == {"phase": "Running"}  # main-resource writes ignore .status
    sub = co.patch_namespaced_custom_object_status(G, V, "ml", TF, "a",
                                                   {"spec": {"replicas": 9}, "status": {"phase": "Done"}})
    assert sub["spec"] == {"replicas": 3} and sub["status"] == {"phase": "Done"}  # /status changes only .status


# --- updates and patches --------------------------------------------------------------------
def test_put_needs_a_fresh_resource_version_on_custom_resources(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a"))
    body = {**made, "spec": {"replicas": 2}}
    updated = co.replace_namespaced_custom_object(G, V, "ml", TF, "a", body)
    with pytest.raises(client.ApiException) as stale:
        co.replace_namespaced_custom_object(G, V, "ml", TF, "a", body)  # still carries the old RV
    assert stale.value.status == 409
    assert status_of(stale.value)["message"] == (
        'Operation cannot be fulfilled on tfjobs.kubeflow.org "a": the object has been modified; '
        "please apply your changes to the latest version and try again")
    unversioned = {**updated, "metadata": {k: v for k, v in updated["metadata"].items() if k != "resourceVersion"}}
    with pytest.raises(client.ApiException) as missing:
        co.replace_namespaced_custom_object(G, V, "ml", TF, "a", unversioned)
    # customResourceStrategy.AllowUnconditionalUpdate() is false
    assert missing.value.status == 422 and "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" \
        in status_of(missing.value)["message"]


def test_built_in_kinds_allow_unconditional_put(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("ml", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    # configmap strategy: AllowUnconditionalUpdate() is true
    put = core.replace_namespaced_config_map("c", "ml", {"metadata": {"name": "c"}, "data": {"a": "2"}})
    assert put.data == {"a": "2"}


def test_merge_patch_semantics_and_precondition(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a", labels={"x": "1", "y": "2"}))
    patched = co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"labels": {"x": None}}})
    assert patched["metadata"]["labels"] == {"y": "2"}  # RFC 7386: null deletes the key
    with pytest.raises(client.ApiException) as stale:
        co.patch_namespaced_custom_object(G, V, "ml", TF, "a",
                                          {"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]}})
    assert stale.value.status == 409  # a resourceVersion in a patch is a precondition (concepts)


def test_json_patch_and_its_failure(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a", labels={"x": "1"}))
    ops = [{"op": "test", "path": "/metadata/labels/x", "value": "1"},
           {"op": "remove", "path": "/metadata/labels/x"},
           {"op": "add", "path": "/spec/extra", "value": [1]}]
    done = co.patch_namespaced_custom_object(G, V, "ml", TF, "a", ops, _content_type="application/json-patch+json")
    assert "labels" not in done["metadata"] or done["metadata"]["labels"] == {}
    assert done["spec"]["extra"] == [1]
    with pytest.raises(client.ApiException) as failed:
        co.patch_namespaced_custom_object(G, V, "ml", TF, "a", [{"op": "test", "path": "/spec/replicas", "value": 5}],
                                          _content_type="application/json-patch+json")
    assert failed.value.status == 422  # handlers/patch.go: a patch that does not apply is 422


def test_strategic_merge_patch(api: client.ApiClient, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    with pytest.raises(client.ApiException) as refused:
        co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"spec": {}},
                                          _content_type="application/strategic-merge-patch+json")
    # custom resources have no Go struct tags to merge by: the apiserver answers 415
    assert (refused.value.status, status_of(refused.value)["reason"]) == (415, "UnsupportedMediaType")
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("ml", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    merged = core.patch_namespaced_config_map("c", "ml", {"data": {"b": "2"}})  # the client sends SMP here
    assert merged.data == {"a": "1", "b": "2"}


def test_no_op_write_keeps_resource_version_and_sends_no_event(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a", labels={"x": "1"}))
    same = co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"labels": {"x": "1"}}})
    # GuaranteedUpdate skips the etcd write when the bytes are unchanged
    assert same["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"labels": {"x": "2"}}})
    seen = events(co, made["metadata"]["resourceVersion"], count=1)
    assert [(t, o["metadata"]["labels"]["x"]) for t, o in seen] == [("MODIFIED", "2")]


# --- reads ----------------------------------------------------------------------------------
def test_get_missing_is_a_not_found_status(co: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as missing:
        co.get_namespaced_custom_object(G, V, "ml", TF, "nope")
    body = status_of(missing.value)
    assert (missing.value.status, body["kind"], body["reason"], body["code"]) == (404, "Status", "NotFound", 404)
    assert body["message"] == 'tfjobs.kubeflow.org "nope" not found'
    assert body["details"] == {"name": "nope", "group": "kubeflow.org", "kind": "tfjobs"}


def test_list_kind_resource_version_and_scopes(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    create(co, tfjob("b", namespace="team"))
    listed = co.list_namespaced_custom_object(G, V, "ml", TF)
    assert listed["kind"] == "TFJobList" and listed["metadata"]["resourceVersion"] == str(emu.resource_version)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
    everywhere = co.list_custom_object_for_all_namespaces(G, V, TF)
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]] == [("ml", "a"), ("team", "b")]


def test_built_in_list_items_have_no_kind(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("ml", {"metadata": {"name": "c"}})
    raw = json.loads(core.list_namespaced_config_map("ml", _preload_content=False).data)
    # typed lists carry kind/apiVersion once, on the list (runtime encoding of []ConfigMap)
    assert raw["kind"] == "ConfigMapList" and "kind" not in raw["items"][0]


@pytest.mark.parametrize(("selector", "expected"), [
    ("team=a", ["a1", "a2"]),
    ("team==a", ["a1", "a2"]),
    ("team!=a", ["b", "none"]),  # != also selects objects without the key (labels.Requirement)
    ("team in (a,b)", ["a1", "a2", "b"]),
    ("team notin (a)", ["b", "none"]),
    ("team", ["a1", "a2", "b"]),
    ("!team", ["none"]),
    ("team=a,tier=gpu", ["a2"]),
])
def test_label_selectors(co: client.CustomObjectsApi, selector: str, expected: list[str]) -> None:
    for name, labels in (("a1", {"team": "a"}), ("a2", {"team": "a", "tier": "gpu"}), ("b", {"team": "b"}),
                         ("none", None)):
        create(co, tfjob(name, labels=labels))
    listed = co.list_namespaced_custom_object(G, V, "ml", TF, label_selector=selector)
    assert [i["metadata"]["name"] for i in listed["items"]] == expected


def test_field_selectors(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    create(co, tfjob("b", namespace="team"))
    by_name = co.list_custom_object_for_all_namespaces(G, V, TF, field_selector="metadata.name=b")
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["b"]
    not_ml = co.list_custom_object_for_all_namespaces(G, V, TF, field_selector="metadata.namespace!=ml")
    assert [i["metadata"]["name"] for i in not_ml["items"]] == ["b"]
    with pytest.raises(client.ApiException) as unsupported:
        co.list_namespaced_custom_object(G, V, "ml", TF, field_selector="spec.replicas=1")
    # CRDs select only by metadata.name/namespace unless they declare selectableFields
    assert unsupported.value.status == 400 and "field label not supported" in status_of(unsupported.value)["message"]


def test_pagination_is_a_consistent_snapshot(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    for i in range(5):
        create(co, tfjob(f"j{i}"))
    first = co.list_namespaced_custom_object(G, V, "ml", TF, limit=2)
    assert [i["metadata"]["name"] for i in first["items"]] == ["j0", "j1"]
    assert first["metadata"]["remainingItemCount"] == 3
    create(co, tfjob("j5"))  # created after the first page: not in this list (concepts: "consistent snapshot")
    rest, token = [], first["metadata"]["continue"]
    while token:
        page = co.list_namespaced_custom_object(G, V, "ml", TF, limit=2, _continue=token)
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        rest += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert rest == ["j2", "j3", "j4"]
    again = co.list_namespaced_custom_object(G, V, "ml", TF, limit=2)
    emu.expire_history()
    with pytest.raises(client.ApiException) as expired:
        co.list_namespaced_custom_object(G, V, "ml", TF, limit=2, _continue=again["metadata"]["continue"])
    assert expired.value.status == 410  # a compacted continue token is 410 Expired (concepts)


# --- watch ----------------------------------------------------------------------------------
def test_watch_without_resource_version_starts_with_synthetic_adds(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    create(co, tfjob("b"))
    seen = events(co, None, count=2)
    assert [(t, o["metadata"]["name"]) for t, o in seen] == [("ADDED", "a"), ("ADDED", "b")]
    seen0 = events(co, "0", count=2)  # "0" = any: the same synthetic ADDED from the cache (concepts)
    assert [t for t, _ in seen0] == ["ADDED", "ADDED"]


def test_watch_from_resource_version_replays_history(co: client.CustomObjectsApi) -> None:
    a = create(co, tfjob("a"))
    co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"spec": {"replicas": 2}})
    create(co, tfjob("b"))
    co.delete_namespaced_custom_object(G, V, "ml", TF, "a")
    seen = events(co, a["metadata"]["resourceVersion"], count=3)
    assert [(t, o["metadata"]["name"]) for t, o in seen] == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in seen]
    # the DELETED object carries the deletion's revision, so a client can resume after it
    assert rvs == sorted(rvs) and rvs[-1] == int(a["metadata"]["resourceVersion"]) + 3


def test_watch_from_a_compacted_resource_version_is_200_then_one_410_event(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    old = create(co, tfjob("a"))["metadata"]["resourceVersion"]
    create(co, tfjob("b"))
    emu.expire_history()
    url = f"{emu.url}/apis/{G}/{V}/namespaces/ml/{TF}?watch=true&resourceVersion={old}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200  # the watch cache reports expiry in-stream, not as the HTTP status
        lines = resp.read().decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
        "code": 410, "message": f"too old resource version: {old} ({emu.resource_version})"}}
    with pytest.raises(client.ApiException) as gone:  # the client's Watch raises it as an ApiException
        events(co, old, count=1)
    assert gone.value.status == 410


def test_watch_timeout_closes_the_stream_after_a_bookmark(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    started, seen = time.monotonic(), []
    for ev in watch.Watch().stream(co.list_namespaced_custom_object, G, V, "ml", TF, resource_version="0",
                                   timeout_seconds=1, allow_watch_bookmarks=True):
        seen.append(ev["type"])
    assert 0.9 < time.monotonic() - started < 1.9
    assert seen[0] == "ADDED" and seen[-1] == "BOOKMARK"


def test_bookmarks_carry_the_current_resource_version(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a", namespace="team"))  # not in the watched namespace: only the RV moves
    seen = events(co, str(emu.resource_version - 1), count=1, allow_watch_bookmarks=True)
    assert seen[0][0] == "BOOKMARK" and seen[0][1]["metadata"]["resourceVersion"] == str(emu.resource_version)


def test_watch_selectors_turn_label_changes_into_add_and_delete(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a", labels={"advisor": "on"}))
    create(co, tfjob("b"))
    co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"labels": {"advisor": "off"}}})
    co.patch_namespaced_custom_object(G, V, "ml", TF, "b", {"metadata": {"labels": {"advisor": "on"}}})
    seen = events(co, made["metadata"]["resourceVersion"], count=2, label_selector="advisor=on")
    # cacheWatcher.convertToWatchEvent: leaving the selector is DELETED (old content), entering is ADDED
    assert [(t, o["metadata"]["name"], o["metadata"]["labels"]["advisor"]) for t, o in seen] == \
        [("DELETED", "a", "on"), ("ADDED", "b", "on")]


# --- delete, finalizers, garbage collection -------------------------------------------------
def test_delete_answers_status_for_custom_resources(co: client.CustomObjectsApi) -> None:
    made = create(co, tfjob("a"))
    answer = co.delete_namespaced_custom_object(G, V, "ml", TF, "a")
    # generic registry finalizeDelete without ReturnDeletedObject: a Success Status naming the object
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    assert answer["details"] == {"name": "a", "group": G, "kind": TF, "uid": made["metadata"]["uid"]}
    with pytest.raises(client.ApiException) as again:
        co.delete_namespaced_custom_object(G, V, "ml", TF, "a")
    assert again.value.status == 404


def test_finalizers_hold_deletion_until_removed(co: client.CustomObjectsApi) -> None:
    made = create(co, {**tfjob("a"), "metadata": {"name": "a", "namespace": "ml", "finalizers": ["advisor/cleanup"]}})
    pending = co.delete_namespaced_custom_object(G, V, "ml", TF, "a")
    assert pending["metadata"]["deletionTimestamp"] and pending["metadata"]["generation"] == 2  # rest.BeforeDelete bumps it
    assert co.get_namespaced_custom_object(G, V, "ml", TF, "a")["metadata"]["finalizers"] == ["advisor/cleanup"]
    with pytest.raises(client.ApiException) as adding:
        co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"finalizers": ["advisor/cleanup", "x/y"]}})
    assert adding.value.status == 422  # no new finalizers once deletion started
    co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as gone:
        co.get_namespaced_custom_object(G, V, "ml", TF, "a")
    assert gone.value.status == 404
    seen = events(co, made["metadata"]["resourceVersion"], count=2)
    assert [t for t, _ in seen] == ["MODIFIED", "DELETED"]


def test_delete_preconditions(co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    with pytest.raises(client.ApiException) as wrong:
        co.delete_namespaced_custom_object(G, V, "ml", TF, "a", body={"preconditions": {"uid": "other"}})
    assert wrong.value.status == 409 and "Precondition failed: UID in precondition: other" in status_of(wrong.value)["message"]


def test_garbage_collection_of_dependents(api: client.ApiClient, co: client.CustomObjectsApi) -> None:
    core = client.CoreV1Api(api)
    owner = create(co, tfjob("a"))
    other = create(co, tfjob("b"))
    ref = {"apiVersion": f"{G}/{V}", "kind": "TFJob", "name": "a", "uid": owner["metadata"]["uid"]}
    ref_b = {"apiVersion": f"{G}/{V}", "kind": "TFJob", "name": "b", "uid": other["metadata"]["uid"]}
    core.create_namespaced_secret("ml", {"metadata": {"name": "only-a", "ownerReferences": [ref]}})
    core.create_namespaced_secret("ml", {"metadata": {"name": "a-and-b", "ownerReferences": [ref, ref_b]}})
    co.delete_namespaced_custom_object(G, V, "ml", TF, "a")
    # the garbage collector deletes a dependent whose owners are all gone, and only drops the
    # reference from one that still has a live owner
    names = {s.metadata.name: s.metadata.owner_references for s in core.list_namespaced_secret("ml").items}
    assert set(names) == {"a-and-b"} and [r.name for r in names["a-and-b"]] == ["b"]


def test_batch_jobs_orphan_pods_unless_told_otherwise(api: client.ApiClient) -> None:
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    spec = {"template": {"spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}}}
    for name in ("keep", "drop"):
        job = batch.create_namespaced_job("ml", {"metadata": {"name": name}, "spec": spec})
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid}
        core.create_namespaced_pod("ml", {"metadata": {"name": f"{name}-pod", "ownerReferences": [ref]},
                                          "spec": spec["template"]["spec"]})
    batch.delete_namespaced_job("keep", "ml")  # batch/v1 default: OrphanDependents (job strategy)
    batch.delete_namespaced_job("drop", "ml", propagation_policy="Background")
    pods = {p.metadata.name: p.metadata.owner_references for p in core.list_namespaced_pod("ml").items}
    assert pods == {"keep-pod": None}


def test_jobs_get_the_job_strategys_defaults_selector_and_validation(api: client.ApiClient) -> None:
    # pkg/apis/batch/v1/defaults.go, pkg/registry/batch/job/strategy.go (generateSelector),
    # pkg/apis/batch/validation/validation.go
    batch = client.BatchV1Api(api)
    pod = {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}
    job = batch.create_namespaced_job("ml", {"metadata": {"name": "j"}, "spec": {"template": {"spec": pod}}})
    uid = job.metadata.uid
    assert (job.spec.completions, job.spec.parallelism, job.spec.backoff_limit, job.spec.completion_mode,
            job.spec.suspend) == (1, 1, 6, "NonIndexed", False)
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels == {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                                                 "batch.kubernetes.io/job-name": "j", "job-name": "j"}
    with pytest.raises(client.ApiException) as always:  # a pod spec's default restartPolicy is Always
        batch.create_namespaced_job("ml", {"metadata": {"name": "k"}, "spec": {"template": {"spec": {
            "containers": pod["containers"]}}}})
    assert always.value.status == 422
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in status_of(always.value)["message"]
    changed = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}}
    with pytest.raises(client.ApiException) as immutable:
        batch.patch_namespaced_job("j", "ml", changed)
    assert immutable.value.status == 422 and "spec.template: Invalid value" in status_of(immutable.value)["message"]
    assert "field is immutable" in status_of(immutable.value)["message"]
    done = batch.patch_namespaced_job_status("j", "ml", {"status": {"succeeded": 1}})  # status is not the template
    assert done.status.succeeded == 1 and done.metadata.generation == 1


def test_deleting_a_namespace_deletes_its_contents(api: client.ApiClient, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a", namespace="team"))
    client.CoreV1Api(api).delete_namespace("team")
    assert co.list_custom_object_for_all_namespaces(G, V, TF)["items"] == []


# --- other kinds ----------------------------------------------------------------------------
def test_pod_log_subresource(emu: KubeEmulator, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("ml", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "worker", "image": "x"}, {"name": "sidecar", "image": "y"}]}})
    emu.set_pod_log("ml", "p", "step 1\nstep 2\n", container="worker")
    assert core.read_namespaced_pod_log("p", "ml", container="worker") == "step 1\nstep 2\n"
    with pytest.raises(client.ApiException) as ambiguous:
        core.read_namespaced_pod_log("p", "ml")
    assert ambiguous.value.status == 400 and "a container name must be specified" in status_of(ambiguous.value)["message"]


def test_leases_need_micro_time(api: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(api)
    # (the typed client re-renders times with isoformat(), which drops a zero fraction: use .123456)
    good = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "renewTime": "2024-01-01T00:00:00.123456Z"}}
    made = coord.create_namespaced_lease("ml", good)
    assert made.spec.holder_identity == "me"
    bad = {"metadata": {"name": "m"}, "spec": {"renewTime": "2024-01-01T00:00:00Z"}}
    with pytest.raises(client.ApiException) as refused:
        coord.create_namespaced_lease("ml", bad)
    # MicroTime is parsed with Go's layout ...05.000000Z07:00, which needs exactly six fractional
    # digits; the apiserver's words, as reported by users hitting it: cannot parse "Z" as ".000000"
    assert refused.value.status == 400 and 'as ".000000"' in status_of(refused.value)["message"]


def test_events_validation(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    ok = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "TFJob", "name": "a", "namespace": "ml"},
          "reason": "Profiled", "message": "m" * 5000, "type": "Normal"}
    assert core.create_namespaced_event("ml", ok).message == "m" * 5000  # legacy events: no message limit
    with pytest.raises(client.ApiException) as mismatch:
        core.create_namespaced_event("team", {**ok, "metadata": {"name": "e2"}})
    assert mismatch.value.status == 422 and "does not match event.namespace" in status_of(mismatch.value)["message"]
    new_style = {"metadata": {"name": "e3"}, "eventTime": "2024-01-01T00:00:00.123456Z", "reason": "R",
                 "action": "Profile", "reportingController": "advisor", "reportingInstance": "pod-1",
                 "type": "Normal", "note": "n" * 1025, "regarding": {"kind": "TFJob", "name": "a", "namespace": "ml"}}
    with pytest.raises(client.ApiException) as too_long:
        client.EventsV1Api(api).create_namespaced_event("ml", new_style)
    assert too_long.value.status == 422 and "can have at most 1024 characters" in status_of(too_long.value)["message"]


def test_secret_data_is_base64(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    made = core.create_namespaced_secret("ml", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert made.data == {"k": "dg=="} and made.type == "Opaque"  # stringData folds into data
    with pytest.raises(client.ApiException) as bad:
        core.create_namespaced_secret("ml", {"metadata": {"name": "t"}, "data": {"k": "not base64!"}})
    assert bad.value.status == 400


# --- test controls --------------------------------------------------------------------------
def test_fail_next_injects_real_error_answers(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    emu.fail_next(verb="get", resource="tfjobs", status=500, times=2)
    for _ in range(2):
        with pytest.raises(client.ApiException) as failed:
            co.get_namespaced_custom_object(G, V, "ml", TF, "a")
        assert (failed.value.status, status_of(failed.value)["reason"]) == (500, "InternalError")
    assert co.get_namespaced_custom_object(G, V, "ml", TF, "a")["metadata"]["name"] == "a"
    emu.fail_next(method="PATCH", status=429, retry_after_s=7)
    with pytest.raises(client.ApiException) as throttled:
        co.patch_namespaced_custom_object(G, V, "ml", TF, "a", {"spec": {}})
    assert throttled.value.headers["Retry-After"] == "7" and status_of(throttled.value)["details"]["retryAfterSeconds"] == 7
    emu.fail_next(path_contains="/tfjobs", status=403)
    with pytest.raises(client.ApiException) as forbidden:
        co.list_namespaced_custom_object(G, V, "ml", TF)
    assert status_of(forbidden.value)["message"].startswith('tfjobs.kubeflow.org is forbidden: User "system:serviceaccount')


def test_request_log_names_each_call(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    emu.clear_calls()
    create(co, tfjob("a"))
    co.patch_namespaced_custom_object_status(G, V, "ml", TF, "a", {"status": {}})
    co.list_custom_object_for_all_namespaces(G, V, TF)
    with pytest.raises(client.ApiException):
        co.get_namespaced_custom_object(G, V, "ml", TF, "nope")
    calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace, c.name, c.code) for c in emu.calls()]
    assert calls == [("create", G, TF, "", "ml", None, 201), ("patch", G, TF, "status", "ml", "a", 200),
                     ("list", G, TF, "", None, None, 200), ("get", G, TF, "", "ml", "nope", 404)]


def test_close_watches_drops_the_connection(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    stream = watch.Watch().stream(co.list_namespaced_custom_object, G, V, "ml", TF, timeout_seconds=5)
    assert next(stream)["type"] == "ADDED"
    emu.close_watches()  # an apiserver restart: no clean end of the chunked body
    with pytest.raises(Exception) as dropped:
        next(stream)
    assert "ProtocolError" in type(dropped.value).__name__ or "ended prematurely" in str(dropped.value)


def test_inject_raw_event_reaches_open_watches(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    create(co, tfjob("a"))
    w = watch.Watch()
    stream = w.stream(co.list_namespaced_custom_object, G, V, "ml", TF, timeout_seconds=5, deserialize=False)
    assert next(stream)["type"] == "ADDED"
    assert emu.inject_raw_event("tfjobs", {"type": "MODIFIED", "object": {"metadata": "broken"}}) == 1
    assert next(stream) == {"type": "MODIFIED", "object": {"metadata": "broken"}}
    w.stop()


def test_write_kubeconfig_works_with_the_client(emu: KubeEmulator, tmp_path: Any) -> None:
    path = emu.write_kubeconfig(tmp_path / "kubeconfig")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        assert client.CoreV1Api(api_client).read_namespace("ml").metadata.name == "ml"


def test_a_thousand_tfjobs_list_quickly(emu: KubeEmulator, co: client.CustomObjectsApi) -> None:
    for i in range(1000):
        emu.seed(tfjob(f"job-{i:04d}", namespace=f"ns-{i % 10}"))
    started = time.monotonic()
    listed = co.list_custom_object_for_all_namespaces(G, V, TF)
    assert len(listed["items"]) == 1000
    assert time.monotonic() - started < 2.0  # a benchmark of 1,000 jobs must not wait on the emulator
