"""Readers for TensorFlow's own ``RunMetadata`` encodings, without needing TensorFlow.

A traced ``session.run`` leaves a ``RunMetadata`` protobuf (step stats plus partition graphs).
Users hand it over either as protobuf-JSON lines (``json_format.MessageToJson`` of one step per
line, partition graphs on the first line only) or as binary ``.pb`` files (one serialized
``RunMetadata`` per step). Both become the same plain dict, protobuf's JSON mapping (camelCase
names, int64 as decimal strings, defaults omitted, bytes base64), the binary one through
``json_format.MessageToDict`` with the minimal schema in ``_proto/``; one set of functions then
turns that dict into the records of ``tf_records``. Callers that already hold the decoded dicts
(the upload bundle of ``trace_upload``) use ``read_runmetadata_documents``. Interpretation
(pairing transfers, dependencies) is ``tf_profile``'s job, not this module's.

Step numbering: ``StepRecords.index`` is the step's position, 0-based (JSON lines: the k-th
non-blank line; binary: the k-th path given). This is the numbering of the condensed dump's
``steps[].step`` and of the ``_step<k>.pb`` file names in ``tests/data/ps-async``. The client-side
``[start, end]`` of each step comes from ``meta.json``'s ``client_steps_us`` by position, and
only when it lists exactly one entry per step: ``meta.json`` documents that line k is traced step
k, and in the recorded runs every line's records lie inside that entry's window. Its third
value, the global step after the run, is not an index (it starts after the warm-up steps).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from advisor.errors import MissingTraceDataError, TraceFormatError
from advisor.importers.json_files import GZIP_MAGIC, read_json_document
from advisor.importers._proto.tf_runmetadata_pb2 import RunMetadata
from advisor.importers.tf_shapes import output_shape
from advisor.importers.tf_records import GraphNode, NodeRecord, StepRecords, TraceRecords

META_NAME = "meta.json"
RUN_ARGS_NAME = "traced_w1.json"
_BITS_PER_MBIT = 1e6
_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_INTEGER = re.compile(r"-?\d+")
_NO_GRAPHS_HINT = "record it with RunOptions(output_partition_graphs=True)"


# --- public entry points -------------------------------------------------------------------


def read_runmetadata_jsonl(path: Path, *, meta: Path | None = None) -> TraceRecords:
    """Decode protobuf-JSON ``RunMetadata`` lines (``.jsonl`` or ``.jsonl.gz``), one step a line.

    ``meta`` is the run's ``meta.json`` (batch size, model, variables, client step times);
    by default the one beside ``path`` is used if it exists.
    """
    path = Path(path)
    lines = ((doc, _Where(f"{path}: line {lineno}")) for lineno, doc in _json_lines(path))
    graph, steps = _collect(lines)
    if not steps:
        raise TraceFormatError(f"{path}: holds no RunMetadata lines (empty file)")
    info = _run_info(path, meta)
    return _assemble(graph, steps, info, origin=str(path), source=path.name)


def read_runmetadata_documents(
    docs: Iterable[object], meta: Mapping[str, Any], *, origin: str, source: str | None = None
) -> TraceRecords:
    """Records from already-decoded ``RunMetadata`` dicts (protobuf's JSON mapping), in step order.

    The documents-in form of ``read_runmetadata_jsonl`` for callers that hold the documents
    already (the upload bundle of ``trace_upload``): ``docs`` are what the lines would decode to,
    ``meta`` what ``meta.json`` would. ``origin`` names the whole for error messages, which place
    a problem as ``runmetadata[i]...`` or ``meta...``; ``source`` (default ``origin``) is recorded
    in the profile.
    """
    steps_in = ((doc, _Where(origin, f"runmetadata[{i}]")) for i, doc in enumerate(docs))
    graph, steps = _collect((_mapping(doc, where), where) for doc, where in steps_in)
    if not steps:
        raise MissingTraceDataError(f"{origin}: holds no RunMetadata (no traced steps)")
    info = _meta_info(_mapping(meta, _Where(origin, "meta")), _Where(origin, "meta"))
    return _assemble(graph, steps, info, origin=origin, source=origin if source is None else source)


def read_runmetadata_pb(paths: Sequence[Path]) -> TraceRecords:
    """Decode binary ``RunMetadata`` files, one step per file in the order given.

    Partition graphs come from the first file that has them. Binary files carry no batch size
    or model name; those stay ``None``.
    """
    if not paths:
        raise MissingTraceDataError("no RunMetadata .pb files were given")
    graph, steps = _collect((_decode_pb(path), _Where(str(path))) for path in map(Path, paths))
    origin = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"
    source = ",".join(Path(p).name for p in paths)
    return _assemble(graph, steps, _RunInfo(), origin=origin, source=source)


# --- file decoding ------------------------------------------------------------------------------


def _json_lines(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """Yield (1-based line number, decoded object) for each non-blank line."""
    lineno = 0
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    yield lineno, _json_object(line, path, lineno)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceFormatError(
            f"{path}: truncated or corrupt gzip data after {lineno} readable lines ({exc})"
        ) from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: line {lineno + 1}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _open_text(path: Path) -> IO[str]:
    """Open a text file, gunzipping it when it starts with the gzip magic bytes."""
    with path.open("rb") as fh:
        gzipped = fh.read(2) == GZIP_MAGIC
    if gzipped:
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _json_object(line: str, path: Path, lineno: int) -> Mapping[str, Any]:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{path}: line {lineno}: not valid JSON at column {exc.colno}: {exc.msg} (truncated line?)"
        ) from None
    except RecursionError:
        raise TraceFormatError(f"{path}: line {lineno}: JSON nested too deeply") from None
    if not isinstance(doc, Mapping):
        raise TraceFormatError(
            f"{path}: line {lineno}: expected a JSON object (one RunMetadata), found {type(doc).__name__}"
        )
    return doc


def _decode_pb(path: Path) -> Mapping[str, Any]:
    """Parse one binary ``RunMetadata`` into its protobuf-JSON dict."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    message = RunMetadata()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise TraceFormatError(f"{path}: not a binary RunMetadata protobuf ({exc})") from None
    if not message.HasField("step_stats") and not message.partition_graphs:
        raise TraceFormatError(
            f"{path}: not a binary RunMetadata protobuf: no step_stats and no partition_graphs "
            f"in {len(data)} bytes"
        )
    return json_format.MessageToDict(message)


# --- shared interpretation of one RunMetadata dict ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a value sits, for error messages: the file (and line), then the field path."""

    origin: str
    path: str = ""

    def key(self, name: str) -> _Where:
        return _Where(self.origin, f"{self.path}.{name}" if self.path else name)

    def item(self, index: int) -> _Where:
        return _Where(self.origin, f"{self.path}[{index}]")

    def error(self, what: str) -> TraceFormatError:
        return TraceFormatError(f"{self.origin}: {self.path or 'RunMetadata'} {what}")


def _collect(
    docs: Iterable[tuple[Mapping[str, Any], _Where]],
) -> tuple[tuple[GraphNode, ...] | None, list[tuple[NodeRecord, ...]]]:
    """Each step's records, and the partition graphs of the first step that has them."""
    graph: tuple[GraphNode, ...] | None = None
    steps: list[tuple[NodeRecord, ...]] = []
    for doc, where in docs:
        steps.append(_step_records(doc, where))
        if graph is None:
            graph = _partition_graphs(doc, where)
    return graph, steps


def _step_records(doc: Mapping[str, Any], where: _Where) -> tuple[NodeRecord, ...]:
    """All ``NodeExecStats`` of one RunMetadata, in file order, each with its device."""
    stats_at = where.key("stepStats")
    step_stats = _mapping(_field(doc, "stepStats"), stats_at, default={})
    devs_at = stats_at.key("devStats")
    records: list[NodeRecord] = []
    for i, dev in enumerate(_list(_field(step_stats, "devStats"), devs_at)):
        dev_at = devs_at.item(i)
        dev = _mapping(dev, dev_at)
        device = _str(_field(dev, "device"), dev_at.key("device"))
        nodes_at = dev_at.key("nodeStats")
        for j, stats in enumerate(_list(_field(dev, "nodeStats"), nodes_at)):
            records.append(_node_record(stats, device, nodes_at.item(j)))
    return tuple(records)


def _node_record(stats: object, device: str, where: _Where) -> NodeRecord:
    stats = _mapping(stats, where)
    return NodeRecord(
        device=device,
        name=_str(_field(stats, "nodeName"), where.key("nodeName")),
        start_us=_int(_field(stats, "allStartMicros"), where.key("allStartMicros")),
        end_rel_us=_int(_field(stats, "allEndRelMicros"), where.key("allEndRelMicros")),
        label=_str(_field(stats, "timelineLabel"), where.key("timelineLabel")),
        requested_bytes=_requested_bytes(stats, where),
        output_shapes=_output_shapes(stats, where),
    )


def _output_shapes(stats: Mapping[str, Any], where: _Where) -> tuple[tuple[int, ...] | None, ...]:
    """Each output's shape by slot (``output[].tensorDescription.shape.dim[].size``), or its
    element count from requested bytes / dtype size when the shape is absent (``tf_shapes``).
    Protobuf semantics: an absent slot or size is 0."""
    outputs_at = where.key("output")
    by_slot: dict[int, tuple[int, ...] | None] = {}
    for k, out in enumerate(_list(_field(stats, "output"), outputs_at)):
        at = outputs_at.item(k)
        out = _mapping(out, at)
        desc_at = at.key("tensorDescription")
        desc = _mapping(_field(out, "tensorDescription"), desc_at, default={})
        shape = _mapping(_field(desc, "shape"), desc_at.key("shape"), default={})
        dims: list[int | None] | None = None
        if not shape.get("unknownRank"):
            dims_at = desc_at.key("shape").key("dim")
            dims = [
                _int(_field(_mapping(d, dims_at.item(i)), "size"), dims_at.item(i).key("size"))
                for i, d in enumerate(_list(_field(shape, "dim"), dims_at))
            ]
        alloc_at = desc_at.key("allocationDescription")
        alloc = _mapping(_field(desc, "allocationDescription"), alloc_at, default={})
        nbytes = _int(_field(alloc, "requestedBytes"), alloc_at.key("requestedBytes"))
        by_slot[_int(_field(out, "slot"), at.key("slot"))] = output_shape(dims, _field(desc, "dtype"), nbytes)
    return tuple(by_slot.get(i) for i in range(max(by_slot, default=-1) + 1))


def _requested_bytes(stats: Mapping[str, Any], where: _Where) -> int | None:
    """``output[0].tensorDescription.allocationDescription.requestedBytes``; None without outputs.

    Read with protobuf's semantics: an absent message or field is its default, so an output
    without an allocation description (an empty tensor) has 0 bytes, as TensorFlow reports it.
    """
    outputs_at = where.key("output")
    outputs = _list(_field(stats, "output"), outputs_at)
    if not outputs:
        return None
    at = outputs_at.item(0)
    first = _mapping(outputs[0], at)
    at = at.key("tensorDescription")
    tensor = _mapping(_field(first, "tensorDescription"), at, default={})
    at = at.key("allocationDescription")
    allocation = _mapping(_field(tensor, "allocationDescription"), at, default={})
    return _int(_field(allocation, "requestedBytes"), at.key("requestedBytes"))


def _partition_graphs(doc: Mapping[str, Any], where: _Where) -> tuple[GraphNode, ...] | None:
    """The nodes of every partition graph, or None when this RunMetadata has none."""
    graphs_at = where.key("partitionGraphs")
    graphs = _list(_field(doc, "partitionGraphs"), graphs_at)
    if not graphs:
        return None
    nodes: list[GraphNode] = []
    for i, graph in enumerate(graphs):
        graph_at = graphs_at.item(i)
        nodes_at = graph_at.key("node")
        for j, node in enumerate(_list(_field(_mapping(graph, graph_at), "node"), nodes_at)):
            nodes.append(_graph_node(node, nodes_at.item(j)))
    return tuple(nodes)


def _graph_node(node: object, where: _Where) -> GraphNode:
    node = _mapping(node, where)
    attrs_at = where.key("attr")
    attrs = _mapping(_field(node, "attr"), attrs_at, default={})
    inputs_at = where.key("input")
    inputs = _list(_field(node, "input"), inputs_at)
    return GraphNode(
        name=_str(_field(node, "name"), where.key("name")),
        op=_str(_field(node, "op"), where.key("op")),
        device=_str(_field(node, "device"), where.key("device")),
        inputs=tuple(_str(x, inputs_at.item(k)) for k, x in enumerate(inputs)),
        tensor_name=_attr_string(attrs, "tensor_name", attrs_at),
        send_device=_attr_string(attrs, "send_device", attrs_at),
        recv_device=_attr_string(attrs, "recv_device", attrs_at),
        client_terminated=_attr_bool(attrs, "client_terminated", attrs_at),
    )


def _attr_string(attrs: Mapping[str, Any], name: str, where: _Where) -> str | None:
    """A string attr (``AttrValue.s``, base64 in protobuf-JSON), or None if absent."""
    at = where.key(name)
    attr = _mapping(attrs.get(name), at, default={})
    value = attr.get("s")
    if value is None:
        return None
    text = _str(value, at.key("s"))
    try:
        return _b64decode(text).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise at.key("s").error(f"is not base64-encoded UTF-8 text ({exc})") from None


def _b64decode(text: str) -> bytes:
    """Decode base64 as protobuf's JSON mapping allows it: standard or URL-safe, padded or not."""
    text = text.translate(str.maketrans("-_", "+/"))
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _attr_bool(attrs: Mapping[str, Any], name: str, where: _Where) -> bool:
    at = where.key(name)
    attr = _mapping(attrs.get(name), at, default={})
    value = attr.get("b", False)
    if not isinstance(value, bool):
        raise at.key("b").error(f"should be true or false, found {value!r}")
    return value


# --- run-level facts from meta.json (and traced_w1.json) ------------------------------------


@dataclass(frozen=True, slots=True)
class _RunInfo:
    """What the sibling files add to the step records."""

    batch_size: int | None = None
    model: str | None = None
    bandwidth_bps: float | None = None
    variable_bytes: dict[str, int] = field(default_factory=dict)
    client_steps: tuple[tuple[int, int], ...] | None = None
    untraced_steps: tuple[tuple[int, int], ...] = ()


def _run_info(trace: Path, meta: Path | None) -> _RunInfo:
    """Read ``meta`` (or ``meta.json`` beside the trace, if any) and the run's arguments file."""
    if meta is None:
        beside = trace.parent / META_NAME
        meta = beside if beside.is_file() else None
    doc = _read_json(meta) if meta is not None else {}
    info = _meta_info(doc, _Where(str(meta)))
    if info.bandwidth_bps is None:
        info = replace(info, bandwidth_bps=_args_bandwidth(trace.parent / RUN_ARGS_NAME))
    return info


def _meta_info(doc: Mapping[str, Any], where: _Where) -> _RunInfo:
    """The facts a ``meta.json`` document gives (every key optional)."""
    bandwidth = _meta_bandwidth(doc, where)
    return _RunInfo(
        batch_size=_meta_batch(doc, where),
        model=_optional_str(doc.get("model"), where.key("model")),
        bandwidth_bps=bandwidth,
        variable_bytes=_meta_variables(doc, where),
        client_steps=_meta_windows(doc, "client_steps_us", where),
        untraced_steps=_meta_windows(doc, "untraced_steps_us", where) or (),
    )


def _read_json(path: Path) -> Mapping[str, Any]:
    return _mapping(read_json_document(path, TraceFormatError), _Where(str(path)))


def _meta_batch(doc: Mapping[str, Any], where: _Where) -> int | None:
    if doc.get("batch") is not None:
        return _int(doc["batch"], where.key("batch"))
    cfg = _mapping(doc.get("model_cfg"), where.key("model_cfg"), default={})
    if cfg.get("batch") is None:
        return None
    return _int(cfg["batch"], where.key("model_cfg").key("batch"))


def _meta_bandwidth(doc: Mapping[str, Any], where: _Where) -> float | None:
    """``bw_mbit`` (Mbit/s) as bits per second."""
    if doc.get("bw_mbit") is None:
        return None
    return _number(doc["bw_mbit"], where.key("bw_mbit")) * _BITS_PER_MBIT


def _args_bandwidth(path: Path) -> float | None:
    """The ``args.bw`` (Mbit/s) of the run's arguments file, when meta.json lacks it."""
    if not path.is_file():
        return None
    where = _Where(str(path))
    args = _mapping(_read_json(path).get("args"), where.key("args"), default={})
    if args.get("bw") is None:
        return None
    return _number(args["bw"], where.key("args").key("bw")) * _BITS_PER_MBIT


def _meta_variables(doc: Mapping[str, Any], where: _Where) -> dict[str, int]:
    """Bytes of every variable ``meta.json`` lists with a size (trainable or not: ``global_step``)."""
    at = where.key("variables")
    sizes: dict[str, int] = {}
    for i, var in enumerate(_list(doc.get("variables"), at)):
        var_at = at.item(i)
        var = _mapping(var, var_at)
        if var.get("bytes") is not None:
            sizes[_str(var.get("name"), var_at.key("name"))] = _int(var["bytes"], var_at.key("bytes"))
    return sizes


def _meta_windows(doc: Mapping[str, Any], key: str, where: _Where) -> tuple[tuple[int, int], ...] | None:
    """``client_steps_us`` ([start, end, global_step] of each traced step, wall-clock µs) or
    ``untraced_steps_us`` (the same of the steps the recorder timed untraced after them)."""
    at = where.key(key)
    if doc.get(key) is None:
        return None
    steps: list[tuple[int, int]] = []
    for i, entry in enumerate(_list(doc[key], at)):
        entry_at = at.item(i)
        entry = _list(entry, entry_at)
        if len(entry) < 2:
            raise entry_at.error(f"should be [start_us, end_us, global_step], found {entry!r}")
        start, end = _int(entry[0], entry_at.item(0)), _int(entry[1], entry_at.item(1))
        if end < start:
            raise entry_at.error(f"ends ({end}) before it starts ({start})")
        steps.append((start, end))
    return tuple(steps)


# --- assembly -----------------------------------------------------------------------------------


def _assemble(
    graph: tuple[GraphNode, ...] | None,
    steps: Sequence[tuple[NodeRecord, ...]],
    info: _RunInfo,
    *,
    origin: str,
    source: str,
) -> TraceRecords:
    if graph is None:
        raise MissingTraceDataError(f"{origin}: no partition graphs in any step; {_NO_GRAPHS_HINT}")
    if not any(steps):
        raise MissingTraceDataError(
            f"{origin}: no step_stats records in any step; record it with RunOptions(trace_level=FULL_TRACE)"
        )
    clients: Sequence[tuple[int | None, int | None]] = [(None, None)] * len(steps)
    if info.client_steps is not None and len(info.client_steps) == len(steps):
        clients = info.client_steps
    return TraceRecords(
        graph=graph,
        steps=tuple(
            StepRecords(index=i, records=records, client_start_us=start, client_end_us=end)
            for i, (records, (start, end)) in enumerate(zip(steps, clients, strict=True))
        ),
        batch_size=info.batch_size,
        model=info.model,
        source=source,
        bandwidth_bps=info.bandwidth_bps,
        variable_bytes=dict(info.variable_bytes),
        untraced_walls_us=tuple(float(end - start) for start, end in info.untraced_steps),
    )


# --- typed access to decoded JSON ----------------------------------------------------------


@cache
def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _field(obj: Mapping[str, Any], camel: str) -> Any:
    """A field by its JSON name, or by its proto name (protobuf-JSON parsers accept both)."""
    value = obj.get(camel)
    return obj.get(_snake(camel)) if value is None else value


def _mapping(value: object, where: _Where, *, default: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    if value is None and default is not None:
        return default
    if not isinstance(value, Mapping):
        raise where.error(f"should be an object, found {_kind(value)}")
    return value


def _list(value: object, where: _Where) -> list[Any]:
    """A repeated field; absent means empty (protobuf-JSON omits empty lists)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(f"should be a list, found {_kind(value)}")
    return value


def _str(value: object, where: _Where) -> str:
    """A string field; absent means empty."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise where.error(f"should be a string, found {_kind(value)}")
    return value


def _optional_str(value: object, where: _Where) -> str | None:
    return None if value is None else _str(value, where)


def _int(value: object, where: _Where) -> int:
    """An integer field: a JSON number or, as protobuf-JSON writes int64, a decimal string."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise where.error(f"should be an integer, found {value!r}")


def _number(value: object, where: _Where) -> float:
    """A number, possibly written as a string (``"100"``)."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        number = float(value)
    if number is None or not math.isfinite(number):
        raise where.error(f"should be a number, found {value!r}")
    return number


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__
