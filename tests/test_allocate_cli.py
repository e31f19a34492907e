"""``advisor allocate JOBS.yaml``: the issue's minimal file, --capacity, the shipped example, bad files as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.cli import main

REPO = Path(__file__).resolve().parents[1]
OVERLAP = REPO / "tests/data/allreduce/ddp-overlap/profile.json.gz"
MWMS = REPO / "tests/data/allreduce/mwms-mlp4m-bw100/profile.json.gz"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def minimal(tmp_path: Path, capacity: int = 16) -> Path:
    """The issue's minimal file, with two all-reduce profiles of this repository (the ring model is quick)."""
    return write(tmp_path, f"""
capacity: {capacity}
jobs:
  - {{name: a, profile: {OVERLAP}, bandwidth: 200Mbit/s, min_workers: 1, max_workers: 4, priority: 1}}
  - {{name: b, profile: {MWMS}, bandwidth: 50Mbit/s, max_workers: 3}}
""")


def predicted_alone(capsys: pytest.CaptureFixture[str], profile: Path, bandwidth: str, workers: str) -> int:
    """What ``advisor predict`` recommends for the job alone: the W the allocator must give with room to spare."""
    assert main(["predict", str(profile), "--bandwidth", bandwidth, "--workers", workers, "--json", "--quiet"]) == 0
    return int(json.loads(capsys.readouterr().out)["recommended"]["workers"])


def test_minimal_file_gives_each_job_what_predict_recommends(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(minimal(tmp_path)), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "advisor-allocation/1" and doc["capacity"]["workers"] == 16
    got = {a["name"]: a["workers"] for a in doc["allocations"]}
    assert got == {"a": predicted_alone(capsys, OVERLAP, "200Mbit/s", "1-4"),
                   "b": predicted_alone(capsys, MWMS, "50Mbit/s", "1-3")}
    assert all(a["status"] == "placed" for a in doc["allocations"])
    assert [p["workers"] for p in doc["allocations"][0]["curve"]] == [1, 2, 3, 4]


def test_capacity_flag_overrides_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(minimal(tmp_path)), "--capacity", "1", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capacity"]["workers"] == 1
    assert sum(a["workers"] for a in doc["allocations"]) == 1  # both start at 1 worker: one runs, one waits
    assert sorted(a["status"] for a in doc["allocations"]) == ["placed", "waiting"]


def test_table_names_every_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(minimal(tmp_path)), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("capacity: 16 workers")
    assert any(line.split()[:1] == ["a"] for line in out.splitlines())
    assert any(line.split()[:1] == ["b"] for line in out.splitlines())


def test_shipped_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(REPO / "examples/allocate-jobs.yaml"), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capacity"]["workers"] == 4 and doc["used"]["workers"] <= 4
    assert {a["name"] for a in doc["allocations"]} == {"mlp", "mlp-2ps", "ddp-overlap", "mwms"}


@pytest.mark.parametrize("text, message", [
    ("capacity: 4\njobs:\n  - {name: a, profile: P, colour: red}\n", "jobs.0.colour: unknown key"),
    ("capacity: -1\njobs:\n  - {name: a, profile: P}\n", "capacity: must be >= 0 workers, got -1"),
    ("capacity: {workers: 2, resources: {cpu: -3}}\njobs:\n  - {name: a, profile: P}\n", ">= 0"),
    ("jobs:\n  - {name: a, profile: P, priority: 0}\n", "jobs.0.priority"),
    ("jobs: [\n", "not valid YAML"),
    ("capacity: 4\njobs:\n  - {name: a, profile: nowhere.json.gz}\n", "jobs[0] (a): no profile at"),
])
def test_bad_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                         message: str) -> None:
    path = write(tmp_path, text.replace("profile: P", f"profile: {OVERLAP}"))
    assert main(["allocate", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_negative_capacity_flag_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["allocate", str(minimal(tmp_path)), "--capacity", "-2"])
    assert exc.value.code == 2 and "must be >= 0" in capsys.readouterr().err
