"""The W = 3 placement runs (tests/data/ps-traces/w3-placements) and the readers behind their
table: the order parameter R1 on hand-made step logs, the network counters as the testbed
parses them, and the claims the data's README and docs/contention-model.md make of the runs."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from types import ModuleType

import pytest

from benchmarks.multi_ps_accuracy import (
    PLACEMENT_RUNS, order_parameter, placement_rows, random_order_parameter, step_end_segments,
)
from tests.conftest import REPO


def load_testbed() -> ModuleType:
    """scripts/netns_testbed.py (a script beside the recorders, not a package module)."""
    spec = importlib.util.spec_from_file_location("netns_testbed", REPO / "scripts" / "netns_testbed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("netns_testbed", module)
    spec.loader.exec_module(module)
    return module


def steps(offset: float, period: float = 1.0, n: int = 40) -> list[tuple[float, float, int]]:
    return [(offset + k * period, offset + (k + 1) * period, k) for k in range(n)]


def test_r1_is_one_in_lockstep_and_zero_when_evenly_spread() -> None:
    assert order_parameter([steps(0.0)] * 3, skip=2) == pytest.approx(1.0)
    # three workers a third of a step apart: the phasors are the cube roots of unity, which sum to 0
    assert order_parameter([steps(0.0), steps(1 / 3), steps(2 / 3)], skip=2) == pytest.approx(0.0, abs=1e-9)
    # two workers half a step apart cancel too
    assert order_parameter([steps(0.0), steps(0.5)], skip=2) == pytest.approx(0.0, abs=1e-9)


def test_random_phases_give_about_one_over_root_w() -> None:
    # E|mean of W unit phasors| is close to sqrt(pi / (4 W)) for large W (a Rayleigh mean); at W = 8, 0.31
    assert random_order_parameter(8) == pytest.approx((3.141592653589793 / 32) ** 0.5, rel=0.05)


def test_the_testbed_reads_tcp_and_tbf_counters() -> None:
    module = load_testbed()
    snmp = ("Ip: Forwarding DefaultTTL\nIp: 2 64\n"
            "Tcp: RtoAlgorithm OutSegs RetransSegs InErrs\nTcp: 1 543427 6 0\n")
    netstat = "TcpExt: SyncookiesSent TCPTimeouts TCPFastRetrans TW\nTcpExt: 0 3 43 9\n"
    assert module._proc_counters(snmp) == {"OutSegs": 543427, "RetransSegs": 6}
    assert module._proc_counters(netstat) == {"TCPTimeouts": 3, "TCPFastRetrans": 43}
    tc = ("qdisc tbf 8001: root refcnt 2 rate 100Mbit burst 4Kb lat 100ms \n"
          " Sent 557825610 bytes 541731 pkt (dropped 265, overlimits 9120 requeues 0) \n"
          " backlog 0b 0p requeues 0\n")
    assert module._qdisc_counters(tc) == {"sent_bytes": 557825610, "sent_packets": 541731, "dropped": 265}
    # an unshaped link (no tbf) has no counters to report
    assert module._qdisc_counters("qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0)\n") == {}


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict]]:
    rows = placement_rows()
    return {p: [r for r in rows if r["placement"] == p] for p in PLACEMENT_RUNS}


def test_every_placement_was_run_twice_at_w3(runs) -> None:
    assert {p: len(rs) for p, rs in runs.items()} == dict.fromkeys(PLACEMENT_RUNS, 2)
    assert {r["workers"] for rs in runs.values() for r in rs} == {3}


def test_only_round_robin_takes_turns(runs) -> None:
    random_r1 = random_order_parameter(3)
    one_ps = statistics.fmean(r["throughput"] for r in runs["one-ps"])
    for r in runs["round-robin"]:
        assert r["r1"] < 0.6 * random_r1  # spread out, far below random phases
        assert r["throughput"] > 1.15 * one_ps
    for placement in ("last-ps", "step-apart", "biases-apart"):
        for r in runs[placement]:
            assert r["r1"] > 0.9 * random_r1  # as the one-PS runs: random phases or closer to lockstep
            assert r["throughput"] == pytest.approx(one_ps, rel=0.08)


def test_no_run_had_a_retransmission_timeout_and_drops_do_not_tell_the_arrangements_apart(runs) -> None:
    assert all(r["timeouts"] == 0 for rs in runs.values() for r in rs)
    # every run lost pushed packets to the full tbf queue; a turn-taking run lost the most of all
    assert all(r["drops_in"] > 0 for rs in runs.values() for r in rs)
    assert max(r["drops_in"] for r in runs["round-robin"]) == max(r["drops_in"] for rs in runs.values() for r in rs)


def test_the_step_ending_trigger_waits_only_where_it_crosses_the_weights_link() -> None:
    # Worker 0's traced steps at W = 3 (record_ps_traces.py --trace-steps 20): with the biases
    # apart, global_step (and the trigger of its increment) stays on the weights' PS, whose inbound
    # link carries the other workers' gradients; with round-robin it goes to PS 0's quiet link.
    data = REPO / "tests" / "data" / "ps-traces" / "w3-placements"
    crossing = step_end_segments(data / "biases-apart.traced.measured.json.gz")
    quiet = step_end_segments(data / "round-robin.traced.measured.json.gz")
    assert len(crossing["tail"]) == len(quiet["tail"]) == 20
    assert max(quiet["trigger"]) < 5.0  # ms: a 0-byte message over an idle 100 Mbit/s link
    assert max(crossing["trigger"]) > 10 * max(quiet["trigger"])  # behind a queued gradient
    assert statistics.median(crossing["tail"]) > statistics.median(quiet["tail"])
