"""benchmarks/model_error.py's leave-one-job-out: the fit never sees the held-out job, and each of
its (run, W) gives one residual. The fit itself is replaced here (it is slow; the benchmark runs it)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import ps_async_data


def test_a_fold_fits_without_its_job_and_predicts_every_point_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    measured_dir = ps_async_data("measured")
    from benchmarks import model_error

    seen: list[str] = []

    def fake_fit(cases: Any, **_: Any) -> SimpleNamespace:
        seen.extend(c.name for c in cases)
        return SimpleNamespace(share_sigma=1.0, multi_flow_goodput=0.85)

    monkeypatch.setattr(model_error, "fit_contention", fake_fit)
    out = model_error.fold(("cubic/cnn", 100, 80, (1.0,), (0.85,)))
    assert "cubic/cnn_bw100.json" not in seen and len(seen) == 6  # the 7 runs but the held-out job's one
    assert all(not name.startswith("cubic/cnn") for name in seen)
    results = json.loads((measured_dir / "cubic" / "cnn_bw100.json").read_text())["results"]
    by_w: dict[int, list[float]] = {}
    for r in results:
        by_w.setdefault(r["W"], []).append(r["thr_window"])
    assert [r["workers"] for r in out["rows"]] == sorted(by_w)
    for row in out["rows"]:
        assert row["measured"] == pytest.approx(statistics.mean(by_w[row["workers"]]))
        assert row["residual"] == pytest.approx(row["measured"] / row["predicted"] - 1)
        assert row["sim_low"] <= row["predicted"] <= row["sim_high"]


def test_a_w2_run_is_measured_against_the_outcome_its_step_log_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bbr/mlp alternated at W = 2 (tests/core/test_arrangements.py): its residual is against the alternating
    outcome; cubic/mlp drifted: against the prediction. Each joins its own outcome's regime."""
    from benchmarks import model_error

    monkeypatch.setattr(model_error, "fit_contention",
                        lambda cases, **_: SimpleNamespace(share_sigma=1.0, multi_flow_goodput=0.85))
    rows = {}
    for job in ("bbr/mlp", "cubic/mlp"):
        out = model_error.fold((job, 100, 80, (1.0,), (0.85,)))
        rows[job] = [r for r in out["rows"] if r["workers"] == 2]
    for r in rows["bbr/mlp"]:
        alternating = r["outcomes"][1]
        assert r["outcome"] == alternating["name"] == "alternating" and r["middle_share"] > 0.75
        assert r["predicted"] == alternating["throughput"] > r["outcomes"][0]["throughput"]
        assert r["residual"] == pytest.approx(r["measured"] / alternating["throughput"] - 1)
    for r in rows["cubic/mlp"]:
        assert r["outcome"] is None and r["middle_share"] < 0.75
        assert r["predicted"] == r["outcomes"][0]["throughput"]
    error = model_error.widths([r for found in rows.values() for r in found])
    assert {(g.label, g.n) for g in error.regimes} == {("W=2", 2), ("W=2 alternating", 2)}


def test_the_shipped_widths_have_no_single_band_for_two_outcomes_at_w2() -> None:
    """The shipped data measure W = 2's prediction and its alternating outcome apart: neither carries the
    other's spread (one band for both was +-39 %)."""
    from advisor.importers.model_error_file import load_model_errors
    from benchmarks import model_error

    error = load_model_errors().of(model_error.MODEL)
    assert error is not None
    drifting, alternating = error.regime(2), error.regime(2, "alternating")
    assert drifting is not None and alternating is not None and drifting is not alternating
    assert drifting.outcome is None and alternating.outcome == "alternating"
    assert max(drifting.up, alternating.up) < 0.2


def test_write_reproduces_the_shipped_file_from_its_own_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``--rows`` (no fit, no simulation) with ``--write`` recomputes the widths from the stored points
    and writes the file ``write_model_error`` makes: the shipped one, field for field, save the
    in-sample coverage, which the stored values (rounded to 4 decimals) may count differently where a
    point sits on its band's edge (each width's largest residual is one): the run that wrote it counted
    34 of 34, and so do they."""
    from advisor.importers.model_error_file import shipped_path
    from benchmarks import model_error

    shipped = shipped_path(model_error.MODEL)
    monkeypatch.setattr(sys, "argv", ["model_error", "--rows", str(shipped), "--write", "--out", str(tmp_path)])
    model_error.main()
    assert f"wrote {tmp_path / shipped.name}" in capsys.readouterr().out
    old, new = json.loads(shipped.read_text()), json.loads((tmp_path / shipped.name).read_text())
    assert new["validation"]["coverage"].pop("shipped_in_sample") == pytest.approx(34 / 34)
    old["validation"]["coverage"].pop("shipped_in_sample")
    assert new == old
