"""The command line: output a person reads, JSON a program reads, and errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.importers.profile_file import read_profile
from tests.conftest import shared_data


def test_inspect_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect"]) == 0
    out = capsys.readouterr().out
    assert "batch size   32 examples/step" in out
    assert "downlink ps0       1,736,752 B in 9 transfers" in out  # 434,186 float32 params + 8 B global step
    assert "critical path" in out


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["bytes_per_step"]["uplink ps0"] == 1736748  # params + 4 B learning rate
    assert doc["job"]["batch_size"] == 32


def test_convert_then_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cnn.json.gz"
    src = shared_data("condensed", "cubic", "cnn_bw100.json.gz")
    assert main(["profile", "convert", str(src), "-o", str(out), "--recorded-bandwidth", "100Mbit/s"]) == 0
    profile = read_profile(out)
    assert profile.job.recorded_bandwidth_bps == 100e6 and profile.job.skipped_steps == 3


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "advisor-profile", "version": 1, "job": {"batch_size": 1}, "ops": [], "steps": []}')
    assert main(["profile", "inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: ") and "bad.json" in err and "ops" in err


def test_inspect_one_runs_binary_steps(capsys: pytest.CaptureFixture[str]) -> None:
    steps = [shared_data("raw-pb", "cubic", f"mlp_bw100_step{k}.pb") for k in (5, 6)]
    assert main(["profile", "inspect", *map(str, steps), "--batch-size", "32"]) == 0
    assert "steps        2 used, 0 skipped" in capsys.readouterr().out


def test_a_directory_mixing_runs_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect", str(shared_data("raw-pb", "cubic"))]) == 2
    assert "belong to 4 runs" in capsys.readouterr().err
