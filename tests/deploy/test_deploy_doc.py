"""docs/deploy.md matches what the chart renders: its helm commands render with their --set
values, its steps come in the order they are run, and it says what a new user needs up front
(the TF1-style hook, the training operator's version and install command, the tools, the release
labels, the cost unit, the one-command image build)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import CHART, render_objects

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "deploy.md"
ONE_COMMAND = "docker build -t advisor:{v} . && kind load docker-image advisor:{v}"


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def helm_commands(text: str) -> list[list[str]]:
    """Every helm install/upgrade in the page's shell blocks, continuation lines joined, as argv."""
    commands = []
    for block in shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith("helm install") or line.startswith("helm upgrade"):
                commands.append(shlex.split(line))
    return commands


def set_values(argv: list[str]) -> dict[str, Any]:
    """--set a.b=c pairs as nested values (Helm's parsing for plain keys: true/false and numbers typed)."""
    values: dict[str, Any] = {}
    for flag, pair in zip(argv, argv[1:]):
        if flag != "--set":
            continue
        key, raw = pair.split("=", 1)
        value: Any = yaml.safe_load(raw) if raw in ("true", "false") or raw.isdigit() else raw
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return values


def test_every_helm_command_renders() -> None:
    commands = helm_commands(DOC.read_text())
    assert len(commands) >= 3, "the install and the upgrades of steps 3-5"
    for argv in commands:
        values = set_values(argv)
        assert values.get("image", {}).get("repository") or "--reuse-values" in argv, argv
        objects = render_objects(values)  # fails on a value the schema rejects or a template refuses
        assert any(o["kind"] == "Deployment" for o in objects)


def test_the_release_labels_reach_every_monitoring_object() -> None:
    (upgrade,) = [a for a in helm_commands(DOC.read_text()) if "serviceMonitor.enabled=true" in a]
    objects = render_objects(set_values(upgrade))
    monitoring = [o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
    assert sorted(o["kind"] for o in monitoring) == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]
    assert all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in monitoring)


def test_the_tls_command_renders_a_certificate_and_https() -> None:
    (upgrade,) = [a for a in helm_commands(DOC.read_text()) if "tls.enabled=true" in a]
    objects = render_objects(set_values(upgrade))
    assert [o["kind"] for o in objects].count("Certificate") == 1


def test_the_page_names_what_a_new_user_needs_up_front() -> None:
    text = DOC.read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    numbered = [h for h in headings if re.match(r"\d+\. ", h)]
    assert [int(h.split(".")[0]) for h in numbered] == list(range(len(numbered))), "steps numbered in run order"
    # run order: operator, image, install, hardening, monitoring, opt in, read, uninstall
    order = ["Tools", "training operator", "Build the image", "Install the chart", "Harden", "Prometheus",
             "Opt a job in", "Read the annotations", "Uninstall"]
    positions = [next(i for i, h in enumerate(numbered) if word.lower() in h.lower()) for word in order]
    assert positions == sorted(positions), numbered
    before_steps = text.split("\n## 0.", 1)[0]
    assert "tf.compat.v1" in before_steps and "TF1-style" in before_steps, "the hook's requirement comes first"
    for tool in ("`kubectl`", "`helm`", "`docker`", "`kind`", "`jq`"):
        assert tool in text.split("\n## 1.", 1)[0], f"{tool} in the tools table"
    assert "training-operator v1.8.1" in text
    assert 'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.8.1"' in text
    assert "release: <its Helm release name>" in text
    assert "per million training examples" in text and "Cost unit" in text
    assert ONE_COMMAND.format(v=app_version()) in text


@pytest.mark.parametrize("path", ["README.md", "docs/deploy.md", "Dockerfile", "helm/advisor/values.yaml"])
def test_the_one_command_build_and_load_is_shown(path: str) -> None:
    assert ONE_COMMAND.format(v=app_version()) in (REPO / path).read_text()


def test_the_plain_manifests_name_the_image_the_one_command_build_loads() -> None:
    deployment = next(d for d in yaml.safe_load_all((REPO / "deploy" / "advisor.yaml").read_text())
                      if d and d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"advisor:{app_version()}"
    assert f"image: advisor:{app_version()}" in DOC.read_text()  # the page's sed command replaces exactly that
