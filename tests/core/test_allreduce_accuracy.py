"""The ring model against real all-reduce runs measured here (``tests/data/allreduce/*/``,
``benchmarks/allreduce_accuracy.py``), every prediction stating the testbed's host (all workers
on its 2 cores): at W = 1 the prediction from the one-worker profile is the separately measured
one-worker rate within 3 % or the measured run-to-run spread (the two are different runs of the
same program, so this checks the hook's bookkeeping and the importer, not the model); the
accuracy target holds per framework on the scored runs, with the defaults and with the host
figure fitted without the configuration scored; the link defaults are their probes' fit, TF's
host figures but one its host probe's, the host's wait a step the runs'; a program predicted at
every W before it ran stays within 10 %; and the accuracy table keeps its invariants. The
per-point figures themselves are the benchmark's to print."""

from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from advisor.core.models.ring_allreduce.model import GLOO, GRPC_RING
from benchmarks.allreduce_accuracy import (
    DATA, GLOO_HOST_PROBE, HOST_CORES, PS_TRACES, Row, committed, configs, cpu_per_step_ms, fit, gloo_probe_fit,
    UNBOUND, grpc_probe_fit, grpc_probe_timings, host_probe_fit, host_timings, predict,
    predict_from_ps_trace, profile_curve, ring_seconds, rows_with_holdout, shifted, stale, summary, superseded, table,
)

MEDIAN_TARGET = 0.05  # per framework, over the scored points (docs/accuracy.md)
MAX_TARGET = 0.15


@cache
def _rows() -> tuple[Row, ...]:
    folders = configs()
    if not folders:
        pytest.skip(f"no measured all-reduce configuration under {DATA} (scripts/record_allreduce_ddp.py records them)")
    return tuple(row for folder in folders for row in predict(folder, steps=300))


def test_w1_predictions_are_the_measured_one_worker_rate() -> None:
    """3 %, or the measured W = 1 repeats' own spread (max - min over the median) where that is
    wider: the profile is one more run of the same program, and no check can be stricter than
    the machine's run-to-run noise (ddp-comm, memory-heavy on a shared 2-core machine: 9 %)."""
    ones = [r for r in _rows() if r.workers == 1]
    assert ones, "every configuration measures W = 1"
    for row in ones:
        noise = (row.spread[1] - row.spread[0]) / row.measured
        assert row.predicted == pytest.approx(row.measured, rel=max(0.03, noise)), row


def test_every_configuration_is_measured_at_w1_to_4_with_a_consistent_spread() -> None:
    """W = 1..4 everywhere, and W = 5..8 where predictions for them were committed first."""
    _rows()  # skips without data
    for folder in configs():
        measured = json.loads((folder / "measured.json").read_text())
        assert measured["kind"] in ("pytorch-ddp", "tf-mwms") and measured["bandwidth_bps"] > 0
        assert measured["batch_size"] >= 1 and measured["how"]
        points = measured["points"]
        beyond = any(folder.glob("predictions-w*-8.json"))
        assert [p["workers"] for p in points] == list(range(1, 9 if beyond else 5)), folder.name
        for p in points:
            low, high = p["spread"]
            assert 0 < low <= p["examples_per_s"] <= high and p["steps"] > 0 and p["repeats"] >= 1


def test_the_table_rows_follow_the_measurements() -> None:
    rows = _rows()
    for row in rows:
        assert row.predicted > 0 and row.error == pytest.approx(row.predicted / row.measured - 1)
    for config in {r.config for r in rows}:
        mine = sorted((r for r in rows if r.config == config), key=lambda r: r.workers)
        one = mine[0].predicted
        # synchronous all-reduce: W workers never do more than W times one worker's examples
        assert all(r.predicted <= r.workers * one * 1.001 for r in mine)
    med, worst = summary(rows)
    assert 0 <= med <= worst
    text = table(rows, markdown=True)
    assert text.count("\n") == len(rows) + 1 and all(f"| {r.config} |" in text for r in rows)


