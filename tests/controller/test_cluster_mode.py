"""Cluster mode over real HTTP: the whole controller against the API emulator, jobs sharing a
capacity from the setting or from a Kueue ClusterQueue (read through the job's LocalQueue).

Every job here is predicted with the canned curve of ``harness.canned_prediction``: 100, 190,
260, 300 examples/s at W = 1..4 (intervals +-2 %), a worker and a PS at 1 per hour, so a job
alone is cheapest at W = 3. In one-worker units its goodput is 1, 1.9, 2.6, 3.0: the allocator's
steps from 0 workers gain 1, 0.9 and 0.7 per worker (times the job's priority) up to W = 3, its
own optimum (docs/allocation.md).
"""

from __future__ import annotations

import json
import time
from typing import Any

from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator

ALLOCATED = PREFIX + "allocated-workers"
ALLOCATION = PREFIX + "allocation"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def cluster_settings(tmp_path, **overrides: Any):
    base: dict[str, Any] = dict(leader_election=False, cluster_mode=True, cluster_debounce_s=0.3)
    return settings_for(tmp_path, **{**base, **overrides})


def predict(emu: KubeEmulator, body: bytes, *jobs: dict[str, Any]) -> None:
    """Create the jobs, play each one's profiling pod, wait until every one is Predicted."""
    for job in jobs:
        create_tfjob(emu, job)
    names = [j["metadata"]["name"] for j in jobs]
    runs = wait_for("the profiling runs", lambda: (len(found := profiling_jobs(emu)) == len(names) and found))
    for run in runs:
        assert upload_as_profiling_pod(emu, run, body).ok
    for name in names:
        wait_for(f"{name} Predicted", lambda n=name: phase(emu, n) == "Predicted")


def allocation(emu: KubeEmulator, name: str) -> dict[str, Any]:
    return json.loads(annotations(emu, name).get(ALLOCATION) or "null") or {}


def allocated(emu: KubeEmulator, name: str) -> str | None:
    return annotations(emu, name).get(ALLOCATED)


def workers(emu: KubeEmulator, name: str) -> int:
    return int(emu.get("tfjobs", NS, name)["spec"]["tfReplicaSpecs"]["Worker"]["replicas"])


def events(emu: KubeEmulator, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in emu.list("events", NS)
            if e.get("involvedObject", {}).get("name") == name]


