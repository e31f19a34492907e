"""Worker speeds from the nodes a job's workers run on (setting ``node_speeds``): pure functions.

Why: heterogeneous workers change a job's curve (a slow worker holds the PS's synchronous steps
back, a slow link its pushes and pulls), and the CLI predicts them from ``--worker-speed`` and
``--worker-bandwidth``; in a cluster the facts are on the nodes. The operator maps node labels
(``node.kubernetes.io/instance-type``, ``nvidia.com/gpu.product``...) to a relative speed and a
link rate; ``placement`` reads where the job's worker pods run and what the profiling run's
traced worker ran on, and says per worker what the prediction takes:

- a worker's compute speed is its node's speed over the traced worker's node's (the profile is
  the traced worker's: a worker on a node twice as fast runs at 2.0);
- a worker's link rate is its node's ``link`` (none given: the job's rate, for every worker);
- a node without any mapped label (or a pod not scheduled yet) counts as speed 1, and the
  document says so (``by``); workers beyond the job's pods run as traced (the core's rule).

The document goes into the prediction's parameters (so the prediction key follows the placement
and a move to another kind of node predicts again) and, from the prediction, into the job's
annotation ``training-advisor.io/worker-speeds``. It names kinds of nodes (label=value), not
pods or nodes, so a rescheduling onto the same kind of node changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from advisor.controller.settings import NodeSpeed

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# replica types (the operator's lower-case labels) whose pods compute gradients, in worker order:
# the chief / master is worker 0, as TF and torchrun count them
WORKER_TYPES = ("chief", "master", "worker")
NodeSpeeds = Mapping[str, Mapping[str, NodeSpeed]]


def worker_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods that compute gradients, in worker order (replica type, then index); no PS, evaluator."""
    def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
        return (pod.get("metadata") or {}).get("labels") or {}

    def index(pod: Mapping[str, Any]) -> int:
        text = labels(pod).get(REPLICA_INDEX_LABEL, "")
        return int(text) if text.isdigit() else 0

    chosen = [p for p in pods if labels(p).get(REPLICA_TYPE_LABEL, "").lower() in WORKER_TYPES]
    return sorted(chosen, key=lambda p: (WORKER_TYPES.index(labels(p)[REPLICA_TYPE_LABEL].lower()), index(p)))


def node_speed(node: Mapping[str, Any] | None, node_speeds: NodeSpeeds) -> tuple[NodeSpeed, str]:
    """What the settings say of ``node`` and why: the first mapped label it has, else speed 1."""
    if node is None:
        return NodeSpeed(speed=1.0), "not scheduled: speed 1"
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, values in node_speeds.items():
        value = labels.get(key)
        if value is not None and value in values:
            return values[value], f"{key}={value}"
    return NodeSpeed(speed=1.0), f"no label of node_speeds on node {(node.get('metadata') or {}).get('name')}: speed 1"


def placement(workers: Sequence[Mapping[str, Any]], traced: Mapping[str, Any] | None,
              node: Callable[[str], Mapping[str, Any] | None], node_speeds: NodeSpeeds, *,
              traced_as: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The speeds and link rates the prediction takes, and why (see the module docstring).

    ``workers``: the job's worker pods in order; ``traced``: the profiling run's traced pod (None:
    gone: ``traced_as``, what an earlier placement said of it, else speed 1); ``node``: a node by
    name (None when it is gone)."""
    def of(pod: Mapping[str, Any] | None) -> tuple[NodeSpeed, str]:
        name = ((pod or {}).get("spec") or {}).get("nodeName")
        return node_speed(node(name) if name else None, node_speeds)

    if traced is not None:
        base, base_by = of(traced)
    elif traced_as is not None:
        base, base_by = NodeSpeed(speed=float(traced_as["speed"])), str(traced_as.get("by", ""))
    else:
        base, base_by = NodeSpeed(speed=1.0), "the profiling run's pod is gone: speed 1"
    placed = [of(pod) for pod in workers]
    links = [entry.link_bps() for entry, _ in placed]
    return {
        "traced": {"speed": base.speed, "by": base_by},
        "workers": [{"speed": round(entry.speed / base.speed, 6), "link_bps": link, "by": by}
                    for (entry, by), link in zip(placed, links)],
        # per-worker link rates only when every worker's node names one; else the job's for all
        "links": all(link is not None for link in links) and bool(links),
    }


def speeds_and_links(doc: Mapping[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The core's ``worker_speeds`` and ``worker_bandwidths_bps`` from a ``placement`` document."""
    workers = doc.get("workers") or []
    speeds = tuple(float(w["speed"]) for w in workers)
    links = tuple(float(w["link_bps"]) for w in workers) if doc.get("links") else ()
    return speeds, links
