"""The prediction pods' scheduling and identity settings: checked at start as the apiserver would
check them in the pod (so a typo does not fail every Job create later), read in the Kubernetes
spelling a platform team pastes from its other manifests, and sent unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from advisor.controller.settings import SettingsError, load_settings

SETTINGS_YAML = """
prediction_backend: job
prediction_job_image: registry.example/advisor:0.1.0
prediction_job_node_selector:
  node-pool.example.com/name: batch
  kubernetes.io/arch: amd64
prediction_job_tolerations:
  - key: dedicated
    operator: Equal
    value: batch
    effect: NoSchedule
  - operator: Exists          # every taint: a key-less toleration
  - key: node.kubernetes.io/not-ready
    operator: Exists
    effect: NoExecute
    tolerationSeconds: 0
prediction_job_priority_class_name: batch-low
prediction_job_run_as_user: 1000680000
prediction_job_run_as_group: 0
"""


def test_a_settings_file_in_kubernetes_spelling_is_read_and_sent_as_written(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SETTINGS_YAML)
    s = load_settings(path)
    written = yaml.safe_load(SETTINGS_YAML)
    assert [t.as_kubernetes() for t in s.prediction_job_tolerations] == written["prediction_job_tolerations"]
    assert s.prediction_job_node_selector == written["prediction_job_node_selector"]
    assert (s.prediction_job_priority_class_name, s.prediction_job_run_as_user, s.prediction_job_run_as_group) == (
        "batch-low", 1000680000, 0)
    # --check-config prints the settings; what it prints reads back the same (the Kubernetes spelling).
    dumped = s.model_dump(mode="json")["prediction_job_tolerations"]
    assert dumped[2]["tolerationSeconds"] == 0 and "toleration_seconds" not in dumped[2]
    assert load_settings(prediction_job_tolerations=dumped).prediction_job_tolerations == s.prediction_job_tolerations


def test_the_environment_takes_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_PREDICTION_JOB_TOLERATIONS", '[{"key": "gpu", "operator": "Exists"}]')
    monkeypatch.setenv("ADVISOR_PREDICTION_JOB_NODE_SELECTOR", '{"pool": "cpu"}')
    s = load_settings()
    assert [t.as_kubernetes() for t in s.prediction_job_tolerations] == [{"key": "gpu", "operator": "Exists"}]
    assert s.prediction_job_node_selector == {"pool": "cpu"}


def test_defaults_leave_scheduling_to_the_cluster_and_run_as_the_images_user() -> None:
    s = load_settings()
    assert s.prediction_job_node_selector == {} and s.prediction_job_tolerations == []
    assert s.prediction_job_priority_class_name == ""
    assert (s.prediction_job_run_as_user, s.prediction_job_run_as_group) == (65532, 65532)  # the Dockerfile's USER


def test_where_prediction_pods_run_does_not_re_predict_anything() -> None:
    moved = load_settings(prediction_job_node_selector={"pool": "batch"}, prediction_job_priority_class_name="low",
                          prediction_job_tolerations=[{"operator": "Exists"}], prediction_job_run_as_user=1000)
    assert moved.prediction_fingerprint() == load_settings().prediction_fingerprint()


@pytest.mark.parametrize(("settings", "complaint"), [
    # ValidateTolerations (pkg/apis/core/validation), one rule each:
    ({"prediction_job_tolerations": [{"value": "x"}]}, "operator must be Exists when key is empty"),
    ({"prediction_job_tolerations": [{"key": "k", "operator": "Exists", "value": "x"}]},
     "value must be empty when operator is Exists"),
    ({"prediction_job_tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}]},
     "tolerationSeconds needs effect NoExecute"),
    ({"prediction_job_tolerations": [{"key": "k", "operator": "Gt"}]},
     "prediction_job_tolerations.0.operator: Input should be 'Exists' or 'Equal'"),
    ({"prediction_job_tolerations": [{"key": "k", "effect": "NoExec"}]},
     "prediction_job_tolerations.0.effect: Input should be '', 'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"),
    ({"prediction_job_tolerations": [{"key": "has space"}]}, "key 'has space': the name must be 1-63 characters"),
    ({"prediction_job_tolerations": [{"key": "k", "value": "x" * 64}]}, "a label value must be empty or 1-63"),
    ({"prediction_job_tolerations": [{"key": "k", "toleration": 5}]}, "toleration: Extra inputs are not permitted"),
    # nodeSelector: label keys and values.
    ({"prediction_job_node_selector": {"Example.COM/pool": "a"}}, "the prefix must be a DNS subdomain"),
    ({"prediction_job_node_selector": {"pool": "-batch"}}, "'-batch': a label value must be empty or 1-63"),
    ({"prediction_job_node_selector": {"/pool": "a"}}, "the prefix must be a DNS subdomain"),
    ({"prediction_job_priority_class_name": "Batch_Low"}, "'Batch_Low' is not a PriorityClass name"),
    ({"prediction_job_run_as_user": 0}, "prediction_job_run_as_user: Input should be greater than or equal to 1"),
    ({"prediction_job_run_as_group": -1}, "prediction_job_run_as_group: Input should be greater than or equal to 0"),
])
def test_mistakes_are_refused_at_start_naming_the_setting(settings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(**settings)
    assert complaint in str(caught.value)
    assert next(iter(settings)) in str(caught.value)


def test_what_the_settings_accept_kubernetes_accepts() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    s = load_settings(prediction_job_tolerations=yaml.safe_load(SETTINGS_YAML)["prediction_job_tolerations"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "x"}],
                    "tolerations": [t.as_kubernetes() for t in s.prediction_job_tolerations]}}
    kv.validate(pod, kv.latest_version(), strict=True)


def test_the_chart_passes_the_settings_to_the_controller_unchanged(tmp_path: Path) -> None:
    from tests.deploy.helm_render import render_objects

    written = yaml.safe_load(SETTINGS_YAML)
    config = {k: v for k, v in written.items() if k.startswith("prediction_job_") and k != "prediction_job_image"}
    objects = render_objects({"config": {"prediction_backend": "job", **config}})
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    s = load_settings(path)
    assert [t.as_kubernetes() for t in s.prediction_job_tolerations] == written["prediction_job_tolerations"]
    assert s.prediction_job_node_selector == written["prediction_job_node_selector"]
    assert (s.prediction_job_priority_class_name, s.prediction_job_run_as_user) == ("batch-low", 1000680000)


@pytest.mark.parametrize(("config", "complaint"), [
    ({"prediction_job_tolerations": [{"key": "k", "operator": "Gt"}]}, "/config/prediction_job_tolerations/0/operator"),
    ({"prediction_job_tolerations": [{"key": "k", "toleration_seconds": 5}]}, "toleration_seconds"),
    ({"prediction_job_node_selector": {"pool": "-batch"}}, "/config/prediction_job_node_selector/pool"),
    ({"prediction_job_priority_class_name": "Batch"}, "/config/prediction_job_priority_class_name"),
    ({"prediction_job_run_as_user": 0}, "/config/prediction_job_run_as_user"),
])
def test_the_chart_schema_refuses_what_the_controller_would(config: dict[str, Any], complaint: str) -> None:
    from tests.deploy.helm_render import helm, render

    with pytest.raises(helm().HelmError) as caught:
        render({"config": config})
    assert complaint in str(caught.value)
    with pytest.raises(SettingsError):  # and the controller agrees
        load_settings(**config)
