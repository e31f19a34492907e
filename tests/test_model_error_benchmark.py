"""benchmarks/model_error.py's leave-one-job-out: the fit never sees the held-out job, and each of
its (run, W) gives one residual. The fit itself is replaced here (it is slow; the benchmark runs it)."""

from __future__ import annotations

import json
import statistics
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
