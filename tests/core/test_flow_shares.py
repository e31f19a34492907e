"""The flow-share comparison (``benchmarks/flow_shares.py``): its arithmetic on hand-made
transfers, its reading of real traced steps, and the findings docs/contention-model.md states
from the recorded runs (``tests/data/flow-shares``)."""

from __future__ import annotations

import gzip
import json
import math
import statistics

import pytest

from advisor.importers.tf_profile import label_bytes
from benchmarks.flow_shares import (
    ALL_TRACED, DATA, MIN_PHASE_BYTES, RUN, Transfer, measured_transfers, phase_rates, round_figures, rows, shares,
    simulated_transfers, sync_rounds,
)

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
PS = "/job:ps/replica:0/task:0/device:CPU:0"


def test_a_phase_runs_from_its_first_transfer_to_its_last_and_leaves_out_few_byte_messages() -> None:
    steps = [
        Transfer(0, True, 50_000, 0.0, 1.0),
        Transfer(0, True, 50_000, 0.5, 2.0),
        Transfer(0, True, 8, 1.9, 5.0),  # a token: not part of the phase
        Transfer(0, False, 40_000, 2.5, 3.5),  # a push: the other direction
        Transfer(1, True, 100_000, 10.0, 10.5),
        Transfer(2, True, MIN_PHASE_BYTES - 1, 20.0, 21.0),  # too small a phase to have a rate
    ]
    # step 0: 100 kB over [0, 2] s; step 1: 100 kB over 0.5 s
    assert phase_rates(steps, pull=True) == [8 * 100_000 / 2.0, 8 * 100_000 / 0.5]
    assert phase_rates(steps, pull=False) == [8 * 40_000 / 1.0]


def test_shares_are_the_median_rate_over_the_fair_share_and_the_spread_of_log_rates() -> None:
    even = shares([25e6, 25e6, 25e6], link_bps=100e6, workers=4)
    assert (even.phases, even.median_share, even.log_sd) == (3, 1.0, 0.0)
    # rates e^-1 and e^1 times 10 Mbit/s: log spread 1, median their mean, fair share 50 Mbit/s
    spread = shares([10e6 / math.e, 10e6 * math.e], link_bps=100e6, workers=2)
    assert spread.log_sd == pytest.approx(1.0)
    assert spread.median_share == pytest.approx((10e6 / math.e + 10e6 * math.e) / 2 / 50e6)
    assert math.isnan(shares([], 100e6, 2).median_share)


def test_label_bytes_reads_tensorflow_s_size_labels() -> None:
    assert label_bytes("8B") == 8
    assert label_bytes("0.3MB") == round(0.3 * 2**20)
    assert label_bytes(" 64KB ") == 64 * 1024
    assert label_bytes("fast") is None


def test_measured_transfers_are_the_recvtensor_nodes_between_ps_and_worker() -> None:
    step = {"client": [0, 2_000_000], "nodes": [
        [WORKER, "RecvTensor", f"[1.1MB] [8.9Mb/s] edge_25_MatMul/ReadVariableOp from {PS} to {WORKER}", 10_000, 1_090_000],
        [WORKER, "RecvTensor", f"[0.4MB] [7.4Mb/s] edge_111_grad from {WORKER} to {PS}", 1_100_000, 1_500_000],
        [WORKER, "compute_fwd0", "compute_fwd0 = PyFunc(Relu)", 1_090_000, 1_095_000],
        [WORKER, "RecvTensor", f"[8B] [0.1Mb/s] edge_1_x from {WORKER} to {WORKER}", 0, 1],  # not the link
    ]}
    pull, push = measured_transfers([step])
    assert (pull.pull, pull.size, pull.start, pull.end) == (True, round(1.1 * 2**20), 0.01, 1.09)
    assert (push.pull, push.size, push.start, push.end) == (False, round(0.4 * 2**20), 1.1, 1.5)


