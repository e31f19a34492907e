"""Memory of the controller's TFJob cache with 1,000 jobs: whole objects versus trimmed ones.

    python -m benchmarks.informer_cache [--jobs 1000]

The informer caches every TFJob of the watched namespaces. As an API server returns them, they
carry ``metadata.managedFields`` (one entry per field manager: kubectl's apply, the training
operator's status writes, the advisor's annotation patches), kubectl's
``last-applied-configuration`` annotation (the whole applied object again) and the training
operator's status (conditions, replica statuses, times). The controller reads none of that but
the conditions and startTime. This feeds the same 1,000 realistic jobs through the real
``Informer`` twice, once caching them whole (the transform replaced by the identity: the code
before issue 15) and once trimmed (``informer.slim``), and prints the memory the cache holds
each time (tracemalloc, after the list; the source objects are freed first).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import tracemalloc
from typing import Any
from unittest import mock

from advisor.controller.kube import informer as informer_module
from advisor.controller.kube.informer import Informer

NS = "ml"


def _fields_v1(doc: Any) -> Any:
    """A managedFields ``fieldsV1`` tree for ``doc``, as the API server writes one."""
    if isinstance(doc, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return {f'k:{{"name":"{i.get("name", n)}"}}' if isinstance(i, dict) else f"v:{json.dumps(i)}":
                _fields_v1(i) for n, i in enumerate(doc)}
    return {}


def realistic_tfjob(i: int) -> dict[str, Any]:
    """A TFJob as kubectl apply, the training operator and the advisor leave it (training-operator v1.9)."""
    def replica(n: int, kind: str) -> dict[str, Any]:
        container = {"name": "tensorflow", "image": f"registry.example.org/team/train:{i % 7}",
                     "command": ["python", "/app/train_ps.py", "--batch-size=128", "--model=resnet50"],
                     "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}, {"name": "DATA", "value": "/data"}],
                     "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}},
                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
        return {"replicas": n, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": {"app": f"job-{i}", "role": kind}},
                             "spec": {"containers": [container],
                                      "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                                      "nodeSelector": {"node.kubernetes.io/instance-type": "m5.2xlarge"}}}}

    name = f"train-{i:04d}"
    spec = {"tfReplicaSpecs": {"PS": replica(2, "ps"), "Worker": replica(8, "worker")},
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3}}
    applied = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
               "metadata": {"name": name, "namespace": NS,
                            "annotations": {"training-advisor.io/enabled": "true"}}, "spec": spec}
    advisor_notes = {"training-advisor.io/phase": "Predicted", "training-advisor.io/reason": "Predicted",
                     "training-advisor.io/curve": json.dumps([[w, 100.0 * w, 98.0 * w, 102.0 * w]
                                                              for w in range(1, 33)])}
    status = {"conditions": [{"type": t, "status": "True" if t == "Running" else "False", "reason": f"TFJob{t}",
                              "message": f"TFJob {NS}/{name} is {t.lower()}.",
                              "lastUpdateTime": "2024-05-01T10:00:00Z", "lastTransitionTime": "2024-05-01T10:00:00Z"}
                             for t in ("Created", "Running")],
              "replicaStatuses": {"PS": {"active": 2, "selector": f"training.kubeflow.org/job-name={name}"},
                                  "Worker": {"active": 8, "selector": f"training.kubeflow.org/job-name={name}"}},
              "startTime": "2024-05-01T10:00:00Z", "lastReconcileTime": "2024-05-01T10:05:00Z"}
    managed = [
        {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "kubeflow.org/v1",
         "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": _fields_v1({"metadata": {"annotations": {".": None, "kubectl.kubernetes.io/last-applied-"
                                                                             "configuration": None}}, "spec": spec})},
        {"manager": "training-operator", "operation": "Update", "apiVersion": "kubeflow.org/v1",
         "time": "2024-05-01T10:05:00Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": _fields_v1({"status": status})},
        {"manager": "advisor", "operation": "Update", "apiVersion": "kubeflow.org/v1",
         "time": "2024-05-01T10:06:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": _fields_v1({"metadata": {"annotations": advisor_notes}})},
    ]
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS, "uid": f"00000000-0000-0000-0000-{i:012d}",
                     "resourceVersion": str(1000 + i), "generation": 1,
                     "creationTimestamp": "2024-05-01T10:00:00Z",
                     "annotations": {"training-advisor.io/enabled": "true", **advisor_notes,
                                     "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
                     "managedFields": managed},
        "spec": spec,
        "status": status,
    }


class _Source:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[Any], str]:
        items, self.items = self.items, []  # hand them over: the cache is then their only holder
        return items, "1"

    def watch_tfjobs(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("not watched in this benchmark")


def cache_bytes(jobs: int, *, trimmed: bool) -> int:
    """Bytes the informer's cache holds after listing ``jobs`` jobs."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    items = [json.loads(json.dumps(realistic_tfjob(i))) for i in range(jobs)]  # fresh objects, as decoded
    informer = Informer(_Source(items), [NS], lambda kind, obj: None)
    del items
    transform = informer_module.slim if trimmed else (lambda obj: obj)
    with mock.patch.object(informer_module, "slim", transform):
        informer._relist(informer._scopes[0])  # one list, as run() does first
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(informer.keys()) == jobs
    del informer
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    sample = realistic_tfjob(0)
    whole, trimmed = cache_bytes(args.jobs, trimmed=False), cache_bytes(args.jobs, trimmed=True)
    size = len(json.dumps(sample))
    slim_size = len(json.dumps(informer_module.slim(copy.deepcopy(sample))))
    print(f"one TFJob as JSON: {size / 1024:.1f} KiB whole, {slim_size / 1024:.1f} KiB trimmed")
    print(f"informer cache, {args.jobs} TFJobs, whole objects (before): {whole / 2**20:.1f} MiB")
    print(f"informer cache, {args.jobs} TFJobs, trimmed (after):        {trimmed / 2**20:.1f} MiB")
    print(f"saved: {(whole - trimmed) / 2**20:.1f} MiB ({100 * (1 - trimmed / whole):.0f} %)")


if __name__ == "__main__":
    main()
