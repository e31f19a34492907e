"""The flow-share comparison (``benchmarks/flow_shares.py``): its arithmetic on hand-made
transfers, its reading of real traced steps, and the findings docs/contention-model.md states
from the recorded runs (``tests/data/flow-shares``)."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import math
import statistics
import sys
from types import ModuleType

import pytest

from advisor.importers.tf_profile import label_bytes
from benchmarks.flow_shares import (
    ALL_TRACED, DATA, MIN_PHASE_BYTES, PULL_CONNECTION, PUSH_CONNECTION, RUN, TCP_FIELDS, Transfer, early_pushes,
    measured_transfers, phase_rates, round_figures, rows, shares, simulated_transfers, sync_rounds,
)
from tests.conftest import REPO

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
        "cnn_sync_bw100_all8", "cnn_sync_bw100_ssai0_all8", "cnn_sync_bw100_tcp_all8", "mlp_sync_bw100_all8.r2",
        "mlp_sync_bw100_all8", "mlp_sync_bw100_q20_all8.r2", "mlp_sync_bw100_q20_all8",
        "mlp_sync_bw100_q20_ssai0_all8", "mlp_sync_bw100_q20_tcp_all8", "mlp_sync_bw100_ssai0_all8",
        "mlp_sync_bw100_tcp_all8"]
    for path in paths:
        (result,) = json.loads(gzip.decompress(path.read_bytes()))["results"]
        rounds = sync_rounds(result)
        assert len(rounds) >= 15  # of the 20 traced steps a worker, the first and last may be cut
        assert all(len(r) == 8 for r in rounds)


def _recorder() -> ModuleType:
    """scripts/record_ps_traces.py (a script, not a package module; TensorFlow is imported only
    inside its tasks)."""
    sys.path.insert(0, str(REPO / "scripts"))  # its own import of netns_testbed
    try:
        spec = importlib.util.spec_from_file_location("record_ps_traces", REPO / "scripts" / "record_ps_traces.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return module


def test_the_recorder_reads_ss_samples_of_both_connections_with_each_worker() -> None:
    recorder = _recorder()
    assert recorder.SS_FIELDS.keys() == set(TCP_FIELDS) and list(recorder.SS_FIELDS) == list(TCP_FIELDS)
    assert (recorder.PULL_CONNECTION, recorder.PUSH_CONNECTION) == (PULL_CONNECTION, PUSH_CONNECTION)
    ps, w0, w1, other = "10.213.77.1", "10.213.77.2", "10.213.77.3", "10.213.77.9"
    text = (f"@ 100.5\n"
            # worker 0 called the PS's server (gRPC's IPv4-mapped form): pulls arrive on it
            f"0      17     [::ffff:{ps}]:2222 [::ffff:{w0}]:43414\n"
            "\t cubic wscale:10,10 rto:276 rtt:76.5/3.2 ato:40 mss:1448 cwnd:62 bytes_sent:9000 "
            "bytes_acked:8000 bytes_received:409 unacked:3 rcv_space:14480 minrtt:0.01\n"
            # the PS called worker 1's server: pushes arrive on it
            f"0      0      {ps}:51000 {w1}:2222\n"
            "\t cubic rtt:1.5/0.5 cwnd:10 bytes_acked:300 bytes_received:1250000 rcv_rtt:72.25 "
            "retrans:0/4\n"
            # a peer that is no worker, and a connection on neither server port: left out
            f"0      0      {ps}:2222 {other}:40000\n\t cubic rtt:1/1 cwnd:5\n"
            f"0      0      {ps}:50000 {w0}:50001\n\t cubic rtt:1/1 cwnd:5\n"
            "@ 100.55\n")
    rows = recorder.parse_tcp_samples(text, {w0: 0, w1: 1})
    assert rows == [[100.5, 0, PULL_CONNECTION, 76.5, 62.0, 8000.0, 409.0, 3.0, None, None],
                    [100.5, 1, PUSH_CONNECTION, 1.5, 10.0, 300.0, 1250000.0, None, 72.25, 4.0]]
    assert recorder.sysctl_setting("net.ipv4.tcp_slow_start_after_idle=0") == ("net.ipv4.tcp_slow_start_after_idle", "0")
    for bad in ("net.ipv4.tcp_slow_start_after_idle", "kernel.pid_max=9", "net.x="):
        with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
            recorder.sysctl_setting(bad)


def _sample(t: float, worker: int, connection: int, **fields: float) -> list:
    return [t, worker, connection] + [fields.get(f) for f in TCP_FIELDS]


def test_an_early_push_is_the_first_worker_out_pushing_while_the_others_pull() -> None:
    # worker 1 ends its pulls first (200 ms) and pushes from 220 ms; worker 0 pulls until 400 ms.
    # Over that 180 ms overlap the PS receives 225 kB from worker 1 (10 Mbit/s) and worker 0
    # acknowledges 1.125 MB (50 Mbit/s); worker 0's pull connection reads 60 ms RTT, worker 1's
    # push connection 40 ms at the receiver.
    result = {"W": 2,
              "traced_steps_w0": [_step(0, (1, 400), (420, 600))],
              "traced_steps_w1": [_step(10, (11, 200), (220, 450))],
              "tcp_samples_ps0": [
                  s for t in (0.0, 0.2, 0.22, 0.26, 0.3, 0.45, 0.5)
                  for s in (_sample(t, 1, PUSH_CONNECTION, bytes_received=max(0.0, t - 0.22) * 1.25e6, rcv_rtt=40.0),
                            _sample(t, 0, PULL_CONNECTION, bytes_acked=t * 6.25e6, rtt=60.0))]}
    (push,) = early_pushes(result)
    assert push.overlap_ms == pytest.approx(180.0)
    assert push.push_mbit == pytest.approx(10.0)
    assert push.pulls_mbit == pytest.approx(50.0)
    assert (push.pull_rtt_ms, push.push_rtt_ms) == (60.0, 40.0)
    # without samples, or with an overlap under MIN_OVERLAP_S, there is nothing to say
    assert early_pushes({k: v for k, v in result.items() if k != "tcp_samples_ps0"}) == []
    short = dict(result, traced_steps_w0=[_step(0, (1, 300), (320, 600))])  # 80 ms
    assert early_pushes(short) == []


def _early(name: str) -> list:
    (result,) = json.loads(gzip.decompress((DATA / f"{name}.traced.measured.json.gz").read_bytes()))["results"]
    return early_pushes(result)


def test_an_early_mlp_push_runs_at_the_round_trip_the_other_direction_s_queue_sets() -> None:
    """docs/contention-model.md, section 8: while the others pull, the first MLP worker out
    pushes at about its fair share (not the idle inbound link's rate) with a 100 ms queue, twice
    as fast with 20 ms, and the round trip both directions see is most of the queue."""
    def median(found: list, field: str) -> float:
        return statistics.median(getattr(e, field) for e in found)
    long_queue, short_queue = _early("mlp_sync_bw100_tcp_all8"), _early("mlp_sync_bw100_q20_tcp_all8")
    assert len(long_queue) >= 15 and len(short_queue) >= 15
    fair = 100 / 8
    assert median(long_queue, "push_mbit") < 1.0 * fair < 1.5 * fair < median(short_queue, "push_mbit")
    assert median(long_queue, "pulls_mbit") > 85  # the others' pulls fill the outbound link meanwhile
    for field in ("pull_rtt_ms", "push_rtt_ms"):
        assert 60 < median(long_queue, field) < 100
        assert median(short_queue, field) < 20
    # the CNN's early pushes run at twice the fair share through the same queue
    assert median(_early("cnn_sync_bw100_tcp_all8"), "push_mbit") > 1.6 * fair


def test_slow_start_after_idle_does_not_hold_the_early_mlp_push_back() -> None:
    """docs/contention-model.md, section 8: with tcp_slow_start_after_idle off in every namespace
    the MLP's throughput and its first worker out's pushes are those of the default runs."""
    def load(name: str) -> tuple[dict, float, float]:
        doc = json.loads(gzip.decompress((DATA / f"{name}.traced.measured.json.gz").read_bytes()))
        f = round_figures(sync_rounds(doc["results"][0]))
        return doc, doc["results"][0]["thr_window"], f.first_push / f.other_push
    off, off_thr, off_ratio = load("mlp_sync_bw100_ssai0_all8")
    assert off["meta"]["sysctls"] == {"net.ipv4.tcp_slow_start_after_idle": "0"}
    on = [load(n) for n in ("mlp_sync_bw100_all8", "mlp_sync_bw100_all8.r2")]
    assert all("sysctls" not in doc["meta"] for doc, _, _ in on)
    assert off_thr == pytest.approx(statistics.fmean(t for _, t, _ in on), rel=0.01)
    assert off_ratio > max(r for _, _, r in on) - 0.01  # no earlier push without the restart