def test_simulated_transfers_read_worker_link_events_of_a_chrome_trace_after_the_warm_up() -> None:
    def event(pid: int, cat: str, name: str, step: int, ts: float, dur: float) -> dict:
        return {"ph": "X", "pid": pid, "cat": cat, "name": name, "ts": ts, "dur": dur,
                "args": {"worker": pid % 2, "step": step}}

    trace = {"traceEvents": [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "worker 0"}},
        event(0, "downlink", "pull0:w", 3, 1e6, 5e5),
        event(0, "uplink", "push0:g", 3, 2e6, 1e6),
        event(0, "worker", "fwd", 3, 1.5e6, 1e5),  # a computation
        event(0, "downlink", "pull0:w", 1, 0.0, 5e5),  # warm-up
        event(2, "downlink", "pull0:w", 3, 1e6, 5e5),  # the PS's copy of worker 0's pull
    ]}
    found = simulated_transfers(trace, {"pull0:w": 1000, "push0:g": 2000}, workers=2, warmup=2)
    assert found == [Transfer(3, True, 1000.0, 1.0, 1.5), Transfer(3, False, 2000.0, 2.0, 3.0)]


def test_the_recorded_runs_are_in_the_repository_with_twenty_traced_steps_per_w() -> None:
    paths = [p for p in sorted(DATA.glob("*.traced.measured.json.gz")) if RUN.fullmatch(p.name)]
    assert [p.name.split(".")[0] for p in paths] == ["cnn_async_bw100", "cnn_sync_bw100", "mlp_async_bw100",
                                                      "mlp_sync_bw100"]
    for path in paths:
        results = json.loads(gzip.decompress(path.read_bytes()))["results"]
        assert [r["W"] for r in results] == [2, 4, 8]
        assert all(len(r["traced_steps_w0"]) == 20 for r in results)


def test_under_a_barrier_the_mlp_s_long_flows_share_evenly_and_the_model_s_spread_is_wider() -> None:
    """docs/contention-model.md, section 8: the synchronous MLP's real phase rates vary by at most
    14 % (log sd) from step to step, traced alone or with every worker traced, where the model
    draws uneven shares (sigma 0.75) and its phases vary more at every W."""
    mlp = [r for r in rows(steps=60) if r.run == "mlp_sync_bw100"]
    assert [r.workers for r in mlp] == [2, 4, 8]
    for r in mlp:
        for real, sim in zip(r.real, r.sim):
            assert real.log_sd < 0.15 and sim.log_sd > real.log_sd
    (result,) = json.loads(gzip.decompress((DATA / "mlp_sync_bw100_all8.traced.measured.json.gz").read_bytes()))["results"]
    for w in range(8):
        transfers = measured_transfers(result[f"traced_steps_w{w}"])
        assert all(shares(phase_rates(transfers, d), 100e6, 8).log_sd < 0.15 for d in (True, False))


def test_under_a_barrier_the_cnn_s_first_worker_released_gets_out_first() -> None:
    """docs/contention-model.md, section 8: with every worker traced, the CNN's round's first
    worker to end its pulls was among the first two released in 17 of 18 rounds (1 in 4 by
    chance) and pushes in well under the others' time; the MLP's, less often (7 of 18), does
    not gain much."""
    figures = {}
    for program in ("cnn", "mlp"):
        path = DATA / f"{program}_sync_bw100_all8.traced.measured.json.gz"
        (result,) = json.loads(gzip.decompress(path.read_bytes()))["results"]
        figures[program] = round_figures(sync_rounds(result))
    assert figures["cnn"].first_out_started_early > 0.9 and figures["cnn"].first_push < 0.7 * figures["cnn"].other_push
    assert figures["mlp"].first_out_started_early < 0.5 and figures["mlp"].first_push > 0.85 * figures["mlp"].other_push
    assert all(f.release_spread < 30 for f in figures.values())  # ms: the barrier releases them together


