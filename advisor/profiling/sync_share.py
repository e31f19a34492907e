"""The share of a worker's examples that moves the model, read from its TensorFlow graph.

Why: with ``SyncReplicasOptimizer`` and backup workers (``replicas_to_aggregate`` R below
``total_num_replicas`` W) every worker computes and pushes a gradient every step, but an update
aggregates the first R and drops the rest as stale. The synchronous models predict, and a
deadline counts, examples of *aggregated* gradients; a worker that counted its whole batch per
step would report W/R times that. Measured on the project's real synchronous runs
(``tests/data/ps-sync``, every run with a backup worker): the workers' local steps per aggregated
gradient are W/R within 2 % at every W = 2..8, whether the two workers of W = 2 alternated,
drifted or held in step. So each step counts R / W of the batch.

TensorFlow keeps R and W in the graph, not in the optimizer's public API: every accumulator's
``take_grad(R)`` has R as its constant ``num_required``, and the chief's queue runner refills the
token queue (``sync_token_q``) after each update with ``max(W, R)`` tokens (``fill([n],
global_step)``, the one enqueue that waits on the update). With R above W (a worker computes
several gradients per update) every gradient counts: the share is ``R / max(W, R)`` either way.
The graph is read as ``json_format.MessageToDict(graph.as_graph_def())`` gives it, so this module
needs no TensorFlow; ``session_hook.py`` hands it the graph.
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TAKE_GRADIENT_OPS = frozenset({"AccumulatorTakeGradient", "ResourceAccumulatorTakeGradient"})
ENQUEUE_MANY_OPS = frozenset({"QueueEnqueueMany", "QueueEnqueueManyV2"})
# SyncReplicasOptimizer (tensorflow/python/training/sync_replicas_optimizer.py) names its token
# queue "sync_token_q" at the graph's root (ops.name_scope("") around it), whatever the optimizer's
# own name scope; TF appends _1, _2 to a second optimizer's. The importer tells the regime by it too.
SYNC_TOKEN_QUEUE = re.compile(r"^sync_token_q(?:_\d+)?$")
TOKEN_QUEUE_OPS = frozenset({"FIFOQueueV2", "FIFOQueue"})


@dataclass(frozen=True, slots=True)
class SyncShare:
    """R and the tokens an update hands out, ``max(W, R)``, and the share of a worker's examples
    that an update aggregates."""

    replicas_to_aggregate: int
    tokens_per_step: int

    @property
    def share(self) -> float:
        return min(1.0, self.replicas_to_aggregate / self.tokens_per_step)


class SyncShareUnknown(ValueError):
    """The graph trains with ``SyncReplicasOptimizer`` but its R or W cannot be read."""


def sync_share(graph_def: Mapping[str, Any]) -> SyncShare | None:
    """R and W of the graph's ``SyncReplicasOptimizer``; None when it has none (every example a
    worker trains moves the model). Raises ``SyncShareUnknown`` naming what could not be read."""
    nodes = {str(n.get("name", "")): n for n in graph_def.get("node") or () if isinstance(n, Mapping)}
    queues = {name for name, n in nodes.items() if n.get("op") in TOKEN_QUEUE_OPS and SYNC_TOKEN_QUEUE.match(name)}
    takes = [n for n in nodes.values() if n.get("op") in TAKE_GRADIENT_OPS]
    if not queues or not takes:
        return None
    required = {_const_int(nodes, _inputs(n)[1:2], f"{n.get('name')}'s num_required") for n in takes}
    refills = [f for f in (_refill(nodes, n, queues) for n in nodes.values()) if f is not None]
    tokens = {_const_int(nodes, _inputs(f)[:1], f"{f.get('name')}'s dims") for f in refills}
    if len(required) != 1:
        raise SyncShareUnknown(f"the graph's gradient accumulators take different counts {sorted(required)}")
    if len(tokens) != 1:
        raise SyncShareUnknown("the graph has no single token refill after an update of its sync_token_q "
                               f"(found {len(refills)} with counts {sorted(tokens)})")
    (r,), (t,) = required, tokens
    if r < 1 or t < 1:
        raise SyncShareUnknown(f"replicas_to_aggregate {r} and tokens per update {t} must be at least 1")
    return SyncShare(r, t)


def _inputs(node: Mapping[str, Any]) -> list[str]:
    return [str(i) for i in node.get("input") or ()]


def _refill(nodes: Mapping[str, Mapping[str, Any]], node: Mapping[str, Any],
            queues: set[str]) -> Mapping[str, Any] | None:
    """The ``fill([n], global_step)`` that ``node`` enqueues into a token queue after an update, the
    chief's refill; None for any other node, the one-off initial tokens included. Waiting for the
    update is a control input: TensorFlow puts it on the first op built under it that has none
    through its inputs (the read of the global step, or the fill, or the enqueue)."""
    if node.get("op") not in ENQUEUE_MANY_OPS:
        return None
    data = [i.split(":")[0] for i in _inputs(node) if not i.startswith("^")]
    fill = nodes.get(data[1]) if len(data) > 1 and data[0] in queues else None
    if fill is None or fill.get("op") != "Fill":
        return None
    read = [nodes.get(i.split(":")[0]) or {} for i in _inputs(fill)[1:] if not i.startswith("^")]
    waits = any(i.startswith("^") for n in (node, fill, *read) for i in _inputs(n))
    return fill if waits else None


def _const_int(nodes: Mapping[str, Mapping[str, Any]], names: Iterable[str], what: str) -> int:
    """The single integer a Const node holds (a scalar or a one-element vector)."""
    name = next(iter(names), "").split(":")[0]
    node = nodes.get(name)
    if node is None or node.get("op") != "Const":
        raise SyncShareUnknown(f"{what} is not a constant ({name or 'no input'})")
    tensor = ((node.get("attr") or {}).get("value") or {}).get("tensor") or {}
    values = [int(v) for v in tensor.get("intVal") or tensor.get("int64Val") or ()]
    if not values and tensor.get("tensorContent"):
        wide = tensor.get("dtype") == "DT_INT64"
        try:
            raw = base64.b64decode(tensor["tensorContent"], validate=True)
            values = list(struct.unpack(f"<{len(raw) // (8 if wide else 4)}{'q' if wide else 'i'}", raw))
        except (ValueError, struct.error) as exc:  # binascii.Error is a ValueError
            raise SyncShareUnknown(f"{what} ({name}) holds bytes that are not integers: {exc}") from None
    if len(set(values)) != 1:
        raise SyncShareUnknown(f"{what} ({name}) holds {values or 'no integer'}, not one integer")
    return values[0]
