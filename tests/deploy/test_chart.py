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
CHART_MANAGED = {"http_port", "store_path", "lease_namespace", "identity", "kubeconfig", "kube_context",
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
        assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
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
    (port,) = container["ports"]
    assert port == {"name": "http", "containerPort": values["containerPort"], "protocol": "TCP"}
    scheme = {"scheme": "HTTPS"} if values.get("tls", {}).get("enabled") else {}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", **scheme}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", **scheme}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/tmp"] == "tmp" and mounts[values["persistence"]["mountPath"]] == "data"
    assert Path(env["ADVISOR_CONFIG_FILE"]["value"]).parent == Path(next(p for p, n in mounts.items() if n == "config"))


def test_service_exposes_the_container_port(value_set: tuple[str, dict[str, Any]]) -> None:
    values = merged_values(value_set[1])
    objects = render_objects(value_set[1])
    (port,) = only(objects, "Service")["spec"]["ports"]
    assert port["port"] == values["service"]["port"] and port["targetPort"] == "http"
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


def test_network_policy_admits_training_pods_prediction_pods_and_prometheus_only() -> None:
    policy = only(render_objects(VALUE_SETS["hardened-tls-netpol-pdb"]), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "advisor",
                                                   "app.kubernetes.io/instance": "advisor"}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    training, prometheus = rule["from"]
    # training operator pods, only in the watched namespaces
    assert training["podSelector"] == {"matchExpressions": [{"key": "training.kubeflow.org/job-name",
                                                             "operator": "Exists"}]}
    assert training["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml-a"]}]}
    assert prometheus == {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    # the job backend's prediction pods (release namespace) are admitted with it
    job = only(render_objects({"networkPolicy": {"enabled": True}, "config": {"prediction_backend": "job"}}),
               "NetworkPolicy")
    peers = job["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"training-advisor.io/role": "prediction"}}} in peers
    assert peers[0]["namespaceSelector"] == {}  # every namespace is watched
    assert "NetworkPolicy" not in {o["kind"] for o in render_objects({})}


def test_network_policy_selects_the_pods_the_controller_creates() -> None:
    """The peers match the labels the training operator and the controller put on their pods."""
    from advisor.controller.jobs import tfjob
    from advisor.controller.pipeline import prediction_job

    assert tfjob.ROLE_LABEL == "training-advisor.io/role" and prediction_job.ROLE == "prediction"


def test_pod_disruption_budget_keeps_one_of_two() -> None:
    pdb = only(render_objects(VALUE_SETS["hardened-tls-netpol-pdb"]), "PodDisruptionBudget")
    assert pdb["spec"] == {"selector": {"matchLabels": {"app.kubernetes.io/name": "advisor",
                                                        "app.kubernetes.io/instance": "advisor"}},
                           "minAvailable": 1}
    by_max = only(render_objects({"podDisruptionBudget": {"enabled": True, "minAvailable": "", "maxUnavailable": 1}}),
                  "PodDisruptionBudget")
    assert by_max["spec"]["maxUnavailable"] == 1 and "minAvailable" not in by_max["spec"]
    assert "PodDisruptionBudget" not in {o["kind"] for o in render_objects({})}
