"""The resources the emulator serves, as one table, and the discovery documents built from it.

Each row says how the real apiserver's strategy for that resource behaves where it matters to a
client: status subresource, whether ``metadata.generation`` is kept, whether an update without
``resourceVersion`` is allowed, what DELETE returns and the default garbage-collection policy.
The values come from the resources' registry strategies in kubernetes/kubernetes
(``pkg/registry/...`` and ``apiextensions-apiserver/pkg/registry/customresource``). Add a row to
serve another resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    generation: bool = False  # the strategy sets generation=1 on create and bumps it
    unconditional_update: bool = True  # PUT without resourceVersion allowed (False for CRDs)
    custom: bool = False  # a CRD: no strategic merge patch, list items keep kind/apiVersion
    return_deleted_object: bool = False  # DELETE answers with the object, not a Status
    orphan_by_default: bool = False  # default propagation is Orphan (batch/v1 Jobs)
    log_subresource: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``tfjobs.kubeflow.org`` or ``secrets``: the name the apiserver's messages use."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """``TFJob.kubeflow.org`` or ``Secret``: the name used in Invalid (422) messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def subresources(self) -> tuple[str, ...]:
        return ("status",) * self.status_subresource + ("log",) * self.log_subresource


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "kubeflow.org", "v1", "tfjobs", "TFJob", status_subresource=True, generation=True,
        unconditional_update=False, custom=True, short_names=("tfjob",),
    ),
    ResourceType(  # training-operator v1.9's CRD: like a TFJob's (status subresource, generation)
        "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", status_subresource=True, generation=True,
        unconditional_update=False, custom=True, short_names=("pytorchjob",),
    ),
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True,
                 return_deleted_object=True, short_names=("ns",)),
    ResourceType("", "v1", "secrets", "Secret"),
    ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "events", "Event", short_names=("ev",)),
    ResourceType("", "v1", "pods", "Pod", status_subresource=True, return_deleted_object=True,
                 log_subresource=True, short_names=("po",)),
    ResourceType("", "v1", "nodes", "Node", namespaced=False, status_subresource=True, short_names=("no",)),
    ResourceType("batch", "v1", "jobs", "Job", status_subresource=True, generation=True,
                 orphan_by_default=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    # Kueue's queues (kueue.x-k8s.io/v1beta1 CRDs, status subresource): a namespaced LocalQueue
    # points at a cluster-scoped ClusterQueue, which holds the quota
    ResourceType("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", status_subresource=True, generation=True,
                 unconditional_update=False, custom=True, short_names=("queue", "queues", "lq")),
    ResourceType("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", namespaced=False,
                 status_subresource=True, generation=True, unconditional_update=False, custom=True,
                 short_names=("cq",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
)

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def find(group: str, version: str, plural: str) -> ResourceType | None:
    for res in RESOURCES:
        if (res.group, res.version, res.plural) == (group, version, plural):
            return res
    return None


def version_document() -> dict[str, Any]:
    return {
        "major": "1", "minor": "31", "gitVersion": "v1.31.0-advisor-emulator",
        "gitCommit": "0000000", "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z",
        "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64",
    }


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [api_group(group) for group in _groups()]}


def api_group(group: str) -> dict[str, Any]:
    versions = sorted({r.version for r in RESOURCES if r.group == group})
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries,
            "preferredVersion": entries[0]}


def resource_list(group: str, version: str, absent: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The group version's resources; ``absent`` (qualified names) are left out, as if their CRD
    were not installed."""
    rows = [r for r in RESOURCES if (r.group, r.version) == (group, version) and r.qualified not in absent]
    if not rows:
        return None
    resources: list[dict[str, Any]] = []
    for r in rows:
        resources.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                          "kind": r.kind, "verbs": VERBS, "shortNames": list(r.short_names)})
        for sub in r.subresources:
            verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
            resources.append({"name": f"{r.plural}/{sub}", "singularName": "", "kind": r.kind,
                              "namespaced": r.namespaced, "verbs": verbs})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _groups() -> list[str]:
    seen: list[str] = []
    for r in RESOURCES:
        if r.group and r.group not in seen:
            seen.append(r.group)
    return seen
