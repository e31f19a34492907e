"""The chart's RBAC grants exactly the API calls of helm/advisor/rbac-calls.yaml, in every mode,
and the coverage check (rbac_check.py) that the controller's end-to-end test will run on the
calls it records says yes and no where it should."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm_render import NAMESPACE, VALUE_SETS, merged_values, render_objects
from tests.deploy.rbac_check import (
    ApiCall,
    RbacError,
    assert_rbac_covers,
    assert_rbac_exact,
    declared_calls,
    excess_grants,
    load_rbac_calls,
    uncovered_calls,
)

RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rbac_grants_the_declared_calls_and_nothing_more(name: str) -> None:
    values = VALUE_SETS[name]
    calls = declared_calls(merged_values(values)["config"], NAMESPACE)
    assert_rbac_exact(calls, render_objects(values))


def test_rbac_calls_file_is_well_formed() -> None:
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
    for entry in load_rbac_calls():
        assert set(entry) <= {"group", "resource", "subresource", "verbs", "scope", "when", "why"}, entry
        assert set(entry["verbs"]) <= verbs and entry["verbs"], entry
        assert entry["scope"] in ("watched", "release", "cluster") and entry.get("when", "always") in (
            "always", "leader_election", "job_backend", "cluster_mode", "node_speeds"), entry
        assert entry["why"], "say why the controller needs it"


def test_job_backend_rules_exist_only_with_the_job_backend() -> None:
    def resources(values: dict[str, Any]) -> set[str]:
        return {r for o in render_objects(values) if o["kind"] in ("Role", "ClusterRole")
                for rule in o["rules"] for r in rule["resources"]}

    def release_rules(values: dict[str, Any]) -> set[tuple[str, str]]:
        return {(r, v) for o in render_objects(values)
                if o["kind"] == "Role" and o["metadata"]["name"] == "advisor-self"
                for rule in o["rules"] for r in rule["resources"] for v in rule["verbs"]}

    job_rules = {("jobs", "get"), ("jobs", "list"), ("jobs", "create"), ("jobs", "delete"), ("pods", "list"),
                 ("secrets", "create")}
    assert job_rules.isdisjoint(release_rules({}))
    assert release_rules({"config": {"prediction_backend": "job", "leader_election": False}}) == job_rules
    assert {"jobs", "pods", "pods/log"}.isdisjoint(resources({}))
    assert "pods/log" not in resources({"config": {"prediction_backend": "job"}})  # answers come over HTTP
    assert "leases" not in resources({"config": {"leader_election": False}})


def test_cluster_mode_adds_reading_kueues_queues_and_nothing_else() -> None:
    def rules(values: dict[str, Any]) -> set[tuple[str, str, str, str | None, str]]:
        return {(o["kind"], o["metadata"]["name"], r, o["metadata"].get("namespace"), v)
                for o in render_objects(values) if o["kind"] in ("Role", "ClusterRole")
                for rule in o["rules"] for r in rule["resources"] for v in rule["verbs"]}

    for namespaces in ([], ["ml-a"]):
        off = rules({"config": {"namespaces": namespaces}})
        on = rules({"config": {"namespaces": namespaces, "cluster_mode": True}})
        watched = ("ClusterRole", "advisor", None) if not namespaces else ("Role", "advisor", "ml-a")
        # LocalQueues where the jobs are; ClusterQueues are cluster-scoped: a ClusterRole of their own
        assert on - off == {(watched[0], watched[1], "localqueues", watched[2], "get"),
                            ("ClusterRole", "advisor-cluster-scoped", "clusterqueues", None, "get")}
        assert off <= on


def test_no_rbac_objects_when_disabled() -> None:
    objects = render_objects({"rbac": {"create": False}})
    assert not [o for o in objects if o["kind"] in RBAC_KINDS]


def test_namespaced_mode_creates_no_cluster_wide_rights() -> None:
    objects = render_objects({"config": {"namespaces": ["ml-a", "ml-b"]}})
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "Role")
    assert roles == [(NAMESPACE, "advisor-self"), ("ml-a", "advisor"), ("ml-b", "advisor")]


# --- the check itself, on hand-written call lists ---------------------------------------------

CLUSTER_MODE: dict[str, Any] = {}
NAMESPACED_JOB_MODE = {"config": {"namespaces": ["ml-a", "ml-b"], "prediction_backend": "job"}}


@pytest.fixture(scope="module")
def cluster_objects() -> list[dict[str, Any]]:
    return render_objects(CLUSTER_MODE)


@pytest.fixture(scope="module")
def namespaced_objects() -> list[dict[str, Any]]:
    return render_objects(NAMESPACED_JOB_MODE)


def test_covers_what_a_controller_in_cluster_mode_does(cluster_objects: list[dict[str, Any]]) -> None:
    calls = [
        ("list", "kubeflow.org", "tfjobs", "", None),  # the cluster-wide list and watch
        ("watch", "kubeflow.org", "tfjobs", "", None),
        ("create", "kubeflow.org", "tfjobs", "", "team-x"),  # the profiling run, in the job's namespace
        ("patch", "kubeflow.org", "tfjobs", "", "team-x"),
        ("create", "", "configmaps", "", "team-x"),  # the profile's record
        ("get", "", "configmaps", "", "team-x"),
        ("create", "", "events", "", "team-x"),
        ("get", "coordination.k8s.io", "leases", "", NAMESPACE),
        ("update", "coordination.k8s.io", "leases", "", NAMESPACE),
    ]
    assert_rbac_covers(calls, cluster_objects)


@pytest.mark.parametrize(
    "call",
    [
        ApiCall("delete", "", "pods", "", "team-x"),  # never granted
        # no right on Secrets in users' namespaces: upload tokens are derived from one key (issue 15)
        ApiCall("create", "", "secrets", "", "team-x"),
        ApiCall("list", "", "secrets", "", None),
        ApiCall("update", "kubeflow.org", "tfjobs", "", "team-x"),  # patch is granted, update is not
        ApiCall("patch", "kubeflow.org", "tfjobs", "status", "team-x"),  # a subresource needs its own rule
        ApiCall("update", "coordination.k8s.io", "leases", "", "team-x"),  # leases only in the release namespace
        ApiCall("create", "batch", "jobs", "", NAMESPACE),  # the job backend is off
    ],
)
def test_reports_what_a_cluster_mode_install_does_not_grant(call: ApiCall,
                                                            cluster_objects: list[dict[str, Any]]) -> None:
    calls = [ApiCall("list", "kubeflow.org", "tfjobs", "", None), call]
    with pytest.raises(RbacError, match="does not grant 1 call") as caught:
        assert_rbac_covers(calls, cluster_objects)
    assert str(call) in str(caught.value)


def test_covers_what_a_namespaced_job_backend_controller_does(namespaced_objects: list[dict[str, Any]]) -> None:
    calls = [
        ("list", "kubeflow.org", "tfjobs", "", "ml-a"),
        ("watch", "kubeflow.org", "tfjobs", "", "ml-b"),
        ("delete", "", "configmaps", "", "ml-b"),
        ("create", "batch", "jobs", "", NAMESPACE),
        ("get", "batch", "jobs", "", NAMESPACE),
        ("list", "", "pods", "", NAMESPACE),
        ("create", "", "secrets", "", NAMESPACE),  # the prediction Jobs' tokens
    ]
    assert_rbac_covers(calls, namespaced_objects)


@pytest.mark.parametrize(
    "call",
    [
        ApiCall("list", "kubeflow.org", "tfjobs", "", None),  # all namespaces: only listed ones are granted
        ApiCall("get", "kubeflow.org", "tfjobs", "", "ml-c"),  # a namespace not watched
        ApiCall("get", "", "pods", "", NAMESPACE),  # pods: list only
        ApiCall("get", "", "pods", "log", NAMESPACE),  # logs are never read: answers come over HTTP
        ApiCall("create", "", "secrets", "", "ml-c"),  # secrets: the release namespace only
        ApiCall("create", "", "secrets", "", "ml-a"),  # not even in a watched namespace
        ApiCall("create", "batch", "jobs", "", "ml-a"),
    ],
)
def test_reports_what_a_namespaced_install_does_not_grant(call: ApiCall,
                                                          namespaced_objects: list[dict[str, Any]]) -> None:
    assert uncovered_calls([call], namespaced_objects) == [call]
    with pytest.raises(RbacError):
        assert_rbac_covers([call], namespaced_objects)


def test_exact_check_reports_rights_no_call_uses(cluster_objects: list[dict[str, Any]]) -> None:
    calls = [c for c in declared_calls(merged_values(CLUSTER_MODE)["config"], NAMESPACE)
             if (c.verb, c.resource) != ("delete", "tfjobs")]
    extra = excess_grants(calls, cluster_objects)
    assert [(g.verb, g.resource, g.namespace) for g in extra] == [("delete", "tfjobs", None)]
    with pytest.raises(RbacError, match="grants 1 permission"):
        assert_rbac_exact(calls, cluster_objects)


def test_exact_check_rejects_wildcards() -> None:
    objects = [
        {"kind": "Deployment", "metadata": {"name": "a", "namespace": "ns"},
         "spec": {"template": {"spec": {"serviceAccountName": "sa"}}}},
        {"kind": "ClusterRole", "metadata": {"name": "r"},
         "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["*"], "verbs": ["get"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "r"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
         "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]},
    ]
    calls = [ApiCall("get", "kubeflow.org", "tfjobs", "", "x")]
    assert_rbac_covers(calls, objects)  # a wildcard covers...
    with pytest.raises(RbacError, match="no call needs"):
        assert_rbac_exact(calls, objects)  # ...but is never least privilege


def test_bindings_to_another_account_do_not_count(cluster_objects: list[dict[str, Any]]) -> None:
    call = ApiCall("get", "kubeflow.org", "tfjobs", "", "team-x")
    assert uncovered_calls([call], cluster_objects, service_account=("someone-else", NAMESPACE)) == [call]


def _calls_the_code_makes() -> set[tuple[str, str, str]]:
    """(verb, group, resource) of every ``Kube`` method some product module outside kube/client.py calls.

    Read from the source: each ``Kube`` method's ``self._call("verb", ..., RES)``,
    ``self._send("verb", ..., RES)``, ``self._list(RES)``, ``self._watch(RES)``,
    ``self._merge_patch(RES)`` and ``self._delete(RES)``, kept only where ``.method(`` appears elsewhere in ``advisor/``. A method
    nobody calls grants nothing, so a verb only it used is a verb too many.
    """
    import ast
    import re

    from advisor.controller.kube import client as kube_module

    adapter = Path(kube_module.__file__).resolve()
    package = adapter.parents[2]  # advisor/
    source = adapter.read_text()
    elsewhere = "\n".join(p.read_text() for p in package.rglob("*.py") if p.resolve() != adapter)
    implied = {"_list": "list", "_watch": "watch", "_merge_patch": "patch", "_delete": "delete"}
    made: set[tuple[str, str, str]] = set()
    kube_class = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Kube")
    for method in (n for n in kube_class.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")):
        if not re.search(rf"\.{method.name}\b", elsewhere):
            continue
        for call in (n for n in ast.walk(method) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            helper, args = call.func.attr, call.args
            res_names = [a.id for a in args if isinstance(a, ast.Name) and a.id.isupper()]
            if not res_names:
                continue
            res = getattr(kube_module, res_names[0])
            if helper in ("_call", "_send") and isinstance(args[0], ast.Constant):
                made.add((str(args[0].value), res.group, res.plural))
            elif helper in implied:
                made.add((implied[helper], res.group, res.plural))
    return made


def test_every_declared_call_is_one_the_code_makes() -> None:
    """The other half of least privilege: the end-to-end test proves each call made is granted;
    this proves each grant is used, so a verb left behind by deleted code fails here."""
    declared = {(verb, e["group"], e["resource"]) for e in load_rbac_calls() for verb in e["verbs"]}
    made = _calls_the_code_makes()
    assert declared - made == set(), "declared in rbac-calls.yaml, but no code makes the call"
    assert made - declared == set(), "made by the code, but not declared in rbac-calls.yaml"


# --- the docs' RBAC tables say what the chart renders -------------------------------------------

RBAC_TABLE_HEADER = "| API | verbs | where | when |"
RBAC_DOCS = (Path(__file__).resolve().parents[2] / "helm" / "advisor" / "README.md",
             Path(__file__).resolve().parents[2] / "docs" / "deploy.md")
WHERE = {"watched namespaces": "watched", "release namespace": "release", "cluster-scoped": "cluster"}
WHEN = {"always": "always", "`config.leader_election`": "leader_election",
        "`config.prediction_backend: job`": "job_backend", "`config.cluster_mode`": "cluster_mode",
        "`config.node_speeds`": "node_speeds"}
NODE_SPEEDS = {"node.kubernetes.io/instance-type": {"p3.2xlarge": {"speed": 1.0}}}


def documented_rbac(path: Path) -> set[tuple[str, str, str, str, frozenset[str]]]:
    """(group, resource, where, when, verbs) of each row of the file's RBAC table."""
    text = path.read_text()
    assert RBAC_TABLE_HEADER in text, f"{path.name} has no RBAC table ({RBAC_TABLE_HEADER})"
    rows = text.split(RBAC_TABLE_HEADER, 1)[1].strip().splitlines()[1:]  # after the |---| line
    table = set()
    for row in rows:
        if not row.startswith("|"):
            break
        api, verbs, where, when = (cell.strip() for cell in row.strip("|").split("|"))
        names = re.findall(r"`([^`]+)`", api)
        group, resource = (names[0], names[1]) if len(names) > 1 else ("", names[0])
        table.add((group, resource, WHERE[where], WHEN[when], frozenset(v.strip() for v in verbs.split(","))))
    return table


def rendered_rbac() -> set[tuple[str, str, str, str, frozenset[str]]]:
    """The same rows, from the chart's rendered roles: each rule's condition found by switching it on alone."""
    base = {"leader_election": False, "prediction_backend": "process"}
    configs = {"always": base, "leader_election": {**base, "leader_election": True},
               "job_backend": {**base, "prediction_backend": "job"}, "cluster_mode": {**base, "cluster_mode": True},
               "node_speeds": {**base, "node_speeds": NODE_SPEEDS}}

    def grants(config: dict[str, Any]) -> set[tuple[str, str, str, str]]:
        out = set()
        for obj in render_objects({"config": config}):
            if obj["kind"] not in ("Role", "ClusterRole"):
                continue
            where = ("release" if obj["kind"] == "Role" else
                     "cluster" if obj["metadata"]["name"].endswith("-cluster-scoped") else "watched")
            for rule in obj["rules"]:
                out |= {(g, r, where, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
        return out

    always = grants(configs["always"])
    rows: dict[tuple[str, str, str, str], set[str]] = {}
    for when, config in configs.items():
        for group, resource, where, verb in grants(config) - (set() if when == "always" else always):
            rows.setdefault((group, resource, where, when), set()).add(verb)
    return {(*key, frozenset(verbs)) for key, verbs in rows.items()}


@pytest.mark.parametrize("doc", RBAC_DOCS, ids=lambda p: p.name)
def test_the_docs_rbac_table_is_what_the_chart_renders(doc: Path) -> None:
    documented, rendered = documented_rbac(doc), rendered_rbac()
    assert documented == rendered, (f"{doc.name}: documented but not rendered {sorted(documented - rendered)}; "
                                    f"rendered but not documented {sorted(rendered - documented)}")
