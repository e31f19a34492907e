"""What a job's pods request, read from its pod templates: one worker's, and the rest of the job's.

Why: when the capacity the jobs share is in resources (a Kueue ClusterQueue's quota of cpu,
memory, ``nvidia.com/gpu``...), the allocator needs what one more worker takes and what the job
takes whatever its worker count (its parameter servers, an evaluator). A pod counts as Kueue
counts it: its containers' requests summed, an init container's where it asks more (init
containers run one at a time, before the others), plus the pod's ``overhead``; a resource with
a limit and no request requests its limit (the API server's default); and every pod counts one
``pods`` (a resource a ClusterQueue may limit). Every worker pod counts as the Worker template's
(a Chief's or Master's when the job has no Worker replicas).

Pure functions of the job's JSON, for every kind (``tfReplicaSpecs``, ``pytorchReplicaSpecs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.controller.jobs.tfjob import TFJobView
from advisor.core.units import UnitError, parse_quantity
from advisor.errors import TFJobError

REPLICA_FIELDS = ("tfReplicaSpecs", "pytorchReplicaSpecs")
WORKER_TYPES = ("Worker", "Chief", "Master")  # replicas that train (TFJobView.workers counts them)
PODS = "pods"


@dataclass(frozen=True)
class JobRequests:
    """Resource amounts (cores, bytes, devices, pods) of one worker pod, and of the job's other pods summed."""

    worker: Mapping[str, float] = field(default_factory=dict)
    other: Mapping[str, float] = field(default_factory=dict)


def job_requests(obj: Mapping[str, Any], view: TFJobView) -> JobRequests:
    """The requests of ``obj`` (the job ``view`` was parsed from); ``TFJobError`` names a quantity
    that does not parse."""
    where = f"{view.kind} {view.namespace}/{view.name}"
    spec = _mapping(obj.get("spec"))
    name = next((f for f in REPLICA_FIELDS if isinstance(spec.get(f), Mapping)), REPLICA_FIELDS[0])
    replicas = _mapping(spec.get(name))
    worker_type = next((t for t in WORKER_TYPES if t in view.spec_keys), None)
    worker: dict[str, float] = {}
    other: dict[str, float] = {}
    for kind, key in view.spec_keys.items():
        pod = pod_requests(_pod_spec(replicas.get(key)), f"{where}: spec.{name}.{key}.template.spec")
        if kind == worker_type:
            worker = pod
        elif kind not in WORKER_TYPES:  # PS, Evaluator: once per replica, whatever the worker count
            for resource, amount in pod.items():
                other[resource] = other.get(resource, 0.0) + amount * view.replicas.get(kind, 0)
    return JobRequests(worker, other)


def pod_requests(pod: Mapping[str, Any], where: str) -> dict[str, float]:
    """One pod's requests as Kueue counts them (module docstring)."""
    total = _sum(_container_requests(c, f"{where}.containers[{i}]")
                 for i, c in enumerate(_list(pod.get("containers"))))
    for i, c in enumerate(_list(pod.get("initContainers"))):
        for resource, amount in _container_requests(c, f"{where}.initContainers[{i}]").items():
            total[resource] = max(total.get(resource, 0.0), amount)
    for resource, amount in _quantities(_mapping(pod.get("overhead")), f"{where}.overhead").items():
        total[resource] = total.get(resource, 0.0) + amount
    total[PODS] = 1.0
    return total


def _container_requests(container: Any, where: str) -> dict[str, float]:
    resources = _mapping(_mapping(container).get("resources"))
    limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
    return {**_quantities(limits, f"{where}.resources.limits"), **_quantities(requests, f"{where}.resources.requests")}


def _quantities(amounts: Mapping[str, Any], where: str) -> dict[str, float]:
    out = {}
    for resource, text in amounts.items():
        try:
            out[str(resource)] = parse_quantity(text)
        except UnitError as exc:
            raise TFJobError(f"{where}.{resource}: {exc}") from None
    return out


def _sum(pods: Any) -> dict[str, float]:
    total: dict[str, float] = {}
    for amounts in pods:
        for resource, amount in amounts.items():
            total[resource] = total.get(resource, 0.0) + amount
    return total


def _pod_spec(replica: Any) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(replica).get("template")).get("spec"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