def test_a_shorter_queue_lets_the_mlp_s_first_worker_out_push_sooner() -> None:
    """docs/contention-model.md, section 8: with a 20 ms queue instead of 100 ms on the PS link
    (two runs each), the MLP's first worker out pushes in 0.80 of the others' time on average
    (at 100 ms: 0.94), and every run with the short queue is faster than every run with the long
    one: what holds an early push back waits in the PS link's queue."""
    def load(name: str) -> tuple[float, float]:
        (result,) = json.loads(gzip.decompress((DATA / name).read_bytes()))["results"]
        f = round_figures(sync_rounds(result))
        return f.first_push / f.other_push, float(result["thr_window"])

    long_queue = [load(f"mlp_sync_bw100_all8{r}.traced.measured.json.gz") for r in ("", ".r2")]
    short_queue = [load(f"mlp_sync_bw100_q20_all8{r}.traced.measured.json.gz") for r in ("", ".r2")]
    assert statistics.fmean(x for x, _ in short_queue) < statistics.fmean(x for x, _ in long_queue) - 0.1
    assert min(t for _, t in short_queue) > 1.03 * max(t for _, t in long_queue)


def _step(start_ms: float, pull: tuple[float, float], push: tuple[float, float]) -> dict:
    """A traced step (microsecond clock) with one 100 kB pull and one 100 kB push."""
    us = 1000
    return {"client": [start_ms * us, (push[1] + 10) * us], "nodes": [
        [WORKER, "RecvTensor", f"[100KB] [1Mb/s] w from {PS} to {WORKER}", pull[0] * us, pull[1] * us],
        [WORKER, "RecvTensor", f"[100KB] [1Mb/s] g from {WORKER} to {PS}", push[0] * us, push[1] * us],
    ]}


def test_rounds_group_every_worker_s_step_of_one_barrier_and_say_who_got_out_first() -> None:
    # two rounds of two workers, 1 s apart; worker 1 is released 10 ms after worker 0 in both,
    # and ends its pulls first in the first round only; a third round lacks worker 1
    result = {"W": 2,
              "traced_steps_w0": [_step(0, (1, 300), (320, 600)), _step(1000, (1001, 1200), (1220, 1400)),
                                  _step(2000, (2001, 2300), (2320, 2600))],
              "traced_steps_w1": [_step(10, (11, 200), (220, 400)), _step(1010, (1011, 1300), (1320, 1600))]}
    rounds = sync_rounds(result)
    assert [[p.worker for p in r] for r in rounds] == [[0, 1], [0, 1]]
    f = round_figures(rounds)
    assert f.rounds == 2
    assert f.release_spread == pytest.approx(10.0)
    assert f.pull_end_spread == pytest.approx(100.0)  # 300 - 200 and 1300 - 1200
    # the first out was released first in round 2 (worker 0) but not in round 1 (worker 1)
    assert f.first_out_started_early == 0.5
    assert f.first_push == pytest.approx((180 + 180) / 2)  # worker 1's 220-400, worker 0's 1220-1400
    assert f.other_push == pytest.approx((280 + 280) / 2)


def test_the_runs_with_every_worker_traced_hold_whole_rounds() -> None:
    paths = [p for p in sorted(DATA.glob("*.traced.measured.json.gz")) if ALL_TRACED.fullmatch(p.name)]
    assert [p.name.removesuffix(".traced.measured.json.gz") for p in paths] == [
        "cnn_sync_bw100_all8", "mlp_sync_bw100_all8.r2", "mlp_sync_bw100_all8", "mlp_sync_bw100_q20_all8.r2",
        "mlp_sync_bw100_q20_all8"]
    for path in paths:
        (result,) = json.loads(gzip.decompress(path.read_bytes()))["results"]
        rounds = sync_rounds(result)
        assert len(rounds) >= 15  # of the 20 traced steps a worker, the first and last may be cut
        assert all(len(r) == 8 for r in rounds)
