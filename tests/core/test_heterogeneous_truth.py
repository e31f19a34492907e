"""Heterogeneous workers on the real testbed (tests/data/ps-traces/heterogeneous and
heterogeneous-nic, tests/data/ps-sync/heterogeneous, recorded by scripts/record_ps_truth.sh) and
the PS model against them.

Independent truths: what the recorder was asked for shows in the runs' own step logs (a
half-speed worker's emulated compute takes twice as long, so the compute-heavy CNN's slow worker
takes longer a step by about its emulated compute, 10 x 11 ms); no run beats W
full-speed workers (W x the same run's W = 1, within the testbed's 5 % run-to-run spread); a
worker behind a 50 Mbit/s link takes at least the time its step's bytes need at that rate, and
no run moves more through the PS link than it carries; and the model, fitted on none of these
runs, is held to the project's aims with the speeds or links stated.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING
from advisor.core.models.ps_des.contention import alone_at_speed, alternating_bound
from advisor.core.phases import ps_link_bound
from advisor.core.profile import Resource
from advisor.importers.loader import load_profile
from benchmarks.heterogeneous_accuracy import DATA, NIC_DATA, SYNC_DATA, points
from tests.conftest import REPO

EMULATED_S = {"mlp": 8 * 0.003, "cnn": 10 * 0.011}  # emulated compute per step (record_ps_traces.py)


def _runs() -> list[Path]:
    files = sorted(p for data in (DATA, SYNC_DATA) for p in data.glob("*.measured.json.gz"))
    assert files, f"no measured runs in {DATA} or {SYNC_DATA}"
    return files


@pytest.mark.parametrize("data", [DATA, SYNC_DATA, NIC_DATA], ids=["async", "sync", "nic"])
def test_the_data_is_in_the_repository(data: Path) -> None:
    assert data.is_relative_to(REPO) and (data / "README.md").is_file()
    metas = [json.loads(gzip.decompress(p.read_bytes()))["meta"] for p in data.glob("*.measured.json.gz")]
    assert {m["model"] for m in metas} == {"mlp", "cnn"} and {m["sync"] for m in metas} == {data == SYNC_DATA}


@pytest.mark.parametrize("path", _runs(), ids=lambda p: p.name)
def test_the_slow_workers_are_slower_by_their_extra_compute(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    meta = doc["meta"]
    assert meta["worker_speeds"][:2] == [1.0, 0.5] and meta["n_ps"] == 1 and meta["backup_workers"] == 0
    one = {r["W"]: r["thr_window"] for r in doc["results"]}
    for r in doc["results"]:
        assert r["thr_window"] <= r["W"] * one[1] * 1.05, r["W"]
        # one worker of each speed: the compute-heavy CNN's slow worker takes its extra compute longer a
        # step (the transfer-bound MLP's slow worker computes while the other's transfers hold the link;
        # under a barrier the fast worker waits for the slow one's gradient inside its own step)
        if r["W"] == 2 and meta["model"] == "cnn" and not meta["sync"]:
            fast, slow = (statistics.median(end - start for start, end, _ in log) for log in r["step_log"])
            extra = EMULATED_S[meta["model"]] * (1 / 0.5 - 1)
            assert slow - fast >= 0.7 * extra, (fast, slow, extra)


def test_the_model_predicts_heterogeneous_workers_within_the_aims() -> None:
    """Median 5 %, max 15 % with the workers' speeds stated, each run against the outcome it
    showed where the model reports two (the transfer-bound MLP's W = 2: its workers drift, or
    alternate pulls and pushes, as one repeat did). Stating the speeds is what gets the
    compute-heavy CNN there: as if every worker ran at full speed, its W = 3-5 are several times
    further off."""
    every = points((DATA, SYNC_DATA), steps=400)
    found = [p for p in every if p.kind == "asynchronous"]  # asynchronous, speeds
    assert len(found) >= 32
    errors = [abs(p.error) for p in found]
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15, sorted(errors)[-5:]
    # synchronous (docs/accuracy.md: its MLP at W = 2 is 16 % off in the first repeat, within 1 %
    # in the second): the median aim, and with the asynchronous runs nine in ten points inside
    # their interval
    sync = [abs(p.error) for p in every if p.kind == "synchronous"]
    assert len(sync) >= 32 and statistics.median(sync) <= 0.05
    assert sum(p.inside for p in every) >= 0.9 * len(every)

    # both outcomes occur at the MLP's W = 2: the classification is not vacuous
    assert {p.outcome for p in found if p.run.startswith("mlp") and p.workers == 2} == {ALTERNATING, DRIFTING}
    cnn = [p for p in found if p.run.startswith("cnn") and 3 <= p.workers <= 5]
    assert statistics.fmean(abs(p.homogeneous_error) for p in cnn) > 2 * statistics.fmean(abs(p.error) for p in cnn)


def test_the_model_predicts_heterogeneous_nics_within_the_aims() -> None:
    """Every second worker behind a 50 Mbit/s link, the links stated: median 5 %, max 15 % at the
    benchmark's 1000 steps (docs/accuracy.md: the model is about 4 % low on average here, where
    ignoring the links is not; its median sits just under the aim), and most points inside
    their interval."""
    found = points((NIC_DATA,), steps=1000)
    assert len(found) >= 32 and {p.kind for p in found} == {"links"}
    errors = [abs(p.error) for p in found]
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15, sorted(errors)[-5:]
    assert sum(p.inside for p in found) >= 0.85 * len(found)
    # the slow links are stated: the predictions differ from the homogeneous ones where a slow
    # worker's transfers weigh (the transfer-bound MLP at W = 2)
    mlp2 = [p for p in found if p.run.startswith("mlp") and p.workers == 2]
    assert all(p.predicted < 0.85 * p.homogeneous for p in mlp2)


def test_two_workers_of_different_speeds_alternate_at_the_sum_of_their_speeds_alone() -> None:
    """The alternating outcome of two workers of speeds 1 and 0.5: each as fast as alone, the
    slow one's step longer by the step's worker compute (the trace's worker ops, 1 / 0.5 - 1 =
    once more), under the PS link's bound; worked out from the trace's own times."""
    profile = load_profile(REPO / "tests" / "data" / "ps-traces" / "mlp_ps1_bw100.trace.json.gz")
    one = 100.0  # examples/s of the full-speed worker alone (any value: the rule is linear in its step)
    compute_s = sum(float(statistics.fmean(s.duration_us[i] for s in profile.steps)) / 1e6
                    for i, op in enumerate(profile.ops) if op.resource is Resource.WORKER)
    step_s = profile.job.batch_size / one
    slow = profile.job.batch_size / (step_s + compute_s)
    assert alone_at_speed(profile, one, 1.0, 0.5, 100e6 * 0.95) == pytest.approx(slow)
    assert alternating_bound(profile, one, 100e6 * 0.95, slow) == pytest.approx(min(one + slow, ps_link_bound(
        profile, 100e6 * 0.95)))
    # back the other way, and a worker ten times faster is at most ten times as fast
    assert alone_at_speed(profile, slow, 0.5, 1.0, 100e6 * 0.95) == pytest.approx(one)
    assert one < alone_at_speed(profile, one, 1.0, 10.0, 100e6 * 0.95) <= 10 * one


def _nic_runs() -> list[Path]:
    files = sorted(NIC_DATA.glob("*.measured.json.gz"))
    assert files, f"no measured runs in {NIC_DATA}"
    return files


@pytest.mark.parametrize("path", _nic_runs(), ids=lambda p: p.name)
def test_a_worker_behind_a_slow_link_takes_at_least_its_bytes_at_that_rate(path: Path) -> None:
    """Every second worker's own link is a 50 Mbit/s tbf both ways: its step pulls the trace's
    pulled bytes through it and then pushes the pushed ones (the pushes are gradients, which
    need the forward pass, which needs every pull), so it cannot be shorter than both at
    50 Mbit/s one after the other (the link's nominal rate; TCP gets less). The transfer-bound
    MLP's full-speed worker alone is shorter than that. And no run carries more than the
    100 Mbit/s PS link does per direction, or more than W workers alone."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    meta = doc["meta"]
    assert meta["worker_mbits"][:2] == [None, 50.0] and meta["n_ps"] == 1 and not meta["sync"]
    profile = load_profile(REPO / "tests" / "data" / "ps-traces" / f"{meta['model']}_ps1_bw100.trace.json.gz")
    moved = {d: sum(op.bytes for op in profile.ops if op.resource is d) for d in (Resource.DOWNLINK, Resource.UPLINK)}
    floor_s = sum(moved.values()) * 8 / 50e6
    one = {r["W"]: r["thr_window"] for r in doc["results"]}
    for r in doc["results"]:
        steps = [statistics.median(end - start for start, end, _ in log[5:]) for log in r["step_log"]]
        assert all(steps[k] >= floor_s for k in range(1, r["W"], 2)), (r["W"], steps, floor_s)
        assert r["thr_window"] <= r["W"] * one[1] * 1.05, r["W"]
        assert r["thr_window"] <= meta["batch"] * 100e6 / (8 * max(moved.values())), r["W"]
    if meta["model"] == "mlp":  # transfer-bound: its full-speed worker alone beats the slow link's floor
        assert statistics.median(e - s for s, e, _ in doc["results"][0]["step_log"][0][5:]) < floor_s
