"""Reader for the condensed per-step dump of a traced run (the form ``tests/data/ps-async/condensed`` holds).

The dump is JSON (optionally gzipped) with ``meta``, ``partition_graphs`` and ``steps``; each
field is a renamed copy of TensorFlow's (``start_us`` = ``all_start_micros``, ``end_rel_us`` =
``all_end_rel_micros``, ``outputs[].requested_bytes`` from the allocation description). This
module only decodes; ``tf_profile`` interprets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.errors import MultiWorkerTraceError, TraceFormatError
from advisor.importers.tf_records import GraphNode, NodeRecord, StepRecords, TraceRecords
from advisor.importers.tf_shapes import output_shape

CONDENSED_KEYS = frozenset({"meta", "partition_graphs", "steps"})


def looks_condensed(doc: object) -> bool:
    """Whether decoded JSON has the condensed dump's top-level shape."""
    return isinstance(doc, Mapping) and CONDENSED_KEYS <= doc.keys()


def condensed_records(doc: Mapping[str, Any], *, source: str | None = None) -> TraceRecords:
    """Decode a condensed dump (already parsed from JSON) into trace records."""
    meta = _mapping(doc.get("meta", {}), "meta")
    workers = meta.get("n_workers", 1)
    if isinstance(workers, int) and workers > 1:
        raise MultiWorkerTraceError(f"the dump was recorded with n_workers={workers}; profile with 1 worker")
    graph = tuple(
        _graph_node(node, f"partition_graphs[{i}].nodes[{j}]")
        for i, part in enumerate(_list(doc["partition_graphs"], "partition_graphs"))
        for j, node in enumerate(_list(_mapping(part, f"partition_graphs[{i}]").get("nodes", []), "nodes"))
    )
    steps = tuple(_step(s, i) for i, s in enumerate(_list(doc["steps"], "steps")))
    return TraceRecords(
        graph=graph,
        steps=steps,
        batch_size=_optional_int(meta.get("batch"), "meta.batch"),
        model=meta.get("model") if isinstance(meta.get("model"), str) else None,
        source=source,
    )


def _graph_node(node: object, where: str) -> GraphNode:
    n = _mapping(node, where)
    attrs = _mapping(n.get("attrs") or {}, f"{where}.attrs")
    try:
        return GraphNode(
            name=_str(n["name"], f"{where}.name"),
            op=_str(n["op"], f"{where}.op"),
            device=_str(n.get("device", ""), f"{where}.device"),
            inputs=tuple(_str(x, f"{where}.inputs") for x in _list(n.get("inputs", []), f"{where}.inputs")),
            tensor_name=attrs.get("tensor_name"),
            send_device=attrs.get("send_device"),
            recv_device=attrs.get("recv_device"),
            client_terminated=bool(attrs.get("client_terminated", False)),
        )
    except KeyError as exc:
        raise TraceFormatError(f"{where} lacks field {exc}") from None


def _step(step: object, i: int) -> StepRecords:
    s = _mapping(step, f"steps[{i}]")
    records = []
    for j, dev in enumerate(_list(s.get("devices", []), f"steps[{i}].devices")):
        d = _mapping(dev, f"steps[{i}].devices[{j}]")
        device = _str(d.get("device"), f"steps[{i}].devices[{j}].device")
        for k, node in enumerate(_list(d.get("nodes", []), f"steps[{i}].devices[{j}].nodes")):
            records.append(_record(node, device, f"steps[{i}].devices[{j}].nodes[{k}]"))
    start = _optional_int(s.get("client_start_us"), f"steps[{i}].client_start_us")
    end = _optional_int(s.get("client_end_us"), f"steps[{i}].client_end_us")
    if start is not None and end is not None and end < start:
        raise TraceFormatError(f"steps[{i}]: client_end_us ({end}) is before client_start_us ({start})")
    return StepRecords(
        index=_optional_int(s.get("step", i), f"steps[{i}].step") or 0,
        records=tuple(records),
        client_start_us=start,
        client_end_us=end,
    )


def _record(node: object, device: str, where: str) -> NodeRecord:
    n = _mapping(node, where)
    outputs = n.get("outputs") or []
    first = _mapping(outputs[0], f"{where}.outputs[0]") if isinstance(outputs, list) and outputs else {}
    start = _optional_int(n.get("start_us"), f"{where}.start_us")
    end = _optional_int(n.get("end_rel_us", 0), f"{where}.end_rel_us")
    if start is None:
        raise TraceFormatError(f"{where} lacks start_us")
    return NodeRecord(
        device=device,
        name=_str(n.get("name"), f"{where}.name"),
        start_us=start,
        end_rel_us=end or 0,
        label=n.get("label") or "",
        requested_bytes=_optional_int(first.get("requested_bytes"), f"{where}.outputs[0].requested_bytes"),
        output_shapes=_output_shapes(outputs, where),
    )


def _output_shapes(outputs: object, where: str) -> tuple[tuple[int, ...] | None, ...]:
    """Each output's shape by slot: ``shape`` when recorded, else bytes / dtype size."""
    if not isinstance(outputs, list):
        return ()
    by_slot: dict[int, tuple[int, ...] | None] = {}
    for k, out in enumerate(outputs):
        o = _mapping(out, f"{where}.outputs[{k}]")
        slot = _optional_int(o.get("slot", k), f"{where}.outputs[{k}].slot")
        shape = o.get("shape")
        dims = None
        if isinstance(shape, list):
            dims = [_optional_int(d, f"{where}.outputs[{k}].shape") for d in shape]
        nbytes = _optional_int(o.get("requested_bytes"), f"{where}.outputs[{k}].requested_bytes")
        by_slot[k if slot is None else slot] = output_shape(dims, o.get("dtype"), nbytes)
    return tuple(by_slot.get(i) for i in range(max(by_slot, default=-1) + 1))


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TraceFormatError(f"{where} should be an object, found {type(value).__name__}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise TraceFormatError(f"{where} should be a list, found {type(value).__name__}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise TraceFormatError(f"{where} should be a string, found {type(value).__name__}")
    return value


def _optional_int(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise TraceFormatError(f"{where} should be a number, found {value!r}")
    return int(value)
