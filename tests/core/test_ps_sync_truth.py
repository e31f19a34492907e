"""The synchronous PS truth (tests/data/ps-sync, recorded by scripts/record_ps_truth.sh) and the
synchronous model against it.

Independent truths: the bytes each step moves follow from the programs' layer shapes (the
README's parameter counts, 4 bytes each, plus what SyncReplicasOptimizer adds: the global step
and the token pulled, each accumulator's local step pushed); the measured throughput of a
synchronous job can never pass the PS link's capacity over the bytes of one worker's step
(every counted gradient crosses it once each way), nor W times one worker's; and the model's
accuracy is checked against measurements it never fitted except for the one constant chosen
leave-one-job-out (benchmarks/sync_accuracy.py --fit), whose held-out figures docs/accuracy.md
gives.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from advisor.core.models import registry
from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING
from advisor.core.models.ps_des.two_way import PROBED
from advisor.core.profile import Resource
from advisor.importers.loader import load_profile
from benchmarks.sync_accuracy import (
    DATA,
    ONE_GRADIENT,
    Point,
    aggregating,
    arrangements,
    job_settings,
    predict,
    runs,
)
from tests.conftest import REPO

# parameters from the layer shapes (tests/data/ps-sync/README.md)
PARAMETERS = {
    "mlp": 784 * 384 + 384 + 384 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10,
    "cnn": (3 * 3 * 3 * 32 + 32) + (3 * 3 * 32 * 64 + 64) + (3 * 3 * 64 * 128 + 128) + (128 * 128 + 128) + (128 * 10 + 10),
}
VARIABLES = {"mlp": 8, "cnn": 10}  # one accumulator (and one local step pushed) per variable
BATCH = {"mlp": 32, "cnn": 8}
GOODPUT = 0.97  # no TCP flow delivers more of a shaped link than this (the testbed: 95-96 %)


def _measured_files() -> list[Path]:
    files = sorted(DATA.glob("*.measured.json.gz"))
    assert files, f"no measured runs in {DATA}"
    return files


def test_the_data_is_in_the_repository() -> None:
    assert DATA.is_relative_to(REPO) and (DATA / "README.md").is_file()
    assert {job_settings(job)[0] for job in runs()} == {p.name.split(".")[0] for p in DATA.glob("*.trace.json.gz")}


@pytest.mark.parametrize("trace", sorted(p.name for p in DATA.glob("*.trace.json.gz")))
def test_each_profile_moves_the_programs_bytes(trace: str) -> None:
    profile = load_profile(DATA / trace)
    program = trace.split("_")[0]
    assert profile.job.synchronous and profile.job.parameter_servers == 1 and profile.job.batch_size == BATCH[program]
    pulled = sum(op.bytes for op in profile.ops if op.resource is Resource.DOWNLINK)
    pushed = sum(op.bytes for op in profile.ops if op.resource is Resource.UPLINK)
    assert pulled == 4 * PARAMETERS[program] + 8 + 8  # the variables, the global step, the token
    assert pushed == 4 * PARAMETERS[program] + 8 * VARIABLES[program]  # the gradients, each with its local step


@pytest.mark.parametrize("path", _measured_files(), ids=lambda p: p.name)
def test_measured_throughput_respects_the_link_and_the_worker_count(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    meta = doc["meta"]
    assert meta["sync"] and meta["n_ps"] == 1 and meta["congestion_control"] == "cubic"
    program = meta["model"]
    bytes_per_gradient = 4 * PARAMETERS[program]
    link_bound = meta["bw_mbit"] * 1e6 / 8 * GOODPUT / bytes_per_gradient * meta["batch"]
    one = {r["W"]: r["thr_window"] for r in doc["results"]}
    for r in doc["results"]:
        assert r["replicas_to_aggregate"] == max(r["W"] - meta["backup_workers"], 1)
        assert r["thr_window"] <= link_bound, (r["W"], r["thr_window"], link_bound)
        if 1 in one:
            assert r["thr_window"] <= r["W"] * one[1] * 1.05, r["W"]  # 5 %: run-to-run spread at W = 1
        assert all(len(log) > meta["window_skips_steps"] for log in r["step_log"])


@pytest.fixture(scope="module")
def default_points() -> list[Point]:
    model = registry.DEFAULT_SYNC_MODEL
    shown = arrangements()
    return [p for job, measured in sorted(runs().items())
            for p in predict(job, measured, model=model, steps=300, shown=shown)]


def test_the_synchronous_default_predicts_the_recorded_runs(default_points: list[Point]) -> None:
    """The default synchronous model within the project's aims (median 5 %, max 15 %) on every
    recorded job and W where an update aggregates gradients (R >= 2, or W = 1); every prediction
    under the link bound and W x its own W = 1."""
    points = [p for p in default_points if aggregating(p)]
    errors = [abs(p.error) for p in points]
    assert len(points) >= 30
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15, sorted(errors)[-5:]
    by_job: dict[str, dict[int, float]] = {}
    for p in default_points:
        by_job.setdefault(p.job, {})[p.workers] = p.predicted
    for job, curve in by_job.items():
        program, mbit = job.split("_")[0], job_settings(job)[1]
        bound = mbit / 8 / (4 * PARAMETERS[program]) * BATCH[program]
        for w, t in curve.items():
            assert t <= bound and (1 not in curve or t <= w * curve[1] * 1.001), (job, w, t)


def test_one_gradient_per_update_meets_the_aims_against_the_arrangement_each_repeat_showed(
        default_points: list[Point]) -> None:
    """W = 2 with one backup worker (R = 1): no barrier holds the workers together. The point is
    the drifting arrangement, and alternation (one step per update: the model's own W = 1, its
    overlapped transfers slowed by the two-way loss) the second outcome. Its independent truth:
    the measured W = 1 of the same program without a backup (every gradient counted) is that one
    step alone, and the loss stretches at most the whole step by 1 / efficiency (``two_way.py``).
    Each repeat, against the arrangement its step log showed, within the project's 15 %."""
    single = [p for p in default_points if not aggregating(p)]
    assert {p.job for p in single} == {job for job in runs() if job_settings(job)[2] == 1}
    measured_w1 = {job: statistics.fmean(by_w[1]) for job, by_w in runs().items() if 1 in by_w}
    for p in single:
        one = measured_w1[job_settings(p.job)[0]]
        assert p.workers == 2 and p.predicted < one, p
        if p.alternative is not None:
            lowest = min(e for probed in PROBED.values() for e in probed.efficiencies)
            assert lowest * one * 0.97 <= p.alternative <= one * 1.03
            assert p.alternative > p.predicted
        for i, m in enumerate(p.measured):
            assert abs(p.reference(i) / m - 1) <= 0.15, (p.job, i, m, p.reference(i))
    # both arrangements occur in the data: the classification is not vacuous
    assert {p.outcome(i) for p in single for i in range(len(p.measured))} == {DRIFTING, ALTERNATING}