@cache
def _scored(kind: str) -> list[Row]:
    everything = configs()
    dropped = superseded(everything)  # loaded runs a calm re-measurement replaced: neither fitted nor scored
    folders = [f for f in everything if json.loads((f / "measured.json").read_text())["kind"] == kind
               and f.name not in dropped]
    if not folders:
        pytest.skip(f"no measured {kind} configuration under {DATA}")
    rows, _ = rows_with_holdout(folders, steps=300, fit_steps=60)
    return rows


# The link figures of both frameworks come from probes, not from these runs; the host figure is
# fitted on the runs, so every configuration is also scored with it fitted on the others only.
@pytest.mark.parametrize("kind", ["pytorch-ddp", "tf-mwms"])
def test_the_accuracy_target_holds_with_the_defaults_and_held_out(kind: str) -> None:
    """Median |error| <= 5 % and max <= 15 % over every scored point of the framework, W = 1..8
    (calm and same-day re-measurements supersede loaded runs and runs of another day than their
    profile), with the model's defaults and with host_cpu_s fitted on the other configurations only."""
    mine = [r for r in _scored(kind) if not r.caveat]
    med, worst = summary(mine)
    assert med <= MEDIAN_TARGET and worst <= MAX_TARGET, (kind, med, worst)
    assert all(r.held_out is not None for r in mine), "every scored configuration has another to fit on"
    hmed, hworst = summary(mine, held_out=True)
    assert hmed <= MEDIAN_TARGET and hworst <= MAX_TARGET, (kind, "held out", hmed, hworst)


def test_the_gloo_defaults_are_the_lone_all_reduce_probes_fit() -> None:
    # derived from timings of a lone gloo all-reduce, not from the DDP training runs scored above
    lat, share, err = gloo_probe_fit()
    assert (lat, share) == pytest.approx((GLOO.latency_s, GLOO.two_way_share), abs=1e-9)
    assert err < 0.02  # the ring's two terms explain the probe within 2 % on average


def test_the_grpc_link_defaults_are_the_lone_all_reduce_probes_fit() -> None:
    """Two workers only (they share none of the host's two cores), three rates, three sizes."""
    timings = grpc_probe_timings()
    assert {w for _, w, _, _ in timings} == {2} and len({rate for rate, *_ in timings}) == 3
    lat, share, err = grpc_probe_fit()
    assert (lat, share) == pytest.approx((GRPC_RING.latency_s, GRPC_RING.two_way_share), abs=1e-9)
    assert err < 0.06  # the 4-byte timings (2-3.5 ms) carry most of it


@pytest.mark.parametrize(("prefix", "figures"), [("mwms-", GRPC_RING), ("ddp-", GLOO)])
def test_the_host_step_figure_is_the_fit_on_the_runs(prefix: str, figures) -> None:  # type: ignore[no-untyped-def]
    """host_cpu_s, with the framework's other host figures as they are (TF's from its probe)."""
    folders = configs()
    dropped = superseded(folders)
    mine = [f for f in folders if f.name.startswith(prefix) and f.name not in dropped
            and (f / "measured.json").is_file() and not any(f.glob("predictions-w1-*.json"))]
    if not mine:
        pytest.skip(f"no {prefix} measurement")
    assert fit(mine, steps=150)["host_cpu_s"] == pytest.approx(figures.host_cpu_s, abs=1e-9)


def test_gloo_needs_no_cpu_bound_on_the_host_probe() -> None:
    """Lone gloo all-reduces at W = 2..8, every worker on the 2-core host (two runs at 100 Mbit/s):
    the 8 MiB calls take the ring's link time with gloo's probe figures within 5 % although the
    ranks keep 90 % or more of the two cores busy at W >= 6. That is why GLOO has no CPU figures:
    the CPU gloo's threads take while they wait is not CPU the ring needs."""
    timings = host_timings(GLOO_HOST_PROBE)
    assert {t.workers for t in timings} == set(range(2, 9)) and len(timings) == 28
    lat, share, _ = gloo_probe_fit()
    large = [t for t in timings if t.bytes > 2e6]
    assert all(abs(ring_seconds(t, lat, share, None) / t.seconds - 1) < 0.05 for t in large)
    assert all(t.utilization() >= 0.9 for t in large if t.workers >= 6)
    assert (GLOO.transfer_cpu_s_per_mb, GLOO.transfer_cpu_s_per_call) == (0.0, 0.0)


