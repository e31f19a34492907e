"""Pei et al.'s transmission model (eq. 20-32): the sigmoid curve and its fit, PS and NCCL, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.core.pei import transmission as tx
from advisor.core.spec import GpuSpec, Sigmoid

P40 = GpuSpec.model_validate("P40")
LINE = tx.latency_bandwidth_curve(bandwidth_gbps=10.0, latency_s=10e-6)  # t = 10 us + bytes / 10 GB/s


@pytest.mark.parametrize("nbytes", [1e3, 1e5, 1e6, 4e7, 1e9])
def test_latency_bandwidth_line_is_a_sigmoid(nbytes):
    # k = 1/(1000 alpha) = 100, a = 1/(1000 alpha beta) = 10, w = 1: eq. 20-21 give alpha + bytes/beta.
    assert (LINE.k, LINE.a, LINE.w) == pytest.approx((100.0, 10.0, 1.0))
    assert tx.seconds(LINE, nbytes) == pytest.approx(10e-6 + nbytes / 10e9)


def test_sigmoid_by_hand():
    # k = 5, a = 0.5, w = 1, 1 MB: x = ln 1 = 0, y = 5 / (0.5 + 1) = 3.333 GB/s, t = 1 / (1000 * 3.333) = 0.3 ms.
    assert tx.seconds(Sigmoid(k=5, a=0.5, w=1), 1e6) == pytest.approx(0.3e-3)
    assert tx.seconds(Sigmoid(k=5, a=0.5, w=1), 0) == 0.0


def test_fit_recovers_a_known_curve():
    truth = Sigmoid(k=4.0, a=0.4, w=0.7)
    sizes = np.geomspace(1e3, 2e8, 40)
    times = [tx.seconds(truth, s) for s in sizes]
    fit = tx.fit_sigmoid(sizes, times)
    assert fit.rms_relative_error < 0.01
    for s in (2e3, 1e6, 1e8):
        assert tx.seconds(fit.curve, s) == pytest.approx(tx.seconds(truth, s), rel=0.01)
    assert fit.curve.k / fit.curve.a == pytest.approx(truth.k / truth.a, rel=0.02)  # the asymptotic rate


def test_fit_reports_its_error_on_noisy_transfers():
    rng = np.random.default_rng(7)
    sizes = np.repeat(np.geomspace(1e3, 1e8, 12), 20)
    times = np.array([tx.seconds(LINE, s) for s in sizes]) * rng.lognormal(0.0, 0.1, sizes.size)
    fit = tx.fit_sigmoid(sizes, times)
    assert 0.05 < fit.rms_relative_error < 0.15  # the 10 % noise, not hidden
    assert fit.points == sizes.size and fit.distinct_sizes == 12


def test_fit_needs_three_sizes():
    with pytest.raises(tx.FitError, match="at least 3 sizes, found 2"):
        tx.fit_sigmoid([1e3, 1e3, 1e6], [1e-5, 1e-5, 1e-4])


def test_ring_bytes_by_hand():
    # 4 GPUs, K = 100 MB: 2 (N - 1) = 6 rounds of K / N = 25 MB: 150 MB sent by each GPU.
    assert tx.ring_rounds(4) == 6
    assert tx.ring_bytes(100e6, 4) == pytest.approx(150e6)
    assert tx.ring_bytes(100e6, 2) == pytest.approx(100e6)  # 2 rounds of 50 MB


def test_allreduce_eq_28_to_30_by_hand():
    # K = 40 MB on 4 P40s, t = 10 us + bytes / 10 GB/s: chunk K/N = 10 MB, t_ring = 10 us + 1 ms = 1.01 ms.
    # t_GPU_avg: 2.5 M fp32 values averaged (read 2, write 1) on the one SM the all-reduce holds:
    #   blocks = ceil(2.5e6 / 1024) = 2442, per block I + L = 3 * 1023.75 * 4 / 128 = 95.98 warp instructions,
    #   C_k = 95.98 * 2442 + 374 = 7.5e6 / 32 + 374 = 234,749 cycles -> 153.33 us at 1531 MHz
    #   (device memory would allow 30 MB / 346 GB/s = 86.7 us, so the SM's issue rate bounds it).
    # eq. 28-30: t_ar = (N - 1) (t_sr + t_ag) = 3 * (1.01 ms + 153.33 us + 1.01 ms) = 6.52 ms.
    t_avg = (7.5e6 / 32 + 374) / 1531e6
    expected = 3 * (2 * 1.01e-3 + t_avg)
    assert tx.allreduce_seconds(40e6, 4, LINE, P40, 4) == pytest.approx(expected, rel=1e-6)
    assert tx.allreduce_seconds(40e6, 1, LINE, P40, 4) == 0.0


def test_backward_slowdown_eq_31():
    # sm_num = 30: s = 30/29 = 1.03448. A 1 s window beside a 2 s all-reduce runs entirely slowed: 1.03448 s.
    assert tx.slowed_window(1.0, 2.0, 30) == pytest.approx(30 / 29)
    # Beside a 0.29 s all-reduce: 0.29 s at 29/30 speed does 0.28033 s of work, the rest 0.71967 s at full
    # speed: 0.29 + 0.71967 = 1.009667 = 1 + 0.29 / 30.
    assert tx.slowed_window(1.0, 0.29, 30) == pytest.approx(1 + 0.29 / 30)


def test_nccl_overlap_eq_27_and_32_by_hand():
    s = 30 / 29
    # Two weighted layers: t_ar = [0.5, 2.0] s (network order), the window after layer 2's gradient 1.0 s.
    # eq. 31: w_hat = 1.0 * s = 1.03448 (the all-reduce outlasts it); eq. 32: t_bo = min(1.03448, 2.0);
    # eq. 27: t_allreduce = t_ar^1 + (t_ar^2 - t_bo) = 0.5 + 0.96552 = 1.46552 s.
    o = tx.overlap([0.0, 1.0], [0.5, 2.0], slowdown=s)
    assert o.exposed == pytest.approx(0.5 + 2.0 - s)
    assert o.backward == pytest.approx(s)
    # A short all-reduce (0.29 s) hides entirely: t_allreduce = 0.5 + (0.29 - min(1.009667, 0.29)) = 0.5.
    o = tx.overlap([0.0, 1.0], [0.5, 0.29], slowdown=s)
    assert o.exposed == pytest.approx(0.5)
    assert o.backward == pytest.approx(1 + 0.29 / 30)


def test_overlap_carries_a_long_transfer_into_the_next_window():
    # Three weighted layers, windows 1 s each, transfers [0.1, 0.1, 3.0], no slowdown.
    # Eq. 23 read literally: 0.1 + (0.1 - min(0.1, 1)) + (3.0 - min(3.0, 1)) = 2.1 s exposed.
    # Queued: layer 3's 3 s transfer runs from t = 0 to 3 (both windows end at t = 2), then layers 2 and 1
    # (0.1 s each) follow: the link ends at 3.2, backward at 2.0 -> 1.2 s exposed.
    o = tx.overlap([0.0, 1.0, 1.0], [0.1, 0.1, 3.0])
    assert o.exposed == pytest.approx(1.2)
    assert o.backward == pytest.approx(2.0)


def test_ps_eq_22_to_25_by_hand():
    # W = 2 GPUs, each on its own link (link_num 1), t = 10 us + bytes / 10 GB/s, host averages 10 GB/s.
    # Gradients [1 MB, 10 MB], window after layer 2's gradient 1 ms.
    # t_d2h = [0.11 ms, 1.01 ms]; t_CPU_a = W * bytes / 10 GB/s = [0.2 ms, 2 ms]; t_r = [0.31 ms, 3.01 ms] (eq. 25).
    # eq. 23: t_reduce = t_r^1 + (t_r^2 - min(t_r^2, 1 ms)) = 0.31 + 2.01 = 2.32 ms.
    # eq. 24: t_broadcast = (0.11 + 1.01) ms * 1 + (W - 1) * 10 us * 2 layers = 1.14 ms. eq. 22: 3.46 ms.
    ps = tx.ps_update([1e6, 1e7], [0.0, 1e-3], workers=2, link_num=1, curve=LINE, latency_s=10e-6,
                      host_reduce_gbps=10.0)
    assert ps.t_r == pytest.approx((0.31e-3, 3.01e-3))
    assert ps.t_reduce == pytest.approx(2.32e-3)
    assert ps.t_broadcast == pytest.approx(1.14e-3)
    assert ps.t_update == pytest.approx(3.46e-3)
    # Two GPUs sharing one link: every transfer takes twice as long on it (link_num = 2).
    shared = tx.ps_update([1e6, 1e7], [0.0, 1e-3], 2, 2, LINE, 10e-6, 10.0)
    assert shared.t_broadcast == pytest.approx(2 * 1.12e-3 + 0.02e-3)
