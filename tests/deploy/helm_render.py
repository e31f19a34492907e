"""Render the Helm chart with the real Helm engine (helm-python-sdk bundles Helm's Go library).

The value sets below are the configurations the tests check; ``render_objects`` turns a render
into Kubernetes objects (NOTES.txt and empty documents dropped), in a stable order.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "advisor"
RELEASE = "advisor"
NAMESPACE = "advisor-system"

# Each set exercises different templates: the defaults (all namespaces, process backend); a
# namespaced, job-backend, HA install with monitoring; and a minimal one that brings its own
# ServiceAccount and watches only its own namespace, without a store volume, leader election or
# dashboard.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced-job-backend-ha": {
        "replicaCount": 2,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
        "image": {"digest": "sha256:" + "ab" * 32},
        "imagePullSecrets": [{"name": "regcred"}],
        "persistence": {"accessModes": ["ReadWriteMany"], "storageClassName": "nfs", "size": "5Gi"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "trainingPodMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True},
        "dashboard": {"namespace": "monitoring"},
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "config": {
            "namespaces": ["ml-a", "ml-b"],
            "mode": "initial",
            "prediction_backend": "job",
            "bandwidth": "10Gbit/s",
            "budget_per_hour": 50,
            "max_workers": 16,
            "cluster_mode": True,  # Kueue's LocalQueues in ml-a and ml-b, ClusterQueues cluster-wide
            "cluster_capacity": {"workers": 24, "nvidia.com/gpu": 8},
            "prices": {"worker_per_hour": 3.06, "ps_per_hour": 0.4,
                       "node_types": {"p3.2xlarge": {"worker_per_hour": 3.06, "ps_per_hour": 3.06}}},
            "node_speeds": {"node.kubernetes.io/instance-type": {"p3.2xlarge": {"speed": 1.0, "link": "10Gbit/s"},
                                                                 "p2.xlarge": {"speed": 0.3, "link": "1Gbit/s"}}},
        },
    },
    # Production hardening: HTTPS with a cert-manager certificate, a NetworkPolicy, a PDB over two replicas.
    "hardened-tls-netpol-pdb": {
        "replicaCount": 2,
        "persistence": {"enabled": False},
        "tls": {"enabled": True, "certManager": {"enabled": True,
                                                 "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer"}}},
        "networkPolicy": {"enabled": True},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "config": {"namespaces": ["ml-a"]},
    },
    "minimal-own-account": {
        "fullnameOverride": "trainadv",
        "serviceAccount": {"create": False, "name": "platform-advisor"},
        "persistence": {"enabled": False},
        "dashboard": {"enabled": False},
        "service": {"port": 9090},
        "containerPort": 9091,
        "config": {"leader_election": False, "namespaces": ["advisor-system"], "opt_in": "all",
                   "ingest_url": "https://advisor.example.internal"},
    },
}


# No image is published, so image.repository is required (the chart fails without it): the
# renders below use this one unless the values name another.
BUILT_IMAGE = "registry.example.com/advisor"


def with_image(values: dict[str, Any] | None) -> dict[str, Any]:
    """``values`` with ``image.repository`` set to ``BUILT_IMAGE`` where they leave it out."""
    values = copy.deepcopy(values or {})
    values.setdefault("image", {}).setdefault("repository", BUILT_IMAGE)
    return values


VALUE_SETS = {name: with_image(values) for name, values in VALUE_SETS.items()}


def helm() -> Any:
    """The helm_python module, or a skip naming the missing package."""
    return pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install -e '.[test]')")


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE,
           namespace: str = NAMESPACE, image: bool = True) -> dict[str, str]:
    """Template path -> rendered text, as `helm install` would render it (``image``: with
    ``with_image``; False: the values exactly as given)."""
    values = with_image(values) if image else values
    with helm().Chart.load(CHART) as chart:
        rendered: dict[str, str] = chart.render(values or None, name=release, namespace=namespace, is_install=True)
    return rendered


def render_objects(values: dict[str, Any] | None = None, *, release: str = RELEASE,
                   namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path, text in sorted(render(values, release=release, namespace=namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def merged_values(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's defaults coalesced with ``values``, as an install would use them."""
    with helm().Chart.load(CHART) as chart:
        merged: dict[str, Any] = chart.merge_values(with_image(values))
    return merged


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
