"""TFJob objects for tests, written as a user would write them (training-operator v1.9 schema)."""

from __future__ import annotations

import copy
from typing import Any

from advisor.controller.jobs.tfjob import OPT_IN


def tfjob(name: str = "mnist", namespace: str = "ml", *, workers: int = 4, ps: int = 1, chief: int = 0,
          opted_in: bool = True, annotations: dict[str, str] | None = None, uid: str | None = None,
          generation: int = 1, suspend: bool | None = None, dynamic: bool | None = None,
          node_type: str | None = None) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        pod: dict[str, Any] = {"containers": [{"name": "tensorflow", "image": "example.org/train:1.0",
                                               "command": ["python", "/app/train_ps.py"]}]}
        if node_type:
            pod["nodeSelector"] = {"node.kubernetes.io/instance-type": node_type}
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": pod}}

    specs = {"PS": replica(ps), "Worker": replica(workers)}
    if chief:
        specs["Chief"] = replica(chief)
    notes = dict(annotations or {})
    if opted_in:
        notes[OPT_IN] = "true"
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": notes},
        "spec": {"tfReplicaSpecs": specs},
    }
    if uid is not None:
        obj["metadata"].update(uid=uid, generation=generation, resourceVersion="1")
    if suspend is not None:
        obj["spec"]["runPolicy"] = {"suspend": suspend}
    if dynamic is not None:
        obj["spec"]["enableDynamicWorker"] = dynamic
    return obj


def with_uid(obj: dict[str, Any], uid: str = "uid-1", generation: int = 1) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update(uid=uid, generation=generation, resourceVersion="1")
    return out


def pytorchjob(name: str = "ddp", namespace: str = "ml", *, workers: int = 3, master: bool = True,
               opted_in: bool = True, annotations: dict[str, str] | None = None, uid: str | None = None,
               suspend: bool | None = None, elastic: dict[str, Any] | None = None,
               nproc_per_node: str | None = None) -> dict[str, Any]:
    """A PyTorchJob as a user writes it (training-operator v1.9: a container named ``pytorch``)."""
    def replica(n: int) -> dict[str, Any]:
        pod = {"containers": [{"name": "pytorch", "image": "example.org/ddp:1.0",
                               "command": ["python", "/app/train_ddp.py"]}]}
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": pod}}

    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = replica(1)
    if workers:
        specs["Worker"] = replica(workers)
    notes = dict(annotations or {})
    if opted_in:
        notes[OPT_IN] = "true"
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": notes},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    if uid is not None:
        obj["metadata"].update(uid=uid, generation=1, resourceVersion="1")
    if suspend is not None:
        obj["spec"]["runPolicy"] = {"suspend": suspend}
    if elastic is not None:
        obj["spec"]["elasticPolicy"] = elastic
    if nproc_per_node is not None:
        obj["spec"]["nprocPerNode"] = nproc_per_node
    return obj


def mwms_tfjob(name: str = "mwms", *, workers: int = 3, chief: int = 0, **kwargs: Any) -> dict[str, Any]:
    """A TF2 MultiWorkerMirroredStrategy TFJob: Worker (and Chief) replicas, no PS."""
    obj = tfjob(name, workers=workers, chief=chief, **kwargs)
    del obj["spec"]["tfReplicaSpecs"]["PS"]
    return obj