def test_the_one_gradient_runs_recorded_after_their_rule() -> None:
    """tests/data/ps-sync/one-gradient: the model still makes the W = 1 predictions committed
    before the runs were measured; its W = 2 lies at or below the committed one (the two-way loss,
    probed after these runs with no training job, only lengthens the alternating cycle; the
    committed predictions' errors stand in docs/accuracy.md beside the new ones). What holds
    whatever the arrangement: with one gradient per update two workers count at most one fresh
    gradient per cycle of at least one uncontended step, so W = 2 never beats W = 1 (5 %: the
    run-to-run spread), measured or predicted; W = 1 is predicted within 5 %."""
    committed = json.loads((ONE_GRADIENT / "predictions-before-measuring.json").read_text())["jobs"]
    measured, shown = runs(ONE_GRADIENT), arrangements(ONE_GRADIENT)
    assert set(measured) == set(committed) and len(committed) == 3
    for job, by_w in measured.items():
        points = {p.workers: p for p in predict(job, by_w, steps=400, data=ONE_GRADIENT, shown=shown)}
        for row in committed[job]:
            if row["workers"] == 1:
                assert points[1].predicted == pytest.approx(row["predicted"], rel=0.02), (job, row)
            else:
                assert points[row["workers"]].predicted <= row["predicted"] * 1.02, (job, row)
        one = statistics.fmean(by_w[1])
        assert abs(points[1].predicted / one - 1) <= 0.05, job
        assert max(by_w[2]) <= 1.05 * one and points[2].predicted <= points[1].predicted, job
        assert points[2].predicted < points[2].alternative < points[1].predicted
