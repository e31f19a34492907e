"""Kueue's queues as cluster mode reads them: which ClusterQueue a job's LocalQueue feeds, and its quota.

A job names its Kueue queue with the label ``kueue.x-k8s.io/queue-name`` (Kueue's older
annotation of the same name is read too): a LocalQueue in the job's namespace, whose
``spec.clusterQueue`` names the cluster-scoped ClusterQueue that holds the quota. The capacity is
the ClusterQueue's *nominal* quota, ``spec.resourceGroups[].flavors[].resources[].nominalQuota``,
summed over its flavors and resource groups (the allocator shares amounts, not flavors); what the
queue may borrow from its cohort is not counted, so the allocation never depends on another
queue's idle quota. Read only: Kueue stays in charge of admission.

Pure functions of the objects' JSON (API schema kueue.x-k8s.io/v1beta1); ``QuotaError`` names
the field that is not as Kueue defines it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.units import UnitError, parse_quantity
from advisor.errors import QuotaError

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queue_name(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The LocalQueue a job is submitted to, or None when it names none."""
    return labels.get(QUEUE_LABEL) or annotations.get(QUEUE_LABEL) or None


def cluster_queue_of(local_queue: Mapping[str, Any]) -> str:
    """The name of the ClusterQueue a LocalQueue feeds."""
    where = _where(local_queue, "LocalQueue")
    spec = local_queue.get("spec")
    name = spec.get("clusterQueue") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or not name:
        raise QuotaError(f"{where}: spec.clusterQueue must name a ClusterQueue, found {name!r}")
    return name


def nominal_quota(cluster_queue: Mapping[str, Any]) -> dict[str, float]:
    """Resource name -> nominal quota summed over every flavor of every resource group (cores,
    bytes, devices, pods, as ``parse_quantity`` reads them)."""
    where = _where(cluster_queue, "ClusterQueue")
    spec = cluster_queue.get("spec")
    groups = spec.get("resourceGroups") if isinstance(spec, Mapping) else None
    if not isinstance(groups, list) or not groups:
        raise QuotaError(f"{where}: spec.resourceGroups lists no quota to share")
    quota: dict[str, float] = {}
    for g, group in enumerate(groups):
        flavors = group.get("flavors") if isinstance(group, Mapping) else None
        if not isinstance(flavors, list):
            raise QuotaError(f"{where}: spec.resourceGroups[{g}].flavors must be a list")
        for f, flavor in enumerate(flavors):
            resources = flavor.get("resources") if isinstance(flavor, Mapping) else None
            if not isinstance(resources, list):
                raise QuotaError(f"{where}: spec.resourceGroups[{g}].flavors[{f}].resources must be a list")
            for r, resource in enumerate(resources):
                path = f"{where}: spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                name, amount = _resource(resource, path)
                quota[name] = quota.get(name, 0.0) + amount
    return quota


def _resource(resource: Any, path: str) -> tuple[str, float]:
    if not isinstance(resource, Mapping) or not isinstance(resource.get("name"), str) or not resource["name"]:
        raise QuotaError(f"{path}: must have a name")
    if "nominalQuota" not in resource:
        raise QuotaError(f"{path} ({resource['name']}): no nominalQuota")
    try:
        return resource["name"], parse_quantity(resource["nominalQuota"])
    except UnitError as exc:
        raise QuotaError(f"{path} ({resource['name']}): nominalQuota: {exc}") from None


def _where(obj: Mapping[str, Any], kind: str) -> str:
    meta = _mapping(obj.get("metadata"))
    namespace = meta.get("namespace")
    return f"{kind} {namespace + '/' if namespace else ''}{meta.get('name', '?')}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
