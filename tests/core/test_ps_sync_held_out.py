"""The synchronous program recorded after every constant of the synchronous model was chosen
(tests/data/ps-sync/held-out, its README): its predictions were committed before its runs, the
model still makes them, and the runs are within the project's aims of them."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from benchmarks.sync_accuracy import HELD_OUT, predict, runs

PREDICTIONS = HELD_OUT / "predictions-before-measuring.json"
PARAMETERS = 784 * 384 + 384 + 384 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10  # the mlpmid's, the MLP's
GOODPUT = 0.97  # no TCP flow delivers more of a shaped link than this (the testbed: 95-96 %)


@pytest.fixture(scope="module")
def written() -> dict[int, float]:
    doc = json.loads(PREDICTIONS.read_text())
    return {p["workers"]: p["predicted"] for p in doc["jobs"]["mlpmid_bw100"]}


def test_the_model_still_makes_the_predictions_written_before_the_runs(written: dict[int, float]) -> None:
    # the same model and settings today: within the simulation's noise of what was committed
    # (a larger change means the held-out figures in docs/accuracy.md are no longer this model's)
    now = predict("mlpmid_bw100", {w: [] for w in written}, steps=400, data=HELD_OUT)
    for p in now:
        assert p.predicted == pytest.approx(written[p.workers], rel=0.01), p.workers


def test_the_runs_respect_the_link_and_the_worker_count() -> None:
    paths = sorted(HELD_OUT.glob("mlpmid_bw100.r*.measured.json.gz"))
    assert [p.name.split(".")[1] for p in paths] == ["r1", "r2"]
    for path in paths:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        meta, results = doc["meta"], {r["W"]: r["thr_window"] for r in doc["results"]}
        assert meta["sync"] and meta["model"] == "mlpmid" and meta["bw_mbit"] == 100
        assert sorted(results) == list(range(1, 9))
        link_bound = meta["bw_mbit"] * 1e6 / 8 * GOODPUT / (4 * PARAMETERS) * meta["batch"]
        for w, thr in results.items():
            assert thr <= min(link_bound, w * results[1] * 1.05), (path.name, w)


def test_the_held_out_program_is_within_the_aims_and_the_window_is_what_keeps_it_there(
        written: dict[int, float]) -> None:
    """docs/accuracy.md: median 2.6 %, max 4.6 % (W = 1, the trace's own rate) from the
    predictions written before the runs, against the two repeats' mean; without the window the
    model climbs past the runs' plateau (+8.7 % at W = 8)."""
    measured = {w: statistics.fmean(v) for w, v in runs(HELD_OUT)["mlpmid_bw100"].items()}
    errors = {w: written[w] / measured[w] - 1 for w in measured}
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05
    assert max(abs(e) for e in errors.values()) <= 0.06
    off = {p.workers: p.error for p in predict("mlpmid_bw100", {w: [measured[w]] for w in (4, 6, 8)}, steps=400,
                                                params={"window_gain": 0.0}, data=HELD_OUT)}
    assert all(off[w] > errors[w] + 0.015 for w in off), (off, errors)
    assert off[8] > 0.07
