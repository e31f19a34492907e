"""Model-error data on disk (importers/model_error_file.py): the shipped folder holds one
``<model>.json`` per measured model, named for it; a user's FILE or FOLDER is read the same way
(``--model-error``); ``write_model_error`` writes what the loader reads; ``advisor models`` says
which models have a measured error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.core.model_error import ModelErrorDataError
from advisor.core.models.registry import DEFAULT_MODEL
from advisor.importers.model_error_file import (
    SCHEMA, SHIPPED, load_model_errors, shipped_path, write_model_error,
)

FAST = ["--workers", "1-3", "--steps", "120", "--warmup", "10", "--jobs", "1", "--quiet"]


def _doc(model: str, regimes: list[tuple[int, int | None, float, float, int]]) -> dict:
    return {"schema": SCHEMA, "model": model, "level": 0.95, "source": "by hand",
            "regimes": [{"workers_min": lo, "workers_max": hi, "down": d, "up": u, "n": n, "exact": False,
                         "outcome": None} for lo, hi, d, u, n in regimes]}


def _folder(tmp_path: Path, **docs: dict) -> Path:
    folder = tmp_path / "errors"
    folder.mkdir()
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    return folder


def test_the_shipped_folder_holds_one_file_per_model_named_for_it() -> None:
    files = sorted(SHIPPED.glob("*.json"))
    assert shipped_path(DEFAULT_MODEL) in files
    for path in files:  # <model>.json, or <model>@<scope>.json for the model's error in one scope
        doc = json.loads(path.read_text())
        assert doc["model"] + ("" if doc.get("scope") is None else "@" + doc["scope"]) == path.stem, path
    errors = load_model_errors()
    assert errors.models == tuple(sorted({p.stem.split("@")[0] for p in files}))
    assert len(errors) == len(files)
    default = errors.of(DEFAULT_MODEL)
    # the residuals the widths come from are the points the benchmark stored with them, and the
    # one-worker runs it keeps beside them (benchmarks/model_error.py, one_worker_extra)
    assert default is not None
    validation = json.loads(shipped_path(DEFAULT_MODEL).read_text())["validation"]
    assert default.points == len(validation["points"]) + len(validation["one_worker_runs"])
    assert not (SHIPPED.parent / "model_error.json").exists()  # one place for the data, not two


def test_a_file_in_a_folder_must_hold_the_model_it_is_named_for(tmp_path: Path) -> None:
    folder = tmp_path / "errors"
    folder.mkdir()
    shutil.copy(shipped_path(DEFAULT_MODEL), folder / "cynthia.json")
    with pytest.raises(ModelErrorDataError) as caught:
        load_model_errors(folder)
    message = str(caught.value)
    assert "cynthia.json" in message and "'cynthia'" in message and f"'{DEFAULT_MODEL}'" in message


def test_a_single_file_may_be_named_anything(tmp_path: Path) -> None:
    mine = tmp_path / "our-cluster.json"
    shutil.copy(shipped_path(DEFAULT_MODEL), mine)
    assert load_model_errors(mine).models == (DEFAULT_MODEL,)


@pytest.mark.parametrize(("docs", "match"), [
    ({"nope": _doc("nope", [(1, None, 0.1, 0.1, 5)])}, r"nope\.json: model 'nope' is not a registered model"),
    ({"cynthia": {"schema": SCHEMA, "model": "cynthia"}}, r"cynthia\.json: a field is missing"),
    ({"cynthia": _doc("cynthia", [(1, 3, 0.1, 0.1, 5), (2, None, 0.1, 0.1, 5)])}, r"cynthia\.json: regimes .* overlap"),
    ({}, "the folder holds no <model>.json file"),
])
def test_bad_data_in_a_folder_is_refused_naming_the_file(tmp_path: Path, docs: dict, match: str) -> None:
    folder = _folder(tmp_path, **docs)
    with pytest.raises(ModelErrorDataError, match=match):
        load_model_errors(folder)


def test_write_model_error_writes_what_the_loader_reads(tmp_path: Path) -> None:
    rows = [(1, 0.123456, None), (1, -0.05, None), (2, 0.2, None), (4, -0.3, None), (2, -0.1, "alternating")]
    error, path = write_model_error("cynthia", 0.5, rows, ((1, 1), (2, None)), "by hand", {"points": 5},
                                    outcome_bounds=((2, 2),), folder=tmp_path)
    assert path == tmp_path / "cynthia.json"
    # level 0.5: n = 2, rank ceil(3 x 0.5) = 2, the larger |r| (0.123456, stored to 4 decimals); n = 1: the only one
    assert [(g.label, g.down, g.up, g.n) for g in error.regimes] == [
        ("W=1", 0.1235, 0.1235, 2), ("W>=2", 0.3, 0.3, 2), ("W=2 alternating", 0.1, 0.1, 1)]
    doc = json.loads(path.read_text())
    assert doc["source"] == "by hand" and doc["validation"] == {"points": 5}
    assert load_model_errors(tmp_path).of("cynthia") == error
    with pytest.raises(ModelErrorDataError, match="model-error data of nope: model 'nope' is not a registered"):
        write_model_error("nope", 0.5, rows, ((1, None),), "by hand", folder=tmp_path)
    assert not (tmp_path / "nope.json").exists()  # refused before writing


def test_a_folder_given_to_predict_widens_the_model_it_holds(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, cynthia=_doc("cynthia", [(1, 1, 0.2, 0.1, 5), (2, None, 0.3, 0.5, 8)]))
    assert main(["predict", "--model", "cynthia", "--model-error", str(folder), "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model_error"]["model"] == "cynthia"
    one, _, three = doc["curve"]  # a closed form: its own interval is its value
    assert (one["low"], one["high"]) == pytest.approx((one["throughput"] * 0.8, one["throughput"] * 1.1))
    assert (three["low"], three["high"]) == pytest.approx((three["throughput"] * 0.7, three["throughput"] * 1.5))
    # the same folder says nothing of phase-mva: not widened, and the note names the model that is measured
    assert main(["predict", "--model", "phase-mva", "--model-error", str(folder), "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model_error"] is None and all(p["low"] == p["throughput"] == p["high"] for p in doc["curve"])
    assert any("model error of phase-mva has not been measured (only cynthia's has)" in n for n in doc["notes"])


def test_a_bad_folder_given_to_predict_is_one_line_and_exit_2(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, cynthia=_doc(DEFAULT_MODEL, [(1, None, 0.1, 0.1, 5)]))
    assert main(["predict", "--model-error", str(folder), *FAST]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("advisor: error:")]
    assert len(errors) == 1 and "cynthia.json" in errors[0] and DEFAULT_MODEL in errors[0]


def test_models_says_whose_error_is_measured_and_from_how_many_points(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    rows = {m["name"]: m["model_error"] for m in json.loads(capsys.readouterr().out)["models"]}
    shipped = json.loads(shipped_path(DEFAULT_MODEL).read_text())
    assert rows[DEFAULT_MODEL]["measured"] and rows[DEFAULT_MODEL]["level"] == 0.95
    assert rows[DEFAULT_MODEL]["points"] == sum(r["n"] for r in shipped["regimes"])
    for name, row in rows.items():
        assert row["measured"] == shipped_path(name).exists(), name
        if not row["measured"]:
            assert row["why_not"] == f"no {name}.json in the shipped advisor/data/model_error"

    folder = _folder(tmp_path, cynthia=_doc("cynthia", [(1, 1, 0.2, 0.1, 5), (2, None, 0.3, 0.5, 8)]))
    assert main(["models", "--model-error", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "  model error: measured from 13 points, at 95%: W=1 -20.0%/+10.0%, W>=2 -30.0%/+50.0%\n" in text
    assert f"  model error: not measured (no {DEFAULT_MODEL}.json in {folder}): its intervals leave it out\n" in text
    assert main(["models", "--model-error", "off", "--json"]) == 0
    rows = {m["name"]: m["model_error"] for m in json.loads(capsys.readouterr().out)["models"]}
    assert rows[DEFAULT_MODEL] == {"measured": False, "why_not": "--model-error off"}
