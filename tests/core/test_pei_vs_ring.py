"""Pei et al.'s NCCL all-reduce (eq. 28-30) and the ring all-reduce model agree on the same step.

Both move 2(W-1) chunks of K/W bytes per GPU, each paying the link's latency; Pei adds the
averaging kernel on one SM per round (t_GPU_avg), which the ring model leaves out. On one 40 MB
bucket with nothing to overlap (no compute after the gradient is ready) the two communication
times must agree within 10 % (issue 16, part 2).
"""

from __future__ import annotations

import pytest

from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.pei.transmission import allreduce_seconds, latency_bandwidth_curve
from advisor.core.profile import build_profile
from advisor.core.sim_types import NetworkModel
from advisor.core.spec import GpuSpec

RATE_BPS, LATENCY_S, GRADIENT = 10e9, 50e-6, 40_000_000  # 10 Gbit/s, 50 us, one 40 MB gradient


def _one_gradient_step(compute_us: float = 1.0) -> ModelInputs:
    """A worker op that produces one gradient, pushed at its end; compute is negligible. The worker
    is a GPU's, as Pei's (so the ring takes NCCL-style figures: one-way goodput, no other collective)."""
    ops = [{"name": "worker:bwd", "resource": "worker"},
           {"name": "push", "resource": "uplink", "ps": 0, "bytes": GRADIENT, "deps": ["worker:bwd"]}]
    steps = [{"index": k, "start_us": [0.0, compute_us], "duration_us": [compute_us, 1.0]} for k in range(3)]
    profile = build_profile(job={"batch_size": 32, "worker_on_gpu": True}, ops=ops, steps=steps)
    return ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=RATE_BPS))


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_peis_nccl_time_matches_the_ring_model_within_10_percent(workers: int) -> None:
    ring = registry.get("ring-allreduce")
    params = registry.params_for(ring, {"latency_s": LATENCY_S, "bucket_mb": 100})
    (point,) = predict_curve(ring, _one_gradient_step(), params, CurveSettings(workers=(workers,), steps=60,
                                                                             warmup_steps=5))
    ring_s = workers * 32 / point.throughput  # the step is all communication here
    # By hand, the ring model: 2(W-1)(latency + 8 K / (W rate)); at W = 4: 6 x (50 us + 8 ms) = 48.3 ms
    assert ring_s == pytest.approx(2 * (workers - 1) * (LATENCY_S + 8 * GRADIENT / (workers * RATE_BPS)), rel=0.01)
    gpu = GpuSpec(name="P40")
    gigabytes_per_s = RATE_BPS / 8 / 1e9  # the spec's links.bandwidth_gbps is GB/s (PCIe 3 x16: 12)
    pei_s = allreduce_seconds(GRADIENT, workers, latency_bandwidth_curve(gigabytes_per_s, LATENCY_S), gpu, 4)
    assert pei_s == pytest.approx(ring_s, rel=0.10)
