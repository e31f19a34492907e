"""``advisor store``: list what the controller profiled and export a profile that predicts as the original."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.controller.state.store import Store
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json
from tests.conftest import ps_async_data

MLP = ps_async_data("condensed", "cubic", "mlp_bw100.json.gz")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store as the controller leaves it: one job profiled twice (generations 1 and 2), one still profiling."""
    path = tmp_path / "advisor.db"
    profile = load_profile(MLP)
    with Store(path) as store:
        for generation, t in ((1, 1000.0), (2, 2000.0)):
            store.ensure_run("uid-a", "ml", "mlp", generation, f"mlp-prof-g{generation}", t)
            text = json.dumps(profile_to_json(profile), sort_keys=True, separators=(",", ":"))
            if generation == 2:  # a later generation with another batch size, so the two differ
                doc = json.loads(text)
                doc["job"]["batch_size"] = 64
                text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
            store.put_trace("uid-a", generation, b"raw", text, hashlib.sha256(text.encode()).hexdigest(), t)
        store.ensure_run("uid-b", "team", "cnn", 1, "cnn-prof-g1", 3000.0)
    return path


def test_list_shows_every_run_with_its_profile(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "list", "--store", str(store_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["namespace"], r["name"], r["generation"], r["state"], r["profile_sha256"] is not None)
            for r in rows] == [("ml", "mlp", 1, "received", True), ("ml", "mlp", 2, "received", True),
                               ("team", "cnn", 1, "profiling", False)]
    assert main(["store", "list", "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "ml/mlp" in out and "team/cnn" in out and "sha256:" in out


def test_export_writes_the_latest_profile_and_it_is_the_original(store_path: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp.json.gz"
    assert main(["store", "export", "ml/mlp", "--store", str(store_path), "-o", str(out)]) == 0
    assert load_profile(out).job.batch_size == 64  # generation 2
    assert main(["store", "export", "ml/mlp", "--generation", "1", "--store", str(store_path)]) == 0
    exported = tmp_path / "g1.json"
    exported.write_text(capsys.readouterr().out)
    original = load_profile(MLP)
    again = load_profile(exported)
    assert again.ops == original.ops and again.steps == original.steps and again.job == original.job


@pytest.mark.parametrize(("argv", "words"), [
    (["store", "export", "team/cnn"], "no profile of team/cnn: it has generation 1 (profiling)"),
    (["store", "export", "ml/absent"], "no profile of ml/absent: it has no runs"),
    (["store", "export", "ml/mlp", "--generation", "7"], "no profile of ml/mlp generation 7"),
    (["store", "export", "mlp"], "NAMESPACE/NAME"),
])
def test_what_is_not_there_is_named(store_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                    words: str) -> None:
    assert main([*argv, "--store", str(store_path)]) == 2
    assert words in capsys.readouterr().err


def test_an_output_it_cannot_write_is_named(store_path: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no-such-dir" / "mlp.json"
    assert main(["store", "export", "ml/mlp", "--store", str(store_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"-o {out}: cannot write it (No such file or directory)" in err and "Traceback" not in err


def test_a_missing_store_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "nothing.db"
    assert main(["store", "list", "--store", str(absent)]) == 2
    assert "no advisor store at" in capsys.readouterr().err and not absent.exists()


def test_the_store_path_comes_from_the_controller_settings(store_path: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store_path: {store_path}\n")
    assert main(["store", "list", "--config", str(config), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