def test_the_grpc_host_figures_are_the_host_probes_fit() -> None:
    """TF's ring's host figures per MB and its CPU bound come from lone all-reduces at W = 2..8 on
    the 2-core host, with their CPU (three rates, two sizes), never from the training runs scored
    above (the step's own figure, host_cpu_s, is the runs', below); the ring's time with them
    explains those timings within 19 % (mean 4 %)."""
    timings = host_timings()
    assert {t.workers for t in timings} == set(range(2, 9)) and {t.rate_bps for t in timings} == {25e6, 50e6, 100e6}
    found = host_probe_fit(timings)
    assert (found.host_cpu_s_per_mb, found.transfer_cpu_s_per_mb, found.transfer_cpu_s_per_call,
            found.host_utilization, found.host_bound_exponent, found.collective_cpu_s) == pytest.approx(
        (GRPC_RING.host_cpu_s_per_mb, GRPC_RING.transfer_cpu_s_per_mb, GRPC_RING.transfer_cpu_s_per_call,
         GRPC_RING.host_utilization, GRPC_RING.host_bound_exponent, GRPC_RING.collective_cpu_s), abs=1e-9)
    assert found.mean_error < 0.04 and found.max_error < 0.19
    # near the bound the ring is slower than both the wait and the bound: a sharp max with the same
    # figures explains the probe worse, most of all where the two meet (100 Mbit/s, W >= 4)
    lat, share, _ = grpc_probe_fit()
    sharp = replace(found, host_bound_exponent=None)
    crowded = [t for t in timings if t.workers > HOST_CORES]
    off = {f: [ring_seconds(t, lat, share, f) / t.seconds - 1 for t in crowded] for f in (found, sharp)}
    assert statistics.fmean(map(abs, off[sharp])) > statistics.fmean(map(abs, off[found])) + 0.005
    meeting = [i for i, t in enumerate(crowded) if t.rate_bps == 100e6 and t.workers >= 4]
    assert statistics.fmean(off[sharp][i] for i in meeting) < -0.04 < statistics.fmean(off[found][i] for i in meeting)
    # a 4-byte all-reduce (Keras's metric sums) costs a third or less of the large calls' per-call CPU
    assert 0 < found.collective_cpu_s <= found.transfer_cpu_s_per_call / 3
    # the CPU bound's figures: a worker's CPU per MB is its measured CPU, the cores' share never above 1
    busiest = max(timings, key=lambda t: t.utilization())
    assert 0.5 < found.host_utilization <= busiest.utilization() <= 1.0
    # beyond the cores the ring runs slower than the links alone allow wherever the links are fast
    # enough to leave the CPU little spare time (50 and 100 Mbit/s; at 25 the 8 MiB calls lose none)
    lat, share, _ = grpc_probe_fit()
    slower = [t for t in timings if t.workers >= 6 and t.rate_bps >= 50e6]
    assert all(t.seconds > 1.04 * ring_seconds(t, lat, share, None) for t in slower)


def test_the_host_term_lengthens_every_step_alike() -> None:
    """``shifted`` (what the fit uses) is the model with host_cpu_s, not an approximation of it:
    every step ends at a barrier, so the term adds the same time to each; and it is nothing up to
    the host's cores and with no host stated."""
    folder = next((f for f in configs() if f.name in PS_TRACES), None)
    if folder is None:
        pytest.skip("no MWMS run of a PS testbed program")
    batch = json.loads((folder / "measured.json").read_text())["batch_size"]
    ws = [1, 2, 3, 5, 8]
    only = {"host_cpu_s_per_mb": 0.0, **UNBOUND}  # the step term alone
    without = profile_curve(folder, ws, 200, {**only, "host_cpu_s": 0.0})
    with_host = profile_curve(folder, ws, 200, {**only, "host_cpu_s": 0.02})
    unstated = profile_curve(folder, ws, 200, {**only, "host_cpu_s": 0.02, "host_cores": None})
    for a, b, c in zip(without, with_host, unstated, strict=True):
        assert b.throughput == pytest.approx(shifted(a.throughput, a.workers, batch, 0.02), rel=1e-9)
        assert c.throughput == pytest.approx(a.throughput, rel=1e-12)
        if a.workers <= HOST_CORES:
            assert b.throughput == pytest.approx(a.throughput, rel=1e-12)
        else:  # W x batch / (step + 20 ms x (W - 2))
            step = a.workers * batch / a.throughput
            assert b.throughput == pytest.approx(a.workers * batch / (step + 0.02 * (a.workers - 2)), rel=1e-9)


