"""Does the chart's RBAC grant the controller's Kubernetes API calls, and nothing more?

A call is what a Kubernetes API emulator records: (verb, group, resource, subresource,
namespace), with namespace ``None`` for a request across all namespaces (a cluster-wide list or
watch) or on a cluster-scoped resource. A call in namespace N is granted by a ClusterRoleBinding,
or by a RoleBinding in N, to the controller's ServiceAccount; a call with namespace ``None`` only
by a ClusterRoleBinding. Rules with ``resourceNames`` grant only calls on those names, and the
recorded calls carry no name, so such rules never count as covering (none is rendered today).

``assert_rbac_covers`` is the check the controller's end-to-end test runs on the calls it
recorded; ``assert_rbac_exact`` adds "nothing more" for a complete list of calls, such as the
one ``helm/advisor/rbac-calls.yaml`` declares (``declared_calls``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

RBAC_CALLS_FILE = Path(__file__).resolve().parents[2] / "helm" / "advisor" / "rbac-calls.yaml"
RBAC_GROUP = "rbac.authorization.k8s.io"


class ApiCall(NamedTuple):
    verb: str
    group: str  # "" for the core group
    resource: str
    subresource: str = ""
    namespace: str | None = None  # None: all namespaces, or a cluster-scoped resource

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{self.verb} {self.group or 'core'}/{self.resource_path} in {where}"


class Grant(NamedTuple):
    """One verb on one resource, in one namespace (None: every namespace), from one role."""

    verb: str
    group: str
    resource: str  # with "/subresource" where the rule names one
    namespace: str | None
    role: str  # "ClusterRole/x" or "Role/ns/x", for messages

    def covers(self, call: ApiCall) -> bool:
        return (
            _matches(self.verb, call.verb)
            and _matches(self.group, call.group)
            and _matches(self.resource, call.resource_path)
            and (self.namespace is None or self.namespace == call.namespace)
        )


class RbacError(AssertionError):
    """The rendered RBAC and the calls disagree (the message lists every difference)."""


def _matches(granted: str, wanted: str) -> bool:
    return granted == "*" or granted == wanted


def as_calls(calls: Iterable[ApiCall | Sequence[Any]]) -> list[ApiCall]:
    """Accept ApiCalls or plain tuples (verb, group, resource, subresource, namespace)."""
    return [c if isinstance(c, ApiCall) else ApiCall(*c) for c in calls]


def controller_service_account(objects: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """(name, namespace) of the ServiceAccount the rendered Deployment runs as."""
    deployments = [o for o in objects if o.get("kind") == "Deployment"]
    if len(deployments) != 1:
        raise RbacError(f"expected one Deployment in the rendered chart, found {len(deployments)}")
    dep = deployments[0]
    name = dep["spec"]["template"]["spec"].get("serviceAccountName", "default")
    return name, dep["metadata"]["namespace"]


def grants(objects: Sequence[Mapping[str, Any]], service_account: tuple[str, str]) -> list[Grant]:
    """Every (verb, group, resource, namespace) the bindings in ``objects`` give ``service_account``."""
    roles = {_role_key(o): o for o in objects if o.get("kind") in ("Role", "ClusterRole")}
    result: list[Grant] = []
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding") or not _binds(binding, service_account):
            continue
        namespace = binding["metadata"].get("namespace") if kind == "RoleBinding" else None
        ref = binding["roleRef"]
        ref_ns = namespace if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], ref_ns, ref["name"]))
        if role is None:
            continue  # a role the chart does not render grants nothing we can see
        label = f"{ref['kind']}/{ref_ns + '/' if ref_ns else ''}{ref['name']}"
        for rule in role.get("rules") or []:
            if rule.get("resourceNames") or rule.get("nonResourceURLs"):
                continue
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        result.append(Grant(verb, group, resource, namespace, label))
    return result


def _role_key(role: Mapping[str, Any]) -> tuple[str, str | None, str]:
    namespace = role["metadata"].get("namespace") if role["kind"] == "Role" else None
    return role["kind"], namespace, role["metadata"]["name"]


def _binds(binding: Mapping[str, Any], service_account: tuple[str, str]) -> bool:
    name, namespace = service_account
    default_ns = binding["metadata"].get("namespace")
    return any(
        s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace", default_ns) == namespace
        for s in binding.get("subjects") or []
    )


def uncovered_calls(calls: Iterable[ApiCall | Sequence[Any]], objects: Sequence[Mapping[str, Any]],
                    service_account: tuple[str, str] | None = None) -> list[ApiCall]:
    granted = grants(objects, service_account or controller_service_account(objects))
    return [c for c in as_calls(calls) if not any(g.covers(c) for g in granted)]


def excess_grants(calls: Iterable[ApiCall | Sequence[Any]], objects: Sequence[Mapping[str, Any]],
                  service_account: tuple[str, str] | None = None) -> list[Grant]:
    """Grants no call uses, and every wildcard grant (least privilege names each verb and resource)."""
    wanted = as_calls(calls)
    granted = grants(objects, service_account or controller_service_account(objects))
    return [
        g for g in granted
        if "*" in (g.verb, g.group, g.resource) or not any(g.covers(c) for c in wanted)
    ]


def assert_rbac_covers(calls: Iterable[ApiCall | Sequence[Any]], rendered_objects: Sequence[Mapping[str, Any]],
                       service_account: tuple[str, str] | None = None) -> None:
    """Raise RbacError listing every call the rendered RBAC does not grant the controller."""
    missing = uncovered_calls(calls, rendered_objects, service_account)
    if missing:
        lines = "\n  ".join(str(c) for c in missing)
        raise RbacError(f"the chart's RBAC does not grant {len(missing)} call(s) the controller makes:\n  {lines}\n"
                        f"add them to {RBAC_CALLS_FILE.relative_to(RBAC_CALLS_FILE.parents[2])}")


def assert_rbac_exact(calls: Iterable[ApiCall | Sequence[Any]], rendered_objects: Sequence[Mapping[str, Any]],
                      service_account: tuple[str, str] | None = None) -> None:
    """``assert_rbac_covers`` and: every grant is used by some call, and none is a wildcard."""
    wanted = as_calls(calls)
    assert_rbac_covers(wanted, rendered_objects, service_account)
    extra = excess_grants(wanted, rendered_objects, service_account)
    if extra:
        lines = "\n  ".join(f"{g.verb} {g.group or 'core'}/{g.resource} in {g.namespace or 'all namespaces'} "
                            f"({g.role})" for g in extra)
        raise RbacError(f"the chart's RBAC grants {len(extra)} permission(s) no call needs:\n  {lines}")


def load_rbac_calls(path: Path = RBAC_CALLS_FILE) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = yaml.safe_load(path.read_text())["calls"]
    return calls


def declared_calls(config: Mapping[str, Any], release_namespace: str,
                   spec: Sequence[Mapping[str, Any]] | None = None) -> list[ApiCall]:
    """The calls rbac-calls.yaml declares, made concrete for these settings (the chart's ``config``)."""
    conditions = {
        "always": True,
        "leader_election": bool(config.get("leader_election", True)),
        "job_backend": config.get("prediction_backend", "process") == "job",
        "cluster_mode": bool(config.get("cluster_mode", False)),
        "node_speeds": bool(config.get("node_speeds")),
    }
    watched: list[str | None] = list(config.get("namespaces") or []) or [None]
    scopes: dict[str, list[str | None]] = {"watched": watched, "release": [release_namespace], "cluster": [None]}
    result = []
    for entry in spec if spec is not None else load_rbac_calls():
        if not conditions[entry.get("when", "always")]:
            continue
        namespaces = scopes[entry["scope"]]
        for namespace in namespaces:
            for verb in entry["verbs"]:
                result.append(ApiCall(verb, entry["group"], entry["resource"], entry.get("subresource", ""), namespace))
    return result
