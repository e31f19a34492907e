"""The asynchronous model against one-PS runs recorded after their predictions were kept
(benchmarks/predicted_first.py over tests/data/ps-async-held-out and tests/data/ps-arrangements):
the kept documents are what ``advisor predict --json`` wrote before the runs, so these hold the
figures docs/accuracy.md gives for runs the model never saw."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks.predicted_first import FOLDERS, points, prediction_key
from tests.conftest import REPO

HELD_OUT = REPO / "tests" / "data" / "ps-async-held-out"


def test_each_measured_file_is_scored_against_the_prediction_of_its_trace() -> None:
    assert prediction_key("mlp_ps1_bw100_q20.w2.measured.json.gz") == "q20"
    assert prediction_key("cnn_ps1_bw100.r2.measured.json.gz") == "cnn"
    assert prediction_key("mlp_ps1_bw100_bbr.r1.measured.json.gz") == "bbr"
    for folder in FOLDERS:
        for path in folder.glob("prediction-*.json"):
            doc = json.loads(path.read_text())
            # every kept prediction is the product's own document, one point per W it was asked for
            assert doc["schema"].startswith("advisor-prediction/") and doc["model"] == "li2020-des+contention"
            assert [p["workers"] for p in doc["curve"]] == sorted(p["workers"] for p in doc["curve"])


def test_the_held_out_mlp_lies_inside_its_outcomes_at_every_worker_count() -> None:
    """The MLP's two repeats at W = 1..8: every point inside the range of its outcomes' intervals,
    median |error| under the 5 % aim, and never a point the curve gives more than the link's
    capacity could (the kept predictions obey the invariant the measurements do)."""
    mlp = [p for p in points(HELD_OUT) if p.key == "mlp"]
    assert sorted({p.workers for p in mlp}) == list(range(1, 9)) and len(mlp) == 16
    assert all(p.inside_any for p in mlp)
    assert statistics.median(abs(p.error) for p in mlp) < 0.05
    # 1.74 MB each way a step, batch 32, 100 Mbit/s: at most 230 examples/s whatever W
    assert max(p.predicted for p in mlp) < 32 * 100e6 / 8 / 1_736_752
    assert max(p.measured for p in mlp) < 32 * 100e6 / 8 / 1_736_752


def test_the_held_out_cnn_runs_in_step_at_three_workers_and_takes_turns_from_six() -> None:
    """What the CNN's misses are (docs/accuracy.md): its phases' order parameter R1 above the value
    for independent phases at W = 3 in both repeats, well below it from W = 6."""
    from benchmarks.multi_ps_accuracy import random_order_parameter

    cnn = [p for p in points(HELD_OUT) if p.key == "cnn"]
    for p in cnn:
        random = random_order_parameter(p.workers, 4000) if p.workers >= 2 else None
        if p.workers == 3:
            assert p.order is not None and random is not None and p.order > random + 0.2
        if p.workers >= 6:
            assert p.order is not None and random is not None and p.order < random - 0.15


@pytest.mark.xfail(strict=True, reason="the CNN's workers lock in step at W = 3 (+22 %) and take turns "
                                       "from W = 6 (-10 to -18 %); the model's phases wander (docs/accuracy.md)")
def test_the_held_out_cnn_within_the_aims() -> None:
    cnn = [p for p in points(HELD_OUT) if p.key == "cnn"]
    assert statistics.median(abs(p.error) for p in cnn) <= 0.05 and max(abs(p.error) for p in cnn) <= 0.15
