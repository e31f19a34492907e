"""``advisor opdb build/show`` and the database file: real traces in, shapes as the layers say,
a file that reads back equal, and bad files or paths as one-line errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.core.huang.opdb import OpDatabase, OpEntry
from advisor.importers.loader import load_profile
from advisor.importers.opdb_file import OpDatabaseFileError, opdb_from_json, opdb_to_json, read_opdb, write_opdb
from tests.conftest import ps_async_data


def test_build_keeps_the_conv_shapes_the_layers_define(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cnn = ps_async_data("condensed", "cubic", "cnn_bw100.json.gz")
    out = tmp_path / "db.json.gz"
    assert main(["opdb", "build", str(cnn), "-o", str(out), "--device", "cpu-2core"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    db = read_opdb(out)
    assert db.device_label == "cpu-2core" and db.sources == (str(cnn),)
    # the cnn of tests/data/ps-async/README.md: batch 8 of 8x8x3 inputs, 3x3 convolutions of 32, 64 and
    # 128 channels, 2x2 max-pooling after the second and third: Conv2D sees (input, filter)
    convs = sorted(e.input_shapes for e in db.entries if e.op_type == "Conv2D")
    assert convs == sorted([
        ((8, 8, 8, 3), (3, 3, 3, 32)),
        ((8, 8, 8, 32), (3, 3, 32, 64)),
        ((8, 4, 4, 64), (3, 3, 64, 128)),
    ])
    steps = len(load_profile(cnn).steps)
    assert all(e.count == steps for e in db.entries if e.op_type == "Conv2D")  # one record a step each
    # the emulated layers (PyFunc sleeps) are kept per node: 5 forward + 5 backward
    assert sum(1 for e in db.entries if e.op_type == "PyFunc" and e.node) == 10


def test_show_lists_the_fit_of_each_op_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = OpDatabase(tuple(
        OpEntry(op_type="MatMul", device="worker", input_shapes=((n,),), count=1, mean_us=t, min_us=t, max_us=t)
        for n, t in ((100, 30.0), (200, 50.0))  # t = 10 + 0.2 n
    ), "hand")
    path = tmp_path / "db.json"
    write_opdb(db, path)
    assert main(["opdb", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "device 'hand', 2 entries" in out
    assert "a = 10.0 us, b = 0.2 us (2 shape(s))" in out


def test_the_file_reads_back_equal(tmp_path: Path) -> None:
    entry = OpEntry(op_type="Relu", device="worker", input_shapes=((8, 16),), count=3, mean_us=5.0,
                    std_us=1.0, min_us=4.0, max_us=6.0)
    node = OpEntry(op_type="PyFunc", device="worker", node="worker:emu", count=1, mean_us=9.0, min_us=9.0, max_us=9.0)
    db = OpDatabase((entry, node), "dev", ("a.json",))
    for name in ("db.json", "db.json.gz"):
        write_opdb(db, tmp_path / name)
        assert read_opdb(tmp_path / name) == db
    assert gzip.decompress((tmp_path / "db.json.gz").read_bytes()).startswith(b'{"format":"advisor-opdb"')


@pytest.mark.parametrize(("change", "message"), [
    ({"format": "advisor-profile"}, "not an op database"),
    ({"version": 2}, "unsupported op database version 2"),
    ({"extra": 1}, r"unknown field\(s\) \['extra'\]"),
    ({"entries": {}}, "'entries' must be a list"),
    ({"entries": [{"op_type": "Relu", "device": "worker", "count": 0, "mean_us": 1, "min_us": 1, "max_us": 1}]},
     r"entries\[0\]:.*count"),
    ({"entries": [{"op_type": "Relu", "device": "worker", "count": 1, "mean_us": -1, "min_us": 1, "max_us": 1}]},
     r"entries\[0\]:.*mean_us"),
])
def test_bad_documents_name_the_problem(change: dict[str, object], message: str) -> None:
    doc = {**opdb_to_json(OpDatabase(())), **change}
    with pytest.raises(OpDatabaseFileError, match=message):
        opdb_from_json(doc, "db.json")


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "advisor-opdb", "version": 9, "entries": []}))
    assert main(["opdb", "show", str(bad)]) == 2
    assert "unsupported op database version 9" in capsys.readouterr().err
    assert main(["opdb", "build", str(tmp_path / "missing.json"), "-o", str(tmp_path / "db.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["opdb", "build", str(bad), "-o", str(tmp_path / "no" / "db.json")]) == 2
    assert "there is no directory" in capsys.readouterr().err
