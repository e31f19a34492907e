"""Turn TensorFlow trace records into a profile: one interpretation shared by every encoding.

What it does, in the order of ``build_profile_from_trace``:

1. Read each device name (``/job:ps/replica:0/task:1/...``) as a role and task; refuse a trace
   with more than one worker.
2. Pair transfers: each cross-process ``_Send``/``_Recv`` pair in the partition graphs is one
   transfer, keyed by its ``tensor_name``; parameter-server-to-worker is the downlink of that
   PS, worker-to-PS its uplink. Its step records are the ``RecvTensor`` records whose label
   names the tensor. A message from one PS to another (TensorFlow sends one when an update's
   ops span PS, e.g. ``global_step`` apart from every variable it counts) is a *relay*: the
   simulation has no link between PS, so it is kept as a dependency without link time, and
   refused when it carries more than ``RELAY_MAX_BYTES``.
3. Choose the operations: transfers and graph nodes that have records in most steps. A step
   that lacks a record of any of them (TensorFlow logs asynchronously and sometimes drops all
   PS-side transfer records of a step) is skipped and counted.
4. Recover dependencies from node inputs, looking through nodes that step_stats never
   records (``_Send``, ``_Recv``, unrecorded helpers) so that every edge joins two profile ops.
5. Time each op per step relative to the step's first record.
6. Keep each computation's type and input shapes (its producers' recorded output shapes, through
   ``_Recv`` to the tensor the ``_Send`` sent) for the op database (``advisor opdb``).
7. Tell the regime: synchronous when the graph holds ``SyncReplicasOptimizer``'s token queue and
   its conditional accumulators (``is_sync_replicas``), else asynchronous.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import ValidationError

from advisor.core.profile import JobInfo, Operation, Profile, Resource, StepTiming, build_profile
from advisor.errors import MissingTraceDataError, MultiWorkerTraceError, ProfileError, TraceFormatError
from advisor.importers.tf_records import GraphNode, NodeRecord, StepRecords, TraceRecords
from advisor.profiling.sync_share import SYNC_TOKEN_QUEUE, TOKEN_QUEUE_OPS

_DEVICE = re.compile(r"^/job:(?P<job>[A-Za-z_]+)(?:/replica:\d+)?/task:(?P<task>\d+)")
# a RecvTensor record's timeline label: "[size] [rate] tensor from device to device"
RECV_LABEL = re.compile(r"^\[(?P<size>[^\]]*)\]\s+\[[^\]]*\]\s+(?P<tensor>\S+)\s+from\s+(?P<src>\S+)\s+to\s+(?P<dst>\S+)")
_GPU_DEVICE = re.compile(r"/(?:device:)?gpu:\d", re.IGNORECASE)
_SIZE = re.compile(r"^(?P<num>[0-9.]+)\s*(?P<unit>B|KB|MB|GB)$")
_SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
_WORKER_JOBS = ("worker", "chief", "master")
_TRANSFER_RECORD = "RecvTensor"
MAJORITY = 0.5
# The most a PS -> PS message may carry to be kept as a dependency without link time: a few
# scalars, under 0.1 ms at 100 Mbit/s. The relays TensorFlow sends for an update spanning PS are
# control edges of 0 bytes (tests/data/ps-traces/w3-placements/README.md); more than this is
# data moving between PS, which the simulation has no link for.
RELAY_MAX_BYTES = 1024
# SyncReplicasOptimizer's token queue (sync_share.SYNC_TOKEN_QUEUE, TOKEN_QUEUE_OPS). Its
# accumulators live under the optimizer's name (default sync_replicas), which a user may change, so
# they are known by op type.
ACCUMULATOR_APPLY_OPS = frozenset({"ResourceAccumulatorApplyGradient", "AccumulatorApplyGradient",
                                   "SparseAccumulatorApplyGradient"})


@dataclass(frozen=True, slots=True)
class Place:
    """A process of the training cluster: ``role`` is 'ps' or 'worker', ``task`` its index."""

    role: str
    task: int

    @property
    def key(self) -> str:
        return "worker" if self.role == "worker" else f"ps{self.task}"


@dataclass(frozen=True, slots=True)
class _Transfer:
    tensor: str
    resource: Resource
    ps: int
    sender: GraphNode
    receiver: Place


def place_of(device: str) -> Place:
    """The role and task of a TensorFlow device name; raises on one we cannot place."""
    m = _DEVICE.match(device or "")
    if not m:
        raise TraceFormatError(f"cannot read device name {device!r} (expected /job:<name>/task:<n>/...)")
    job, task = m["job"], int(m["task"])
    if job == "ps":
        return Place("ps", task)
    if job in _WORKER_JOBS:
        return Place("worker", task)
    raise TraceFormatError(f"device {device!r} belongs to job {job!r}; expected 'ps' or 'worker'")


def build_profile_from_trace(trace: TraceRecords, *, batch_size: int | None = None) -> Profile:
    """Interpret decoded trace records as a validated single-worker profile."""
    if not trace.graph:
        raise MissingTraceDataError(
            "the trace has no partition graphs: record it with RunOptions(output_partition_graphs=True)"
        )
    if not trace.steps:
        raise MissingTraceDataError("the trace has no steps (no step_stats)")
    _check_single_worker(trace)
    nodes = {(place_of(n.device).key, n.name): n for n in trace.graph}
    transfers, relays = _pair_transfers(trace.graph)
    _check_relays(relays, trace.steps)
    if not transfers:
        raise MissingTraceDataError(
            "the trace has no transfers between a worker and a parameter server: "
            "is this a distributed (parameter-server) training trace?"
        )
    per_step = [_index_step(step, transfers, nodes) for step in trace.steps]
    chosen = _choose_ops(per_step, nodes, transfers)
    complete = [(step, recs) for step, recs in zip(trace.steps, per_step) if all(k in recs for k in chosen)]
    if not complete:
        raise MissingTraceDataError(
            f"none of the {len(trace.steps)} steps records every operation; cannot build a profile"
        )
    ops = _operations(chosen, nodes, transfers, complete, relays)
    steps = tuple(_timing(step, recs, chosen) for step, recs in complete)
    size = batch_size if batch_size is not None else trace.batch_size
    if size is None:
        raise MissingTraceDataError("the trace does not say its batch size: give it (--batch-size)")
    job = dict(
        model=trace.model,
        batch_size=size,
        parameter_servers=1 + max((t.ps for t in transfers.values()), default=0),
        recorded_bandwidth_bps=trace.bandwidth_bps,
        source=trace.source,
        skipped_steps=len(trace.steps) - len(complete),
        synchronous=is_sync_replicas(trace.graph),
        worker_on_gpu=worker_on_gpu(trace.graph),
        variable_order=tuple(trace.variable_bytes) or None,  # the hook's list, in creation order
        untraced_walls_us=trace.untraced_walls_us or None,
    )
    try:
        return build_profile(job=JobInfo.model_validate(job), ops=ops, steps=steps)
    except (ProfileError, ValidationError) as exc:  # e.g. a batch size of 0 in the trace's metadata
        raise TraceFormatError(f"the trace does not form a valid profile: {exc}") from None


def is_sync_replicas(graph: Iterable[GraphNode]) -> bool:
    """Whether the traced step trains with ``SyncReplicasOptimizer`` (synchronous PS): the
    partition graphs hold its token queue (a FIFO queue named ``sync_token_q``, the input of the
    dequeue that ends every step) and an apply-gradient of a conditional accumulator (each
    gradient goes to one instead of to its variable). Both, so that neither a queue of the user's
    that happens to bear the name nor an accumulator used for something else flips the regime;
    every ``SyncReplicasOptimizer`` step has both."""
    queue = accumulator = False
    for node in graph:
        queue = queue or (node.op in TOKEN_QUEUE_OPS and SYNC_TOKEN_QUEUE.match(node.name) is not None)
        accumulator = accumulator or node.op in ACCUMULATOR_APPLY_OPS
        if queue and accumulator:
            return True
    return False


def worker_on_gpu(graph: Iterable[GraphNode]) -> bool:
    """Whether any of the worker's nodes is placed on a GPU (``/device:GPU:k``, or TF 1's
    ``/gpu:k``, in its device name)."""
    return any(place_of(n.device).role == "worker" and _GPU_DEVICE.search(n.device) is not None
               for n in graph if n.device)


def _check_single_worker(trace: TraceRecords) -> None:
    devices = {n.device for n in trace.graph}
    for step in trace.steps[:3]:
        devices.update(r.device for r in step.records)
    workers = sorted({p.task for p in map(place_of, devices) if p.role == "worker"})
    if len(workers) > 1:
        raise MultiWorkerTraceError(
            f"the trace holds {len(workers)} workers (tasks {workers}); profile with 1 worker and 1+ PS"
        )
    if not workers:
        raise MissingTraceDataError("the trace holds no worker device")


def _pair_transfers(graph: Iterable[GraphNode]) -> tuple[dict[str, _Transfer], dict[str, GraphNode]]:
    """Cross-process _Send nodes, keyed by tensor name: the transfers between a worker and a PS,
    with direction and PS index, and the relays from one PS to another (their sending node)."""
    transfers: dict[str, _Transfer] = {}
    relays: dict[str, GraphNode] = {}
    for node in graph:
        if node.op != "_Send" or node.client_terminated or not node.tensor_name:
            continue
        src = place_of(node.send_device or node.device)
        dst = place_of(node.recv_device or "")
        if src == dst:
            continue
        if src.role == "ps" and dst.role == "worker":
            resource, ps = Resource.DOWNLINK, src.task
        elif src.role == "worker" and dst.role == "ps":
            resource, ps = Resource.UPLINK, dst.task
        else:  # PS -> PS (one worker only, so never worker -> worker)
            relays[node.tensor_name] = node
            continue
        transfers[node.tensor_name] = _Transfer(node.tensor_name, resource, ps, node, dst)
    return transfers, relays


def _check_relays(relays: dict[str, GraphNode], steps: Iterable[StepRecords]) -> None:
    """Refuse a PS -> PS message the profile cannot keep as a bare dependency: one that carries
    more than ``RELAY_MAX_BYTES``, or whose size no step records."""
    if not relays:
        return
    records: dict[str, list[NodeRecord]] = {}
    for step in steps:
        for rec in step.records:
            m = RECV_LABEL.match(rec.label) if rec.name == _TRANSFER_RECORD else None
            if m and m["tensor"] in relays:
                records.setdefault(m["tensor"], []).append(rec)
    for tensor, node in relays.items():
        route = f"{place_of(node.send_device or node.device).key} to {place_of(node.recv_device or '').key}"
        if tensor not in records:
            raise MissingTraceDataError(
                f"message {tensor!r} goes from {route}, and no step records its size: the simulation has no link "
                "between parameter servers and keeps such a message only when it is a control edge or a few bytes"
            )
        size = _transfer_bytes(tensor, records[tensor])
        if size > RELAY_MAX_BYTES:
            raise TraceFormatError(
                f"transfer {tensor!r} carries {size} bytes from {route}; only worker<->PS transfers are modelled "
                f"(a message between parameter servers is kept only up to {RELAY_MAX_BYTES} bytes, as a dependency)"
            )


def _record_key(rec: NodeRecord, transfers: dict[str, _Transfer]) -> tuple[str, str] | None:
    """The op a record belongs to: ('xfer', tensor) or (place, node); None if not an op of ours."""
    if rec.name == _TRANSFER_RECORD:
        m = RECV_LABEL.match(rec.label)
        if not m:
            raise TraceFormatError(f"RecvTensor record with an unreadable label {rec.label!r}")
        return ("xfer", m["tensor"]) if m["tensor"] in transfers else None
    return (place_of(rec.device).key, rec.name)


def _index_step(
    step: StepRecords, transfers: dict[str, _Transfer], nodes: dict[tuple[str, str], GraphNode]
) -> dict[tuple[str, str], NodeRecord]:
    """Records of one step by op key; repeated records of one op merge to their span."""
    out: dict[tuple[str, str], NodeRecord] = {}
    for rec in step.records:
        key = _record_key(rec, transfers)
        if key is None or (key[0] != "xfer" and key not in nodes):
            continue
        if rec.end_rel_us < 0 or rec.start_us < 0:
            raise TraceFormatError(f"step {step.index}: {rec.name!r} has a negative time")
        prev = out.get(key)
        if prev is not None:
            start = min(prev.start_us, rec.start_us)
            end = max(prev.start_us + prev.end_rel_us, rec.start_us + rec.end_rel_us)
            rec = NodeRecord(rec.device, rec.name, start, end - start, rec.label, rec.requested_bytes, rec.output_shapes)
        out[key] = rec
    return out


def _choose_ops(
    per_step: list[dict[tuple[str, str], NodeRecord]],
    nodes: dict[tuple[str, str], GraphNode],
    transfers: dict[str, _Transfer],
) -> list[tuple[str, str]]:
    """Ops recorded in more than half of the steps, in a stable order (graph order, then transfers)."""
    seen = Counter(k for recs in per_step for k in recs)
    threshold = MAJORITY * len(per_step)
    chosen = [k for k in nodes if seen[k] > threshold and nodes[k].op not in ("_Send", "_Recv")]
    chosen += [("xfer", t) for t in transfers if seen[("xfer", t)] > threshold]
    if not any(k[0] == "xfer" for k in chosen):
        raise MissingTraceDataError(
            "no RecvTensor records for the graph's transfers: was the trace recorded with FULL_TRACE?"
        )
    return chosen


def _op_name(key: tuple[str, str], transfers: dict[str, _Transfer]) -> str:
    if key[0] == "xfer":
        t = transfers[key[1]]
        verb = "pull" if t.resource is Resource.DOWNLINK else "push"
        return f"{verb}{t.ps}:{t.tensor}"
    return f"{key[0]}:{key[1]}"


def _operations(
    chosen: list[tuple[str, str]],
    nodes: dict[tuple[str, str], GraphNode],
    transfers: dict[str, _Transfer],
    complete: list[tuple[StepRecords, dict[tuple[str, str], NodeRecord]]],
    relays: dict[str, GraphNode] | None = None,
) -> tuple[Operation, ...]:
    keys = set(chosen)
    resolver = _DependencyResolver(nodes, keys, transfers, relays)
    shapes = _ShapeFinder(nodes, transfers, [recs for _, recs in complete])
    ops = []
    for key in chosen:
        if key[0] == "xfer":
            t = transfers[key[1]]
            deps = resolver.inputs_of(place_of(t.sender.device).key, t.sender)
            nbytes = _transfer_bytes(t.tensor, [recs[key] for _, recs in complete])
            placement = dict(resource=t.resource, ps=t.ps, bytes=nbytes, op_type="Transfer")
        else:
            node = nodes[key]
            deps = resolver.inputs_of(key[0], node)
            on_ps = key[0] != "worker"
            placement = dict(
                resource=Resource.PS if on_ps else Resource.WORKER,
                ps=int(key[0][2:]) if on_ps else None,
                op_type=node.op,
                input_shapes=shapes.inputs_of(key[0], node),
            )
        dep_names = tuple(sorted(_op_name(d, transfers) for d in deps))
        ops.append(Operation.model_validate({"name": _op_name(key, transfers), "deps": dep_names, **placement}))
    return tuple(ops)


class _DependencyResolver:
    """Maps a node's inputs to profile ops, looking through nodes that are not profile ops."""

    def __init__(
        self,
        nodes: dict[tuple[str, str], GraphNode],
        keys: set[tuple[str, str]],
        transfers: dict[str, _Transfer],
        relays: dict[str, GraphNode] | None = None,
    ) -> None:
        self.nodes = nodes
        self.keys = keys
        self.transfers = transfers
        self.relays = relays or {}
        self.memo: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}

    def inputs_of(self, place: str, node: GraphNode) -> frozenset[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for raw in node.inputs:
            found |= self._resolve(place, _input_node(raw), node.name)
        return frozenset(found)

    def _resolve(self, place: str, name: str, user: str) -> frozenset[tuple[str, str]]:
        key = (place, name)
        if key in self.keys:
            return frozenset({key})
        node = self.nodes.get(key)
        if node is None:
            raise TraceFormatError(f"node {user!r} on {place} has input {name!r}, which no partition graph holds")
        if node.op == "_Recv" and node.tensor_name in self.transfers:
            xfer = ("xfer", node.tensor_name)
            if xfer in self.keys:
                return frozenset({xfer})
            t = self.transfers[node.tensor_name]
            return self.inputs_of(place_of(t.sender.device).key, t.sender)
        if node.op == "_Recv" and node.tensor_name in self.relays:  # PS -> PS: a dependency, no link time
            sender = self.relays[node.tensor_name]
            return self.inputs_of(place_of(sender.device).key, sender)
        if key not in self.memo:
            self.memo[key] = frozenset()  # breaks cycles among unrecorded nodes
            self.memo[key] = self.inputs_of(place, node)
        return self.memo[key]


class _ShapeFinder:
    """Input shapes of a computation: each data input's output shape as its producer's step
    record gives it, following a ``_Recv`` to the tensor its ``_Send`` sent (shapes are the same
    in every step; the first step recording the producer is used)."""

    def __init__(
        self,
        nodes: dict[tuple[str, str], GraphNode],
        transfers: dict[str, _Transfer],
        steps: list[dict[tuple[str, str], NodeRecord]],
    ) -> None:
        self.nodes = nodes
        self.transfers = transfers
        self.steps = steps

    def inputs_of(self, place: str, node: GraphNode) -> tuple[tuple[int, ...], ...] | None:
        """Shapes of ``node``'s data inputs in order; None if any of them is unknown."""
        found = []
        for raw in node.inputs:
            if raw.startswith("^"):
                continue
            shape = self._output(place, _input_node(raw), _input_slot(raw), depth=0)
            if shape is None:
                return None
            found.append(shape)
        return tuple(found)

    def _output(self, place: str, name: str, slot: int, depth: int) -> tuple[int, ...] | None:
        node = self.nodes.get((place, name))
        if node is None or depth > 4:
            return None
        if node.op == "_Recv" and node.tensor_name in self.transfers:
            sender = self.transfers[node.tensor_name].sender
            data = [raw for raw in sender.inputs if not raw.startswith("^")]
            if not data:
                return None
            return self._output(place_of(sender.device).key, _input_node(data[0]), _input_slot(data[0]), depth + 1)
        for recs in self.steps:
            rec = recs.get((place, name))
            if rec is not None and slot < len(rec.output_shapes):
                return rec.output_shapes[slot]
        return None


def _input_slot(raw: str) -> int:
    """The output slot an input refers to: 'name:1' is slot 1, 'name' slot 0."""
    _, sep, slot = raw.rpartition(":")
    return int(slot) if sep and slot.isdigit() else 0


def _input_node(raw: str) -> str:
    """'^name' (control input) and 'name:1' (output slot) both refer to node 'name'."""
    name = raw[1:] if raw.startswith("^") else raw
    head, sep, slot = name.rpartition(":")
    return head if sep and slot.isdigit() else name


def _transfer_bytes(tensor: str, records: list[NodeRecord]) -> int:
    """Bytes of a transfer: the recorded allocation size, else the size in the label."""
    exact = [r.requested_bytes for r in records if r.requested_bytes is not None]
    if exact:
        return max(exact)
    m = RECV_LABEL.match(records[0].label)
    size = label_bytes(m["size"]) if m else None
    if size is None:
        raise MissingTraceDataError(f"transfer {tensor!r} records no size (neither bytes nor a readable label)")
    return size


def label_bytes(size: str) -> int | None:
    """The bytes a ``RecvTensor`` label states (its ``[1.1MB]`` part, without the brackets), or
    None if it is not a size."""
    m = _SIZE.match(size.strip())
    return round(float(m["num"]) * _SIZE_UNITS[m["unit"]]) if m else None


def _timing(step: StepRecords, recs: dict[tuple[str, str], NodeRecord], chosen: list[tuple[str, str]]) -> StepTiming:
    first = min(recs[k].start_us for k in chosen)
    wall = None
    if step.client_start_us is not None and step.client_end_us is not None:
        wall = float(step.client_end_us - step.client_start_us) or None
    return StepTiming(
        index=step.index,
        start_us=tuple(float(recs[k].start_us - first) for k in chosen),
        duration_us=tuple(float(recs[k].end_rel_us) for k in chosen),
        wall_us=wall,
    )

