"""benchmarks/deadline_decisions.py holds the data out: a run's beliefs use neither its own job's
residuals nor its own runs' arrangements, and each answer is scored on the measurements."""

from __future__ import annotations

import json

import pytest

from advisor.importers.model_error_file import shipped_path
from benchmarks.deadline_decisions import deadlines, held_out_runs, one_worker_extra, score
from benchmarks.model_error import MODEL

SHIPPED = shipped_path(MODEL)


@pytest.fixture(scope="module")
def runs():
    validation = json.loads(SHIPPED.read_text())["validation"]
    return {r.name: r for r in held_out_runs(validation["points"], one_worker_extra(validation))}


def test_held_out_beliefs_know_nothing_of_their_own_job(runs) -> None:
    points = json.loads(SHIPPED.read_text())["validation"]["points"]
    bbr = runs["bbr/mlp_bw100.json"]
    two = bbr.beliefs[bbr.workers.index(2)]
    # bbr's count is bbr/mlp's own runs (2 of 2 alternated): without them, none is left, (0 + 1) / (0 + 2) = 0.5
    assert [weight for weight, _ in two.parts] == [0.5, 0.5]
    # the alternating outcome's width comes from the other job that alternated (cubic_q20ms: -4.5 %), not from
    # bbr/mlp's own -18 %: its sigma is 4.5 % of the bound / z
    q20 = next(p for p in points if p["run"].startswith("cubic_q20ms") and p["workers"] == 2)
    bound = two.parts[1][1].mode
    assert two.parts[1][1].sigma_low == pytest.approx(bound * abs(q20["residual"]) / 1.959963984540054, rel=1e-3)


def test_each_deadline_is_scored_on_the_measurements(runs) -> None:
    run = runs["cubic/cnn_bw100.json"]
    tight = dict(deadlines(run))["tight"]
    assert tight == pytest.approx(0.85 * max(run.measured.values()))
    case = score(run, tight, 0.9)
    # the cheapest measured W that meets it, by hand from the measurements
    meets = [w for w in run.workers if run.measured[w] >= tight]
    cost = {w: (3.06 * w + 0.40) / run.measured[w] for w in meets}  # prices of benchmarks/accuracy.py, per second
    assert case["best"] == min(meets, key=cost.__getitem__) and case["met"] == (run.measured[case["rec"]] >= tight)
    assert case["gap"] >= 0 or not case["met"]
