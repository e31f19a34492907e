"""Bad trace files get the project's own errors, each naming the file and the problem."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.errors import (
    MissingTraceDataError, MultiWorkerTraceError, ProfileError, TraceFormatError,
)
from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import read_profile, write_profile
from tests.conftest import ps_async_data
from tests.factories import one_layer


def _condensed() -> dict:
    return json.load(gzip.open(ps_async_data("condensed", "cubic/mlp_bw100.json.gz")))


def _write(tmp_path: Path, doc: object, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_truncated_json_names_the_position(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_condensed())[:5000])
    with pytest.raises(ProfileError, match=r"t\.json: not valid JSON at line 1 column \d+"):
        load_profile(path)


def test_truncated_gzip_is_reported(tmp_path: Path) -> None:
    data = ps_async_data("condensed", "cubic/mlp_bw100.json.gz").read_bytes()
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ProfileError, match="truncated or corrupt gzip"):
        load_profile(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such file"):
        load_profile(tmp_path / "absent.json")


def test_chrome_timeline_is_refused_with_the_reason() -> None:
    timeline = ps_async_data("raw-pb", "cubic", "mlp_bw100_timeline_step5.json")
    with pytest.raises(TraceFormatError, match="Chrome-trace timeline.*tensor names and sizes"):
        load_profile(timeline)


def test_multi_worker_trace_is_refused(tmp_path: Path) -> None:
    doc = _condensed()
    # add a second worker's device, as a 2-worker trace would have
    extra = json.loads(json.dumps(doc["steps"][0]["devices"][-1]).replace("task:0", "task:1"))
    doc["steps"][0]["devices"].append(extra)
    with pytest.raises(MultiWorkerTraceError, match=r"2 workers \(tasks \[0, 1\]\)"):
        load_profile(_write(tmp_path, doc))


def test_multi_worker_meta_is_refused(tmp_path: Path) -> None:
    doc = _condensed()
    doc["meta"]["n_workers"] = 3
    with pytest.raises(MultiWorkerTraceError, match="n_workers=3"):
        load_profile(_write(tmp_path, doc))


def test_trace_without_transfers(tmp_path: Path) -> None:
    doc = _condensed()
    for g in doc["partition_graphs"]:
        g["nodes"] = [n for n in g["nodes"] if n["op"] not in ("_Send", "_Recv")]
    with pytest.raises(MissingTraceDataError, match="no transfers between a worker and a parameter server"):
        load_profile(_write(tmp_path, doc))


def test_trace_without_partition_graphs(tmp_path: Path) -> None:
    doc = _condensed()
    doc["partition_graphs"] = []
    with pytest.raises(MissingTraceDataError, match="output_partition_graphs=True"):
        load_profile(_write(tmp_path, doc))


def test_unknown_input_reference(tmp_path: Path) -> None:
    doc = _condensed()
    worker = doc["partition_graphs"][1]["nodes"]
    node = next(n for n in worker if n["name"] == "fc0/MatMul")
    node["inputs"].append("no/such/node")
    with pytest.raises(TraceFormatError, match="'fc0/MatMul' on worker has input 'no/such/node'"):
        load_profile(_write(tmp_path, doc))


def test_missing_batch_size_asks_for_it(tmp_path: Path) -> None:
    doc = _condensed()
    del doc["meta"]["batch"]
    path = _write(tmp_path, doc)
    with pytest.raises(MissingTraceDataError, match="batch size"):
        load_profile(path)
    assert load_profile(path, batch_size=16).job.batch_size == 16


def test_wrong_shapes_are_named(tmp_path: Path) -> None:
    doc = _condensed()
    doc["steps"][3]["devices"][0]["nodes"][0]["start_us"] = "soon"
    with pytest.raises(TraceFormatError, match=r"steps\[3\]\.devices\[0\]\.nodes\[0\]\.start_us should be a number"):
        load_profile(_write(tmp_path, doc))


def test_every_step_incomplete(tmp_path: Path) -> None:
    doc = _condensed()
    for s in doc["steps"]:
        s["devices"] = [d for d in s["devices"] if not any(n["name"] == "RecvTensor" for n in d["nodes"])]
    with pytest.raises(MissingTraceDataError, match="no RecvTensor records"):
        load_profile(_write(tmp_path, doc))


def test_own_profile_round_trips(tmp_path: Path) -> None:
    profile = one_layer()
    for name in ("p.json", "p.json.gz"):
        write_profile(profile, tmp_path / name)
        assert read_profile(tmp_path / name) == profile
        assert load_profile(tmp_path / name) == profile


def test_bundled_example_is_a_valid_profile() -> None:
    profile = load_profile(BUNDLED_EXAMPLE)
    assert profile.job.batch_size == 32 and len(profile.steps) == 100
    assert profile.job.recorded_bandwidth_bps == 100e6


def test_deeply_nested_json_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(ProfileError, match="deep.json: JSON nested too deeply"):
        load_profile(path)


def test_a_step_that_ends_before_it_starts_is_named(tmp_path: Path) -> None:
    doc = _condensed()
    step = doc["steps"][1]
    step["client_start_us"], step["client_end_us"] = step["client_end_us"], step["client_start_us"]
    with pytest.raises(TraceFormatError, match=r"steps\[1\]: client_end_us \(\d+\) is before client_start_us"):
        load_profile(_write(tmp_path, doc))


def test_a_meta_client_step_that_ends_before_it_starts_is_named(tmp_path: Path) -> None:
    folder = ps_async_data("tf-native", "cnn_bw50")
    lines = gzip.decompress((folder / "runmetadata.jsonl.gz").read_bytes()).decode().splitlines()[:2]
    (tmp_path / "runmetadata.jsonl").write_text("\n".join(lines) + "\n")
    meta = json.loads((folder / "meta.json").read_text())
    meta["client_steps_us"] = meta["client_steps_us"][:2]
    start, end, step = meta["client_steps_us"][0]
    meta["client_steps_us"][0] = [end, start, step]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceFormatError, match=r"client_steps_us\[0\] ends \(\d+\) before it starts"):
        load_profile(tmp_path / "runmetadata.jsonl")