def sample(controller, name: str, **labels: str) -> float | None:
    for family in controller.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def queued(job: dict[str, Any], queue: str) -> dict[str, Any]:
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def with_cpu(job: dict[str, Any], worker: str, ps: str) -> dict[str, Any]:
    specs = job["spec"]["tfReplicaSpecs"]
    specs["Worker"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": worker}}
    specs["PS"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": ps}}
    return job


def seed_queues(emu: KubeEmulator, local: str, cluster: str, flavors: list[tuple[str, Any]] | None) -> None:
    """A LocalQueue ``local`` in NS feeding ClusterQueue ``cluster``; ``flavors`` (name, cpu quota)
    None: the ClusterQueue is not created."""
    emu.seed({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
              "metadata": {"name": local, "namespace": NS}, "spec": {"clusterQueue": cluster}})
    if flavors is not None:
        emu.seed({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster},
                  "spec": {"namespaceSelector": {}, "resourceGroups": [
                      {"coveredResources": ["cpu"],
                       "flavors": [{"name": f, "resources": [{"name": "cpu", "nominalQuota": q}]} for f, q in flavors]}]}})


def test_two_jobs_share_the_settings_capacity_by_priority(emu, body, tmp_path) -> None:
    controller = start_controller(emu, cluster_settings(tmp_path, cluster_capacity={"workers": 4}))
    try:
        predict(emu, body, tfjob("a", workers=2, annotations={PREFIX + "priority": "2"}), tfjob("b", workers=2))
        wait_for("both allocated", lambda: allocated(emu, "a") and allocated(emu, "b"))
        # a's steps gain 2, 1.8, 1.4 per worker, b's 1, 0.9, 0.7: a takes its three (its own
        # optimum), b the one worker left.
        assert (allocated(emu, "a"), allocated(emu, "b")) == ("3", "1")
        b = allocation(emu, "b")
        assert b == {"pool": "settings", "status": "placed", "workers": 1, "ownOptimum": 3,
                     "reason": "own cost-optimal W = 3; held at 1 by the capacity"}
        assert allocation(emu, "a")["reason"] == "own cost-optimal W = 3"
        # advise mode: the jobs keep their replicas; the per-job recommendation is unchanged beside
        assert (workers(emu, "a"), workers(emu, "b")) == (2, 2)
        assert annotations(emu, "b")[PREFIX + "recommended-workers"] == "3"
        m = controller.metrics
        assert sample(controller, "advisor_allocated_workers", job_namespace=NS, tfjob="a") == 3
        assert sample(controller, "advisor_allocated_workers", job_namespace=NS, tfjob="b") == 1
        assert sample(controller, "advisor_recommended_workers", job_namespace=NS, tfjob="b") == 3
        assert sample(controller, "advisor_allocation_capacity", pool="settings", resource="workers") == 4
        assert sample(controller, "advisor_allocation_used", pool="settings", resource="workers") == 4
        text = m.exposition()[0].decode()
        assert 'advisor_allocated_workers{job_namespace="ml",tfjob="b"} 1.0' in text
        # a leaves (deleted): b gets its own optimum, and a's series go
        emu.delete("tfjobs", NS, "a")
        wait_for("b reallocated", lambda: allocated(emu, "b") == "3")
        assert allocation(emu, "b")["reason"] == "own cost-optimal W = 3"
        assert sample(controller, "advisor_allocated_workers", job_namespace=NS, tfjob="a") is None
        assert sample(controller, "advisor_allocation_used", pool="settings", resource="workers") == 3
    finally:
        controller.stop()


def test_the_capacity_of_a_clusterqueue_through_the_jobs_localqueue(emu, body, tmp_path) -> None:
    seed_queues(emu, "team-a-queue", "team-a", [("on-demand", 1), ("spot", "2")])
    controller = start_controller(emu, cluster_settings(tmp_path))
    try:
        predict(emu, body, queued(with_cpu(tfjob("q", workers=1), worker="1", ps="500m"), "team-a-queue"))
        wait_for("allocated", lambda: allocated(emu, "q"))
        # 3 cores in all (1 + 2 over the flavors); the PS takes 0.5 whatever the W, a worker 1:
        # W = 3 (its own optimum) needs 3.5, W = 2 needs 2.5.
        assert allocated(emu, "q") == "2"
        assert allocation(emu, "q")["pool"] == "clusterqueue/team-a"
        assert sample(controller, "advisor_allocation_capacity", pool="clusterqueue/team-a", resource="cpu") == 3
        assert sample(controller, "advisor_allocation_used", pool="clusterqueue/team-a", resource="cpu") == 2.5
        assert sample(controller, "advisor_allocation_used", pool="clusterqueue/team-a", resource="workers") == 2
        calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls() if c.resource]
    finally:
        controller.stop()
    assert ("get", "kueue.x-k8s.io", "localqueues", "", NS) in calls
    assert ("get", "kueue.x-k8s.io", "clusterqueues", "", None) in calls  # cluster-scoped
    # the chart with cluster mode on grants them, even to a controller that watches one namespace
    assert_rbac_covers(calls, render_objects({"config": {"namespaces": [NS], "cluster_mode": True}}, namespace=NS))


def test_a_missing_clusterqueue_or_localqueue_leaves_the_job_sized_alone_with_a_warning(emu, body, tmp_path) -> None:
    seed_queues(emu, "orphan", "gone", None)
    settings = cluster_settings(tmp_path, mode="auto", auto_cooldown_s=0)
    controller = start_controller(emu, settings)
    try:
        predict(emu, body, queued(tfjob("lost", workers=1, dynamic=True), "orphan"),
                queued(tfjob("nowhere", workers=1), "no-such-queue"))
        wait_for("warnings", lambda: all(any(e[1] == "QuotaUnavailable" for e in events(emu, n))
                                         for n in ("lost", "nowhere")))
        (warning,) = [e for e in events(emu, "lost") if e[1] == "QuotaUnavailable"]
        assert warning[0] == "Warning" and "ClusterQueue gone (of LocalQueue ml/orphan) does not exist" in warning[2]
        (other,) = [e for e in events(emu, "nowhere") if e[1] == "QuotaUnavailable"]
        assert "LocalQueue ml/no-such-queue (the job's kueue.x-k8s.io/queue-name) does not exist" in other[2]
        wait_for("the reason on the job", lambda: allocation(emu, "lost").get("status") == "per-job")
        assert "ClusterQueue gone" in allocation(emu, "lost")["reason"] and allocated(emu, "lost") is None
        # per-job mode: auto mode resizes to the job's own recommendation, as without cluster mode
        wait_for("the per-job resize", lambda: workers(emu, "lost") == 3)
        assert controller.healthy() == (True, "ok")
        time.sleep(1.0)  # more reallocations (each reconcile of a predicted job may ask): one event each
        assert [e[1] for e in events(emu, "lost")].count("QuotaUnavailable") == 1
    finally:
        controller.stop()


