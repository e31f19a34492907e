"""The several-PS model error of ``benchmarks/multi_ps_accuracy.py``: which residuals it keeps,
and the shipped widths are those of the residuals stored with them."""

from __future__ import annotations

import json

import pytest

from advisor.core.model_error import SEVERAL_PS
from advisor.core.models.registry import DEFAULT_MODEL
from advisor.importers.model_error_file import load_model_errors, shipped_path
from benchmarks import multi_ps_accuracy as bench


def test_each_point_keeps_its_worse_prediction_and_only_placement_runs_with_two_busy_ps() -> None:
    rows = [bench.Row("round-robin", "a", 3, 100.0, own=110.0, what_if=95.0),  # |r|: 0.091 against 0.053
            bench.Row("greedy-bytes", "b", 2, 200.0, own=190.0, what_if=230.0)]
    runs = [{"placement": p, "repeat": "r1", "workers": 3, "throughput": 150.0, "predicted": 160.0}
            for p in ("one-ps", "last-ps", "step-apart", "biases-apart", "round-robin")]
    found = bench.residuals(rows, runs)
    assert [(x.run, x.predicted) for x in found[:2]] == [("a", 110.0), ("b", 230.0)]
    assert found[0].r == pytest.approx(100 / 110 - 1)
    # one PS, and a second PS that serves nothing, are one-PS jobs to the model: not this scope's
    assert [x.placement for x in found[2:]] == ["w3-step-apart", "w3-biases-apart", "w3-round-robin"]


def test_the_shipped_widths_are_the_stored_residuals_quantiles() -> None:
    doc = json.loads(shipped_path(DEFAULT_MODEL, SEVERAL_PS).read_text())
    assert doc["scope"] == SEVERAL_PS
    stored = bench.stored_residuals()
    assert len(stored) == len(doc["validation"]["points"])
    again = bench.several_ps_error(stored)
    shipped = load_model_errors().of(DEFAULT_MODEL, SEVERAL_PS)
    assert shipped is not None
    for g in again.regimes:
        mine = shipped.regime(g.workers_min)
        assert mine is not None and (mine.down, mine.up) == pytest.approx((g.down, g.up), abs=1e-4)
    # W = 1 is not this scope's: the model's own width holds there
    assert shipped.regime(1) == load_model_errors().of(DEFAULT_MODEL).regime(1)  # type: ignore[union-attr]
    assert doc["validation"]["coverage"]["cross_conformal"] == pytest.approx(bench.cross_coverage(stored))


def test_from_three_workers_each_side_takes_its_own_tail() -> None:
    # by hand, level 0.95, 3 residuals from W = 3 on: each tail at 0.975, rank ceil(4 x 0.975) = 4 > 3: its largest
    found = [bench.Residual("p", "a", 3, 131.0, 100.0), bench.Residual("p", "b", 4, 90.0, 100.0),
             bench.Residual("p", "c", 5, 105.0, 100.0), bench.Residual("p", "d", 2, 110.0, 100.0)]
    error = bench.several_ps_error(found)
    two, three = error.regime(2), error.regime(3)
    assert two is not None and (two.down, two.up) == pytest.approx((0.1, 0.1))  # W = 2: |r|, both sides
    assert three is not None and (three.down, three.up) == pytest.approx((0.1, 0.31))
    assert error.regime(1) is None  # W = 1 is the model's
