"""What cluster mode reads, on literal objects: a Kueue ClusterQueue's quota, a LocalQueue's
ClusterQueue, and what a job's pods request (pipeline/kueue.py, jobs/requests.py)."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.controller.jobs.kinds import parse_job
from advisor.controller.jobs.requests import job_requests, pod_requests
from advisor.controller.pipeline.kueue import cluster_queue_of, nominal_quota, queue_name
from advisor.errors import QuotaError, TFJobError
from tests.controller.tfjobs import pytorchjob, tfjob, with_uid

GI = 2.0 ** 30


def cluster_queue(groups: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "team-a"},
            "spec": {"namespaceSelector": {}, "resourceGroups": groups}}


def test_the_quota_is_summed_over_flavors_and_resource_groups() -> None:
    # Kueue's own example shape: two flavors for cpu/memory, one group for GPUs.
    queue = cluster_queue([
        {"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": 9},
                                                {"name": "memory", "nominalQuota": "36Gi"}]},
            {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "500m", "borrowingLimit": 10},
                                           {"name": "memory", "nominalQuota": "4Gi"}]}]},
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]},
    ])
    # 9 + 0.5 cores, 36 + 4 GiB, 8 GPUs; the borrowing limit is not capacity
    assert nominal_quota(queue) == {"cpu": 9.5, "memory": 40 * GI, "nvidia.com/gpu": 8.0}


@pytest.mark.parametrize(("groups", "complaint"), [
    ([], "lists no quota to share"),
    (None, "lists no quota to share"),
    ([{"flavors": "default"}], r"resourceGroups\[0\].flavors must be a list"),
    ([{"flavors": [{"name": "f"}]}], r"flavors\[0\].resources must be a list"),
    ([{"flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}], r"resources\[0\] \(cpu\): no nominalQuota"),
    ([{"flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}],
     r"\(cpu\): nominalQuota: cannot read the resource quantity 'lots'"),
    ([{"flavors": [{"name": "f", "resources": [{"nominalQuota": 1}]}]}], "must have a name"),
])
def test_a_quota_that_cannot_be_read_is_a_quota_error_naming_the_field(groups: Any, complaint: str) -> None:
    with pytest.raises(QuotaError, match=complaint) as caught:
        nominal_quota(cluster_queue(groups))
    assert str(caught.value).startswith("ClusterQueue team-a: ")


def test_a_local_queue_names_its_cluster_queue() -> None:
    local = {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}
    assert cluster_queue_of(local) == "team-a"
    with pytest.raises(QuotaError, match="LocalQueue ml/q: spec.clusterQueue must name a ClusterQueue"):
        cluster_queue_of({"metadata": {"name": "q", "namespace": "ml"}, "spec": {}})


def test_the_queue_label_wins_over_kueues_older_annotation() -> None:
    key = "kueue.x-k8s.io/queue-name"
    assert queue_name({key: "a"}, {key: "b"}) == "a"
    assert queue_name({}, {key: "b"}) == "b"
    assert queue_name({}, {}) is None and queue_name({key: ""}, {}) is None


def with_resources(obj: dict[str, Any], replica: str, resources: dict[str, Any], **pod: Any) -> dict[str, Any]:
    field = "pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "tfReplicaSpecs"
    spec = obj["spec"][field][replica]["template"]["spec"]
    spec["containers"][0]["resources"] = resources
    spec.update(pod)
    return obj


def test_a_worker_counts_its_template_and_the_parameter_servers_count_once_each() -> None:
    obj = with_uid(tfjob("j", workers=4, ps=2))
    with_resources(obj, "Worker", {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": 1}})
    with_resources(obj, "PS", {"requests": {"cpu": "500m"}})
    needs = job_requests(obj, parse_job(obj))
    # the GPU has a limit and no request: it requests its limit, as the API server defaults it
    assert needs.worker == {"cpu": 2.0, "memory": 4 * GI, "nvidia.com/gpu": 1.0, "pods": 1.0}
    assert needs.other == {"cpu": 1.0, "pods": 2.0}  # two PS pods of 0.5 cores


def test_init_containers_and_pod_overhead_count_as_kueue_counts_them() -> None:
    pod = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                          {"name": "b", "resources": {"requests": {"cpu": "500m"}}}],
           "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
           "overhead": {"cpu": "100m"}}
    # cpu: max(1 + 0.5, 2) + 0.1; memory: max(1Gi, 512Mi)
    assert pod_requests(pod, "pod") == pytest.approx({"cpu": 2.1, "memory": GI, "pods": 1.0})


def test_a_pytorchjob_counts_its_worker_template_and_nothing_else() -> None:
    obj = with_uid(pytorchjob("ddp", workers=3))
    with_resources(obj, "Worker", {"requests": {"nvidia.com/gpu": "1"}})
    with_resources(obj, "Master", {"requests": {"nvidia.com/gpu": "1"}})
    needs = job_requests(obj, parse_job(obj))
    assert needs.worker == {"nvidia.com/gpu": 1.0, "pods": 1.0} and needs.other == {}


def test_a_quantity_that_does_not_parse_names_its_place() -> None:
    obj = with_resources(with_uid(tfjob("j")), "Worker", {"requests": {"cpu": "two"}})
    with pytest.raises(TFJobError, match=r"TFJob ml/j: spec.tfReplicaSpecs.Worker.template.spec.containers\[0\]"
                                         r".resources.requests.cpu: cannot read the resource quantity 'two'"):
        job_requests(obj, parse_job(obj))