def test_a_calm_re_measurement_supersedes_the_loaded_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for name in ("mwms-a", "mwms-a-calm", "mwms-b"):
        (tmp_path / name).mkdir()
    assert superseded(sorted(tmp_path.iterdir())) == {"mwms-a"}


def test_runs_of_another_day_than_their_profile_are_shown_not_scored(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The 4.2 MB Keras MLP's calm set ran W = 5..8 two days after its profile, on a day the VM
    ran the program's W = 1 12 % slower, and the same program was measured that day in one
    sitting with its profile (``mwms-mlp4m-bw100-same-day``): those W are caveats, neither fitted
    nor scored. Without the same-day set beside it, nothing would be."""
    calm = DATA / "mwms-mlp4m-bw100-calm"
    assert stale(calm) == {5, 6, 7, 8}
    (tmp_path / calm.name).mkdir()
    assert stale(tmp_path / calm.name) == set()
    rows, _ = rows_with_holdout([calm, DATA / "mwms-mlp4m-bw100-same-day"], steps=60, holdout=False)
    assert {(r.config, r.workers) for r in rows if r.caveat} == {(calm.name, w) for w in (5, 6, 7, 8)}


def test_a_ps_trace_predicts_the_mwms_runs_of_the_same_program() -> None:
    """The all-reduce what-if from a PS trace (kind tf-ps: TensorFlow's ring figures) against
    real MWMS runs of the same program, W >= 2: the accuracy target, and not the optimism that
    grows with W which NCCL-style figures (50 us a round, no two-way loss) give."""
    folders = [f for f in configs() if f.name in PS_TRACES]
    if not folders:
        pytest.skip("no MWMS run of a PS testbed program")
    rows = [r for f in folders for r in predict_from_ps_trace(f, steps=300) if r.workers > 1]
    med, worst = summary(rows)
    assert med <= MEDIAN_TARGET and worst <= MAX_TARGET, (med, worst)
    # NCCL-style figures (50 us a round, no two-way loss) are optimistic, more so as W grows
    generic = [r for f in folders for r in predict_from_ps_trace(f, steps=300, params={"latency_s": 5e-5,
                                                                                        "two_way_share": 1.0})
               if r.workers > 1]
    assert summary(generic)[1] > worst and statistics.fmean(r.error for r in generic if r.workers >= 5) > 0.05


# the ring's figures when predictions-w5-8.json was written: the link fit on the W <= 4 runs, no host stated
COMMITTED_WITH = {"latency_s": 1.25e-3, "two_way_share": 0.95, "host_cores": None}


def test_co_located_workers_run_below_the_committed_ring_predictions_and_the_host_term_closes_the_gap() -> None:
    """The PS testbed's programs at W = 5..8 (every worker on the testbed's 2-core host), predicted
    before they were measured (predictions-w5-8.json): the model with the figures of that time
    still gives the committed figures; every run is slower than them, and no run breaks what holds
    whatever the model: a synchronous ring job never beats W times its one-worker rate, nor what
    its links carry (each worker's link moves 2(W-1)/W of the gradients each way per step). With
    the host stated (and the host's step figure fitted on the other configurations) each is within
    the 15 % target.
    Where a run kept its CPU, a worker spent more of it per step than alone (the collectives'
    share, docs/accuracy.md)."""
    folders = [f for f in configs() if f.name in PS_TRACES]
    if not folders:
        pytest.skip("no MWMS run of a PS testbed program")
    calm = [f for f in configs() if f.name.startswith("mwms-") and f.name not in superseded(configs())]
    found = 0
    for folder in folders:
        measured = json.loads((folder / "measured.json").read_text())
        one = next(p["examples_per_s"] for p in measured["points"] if p["workers"] == 1)
        profile = json.loads(gzip.decompress((folder / "profile.json.gz").read_bytes()))
        gradient_bytes = sum(g["bytes"] for g in profile["gradients"])
        rows = committed(folder)
        ws = [w for w, *_ in rows]
        then = {c.workers: c.throughput for c in profile_curve(folder, ws, 300, COMMITTED_WITH)}
        fitted = fit([f for f in calm if f != folder], steps=60)
        now = {c.workers: c.throughput for c in profile_curve(folder, ws, 300, fitted)}
        for w, own, _, real in rows:
            found += 1
            assert then[w] == pytest.approx(own, rel=0.03), (folder.name, w)
            assert own > real, (folder.name, w)
            assert now[w] == pytest.approx(real, rel=MAX_TARGET), (folder.name, w)
            link_steps = measured["bandwidth_bps"] / (8 * 2 * (w - 1) / w * gradient_bytes)
            assert real <= w * one and real <= link_steps * w * measured["batch_size"], (folder.name, w)
        cpu = cpu_per_step_ms(folder)
        for w in set(cpu) - {1}:
            if 1 in cpu:
                assert min(cpu[w]) > max(cpu[1]), (folder.name, w)
    assert found == 12


def _committed_w1_8(folder: Path, params: dict[str, float] | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """A configuration predicted at W = 1..8 before any run (``predictions-w1-8.json``, the
    testbed's host stated): the model with ``params`` gives the committed figures again; returns
    them and the measured rates, by W."""
    doc = json.loads((folder / "predictions-w1-8.json").read_text())
    ws = doc["workers"]
    assert ws == list(range(1, 9)) and doc["params"] == {"host_cores": HOST_CORES}
    now = profile_curve(folder, ws, doc["steps"], params or {})
    assert [c.throughput for c in now] == pytest.approx(doc["from_profile"], rel=1e-4)
    return dict(zip(ws, doc["from_profile"], strict=True)), _measured(folder)


def _measured(folder: Path) -> dict[int, float]:
    """A configuration's measured examples/s, by W."""
    doc = json.loads((folder / "measured.json").read_text())
    return {int(p["workers"]): float(p["examples_per_s"]) for p in doc["points"]}


def test_a_profile_and_its_runs_of_one_day_predicted_first() -> None:
    """The 4.2 MB Keras MLP at 100 Mbit/s again (``mwms-mlp4m-bw100-same-day``), its profile and
    every W from one sitting, W = 1..8 predicted and committed before any run: the model gives the
    committed figures, and every measured W is within 11 % of them (W = 1..4 within 5 %). The same
    program's W = 5..8 measured that day for ``mwms-mlp4m-bw100-calm``, whose profile is two days
    older, are 14-17 % below the prediction from it, within 12 % of that from the day's profile."""
    committed, measured = _committed_w1_8(DATA / "mwms-mlp4m-bw100-same-day")
    for w, own in committed.items():
        assert own == pytest.approx(measured[w], rel=0.05 if w <= 4 else 0.11), w
    older = {r.workers: r for r in predict(DATA / "mwms-mlp4m-bw100-calm")}
    for w, own in committed.items():
        if w >= 5:
            assert 0.14 < older[w].error < 0.18 and own == pytest.approx(older[w].measured, rel=0.12), w


def test_a_program_near_the_cpu_bound_predicted_first() -> None:
    """The PS testbed's MLP under Keras MWMS at 100 Mbit/s (``mwms-mlp-bw100``), recorded after the
    turn into the CPU bound and the small collectives' CPU were taken from the probe, W = 1..8
    predicted and committed before any run: the model gives the committed figures, and every
    measured W is within 5 %; with a sharp bound and every all-reduce at the large calls' CPU
    (``THEN``) W = 8 would be more than 15 % low, with the links alone more than 30 % high."""
    folder = DATA / "mwms-mlp-bw100"
    committed, measured = _committed_w1_8(folder)
    for w, own in committed.items():
        assert own == pytest.approx(measured[w], rel=0.05), w
    sharp = profile_curve(folder, [8], 300, THEN)
    links = profile_curve(folder, [8], 300, UNBOUND)
    assert sharp[0].throughput < 0.85 * measured[8] and links[0].throughput > 1.3 * measured[8]


# TF's ring's host figures when mwms-mlp4m-bw200 was predicted: a sharp CPU bound (an exponent so
# large that the turn is the max), every all-reduce at the large calls' CPU, a 7.5 ms and 4 ms/MB wait
THEN: dict[str, float] = {"host_bound_exponent": 1e6, "collective_cpu_s": GRPC_RING.transfer_cpu_s_per_call,
                          "host_cpu_s": 7.5e-3, "host_cpu_s_per_mb": 4e-3}


def test_the_hosts_cpu_bound_predicted_a_flat_curve_before_it_was_run() -> None:
    """The 4.2 MB Keras MLP at 200 Mbit/s (``mwms-mlp4m-bw200``), predicted at W = 1..8 and
    committed before any multi-worker run: the model with the figures it had then (``THEN``) still
    gives the committed figures, and every measured W is within 10 % of them; the model as it is
    (its host figures refined on the probe since) is within 7 %; and what the runs show holds
    whatever the model: twice the link rate of the 100 Mbit/s runs bought nothing at W = 8, where
    the links alone (the host's wait stated, its CPU bound not) would promise more than twice what
    was measured."""
    folder = DATA / "mwms-mlp4m-bw200"
    if not (folder / "measured.json").is_file():
        pytest.skip("mwms-mlp4m-bw200 not measured")
    committed, measured = _committed_w1_8(folder, THEN)
    for w, own in committed.items():
        assert own == pytest.approx(measured[w], rel=0.10), w
    for r in predict(folder):  # the model as it is
        assert r.predicted == pytest.approx(measured[r.workers], rel=0.07), r.workers
    assert measured[8] < 1.1 * _measured(DATA / "mwms-mlp4m-bw100-calm")[8]
    links = profile_curve(folder, [8], 300, UNBOUND)
    assert links[0].throughput > 2 * measured[8]


# gloo's host figure when each DDP set at the normal priority was predicted: ddp-one-bucket's
# before the real-time-priority runs were superseded (2 ms, fitted on them), ddp-slow-calm's after (0)
DDP_THEN: dict[str, dict[str, float]] = {"ddp-one-bucket": {"host_cpu_s": 2e-3}, "ddp-slow-calm": {}}


@pytest.mark.parametrize("name", sorted(DDP_THEN))
def test_ddp_on_the_shared_host_predicted_first(name: str) -> None:
    """ddp-slow's program at the scheduler's normal priority on the testbed's 2-core host, W = 1..8
    each predicted and committed before its multi-worker runs: with DDP's buckets (a first of
    1 MiB all-reduced while backward goes on) and with all 3 MiB in one bucket after backward. The
    model with the figures it had then gives the committed figures, and every measured W is
    within 5 % of them, eight ranks on two cores included."""
    committed, measured = _committed_w1_8(DATA / name, DDP_THEN[name])
    for w, own in committed.items():
        assert own == pytest.approx(measured[w], rel=0.05), w


def test_ddp_at_real_time_priority_ran_eight_ranks_slower() -> None:
    """Why ddp-slow-calm supersedes ddp-slow: the same program and buckets, recorded at real-time
    round-robin priority (ddp-slow), ran W = 1..6 within 8 % of the calm set, but W = 8 more than
    12 % slower."""
    rt, calm = _measured(DATA / "ddp-slow"), _measured(DATA / "ddp-slow-calm")
    assert superseded(configs()) >= {"ddp-slow"}
    for w in range(1, 7):
        assert rt[w] == pytest.approx(calm[w], rel=0.08), w
    assert rt[8] < 0.88 * calm[8]
