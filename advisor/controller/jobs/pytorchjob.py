"""Kubeflow PyTorchJob objects (kubeflow.org/v1) as the controller reads and writes them: pure functions.

The PyTorch DDP counterpart of ``tfjob.py``, returning the same ``TFJobView`` (the view every
job kind shares) so that the reconcile loop needs nothing kind-specific beyond
``advisor.controller.jobs.kinds``.

Schema followed (training-operator v1.9, ``pkg/apis/kubeflow.org/v1/pytorch_types.go`` and
``pytorch_validation.go``): ``spec.pytorchReplicaSpecs`` maps ``Master`` (at most 1 replica) and
``Worker`` to ``{replicas, restartPolicy, template}``, each template with a container named
``pytorch``; ``spec.runPolicy`` as a TFJob's (``suspend`` among them); ``spec.elasticPolicy``
(``minReplicas``, ``maxReplicas``, rendezvous settings; the scale subresource and its HPA act on
``Worker`` replicas); ``spec.nprocPerNode`` (``auto``, ``cpu``, ``gpu`` or an integer).

What the operator does that matters here (``pkg/controller.v1/pytorch/envvar.go``): with a
Master, every pod gets ``WORLD_SIZE`` = the sum of all replicas (times an integer
``nprocPerNode``) and ``RANK`` (Master 0, Worker i -> i + 1). So the Master is a worker like any
other (it trains, it is rank 0), and a run of one Master and no Worker has WORLD_SIZE 1: that is
the profiling run, with ``nprocPerNode: "1"`` and no elasticPolicy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.controller.jobs.tfjob import (
    ProfilingSpec, TFJobView, finished_state, profiling_env, profiling_object, profiling_replica,
    resize_patch as _resize_patch,
)
from advisor.controller.jobs import tfjob as _tf
from advisor.errors import JobKindError, TFJobError

KIND, PLURAL = "PyTorchJob", "pytorchjobs"
FIELD = "pytorchReplicaSpecs"
_REPLICA_TYPES = ("Master", "Worker")  # the operator's validation: exactly these keys
CONTAINER = "pytorch"  # the container the operator requires in every replica's template


def parse_pytorchjob(obj: Mapping[str, Any], *, node_type_label: str = "node.kubernetes.io/instance-type") -> TFJobView:
    """The typed view of a PyTorchJob; ``TFJobError`` names the first field the advisor cannot use."""
    meta = _tf._mapping(obj.get("metadata"), "metadata")
    name = _tf._text(meta.get("name"), "metadata.name")
    namespace = _tf._text(meta.get("namespace"), "metadata.namespace")
    where = f"{KIND} {namespace}/{name}"
    spec = _tf._mapping(obj.get("spec"), f"{where}: spec")
    specs = _replica_specs(spec, where)
    run_policy = _tf._mapping(spec.get("runPolicy") or {}, f"{where}: spec.runPolicy")
    status = _tf._mapping(obj.get("status") or {}, f"{where}: status")
    replicas = {kind: _tf._int(s.get("replicas", 1), f"{where}: spec.{FIELD}.{kind}.replicas", minimum=0)
                for kind, s in specs.items()}
    if replicas.get("Master", 0) > 1:
        raise TFJobError(f"{where}: spec.{FIELD}.Master.replicas must be 0 or 1 (the operator allows one Master)")
    _one_process_per_pod(spec, where)
    elastic = spec.get("elasticPolicy")
    worker_range = _elastic_range(elastic, replicas.get("Master", 0), where) if elastic is not None else None
    finished, message = finished_state(status)
    return TFJobView(
        namespace=namespace, name=name,
        uid=_tf._text(meta.get("uid"), f"{where}: metadata.uid"),
        generation=_tf._int(meta.get("generation", 1), f"{where}: metadata.generation", minimum=1),
        resource_version=str(meta.get("resourceVersion", "")),
        annotations=_tf._string_map(meta.get("annotations"), f"{where}: metadata.annotations"),
        labels=_tf._string_map(meta.get("labels"), f"{where}: metadata.labels"),
        replicas=replicas,
        suspended=_tf._bool(run_policy.get("suspend", False), f"{where}: spec.runPolicy.suspend"),
        # an elastic job (torchrun's rendezvous) takes a changed Worker count while it runs
        dynamic_workers=elastic is not None,
        started=bool(status.get("startTime")) or _tf._condition(status, "Running"),
        started_at=_tf.start_time(status),
        finished=finished, finished_message=message,
        template_hash=_tf._template_hash(specs),
        node_types={kind: s["template"].get("spec", {}).get("nodeSelector", {}).get(node_type_label)
                    for kind, s in specs.items()
                    if s["template"].get("spec", {}).get("nodeSelector", {}).get(node_type_label)},
        spec_keys={kind: kind for kind in specs},
        kind=KIND, program="pytorch-ddp", worker_range=worker_range,
    )


def _replica_specs(spec: Mapping[str, Any], where: str) -> dict[str, dict[str, Any]]:
    raw = _tf._mapping(spec.get(FIELD), f"{where}: spec.{FIELD}")
    specs: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key not in _REPLICA_TYPES:
            raise TFJobError(f"{where}: spec.{FIELD} has unknown replica type {key!r} "
                             f"(expected {' or '.join(_REPLICA_TYPES)})")
        specs[key] = _tf.replica_spec(value, f"{where}: spec.{FIELD}.{key}")
    if not specs:
        raise TFJobError(f"{where}: spec.{FIELD} has no Master or Worker replicas to profile")
    return specs


def _one_process_per_pod(spec: Mapping[str, Any], where: str) -> None:
    """The advisor counts workers as pods: a job that starts several processes in each pod
    (an integer ``nprocPerNode`` > 1) is not a shape it can predict."""
    elastic = spec.get("elasticPolicy")
    for path, value in (("spec.nprocPerNode", spec.get("nprocPerNode")),
                        ("spec.elasticPolicy.nProcPerNode",
                         elastic.get("nProcPerNode") if isinstance(elastic, Mapping) else None)):
        if value is None or str(value) in ("auto", "cpu", "gpu"):
            continue
        try:
            count = int(str(value))
        except ValueError:
            raise TFJobError(f"{where}: {path} must be auto, cpu, gpu or an integer, found {value!r}") from None
        if count != 1:
            raise JobKindError(f"{where}: {path} is {count}: the advisor predicts one training process per pod "
                             "(unsupported job shape)")


def _elastic_range(elastic: Any, masters: int, where: str) -> tuple[int, int] | None:
    """Workers (Master + Worker) the elasticPolicy allows; None when it sets no bounds."""
    policy = _tf._mapping(elastic, f"{where}: spec.elasticPolicy")
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    if low is None and high is None:
        return None
    lo = _tf._int(low, f"{where}: spec.elasticPolicy.minReplicas", minimum=1) if low is not None else 1
    hi = _tf._int(high, f"{where}: spec.elasticPolicy.maxReplicas", minimum=lo) if high is not None else 10**6
    return lo + masters, hi + masters


def build_profiling_pytorchjob(
    obj: Mapping[str, Any], view: TFJobView, spec: ProfilingSpec, generation: int | None = None
) -> dict[str, Any]:
    """The profiling PyTorchJob: ONE Master (cloned from the job's Master template, else its
    Worker's), no Worker, ``nprocPerNode: "1"`` and no elasticPolicy, so the operator gives the
    pod WORLD_SIZE=1 and RANK=0 and the program trains alone."""
    generation = view.generation if generation is None else generation
    source = _replica_specs(obj["spec"], f"{KIND} {view.namespace}/{view.name}")
    template = source["Master"] if "Master" in source else source["Worker"]
    env = profiling_env(view, spec, generation)
    replicas = {"Master": profiling_replica(template, env, spec.token)}
    return profiling_object(obj, view, spec, generation, {FIELD: replicas, "nprocPerNode": "1"}, pods=1)


def resize_patch(view: TFJobView, workers: int, *, resume: bool = False) -> dict[str, Any]:
    """Merge patch setting Worker replicas so that Master + Worker = ``workers`` (and resuming)."""
    return _resize_patch(view, workers, resume=resume, field=FIELD)
