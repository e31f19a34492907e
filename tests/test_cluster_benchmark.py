"""The cluster benchmark (benchmarks/cluster.py): one hand-computed job, and a tiny run of every policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cluster
from advisor.core.allocation import CurvePoint


def one_type() -> cluster.JobType:
    # truth 100 ex/s at W = 1, 200 at W = 2 (measured), one PS
    return cluster.JobType("t", Path("unused"), 100e6, {1: 100.0, 2: 200.0}, 1)


def test_one_job_by_hand() -> None:
    # 720,000 examples at W = 2 (200 ex/s): 3600 s. Cost: (2 workers + 1 PS) x 1 h x 1 per hour = 3.
    kind = one_type()
    curve = (CurvePoint(1, 100.0, 95.0, 105.0), CurvePoint(2, 200.0, 190.0, 210.0))
    job = cluster.Job("j", kind, curve, arrival=10.0, examples=720_000, requested=2, deadline=None,
                      remaining=720_000, last=10.0)
    out = cluster.simulate([job], capacity=4, policy="fixed")
    assert out.avg_jct_h == pytest.approx(1.0)
    assert out.cost == pytest.approx(3.0)
    assert out.utilization == pytest.approx(0.5)  # 2 of 4 workers for the whole span


def test_allocator_keeps_a_running_job_when_a_move_gains_nothing() -> None:
    # Two jobs of 360,000 examples, capacity 2; alone each takes W = 2 (cost per example (W + 1) / T: 2/100 >
    # 3/200). a starts at t = 0 with 2 workers. When b arrives (t = 900 s), one worker each gives goodput
    # 1 + 1 = 2, no more than a's 2 at W = 2: within the stability margin, a keeps its workers (no resize
    # pause) and ends at 360,000 / 200 = 1800 s; b then gets 2 workers and ends at 3600 s (JCT 2700 s).
    kind = one_type()
    curve = (CurvePoint(1, 100.0, 100.0, 100.0), CurvePoint(2, 200.0, 200.0, 200.0))
    jobs = [cluster.Job(n, kind, curve, arrival=t, examples=360_000, requested=2, deadline=None, remaining=360_000,
                        last=t) for n, t in (("a", 0.0), ("b", 900.0))]
    out = cluster.simulate(jobs, capacity=2, policy="allocator")
    assert out.avg_jct_h == pytest.approx((1800.0 + 2700.0) / 2 / 3600)
    assert out.makespan_h == pytest.approx(1.0)


def test_tiny_run_of_every_policy() -> None:
    types = cluster.job_types(cluster.PS_ASYNC)
    curves = cluster.predicted_curves(types, refresh=False, keep=False)
    results = cluster.run(types, curves, capacity=8, n=8, loads=[2.0], seeds=[0])
    for policy, outs in results[2.0].items():
        assert 0 < outs[0].utilization <= 1 and outs[0].cost > 0, policy
    assert "| 2 | allocator |" in cluster.table(results)


def test_the_kept_curves_cover_every_job_type_of_the_data() -> None:
    # docs/allocation.md's figures come from the kept curves: a data set added without its curve would
    # leave its program out of them (python -m benchmarks.cluster predicts and keeps the missing ones).
    kept = set(json.loads(cluster.CURVES.read_text()))
    missing = sorted(t.name for t in cluster.job_types(cluster.PS_ASYNC) if t.name not in kept)
    assert not missing, f"no kept curve for {missing}: run python -m benchmarks.cluster to predict and keep them"
