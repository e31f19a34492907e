"""``advisor dts SPEC.yaml``: the bundled example runs, the JSON has its documented shape, bad
input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from advisor.cli import main
from tests.conftest import REPO

EXAMPLE = REPO / "advisor" / "data" / "dts-example.yaml"


def test_the_example_table_lists_every_architecture_and_its_roles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dts", str(EXAMPLE), "--samples", "200"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if line.split()[:1] in (["PL"], ["FL"], ["SL"], ["PSL"], ["FSL"])]
    assert rows == ["PL", "FL", "SL", "PSL", "FSL"] * 2  # the times, then the roles
    assert "best: " in out and "worker 1=worker-1 (9 layers)" in out
    assert "edge server 3=" in out


def test_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dts", str(EXAMPLE), "--json", "--samples", "200", "--seed", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "advisor-dts/1" and doc["best"] in ("PL", "FL", "SL", "PSL", "FSL")
    assert [r["architecture"] for r in doc["results"]] == ["PL", "FL", "SL", "PSL", "FSL"]
    for r in doc["results"]:
        assert {"architecture", "seconds_per_batch", "seconds_per_epoch", "roles", "interval"} <= set(r)
        assert r["seconds_per_epoch"] == pytest.approx(r["batches_per_epoch"] * r["seconds_per_batch"])
        assert r["seconds_total"] == pytest.approx(5 * r["seconds_per_epoch"])  # 5 epochs in the example
        i = r["interval"]
        assert i["level"] == 0.95 and i["samples"] == 200
        assert i["seconds_per_batch"][0] < i["mean_seconds_per_batch"] < i["seconds_per_batch"][1]
        assert all({"processor", "role"} <= set(x) for x in r["roles"])
        used = {x["processor"] for x in r["roles"]}
        assert all(set(link) <= used for link in r["links"])
    fsl = doc["results"][4]
    assert sorted(x["role"] for x in fsl["roles"]) == sorted(
        ["server"] + [f"client {j}" for j in (1, 2, 3)] + [f"edge server {j}" for j in (1, 2, 3)])
    # the example's testbed: 3 clients x 124 batches; PL runs them all through one pipeline
    assert doc["results"][0]["batches_per_epoch"] == 372 and doc["results"][1]["batches_per_epoch"] == 124


def test_the_same_seed_prints_the_same_json(capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for _ in range(2):
        main(["dts", str(EXAMPLE), "--json", "--samples", "50", "--seed", "9"])
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("advisor: error: model 'dts': ")
    return err


def test_a_bad_field_is_one_line_naming_file_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["cluster"]["processors"][0]["gflop_per_s"] = 0
    doc["training"]["sample_gb"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    err = _fails(["dts", str(path)], capsys)
    assert f"{path}: cluster.processors[0].gflop_per_s: Input should be greater than 0" in err
    assert "training.sample_gb: Input should be greater than 0" in err


def test_memory_too_small_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["cluster"]["processors"][0]["memory_gb"] = 0.03  # below the 0.0357 GB an FL client needs
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc))
    err = _fails(["dts", str(path)], capsys)
    # PL still fits (a 0.004 GB layer per worker); FL is the first that cannot place its clients
    assert "FL: processor 'worker-1' has 0.03 GB" in err and "role 'client' needs 0.0357 GB" in err


def test_unreadable_and_not_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "cannot read it" in _fails(["dts", str(tmp_path / "missing.yaml")], capsys)
    broken = tmp_path / "broken.yaml"
    broken.write_text("cluster: [1, 2\n")
    assert "not valid YAML at line" in _fails(["dts", str(broken)], capsys)
