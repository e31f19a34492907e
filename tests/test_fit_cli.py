"""``advisor fit-contention``: one job on the command line, several in a YAML file, errors as one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor.cli import main
from tests.conftest import ps_async_data

GRID = ["--sigmas", "0.5,1", "--etas", "0.85,0.9", "--steps", "200"]
MLP = ps_async_data("condensed", "cubic", "mlp_bw100.json.gz")


def test_one_job_table_names_the_pair_and_how_to_use_it(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fit-contention", str(MLP), "--observed", "1=102,2=131,3=150,4=158", "--bandwidth", "100Mbit/s",
                 "--congestion", "cubic", "--queue", "100ms", "--quiet", *GRID])
    out = capsys.readouterr().out
    assert code == 0
    assert "fitted       share_sigma = " in out and "--share-sigma" in out and "multi_flow_goodput:" in out
    rows = [line for line in out.splitlines() if line.startswith("mlp_bw100.json.gz")]
    assert [line.split()[1] for line in rows] == ["1", "2", "3", "4"]
    assert rows[0].endswith("(not scored)") and "one flow per link" in out


def test_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit-contention", str(MLP), "--observed", "2=131,3=150", "--bandwidth", "100Mbit/s",
                 "--json", *GRID]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "advisor-contention-fit/1"
    assert doc["share_sigma"] in (0.5, 1.0) and doc["multi_flow_goodput"] in (0.85, 0.9)
    assert len(doc["grid"]) == 4 and [o["workers"] for o in doc["observations"]] == [2, 3]
    assert doc["before"]["share_sigma"] == 1.0 and doc["mean_abs_error"] <= doc["before"]["mean_abs_error"]
    best = min(doc["grid"], key=lambda g: g["mean_abs_error"])
    assert best["mean_abs_error"] == doc["mean_abs_error"]


def test_jobs_file_with_relative_paths_and_repeats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(MLP, tmp_path / "mlp.json.gz")
    shutil.copy(ps_async_data("condensed", "cubic", "cnn_bw100.json.gz"), tmp_path / "cnn.json.gz")
    (tmp_path / "jobs.yaml").write_text(
        "jobs:\n"
        "  - {profile: mlp.json.gz, observed: {2: [131, 126], 4: 158}, bandwidth: 100Mbit/s, congestion: cubic,"
        " queue: 100ms}\n"
        "  - {profile: cnn.json.gz, observed: {3: 120}, bandwidth: 100Mbit/s, congestion: cubic, queue: 100ms}\n")
    assert main(["fit-contention", "--jobs", str(tmp_path / "jobs.yaml"), "--json", *GRID]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(o["job"], o["workers"], o["measured"]) for o in doc["observations"]] == [
        ("jobs.yaml: jobs[0]", 2, 131), ("jobs.yaml: jobs[0]", 2, 126), ("jobs.yaml: jobs[0]", 4, 158),
        ("jobs.yaml: jobs[1]", 3, 120)]


@pytest.mark.parametrize(("yaml_text", "words"), [
    ("jobs:\n  - {profile: mlp.json.gz, observed: {2: 131}, colour: red}\n", "jobs.0.colour: Extra inputs"),
    ("jobs:\n  - {profile: mlp.json.gz, observed: {}}\n", "jobs.0.observed"),
    ("jobs:\n  - {profile: mlp.json.gz, observed: {2: 131}, bandwidth: fast}\n", "cannot read bandwidth 'fast'"),
    ("jobs: []\n", "jobs: List should have at least 1 item"),
    ("jobs: [\n", "not valid YAML at line 2 column 1"),
    ("jobs:\n  - {profile: mlp.json.gz, observed: {2: -4}}\n", "jobs[0].observed: observed throughput with 2 workers"),
    ("jobs:\n  - {profile: absent.json, observed: {2: 131}}\n", "no such file"),
])
def test_a_bad_jobs_file_is_one_line_naming_the_place(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     yaml_text: str, words: str) -> None:
    shutil.copy(MLP, tmp_path / "mlp.json.gz")
    (tmp_path / "jobs.yaml").write_text(yaml_text)
    assert main(["fit-contention", "--jobs", str(tmp_path / "jobs.yaml"), *GRID]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: ") and words in err and err.count("\n") == 1


@pytest.mark.parametrize("observed", ["2:131", "two=131", "2=fast", "0=131", "2=-1"])
def test_a_bad_observed_list_is_a_usage_error(observed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fit-contention", str(MLP), "--observed", observed])
    assert exit_.value.code == 2 and "--observed" in capsys.readouterr().err


def test_a_profile_without_observations_or_both_forms_are_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit-contention", str(MLP)]) == 2
    assert "--observed" in capsys.readouterr().err
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    assert main(["fit-contention", str(MLP), "--observed", "2=131", "--jobs", str(tmp_path / "jobs.yaml")]) == 2
    assert "not both" in capsys.readouterr().err
