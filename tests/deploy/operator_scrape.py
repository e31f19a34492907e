"""Scrape configs as the Prometheus Operator generates them from the chart's ServiceMonitor and
PodMonitor, for a Prometheus that scrapes plain loopback targets.

The operator turns a ServiceMonitor endpoint into a ``kubernetes_sd_configs`` job with
``honor_labels: false`` whose relabelings add the target labels ``namespace``, ``service``,
``pod``, ``container``, ``endpoint`` and ``job`` (the Service's name) from Kubernetes service
discovery's ``__meta_kubernetes_*`` labels, then the monitor's own ``relabelings``; a PodMonitor
the same with ``job`` = ``<namespace>/<PodMonitor name>`` and no ``service``
(prometheus-operator pkg/prometheus/promcfg.go, generateServiceMonitorConfig and
generatePodMonitorConfig, v0.7x). Here service discovery is replaced by a static target carrying
the ``__meta_kubernetes_*`` labels discovery would give it, so the same relabelings run in the
real Prometheus. With ``honor_labels: false`` a label the target exports under one of these
names arrives renamed ``exported_<name>``: the failure this module exists to reproduce.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def meta_labels(*, namespace: str, pod: str, container: str, pod_labels: Mapping[str, str] | None = None,
                service: str | None = None) -> dict[str, str]:
    """The ``__meta_kubernetes_*`` labels service discovery gives one target."""
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": container,
    }
    if service is not None:
        labels["__meta_kubernetes_service_name"] = service
    for key, value in (pod_labels or {}).items():
        labels["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    return labels


def _relabeling(rule: Mapping[str, Any]) -> dict[str, Any]:
    """A monitor's relabeling (camelCase, as in the CRD) in Prometheus's spelling."""
    spelling = {"sourceLabels": "source_labels", "targetLabel": "target_label", "action": "action",
                "regex": "regex", "replacement": "replacement", "separator": "separator", "modulus": "modulus"}
    return {spelling[key]: value for key, value in rule.items()}


def scrape_config(monitor: Mapping[str, Any], target: str, meta: Mapping[str, str], *,
                  scrape_interval: str = "1s") -> dict[str, Any]:
    """The scrape config the operator would generate for ``monitor`` (a rendered ServiceMonitor or
    PodMonitor with one endpoint), scraping ``target`` (host:port) that discovery found with ``meta``."""
    kind, name, namespace = monitor["kind"], monitor["metadata"]["name"], monitor["metadata"]["namespace"]
    if kind == "ServiceMonitor":
        (endpoint,) = monitor["spec"]["endpoints"]
        job_name = f"serviceMonitor/{namespace}/{name}/0"
    elif kind == "PodMonitor":
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        job_name = f"podMonitor/{namespace}/{name}/0"
    else:
        raise ValueError(f"not a monitor: {kind}")
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    ]
    if kind == "ServiceMonitor":
        relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"})
    relabel += [
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    ]
    if kind == "ServiceMonitor":
        relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                        "replacement": "${1}"})
    else:
        relabel.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
    relabel.append({"target_label": "endpoint", "replacement": str(endpoint["port"])})
    relabel += [_relabeling(rule) for rule in endpoint.get("relabelings", ())]
    return {
        "job_name": job_name,
        "honor_labels": False,  # the operator's default (honorLabels unset)
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": scrape_interval,
        "scrape_timeout": scrape_interval,
        "static_configs": [{"targets": [target], "labels": dict(meta)}],
        "relabel_configs": relabel,
        "metric_relabel_configs": [_relabeling(rule) for rule in endpoint.get("metricRelabelings", ())],
    }
