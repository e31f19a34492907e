"""The gRPC ring probe with idle time before each call (tests/data/allreduce/grpc-ring-probe,
probe-gap.json): what its README claims, read from the recorded CPU."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.conftest import REPO

PROBE = REPO / "tests" / "data" / "allreduce" / "grpc-ring-probe" / "probe-gap.json"
MIB = 2**20


def cpu_ms() -> list[dict[tuple[int, int], float]]:
    """Per run, per (W, bytes): a worker's mean CPU per timed call (the line-up's included), ms."""
    doc = json.loads(PROBE.read_text())
    return [{(t["workers"], t["bytes"]): statistics.fmean(t["cpu_s"]) * 1e3 for t in run["timings"]}
            for run in doc["runs"]]


def test_the_probe_holds_runs_without_idle_with_idle_and_with_staggered_arrivals_at_w_2_to_8() -> None:
    doc = json.loads(PROBE.read_text())
    assert [(r["gap_s"], r["stagger"]) for r in doc["runs"]] == [(0.0, False), (0.06, False), (0.3, True),
                                                                   (0.3, True)]
    runs = cpu_ms()
    for cpu in runs:
        assert sorted(cpu) == [(w, b) for w in range(2, 9) for b in (4, MIB, 8 * MIB)]


def test_idle_between_calls_does_not_raise_a_large_calls_cpu_beyond_the_cores() -> None:
    without, with_gap = cpu_ms()[:2]
    for w in range(4, 9):
        assert abs(with_gap[(w, 8 * MIB)] / without[(w, 8 * MIB)] - 1) <= 0.055
        assert abs(with_gap[(w, MIB)] / without[(w, MIB)] - 1) <= 0.075
    # no sign either way: the 8 MiB calls cost less with the idle time at some W, more at others
    signs = {with_gap[(w, 8 * MIB)] > without[(w, 8 * MIB)] for w in range(4, 9)}
    assert signs == {True, False}
    # the one larger difference the README names: W = 3 at 8 MiB, +11 %
    assert 0.10 <= with_gap[(3, 8 * MIB)] / without[(3, 8 * MIB)] - 1 <= 0.12


def test_staggered_arrivals_cost_a_few_milliseconds_of_cpu_per_call_beyond_the_cores() -> None:
    without, _, *staggered = cpu_ms()

    def extra(run: dict[tuple[int, int], float], size: int) -> float:  # mean over W = 5..8, ms per call
        return statistics.fmean(run[(w, size)] - without[(w, size)] for w in range(5, 9))
    # the README's figures, run by run: 8 MiB +10.8 and +13.1 ms, 1 MiB +5.4 and +2.4, 4 bytes +2.6 and +2.5
    for run, (big, mid) in zip(staggered, ((10.8, 5.4), (13.1, 2.4)), strict=True):
        assert extra(run, 8 * MIB) == pytest.approx(big, abs=0.05) and extra(run, MIB) == pytest.approx(mid, abs=0.05)
        assert 2.4 <= extra(run, 4) <= 2.7
        # one gradient all-reduce (4.2 MB: between 1 and 8 MiB) and two small ones a step: 7-18 ms
        # of the training steps' 28-37
        assert 7 <= extra(run, MIB) + 2 * extra(run, 4) and extra(run, 8 * MIB) + 2 * extra(run, 4) <= 18.5
