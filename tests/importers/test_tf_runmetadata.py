"""The RunMetadata readers (protobuf-JSON lines and binary) against real traces in tests/data/ps-async.

Independent truths used here, all read with plain ``json``/``gzip``, never with the reader:
- ``tf-native/<run>/trace_w0.json.gz`` is the condensed dump of the same run as that folder's
  ``runmetadata.jsonl.gz``; its records (name, start, end, label, bytes), graphs, step numbers
  and client times must come out identical.
- ``raw-pb/<cc>/<model>_bw<B>_step<k>.pb`` is step ``k`` of ``condensed/<cc>/<model>_bw<B>``,
  i.e. the entry with ``steps[i]["step"] == k`` (``step`` counts traced steps from 0; its
  ``global_step`` is k + 3 because of the warm-up steps). That entry's client window contains
  every record of the file, which is checked too.
- ``traced_w1.json`` (the run's arguments and results) for model, batch and bandwidth, and the
  variable shapes and dtypes of ``meta.json`` for their byte sizes.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.errors import MissingTraceDataError, TraceFormatError, TraceImportError
from advisor.importers._proto.tf_runmetadata_pb2 import RunMetadata
from advisor.importers.tf_records import StepRecords, TraceRecords
from advisor.importers.tf_runmetadata import read_runmetadata_jsonl, read_runmetadata_pb
from tests.conftest import ps_async_data

NATIVE_RUNS = ("mlp_bw100", "mlp_bw50", "cnn_bw100", "cnn_bw50")
PB_RUNS = [f"{cc}/{m}_bw{bw}" for cc in ("cubic", "bbr") for m in ("mlp", "cnn") for bw in (100, 50)]
DTYPE_BYTES = {"float32": 4, "int64": 8}

Row = tuple[str, str, int, int, str, int | None]


# --- truths read straight from the condensed JSON --------------------------------------------


def _load_json_gz(path: Path) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _condensed_rows(step: dict[str, Any]) -> list[Row]:
    """(device, name, start, end_rel, label, output[0] requested bytes) of every record."""
    return [
        (
            dev["device"],
            node["name"],
            node["start_us"],
            node["end_rel_us"],
            node["label"],
            node["outputs"][0]["requested_bytes"] if node["outputs"] else None,
        )
        for dev in step["devices"]
        for node in dev["nodes"]
    ]


def _condensed_graph(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for part in doc["partition_graphs"]:
        for node in part["nodes"]:
            attrs = node.get("attrs", {})
            rows.append(
                (
                    node["name"],
                    node["op"],
                    node["device"],
                    tuple(node["inputs"]),
                    attrs.get("tensor_name"),
                    attrs.get("send_device"),
                    attrs.get("recv_device"),
                    attrs.get("client_terminated", False),
                )
            )
    return rows


def _rows(step: StepRecords) -> list[Row]:
    return [(r.device, r.name, r.start_us, r.end_rel_us, r.label, r.requested_bytes) for r in step.records]


def _graph_rows(trace: TraceRecords) -> list[tuple[Any, ...]]:
    return [
        (g.name, g.op, g.device, g.inputs, g.tensor_name, g.send_device, g.recv_device, g.client_terminated)
        for g in trace.graph
    ]


# --- protobuf-JSON lines: real data -------------------------------------------------------------


@pytest.fixture(scope="module", params=NATIVE_RUNS)
def native(request: pytest.FixtureRequest) -> tuple[Path, TraceRecords, dict[str, Any]]:
    folder = ps_async_data("tf-native", request.param)
    trace = read_runmetadata_jsonl(folder / "runmetadata.jsonl.gz")
    return folder, trace, _load_json_gz(folder / "trace_w0.json.gz")


def test_jsonl_records_equal_the_condensed_dump_of_the_same_run(
    native: tuple[Path, TraceRecords, dict[str, Any]],
) -> None:
    _, trace, condensed = native
    assert len(trace.steps) == len(condensed["steps"]) == 100
    for step, truth in zip(trace.steps, condensed["steps"], strict=True):
        assert step.index == truth["step"]
        assert (step.client_start_us, step.client_end_us) == (
            truth["client_start_us"],
            truth["client_end_us"],
        )
        assert _rows(step) == _condensed_rows(truth), f"step {step.index}"


def test_jsonl_partition_graphs_equal_the_condensed_dump(
    native: tuple[Path, TraceRecords, dict[str, Any]],
) -> None:
    _, trace, condensed = native
    assert _graph_rows(trace) == _condensed_graph(condensed)
    sends = [g for g in trace.graph if g.op == "_Send"]
    assert sends and all(g.tensor_name and g.send_device and g.recv_device for g in sends)


def test_jsonl_client_window_of_each_line_holds_all_its_records(
    native: tuple[Path, TraceRecords, dict[str, Any]],
) -> None:
    # meta.json: "line k = traced step k"; if the client times were shifted by one step, the
    # records (which all share one clock with the client) would fall outside the window.
    _, trace, _ = native
    for step in trace.steps:
        assert step.client_start_us is not None and step.client_end_us is not None
        assert step.client_start_us <= min(r.start_us for r in step.records)
        assert max(r.start_us + r.end_rel_us for r in step.records) <= step.client_end_us


def test_jsonl_run_facts_match_the_run_arguments_and_variable_shapes(
    native: tuple[Path, TraceRecords, dict[str, Any]],
) -> None:
    folder, trace, _ = native
    run = json.loads((folder / "traced_w1.json").read_text())
    meta = json.loads((folder / "meta.json").read_text())
    assert trace.model == run["results"][0]["model"]
    assert trace.batch_size == run["results"][0]["batch"]
    assert trace.bandwidth_bps == float(run["args"]["bw"]) * 1e6  # bw is in Mbit/s
    # sizes derived from shape and dtype, not copied from meta's "bytes"
    expected = {v["name"]: math.prod(v["shape"]) * DTYPE_BYTES[v["dtype"]] for v in meta["variables"]}
    assert trace.variable_bytes == expected
    trainable = sum(trace.variable_bytes[v["name"]] for v in meta["variables"] if v["trainable"])
    assert trainable == run["results"][0]["param_bytes"]
    assert trace.source == "runmetadata.jsonl.gz"


def test_jsonl_without_meta_numbers_steps_by_line(tmp_path: Path) -> None:
    src = ps_async_data("tf-native", "mlp_bw100", "runmetadata.jsonl.gz")
    lines = gzip.decompress(src.read_bytes()).decode().splitlines()[:5]
    path = tmp_path / "runmetadata.jsonl"
    path.write_text("\n".join(lines) + "\n")
    trace = read_runmetadata_jsonl(path)
    assert [s.index for s in trace.steps] == [0, 1, 2, 3, 4]
    assert all(s.client_start_us is None and s.client_end_us is None for s in trace.steps)
    assert (trace.batch_size, trace.model, trace.bandwidth_bps, trace.variable_bytes) == (
        None,
        None,
        None,
        {},
    )
    assert trace.graph


def test_jsonl_explicit_meta_and_client_steps_only_when_counts_match(tmp_path: Path) -> None:
    folder = ps_async_data("tf-native", "cnn_bw50")
    lines = gzip.decompress((folder / "runmetadata.jsonl.gz").read_bytes()).decode().splitlines()[:3]
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    meta = json.loads((folder / "meta.json").read_text())
    meta["client_steps_us"] = meta["client_steps_us"][:3]
    (tmp_path / "exact.json").write_text(json.dumps(meta))
    trace = read_runmetadata_jsonl(path, meta=tmp_path / "exact.json")
    assert trace.batch_size == 8 and trace.model == "cnn" and trace.bandwidth_bps == 50e6
    assert [(s.client_start_us, s.client_end_us) for s in trace.steps] == [
        (start, end) for start, end, _ in meta["client_steps_us"]
    ]
    meta["client_steps_us"] = meta["client_steps_us"][:2]  # one entry short: positions unknown
    (tmp_path / "short.json").write_text(json.dumps(meta))
    trace = read_runmetadata_jsonl(path, meta=tmp_path / "short.json")
    assert all(s.client_start_us is None for s in trace.steps)


# --- binary protobuf: real data -----------------------------------------------------------------


@pytest.mark.parametrize("run", PB_RUNS)
def test_pb_steps_equal_the_same_steps_of_the_condensed_dump(run: str) -> None:
    cc, name = run.split("/")
    files = [ps_async_data("raw-pb", cc, f"{name}_step{k}.pb") for k in (5, 6)]
    condensed = _load_json_gz(ps_async_data("condensed", cc, f"{name}.json.gz"))
    trace = read_runmetadata_pb(files)
    assert [s.index for s in trace.steps] == [0, 1]  # positions in the list given
    for k, step in zip((5, 6), trace.steps, strict=True):
        (truth,) = [s for s in condensed["steps"] if s["step"] == k]
        assert truth["global_step"] == k + 3  # 3 warm-up steps: global_step is not the index
        assert _rows(step) == _condensed_rows(truth), f"{run} step {k}"
        assert truth["client_start_us"] <= min(r.start_us for r in step.records) <= truth["client_end_us"]
    assert _graph_rows(trace) == _condensed_graph(condensed)
    assert trace.batch_size is None and trace.source == f"{name}_step5.pb,{name}_step6.pb"


def test_pb_files_are_read_in_the_order_given_and_graphs_come_from_the_first_having_them(
    tmp_path: Path,
) -> None:
    step5 = ps_async_data("raw-pb", "cubic", "mlp_bw100_step5.pb")
    step6 = ps_async_data("raw-pb", "cubic", "mlp_bw100_step6.pb")
    bare = RunMetadata.FromString(step6.read_bytes())
    del bare.partition_graphs[:]
    (tmp_path / "bare6.pb").write_bytes(bare.SerializeToString())
    forward = read_runmetadata_pb([step5, step6])
    mixed = read_runmetadata_pb([tmp_path / "bare6.pb", step5])
    assert _rows(mixed.steps[0]) == _rows(forward.steps[1])
    assert _rows(mixed.steps[1]) == _rows(forward.steps[0])
    assert mixed.graph == forward.graph


def test_binary_and_json_lines_share_one_interpretation(tmp_path: Path) -> None:
    # The first protobuf-JSON line of a real run, re-encoded as binary with the minimal schema,
    # must decode to the very same records: the schema holds every field the JSON path reads.
    src = ps_async_data("tf-native", "mlp_bw50", "runmetadata.jsonl.gz")
    line = gzip.decompress(src.read_bytes()).decode().splitlines()[0]
    (tmp_path / "one.jsonl").write_text(line + "\n")
    message = json_format.Parse(line, RunMetadata(), ignore_unknown_fields=True)
    (tmp_path / "one.pb").write_bytes(message.SerializeToString())
    from_json = read_runmetadata_jsonl(tmp_path / "one.jsonl")
    from_pb = read_runmetadata_pb([tmp_path / "one.pb"])
    assert from_pb.graph == from_json.graph
    assert from_pb.steps[0].records == from_json.steps[0].records


# --- malformed input --------------------------------------------------------------------------


def _native_lines(run: str = "mlp_bw100") -> list[str]:
    src = ps_async_data("tf-native", run, "runmetadata.jsonl.gz")
    return gzip.decompress(src.read_bytes()).decode().splitlines()


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    data = ps_async_data("tf-native", "mlp_bw100", "runmetadata.jsonl.gz").read_bytes()
    path = tmp_path / "runmetadata.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"runmetadata\.jsonl\.gz.*(truncated|corrupt|line)"):
        read_runmetadata_jsonl(path)


def test_truncated_json_line_names_the_line(tmp_path: Path) -> None:
    lines = _native_lines()[:3]
    lines[1] = lines[1][: len(lines[1]) // 2]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"cut\.jsonl: line 2: not valid JSON"):
        read_runmetadata_jsonl(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", r"line 1: expected a JSON object"),
        ('{"stepStats": {"devStats": {"device": "x"}}}', r"line 1: stepStats\.devStats should be a list"),
        (
            '{"stepStats": {"devStats": [{"device": "d", "nodeStats": [{"allStartMicros": "soon"}]}]}}',
            r"line 1: stepStats\.devStats\[0\]\.nodeStats\[0\]\.allStartMicros should be an integer",
        ),
        (
            '{"partitionGraphs": [{"node": [{"name": "n", "attr": {"tensor_name": {"s": "@@@"}}}]}]}',
            r"line 1: partitionGraphs\[0\]\.node\[0\]\.attr\.tensor_name\.s is not base64",
        ),
        (
            '{"partitionGraphs": [{"node": [{"name": 7}]}]}',
            r"line 1: partitionGraphs\[0\]\.node\[0\]\.name should be a string",
        ),
    ],
)
def test_wrong_shapes_name_the_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl: " + message):
        read_runmetadata_jsonl(path)


def test_empty_jsonl_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(TraceFormatError, match="empty"):
        read_runmetadata_jsonl(path)


def test_jsonl_without_partition_graphs_is_missing_data(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    path.write_text("\n".join(_native_lines()[1:4]) + "\n")  # graphs are on the first line only
    with pytest.raises(MissingTraceDataError, match=r"later\.jsonl: no partition graphs"):
        read_runmetadata_jsonl(path)


def test_malformed_meta_names_the_meta_file(tmp_path: Path) -> None:
    (tmp_path / "runmetadata.jsonl").write_text(_native_lines()[0] + "\n")
    (tmp_path / "meta.json").write_text('{"batch": 32, ')
    with pytest.raises(TraceFormatError, match=r"meta\.json: not valid JSON"):
        read_runmetadata_jsonl(tmp_path / "runmetadata.jsonl")
    (tmp_path / "meta.json").write_text('{"batch": "thirty-two"}')
    with pytest.raises(TraceFormatError, match=r"meta\.json: batch should be an integer"):
        read_runmetadata_jsonl(tmp_path / "runmetadata.jsonl")


def test_missing_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_runmetadata_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_runmetadata_pb([tmp_path / "nope.pb"])


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x01garbage that is not a protobuf",  # field number 0 is invalid
        b"\xff" * 64,  # wire type 7 does not exist
        b'{"stepStats": {}}',  # protobuf-JSON text handed over as a .pb
    ],
)
def test_garbage_pb_is_a_format_error_naming_the_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "junk.pb"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=r"junk\.pb: not a binary RunMetadata"):
        read_runmetadata_pb([path])


def test_truncated_pb_is_a_format_error(tmp_path: Path) -> None:
    data = ps_async_data("raw-pb", "cubic", "cnn_bw100_step5.pb").read_bytes()
    path = tmp_path / "half.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"half\.pb: not a binary RunMetadata"):
        read_runmetadata_pb([path])


def test_pb_without_partition_graphs_is_missing_data(tmp_path: Path) -> None:
    message = RunMetadata.FromString(ps_async_data("raw-pb", "bbr", "mlp_bw50_step5.pb").read_bytes())
    del message.partition_graphs[:]
    path = tmp_path / "nographs.pb"
    path.write_bytes(message.SerializeToString())
    with pytest.raises(MissingTraceDataError, match=r"nographs\.pb: no partition graphs"):
        read_runmetadata_pb([path])
    with pytest.raises(MissingTraceDataError):
        read_runmetadata_pb([])


# --- nothing but the project's errors escape, whatever the input --------------------------------

_KEYS = st.sampled_from(
    [
        "stepStats", "devStats", "device", "nodeStats", "nodeName", "allStartMicros",
        "allEndRelMicros", "timelineLabel", "output", "tensorDescription",
        "allocationDescription", "requestedBytes", "partitionGraphs", "node", "name", "op",
        "input", "attr", "tensor_name", "client_terminated", "s", "b",
    ]
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(_KEYS, _JSON, max_size=3))
def test_any_json_line_gives_records_or_a_trace_error(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.jsonl"
        path.write_text(json.dumps(doc) + "\n")
        with contextlib.suppress(TraceImportError):
            read_runmetadata_jsonl(path)


def test_mutated_pb_bytes_give_records_or_a_trace_error(tmp_path: Path) -> None:
    data = bytearray(ps_async_data("raw-pb", "cubic", "mlp_bw50_step6.pb").read_bytes())
    rng = random.Random(20240601)
    path = tmp_path / "mutated.pb"
    for _ in range(60):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        path.write_bytes(bytes(mutated))
        with contextlib.suppress(TraceImportError):
            read_runmetadata_pb([path])