def test_arrivals_within_the_debounce_make_one_reallocation(emu, body, tmp_path) -> None:
    # The debounce is long against the three predictions' spread (well under a second alone, a few
    # seconds on a loaded machine), and the requests' times are kept to say so if it was not.
    debounce_s = 6.0
    settings = cluster_settings(tmp_path, cluster_capacity={"workers": 12}, cluster_debounce_s=debounce_s,
                                resync_period_s=3600)
    controller = start_controller(emu, settings)
    asked: list[float] = []
    request = controller.allocation.request

    def kept_request(**kwargs: float) -> None:
        asked.append(time.monotonic())
        request(**kwargs)

    controller.allocation.request = kept_request  # type: ignore[method-assign]
    try:
        predict(emu, body, *(tfjob(n, workers=1) for n in ("x", "y", "z")))
        wait_for("all allocated", lambda: all(allocated(emu, n) == "3" for n in ("x", "y", "z")), timeout_s=30)
        time.sleep(debounce_s + 1.0)  # past another debounce: nothing else asked for a reallocation
        assert len(asked) >= 3, asked  # each job's prediction asked for one
        spread = asked[-1] - asked[0]
        assert spread < debounce_s, f"the requests spread over {spread:.1f} s, more than the debounce"
        assert sample(controller, "advisor_reallocations_total") == 1
    finally:
        controller.stop()


def test_auto_mode_resizes_within_the_allocation_and_leaves_an_untouched_job(emu, body, tmp_path) -> None:
    settings = cluster_settings(tmp_path, mode="auto", cluster_capacity={"workers": 2})
    controller = start_controller(emu, settings)
    try:
        predict(emu, body, tfjob("small", workers=4, dynamic=True),
                tfjob("big", workers=4, dynamic=True, annotations={PREFIX + "min-workers": "3"}))
        # small: its own optimum 3 does not fit in 2, W = 2 does: shrunk at once (it frees room)
        wait_for("small resized", lambda: workers(emu, "small") == 2)
        # the allocation annotation is its own patch, which may land just after the resize
        wait_for("small's allocation annotated", lambda: allocated(emu, "small") is not None)
        assert allocated(emu, "small") == "2"
        assert any(e[:2] == ("Normal", "Resized") and "settings: own cost-optimal W = 3; held at 2" in e[2]
                   for e in events(emu, "small"))
        # big: its minimum of 3 exceeds the capacity of 2: left at its request, untouched, saying why
        wait_for("big's share", lambda: allocation(emu, "big").get("status") == "untouched")
        big = allocation(emu, "big")
        assert big["reason"] == ("its minimum of 3 worker(s) exceeds the capacity (2 workers): "
                                 "left at its request, untouched")
        assert allocated(emu, "big") is None
        time.sleep(1.0)
        assert workers(emu, "big") == 4  # per-job sizing would have set 3
    finally:
        controller.stop()


def test_turning_cluster_mode_off_removes_the_allocation_from_the_jobs(emu, body, tmp_path) -> None:
    controller = start_controller(emu, cluster_settings(tmp_path, cluster_capacity={"workers": 2}))
    try:
        predict(emu, body, tfjob("j", workers=1))
        wait_for("allocated", lambda: allocated(emu, "j") == "2")
        controller.reconciler.settings = controller.settings.model_copy(update={"cluster_mode": False})
        controller.resync()
        wait_for("the annotations gone", lambda: ALLOCATION not in annotations(emu, "j")
                 and ALLOCATED not in annotations(emu, "j"))
        assert sample(controller, "advisor_allocated_workers", job_namespace=NS, tfjob="j") is None
        assert sample(controller, "advisor_allocation_capacity", pool="settings", resource="workers") is None
    finally:
        controller.stop()


def test_a_priority_that_is_not_a_number_fails_the_job_before_profiling(emu, tmp_path) -> None:
    controller = start_controller(emu, cluster_settings(tmp_path, cluster_capacity={"workers": 2}))
    try:
        create_tfjob(emu, tfjob("vip", annotations={PREFIX + "priority": "high"}))
        wait_for("Failed", lambda: phase(emu, "vip") == "Failed")
        assert annotations(emu, "vip")[PREFIX + "reason"] == (
            "InvalidPolicy: TFJob ml/vip: annotation training-advisor.io/priority='high' must be a number > 0")
        assert profiling_jobs(emu) == []
    finally:
        controller.stop()
