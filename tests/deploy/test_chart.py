"""The Helm chart, rendered by the real Helm engine: lint-clean, valid Kubernetes objects for a
current Kubernetes version, hardened, and consistent with the controller's settings model."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    helm,
    merged_values,
    only,
    render,
    render_objects,
)

# Chart-managed settings: set from other values, never in `config` (see values.yaml).
CHART_MANAGED = {"http_port", "metrics_port", "store_path", "lease_namespace", "identity", "kubeconfig", "kube_context",
                 "ingest_key", "ingest_key_file"}
# Optional settings whose `None` the chart writes as an empty value ("" or 0) and leaves out of
# the settings file, so the controller's own default applies.
EMPTY_MEANS_UNSET = {"bandwidth": "", "queue": "", "budget_per_hour": 0, "prediction_job_image": ""}
# prometheus-operator and cert-manager custom resources: kubernetes-validate ships no schema for them.
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Certificate"}


@pytest.fixture(params=sorted(VALUE_SETS))
def value_set(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, VALUE_SETS[request.param]


def test_lint_is_clean(value_set: tuple[str, dict[str, Any]]) -> None:
    report = helm().lint(CHART, value_set[1] or None, strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert report["errors"] == [] and problems == [], report


def test_every_object_is_valid_for_current_kubernetes(value_set: tuple[str, dict[str, Any]]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    version = kv.latest_version()
    assert tuple(map(int, version.split(".")[:2])) >= (1, 30), f"kubernetes-validate's schemas are old: {version}"
    objects = render_objects(value_set[1])
    for obj in objects:
        if obj["kind"] in OPERATOR_KINDS:
            _check_operator_object(obj)  # structural check only, see OPERATOR_KINDS
            continue
        try:
            kv.validate(obj, version, strict=True)  # strict: unknown fields are errors too
        except kv.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for Kubernetes {version}: {exc.message} "
                        f"at {'/'.join(map(str, exc.path))}")
        assert obj["metadata"].get("namespace") or obj["kind"] in ("ClusterRole", "ClusterRoleBinding"), obj["kind"]


def _check_operator_object(obj: dict[str, Any]) -> None:
    if obj["kind"] == "Certificate":
        assert obj["apiVersion"] == "cert-manager.io/v1"
        assert set(obj["spec"]) >= {"secretName", "dnsNames", "issuerRef"} and obj["spec"]["issuerRef"]["name"]
        return
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    if obj["kind"] == "ServiceMonitor":
        (endpoint,) = obj["spec"]["endpoints"]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        assert obj["spec"]["selector"]["matchLabels"]
    elif obj["kind"] == "PodMonitor":
        (endpoint,) = obj["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] and endpoint["path"] == "/metrics"
        # the TFJob's name becomes the tfjob label the alert and the dashboard join on
        assert {"sourceLabels": ["__meta_kubernetes_pod_label_training_kubeflow_org_job_name"],
                "targetLabel": "tfjob"} in endpoint["relabelings"]
        assert {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "job_namespace"} in endpoint["relabelings"]
        kinds = {e["key"]: e.get("values") for e in obj["spec"]["selector"]["matchExpressions"]}
        assert kinds == {"training.kubeflow.org/job-name": None,  # the training operator's replica types, lower case
                         "training.kubeflow.org/replica-type": ["worker", "chief", "master"]}
    else:
        assert obj["spec"]["groups"] and all(rule["expr"] for g in obj["spec"]["groups"] for rule in g["rules"])


def test_optional_objects_follow_their_switches() -> None:
    kinds = lambda values: sorted(o["kind"] for o in render_objects(values))  # noqa: E731
    assert kinds({}) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "Deployment",
                         "PersistentVolumeClaim", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount"]
    bare = kinds({"rbac": {"create": False}, "serviceAccount": {"create": False}, "dashboard": {"enabled": False},
                  "persistence": {"enabled": False}, "ingestKey": {"existingSecret": "mine"}})
    assert bare == ["ConfigMap", "Deployment", "Service"]
    monitored = kinds({"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                       "trainingPodMonitor": {"enabled": True}})
    assert "ServiceMonitor" in monitored and "PrometheusRule" in monitored and "PodMonitor" in monitored
    watched = {"config": {"namespaces": ["ml", "research"]}, "trainingPodMonitor": {"enabled": True}}
    assert only(render_objects(watched), "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["ml", "research"]}
    everywhere = only(render_objects({"trainingPodMonitor": {"enabled": True}}), "PodMonitor")
    assert everywhere["spec"]["namespaceSelector"] == {"any": True}
    claimed = render_objects({"persistence": {"existingClaim": "my-store"}})
    assert not [o for o in claimed if o["kind"] == "PersistentVolumeClaim"]
    volumes = only(claimed, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "my-store"}} in volumes


def test_deployment_is_hardened_and_probed(value_set: tuple[str, dict[str, Any]]) -> None:
    values = merged_values(value_set[1])
    pod = only(render_objects(value_set[1]), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["args"] == ["controller"]  # the image's ENTRYPOINT is `advisor`
    assert container["ports"] == [{"name": "http", "containerPort": values["containerPort"], "protocol": "TCP"},
                                  {"name": "metrics", "containerPort": values["metricsPort"], "protocol": "TCP"}]
    scheme = {"scheme": "HTTPS"} if values.get("tls", {}).get("enabled") else {}
    # the probes go to the metrics port, which the controller serves them on (not the ingest port)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", **scheme}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", **scheme}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/tmp"] == "tmp" and mounts[values["persistence"]["mountPath"]] == "data"
    assert Path(env["ADVISOR_CONFIG_FILE"]["value"]).parent == Path(next(p for p, n in mounts.items() if n == "config"))


def test_service_exposes_the_ingest_and_metrics_ports(value_set: tuple[str, dict[str, Any]]) -> None:
    values = merged_values(value_set[1])
    objects = render_objects(value_set[1])
    ingest, metrics = only(objects, "Service")["spec"]["ports"]
    assert (ingest["name"], ingest["port"], ingest["targetPort"]) == ("http", values["service"]["port"], "http")
    assert (metrics["name"], metrics["port"], metrics["targetPort"]) == (
        "metrics", values["service"]["metricsPort"], "metrics")
    if values["serviceMonitor"]["enabled"]:  # Prometheus scrapes the metrics port, never ingest
        assert [e["port"] for e in only(objects, "ServiceMonitor")["spec"]["endpoints"]] == ["metrics"]
    selector = only(objects, "Service")["spec"]["selector"]
    labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def rendered_settings(objects: list[dict[str, Any]]) -> dict[str, Any]:
    configmaps = [o for o in objects if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    assert len(configmaps) == 1
    settings: dict[str, Any] = yaml.safe_load(configmaps[0]["data"]["config.yaml"])
    return settings


def test_settings_file_is_accepted_by_the_controller(value_set: tuple[str, dict[str, Any]], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings_mod = pytest.importorskip("advisor.controller.settings", reason="controller dependencies missing")
    values = merged_values(value_set[1])
    objects = render_objects(value_set[1])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(rendered_settings(objects)))
    for name in [n for n in os.environ if n.startswith("ADVISOR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(settings_mod.CONFIG_FILE_ENV, str(path))  # restored after the test
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    settings = settings_mod.load_settings(config_file=path)

    fullname = only(objects, "Service")["metadata"]["name"]
    scheme = "https" if values["tls"]["enabled"] else "http"
    expected_ingest = values["config"]["ingest_url"] or f"{scheme}://{fullname}.{NAMESPACE}.svc:{values['service']['port']}"
    assert settings.ingest_url == expected_ingest
    assert settings.http_port == values["containerPort"]
    assert settings.metrics_port == values["metricsPort"] != settings.http_port
    assert settings.store_path.parent == Path(values["persistence"]["mountPath"])
    assert settings.namespaces == values["config"]["namespaces"]
    assert settings.prediction_backend.value == values["config"]["prediction_backend"]
    if settings.prediction_backend.value == "job":  # the prediction Jobs run the controller's image
        pod = only(objects, "Deployment")["spec"]["template"]["spec"]
        assert settings.prediction_job_image == pod["containers"][0]["image"]
        assert settings.prediction_job_image_pull_secrets == [s["name"] for s in pod.get("imagePullSecrets", [])]


def test_defaults_match_the_controller() -> None:
    """values.yaml's `config` and values.schema.json name exactly the operator-set settings, with
    the controller's own defaults, so `helm install` without values behaves as documented."""
    settings_mod = pytest.importorskip("advisor.controller.settings", reason="controller dependencies missing")
    fields = settings_mod.ControllerSettings.model_fields
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    operator_set = set(fields) - CHART_MANAGED
    assert set(schema["properties"]) == operator_set
    assert set(defaults) == operator_set
    code = settings_mod.ControllerSettings.model_construct().model_dump(mode="json")
    for name in operator_set - {"ingest_url"}:
        chart_default = defaults[name]
        code_default = code[name]
        if code_default is None:
            assert chart_default == EMPTY_MEANS_UNSET[name], name
        else:
            assert chart_default == code_default, name
    # The settings' ingest_url default is what the chart renders for `helm install advisor -n advisor-system`.
    rendered = rendered_settings(render_objects({}, release=RELEASE, namespace=NAMESPACE))
    assert rendered["ingest_url"] == code["ingest_url"]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"config": {"mode": "autopilot"}}, "/config/mode"),
        ({"config": {"max_worker": 8}}, "max_worker"),  # a typo: unknown keys are rejected
        ({"config": {"max_workers": 0}}, "/config/max_workers"),
        ({"config": {"prices": {"worker_per_hour": -1}}}, "/config/prices/worker_per_hour"),
        ({"config": {"namespaces": ["ML_Team"]}}, "/config/namespaces/0"),
        ({"config": {"prediction_backend": "lambda"}}, "/config/prediction_backend"),
        ({"config": {"node_speeds": {"node.kubernetes.io/instance-type": {"p2.xlarge": {"speed": -1}}}}},
         "/config/node_speeds/node.kubernetes.io~1instance-type/p2.xlarge/speed"),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"serviceMonitor": {"interval": 30}}, "/serviceMonitor/interval"),
        ({"persistence": {"size": "lots"}}, "/persistence/size"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    h = helm()
    with pytest.raises(h.HelmError) as caught:
        render(values)
    assert complaint in str(caught.value)


def test_templates_reject_contradictory_worker_bounds() -> None:
    h = helm()
    with pytest.raises(h.HelmRenderError, match=r"min_workers \(8\) exceeds config.max_workers \(4\)"):
        render({"config": {"min_workers": 8, "max_workers": 4}})


def test_dashboard_and_rules_are_shipped_verbatim() -> None:
    objects = render_objects({"prometheusRule": {"enabled": True}})
    dashboard = only(objects, "ConfigMap", "advisor-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "advisor.json").read_text())
    assert json.loads(dashboard["data"]["advisor.json"]) == shipped
    rule = only(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "alerts" / "advisor-rules.yaml").read_text())


def test_settings_change_restarts_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        pod = only(render_objects(values), "Deployment")["spec"]["template"]
        return str(pod["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) == checksum({}) != checksum({"config": {"max_workers": 8}})


def test_notes_tell_how_to_opt_in_and_warn_about_default_prices() -> None:
    notes = render({})["advisor/templates/NOTES.txt"]
    assert "training-advisor.io/enabled=true" in notes and "http://advisor.advisor-system.svc:8080" in notes
    assert "config.prices are the defaults" in notes
    priced = render({"config": {"prices": {"worker_per_hour": 3.06}}})["advisor/templates/NOTES.txt"]
    assert "config.prices are the defaults" not in priced
    ha = render({"replicaCount": 2})["advisor/templates/NOTES.txt"]
    assert "WARNING: replicaCount 2" in ha and "SQLite" in ha
    shared = render({"replicaCount": 2, "persistence": {"accessModes": ["ReadWriteMany"]}})["advisor/templates/NOTES.txt"]
    assert "WARNING: replicaCount 2" in shared  # a network filesystem is no way out for SQLite's WAL
    own = render({"replicaCount": 2, "persistence": {"enabled": False}})["advisor/templates/NOTES.txt"]
    assert "WARNING" not in own


def _leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("podSecurityContext", "securityContext", "resources",
                                                              "livenessProbe", "readinessProbe", "labels",
                                                              "prediction_job_resources", "ingestPodSelector"):
            paths.extend(_leaf_paths(value, path + "."))
        else:
            paths.append(path)
    return paths


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    table = readme.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in _leaf_paths(values) if p not in documented]
    assert not missing, f"helm/advisor/README.md's values table lacks {missing}"
    unknown = [p for p in documented if p not in _leaf_paths(values)]
    assert not unknown, f"helm/advisor/README.md documents values that do not exist: {unknown}"


# --- the image placeholder, TLS, NetworkPolicy, PodDisruptionBudget ------------------------------


@pytest.mark.parametrize("repository", [None, "", "ghcr.io/training-advisor/advisor", "REPLACE-ME/advisor"])
def test_a_placeholder_image_fails_with_what_to_do(repository: str | None) -> None:
    values: dict[str, Any] = {} if repository is None else {"image": {"repository": repository}}
    with pytest.raises(Exception, match=r"image.repository .* a placeholder: no advisor image is published.*"
                                        r"docker build -t advisor:0.1.0 \. && kind load docker-image advisor:0.1.0"):
        render(values, image=False)
    # a built image renders, by tag or by digest
    pod = only(render_objects({"image": {"repository": "advisor"}}), "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "advisor:0.1.0"


def test_tls_mounts_the_secret_and_switches_every_client_to_https() -> None:
    objects = render_objects(VALUE_SETS["hardened-tls-netpol-pdb"])
    cert = only(objects, "Certificate")
    assert cert["spec"]["secretName"] == "advisor-tls"
    assert "advisor.advisor-system.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ADVISOR_TLS_CERT_FILE"] == "/etc/advisor-tls/tls.crt" and env["ADVISOR_TLS_KEY_FILE"] == "/etc/advisor-tls/tls.key"
    assert {"name": "tls", "mountPath": "/etc/advisor-tls", "readOnly": True} in container["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "advisor-tls"}} in pod["volumes"]
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert rendered_settings(objects)["ingest_url"] == "https://advisor.advisor-system.svc:8080"
    (endpoint,) = only(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"serverName": "advisor.advisor-system.svc",
                                     "ca": {"secret": {"name": "advisor-tls", "key": "ca.crt"}}}
    # without the option: plain HTTP, no Secret mounted, no Certificate
    plain = render_objects({})
    assert "Certificate" not in {o["kind"] for o in plain}
    assert rendered_settings(plain)["ingest_url"].startswith("http://")
    assert "scheme" not in only(plain, "Deployment")["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]


def test_tls_with_an_own_secret_needs_no_cert_manager() -> None:
    objects = render_objects({"tls": {"enabled": True, "secretName": "my-cert"}})
    assert "Certificate" not in {o["kind"] for o in objects}
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-cert"}} in volumes


@pytest.mark.parametrize(("values", "complaint"), [
    ({"tls": {"enabled": True}, "config": {"prediction_backend": "job"}}, "prediction pods .* do not trust"),
    ({"tls": {"enabled": True, "certManager": {"enabled": True}}}, "needs tls.certManager.issuerRef.name"),
    ({"podDisruptionBudget": {"enabled": True}}, "minAvailable 1 with replicaCount 1 would block every node drain"),
    ({"replicaCount": 3, "podDisruptionBudget": {"enabled": True, "minAvailable": 1, "maxUnavailable": 1}},
     "not both"),
])
def test_hardening_options_refuse_contradictions(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(Exception, match=complaint):
        render(values)


def _rules_by_port(policy: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """port name -> the peers its rule admits; each rule names exactly one port."""
    rules = {}
    for rule in policy["spec"]["ingress"]:
        (port,) = rule["ports"]
        assert port["protocol"] == "TCP" and port["port"] not in rules
        rules[port["port"]] = rule["from"]
    return rules


PROFILING_PODS = {"matchLabels": {"training-advisor.io/role": "profiling"}}
PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


def test_network_policy_opens_ingest_to_profiling_pods_and_metrics_to_prometheus_only() -> None:
    objects = render_objects(VALUE_SETS["hardened-tls-netpol-pdb"])
    policy = only(objects, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "advisor",
                                                   "app.kubernetes.io/instance": "advisor"}
    assert spec["policyTypes"] == ["Ingress"]
    rules = _rules_by_port(policy)
    assert set(rules) == {"http", "metrics"}
    # ingest: the profiling pods (the controller's label), only in the watched namespaces; not the
    # job's other training pods (no operator label here), not Prometheus
    assert rules["http"] == [{"podSelector": PROFILING_PODS, "namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml-a"]}]}}]
    # metrics and probes: Prometheus only
    assert rules["metrics"] == [PROMETHEUS]
    # the names in the policy are the container's ports, and those are what the controller serves
    container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    settings = rendered_settings(objects)
    assert ports == {"http": settings["http_port"], "metrics": settings["metrics_port"]}


def test_network_policy_follows_the_backend_the_namespaces_and_the_values() -> None:
    values: dict[str, Any] = {"networkPolicy": {"enabled": True, "extraFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                                                "metricsFrom": [{"namespaceSelector": {"matchLabels": {
                                                    "kubernetes.io/metadata.name": "monitoring"}}}]},
                              "config": {"prediction_backend": "job"}}
    rules = _rules_by_port(only(render_objects(values), "NetworkPolicy"))
    # every namespace is watched: profiling pods from any namespace; the prediction pods (release
    # namespace: no namespaceSelector) with the job backend; extraFrom reaches ingest, not metrics
    assert rules["http"] == [{"podSelector": PROFILING_PODS, "namespaceSelector": {}},
                             {"podSelector": {"matchLabels": {"training-advisor.io/role": "prediction"}}},
                             {"ipBlock": {"cidr": "10.0.0.0/8"}}]
    assert rules["metrics"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    # no metricsFrom: nobody reaches the metrics port (a rule without peers would admit everyone)
    closed = _rules_by_port(only(render_objects({"networkPolicy": {"enabled": True, "metricsFrom": []}}),
                                 "NetworkPolicy"))
    assert set(closed) == {"http"}
    assert "NetworkPolicy" not in {o["kind"] for o in render_objects({})}


def test_network_policy_selects_the_pods_the_controller_creates() -> None:
    """The peers match the labels the controller puts on its pods: the profiling run's pod
    templates (every kind) and the prediction Job's."""
    from advisor.controller.jobs.kinds import kind_of_view, parse_job
    from advisor.controller.jobs.tfjob import ProfilingSpec
    from advisor.controller.pipeline.prediction_job import PredictionJobSpec, build_prediction_job
    from tests.controller.tfjobs import mwms_tfjob, pytorchjob, tfjob, with_uid

    spec = ProfilingSpec("http://advisor.advisor-system.svc:8080", 100, 5, 1800, token="t")
    for body in (with_uid(tfjob("ps-job")), with_uid(mwms_tfjob("mwms-job")), with_uid(pytorchjob("ddp-job"))):
        view = parse_job(body)
        run = kind_of_view(view).build_profiling_run(body, view, spec, 1)
        (specs,) = [v for k, v in run["spec"].items() if k.endswith("ReplicaSpecs")]
        for replica in specs.values():
            assert replica["template"]["metadata"]["labels"].items() >= PROFILING_PODS["matchLabels"].items()
        (own,) = [v for k, v in body["spec"].items() if k.endswith("ReplicaSpecs")]
        for replica in own.values():  # the job's own pods are not labelled so
            assert "training-advisor.io/role" not in (replica["template"].get("metadata") or {}).get("labels", {})
    job = build_prediction_job("ab" * 12, 1, PredictionJobSpec(namespace="advisor-system", image="advisor:0.1.0",
                                                                controller_url="http://x", timeout_s=60))
    assert job["spec"]["template"]["metadata"]["labels"]["training-advisor.io/role"] == "prediction"


def test_pod_disruption_budget_keeps_one_of_two() -> None:
    pdb = only(render_objects(VALUE_SETS["hardened-tls-netpol-pdb"]), "PodDisruptionBudget")
    assert pdb["spec"] == {"selector": {"matchLabels": {"app.kubernetes.io/name": "advisor",
                                                        "app.kubernetes.io/instance": "advisor"}},
                           "minAvailable": 1}
    by_max = only(render_objects({"podDisruptionBudget": {"enabled": True, "minAvailable": "", "maxUnavailable": 1}}),
                  "PodDisruptionBudget")
    assert by_max["spec"]["maxUnavailable"] == 1 and "minAvailable" not in by_max["spec"]
    assert "PodDisruptionBudget" not in {o["kind"] for o in render_objects({})}
