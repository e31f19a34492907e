"""Pei et al.'s instruction-queue kernel model (eq. 6-19), checked by hand and by invariants."""

from __future__ import annotations

import math

import pytest

from advisor.core.pei.iteration import predict_iteration
from advisor.core.pei.kernels import Kernel, elementwise, gemm, kernel_time
from advisor.core.pei.layers import layer_time
from advisor.core.spec import GpuSpec, Layer, parse_spec

WARP = 32
P40 = GpuSpec.model_validate("P40")  # Table 2 latencies: L_S = 92, L_GS = 374 (global, taken for stores)


def test_p40_row_is_the_papers_table_2():
    assert (P40.shared_load_latency, P40.global_load_latency, P40.global_store_latency) == (92, 374, 374)
    assert (P40.sm_count, P40.sp_per_sm, P40.ldst_per_sm) == (30, 128, 32)


def test_storage_intensive_kernel_by_hand():
    # An element-wise kernel over 61,440 fp32 values, 1 read + 1 write + 1 op per value:
    #   blocks = 61440 / 1024 = 60; per block I = 1024 * 4 B / 128 B = 32, L = 32, M = 0, K = 1024/32 = 32.
    #   m = 128 SP / 32 LDST = 4; ceil(K/m) = 8 does not exceed I + L = 64 -> storage-intensive (eq. 8):
    #   C_b = I + M + L = 32 + 0 + 32 = 64; N_iter = ceil(60 / 30) = 2 (eq. 12);
    #   C_k = 64 * 2 + L_GS = 128 + 374 = 502 cycles (eq. 7); t = 502 / 1531 MHz = 327.9 ns (eq. 6).
    k = elementwise("relu", 61440, reads=1, writes=1, ops=1, data_bytes=4)
    assert (k.blocks, k.gl, k.sl, k.cp, k.gs) == (60, 32, 0, 32, 32)
    t = kernel_time(k, P40, memory_floor=False)
    assert not t.compute_intensive
    assert (t.n_iter, t.block_cycles, t.cycles) == (2, 64, 502)
    assert t.seconds == pytest.approx(502 / 1531e6)
    # With the device-memory floor: 61440 * 8 B / 346 GB/s = 1.4206 us > 327.9 ns, memory-bound.
    floored = kernel_time(k, P40)
    assert floored.memory_bound and floored.seconds == pytest.approx(61440 * 8 / 346e9)


def test_compute_intensive_kernel_by_hand():
    # 45 blocks, each I = 16 global loads, M = 64 shared loads, K = 1024 CP, L = 8 global stores.
    #   ceil(K/m) = ceil(1024/4) = 256 > M = 64 -> compute-intensive (eq. 14):
    #   C_b = I + 1 + L_S + ceil(K/m) + L = 16 + 1 + 92 + 256 + 8 = 373;
    #   N_iter = ceil(45 / 30) = 2; C_k = 373 * 2 + 374 = 1120 cycles; t = 1120 / 1531 MHz = 731.5 ns.
    k = Kernel("gemm-ish", blocks=45, gl=16, sl=64, cp=1024, gs=8, dram_bytes=0)
    t = kernel_time(k, P40)
    assert t.compute_intensive
    assert (t.n_iter, t.block_cycles, t.cycles) == (2, 373, 1120)
    assert t.seconds == pytest.approx(1120 / 1531e6)
    # DOP = 0.5 keeps 15 SMs busy: N_iter = ceil(45 / 15) = 3, C_k = 373 * 3 + 374 = 1493.
    assert kernel_time(k, P40, dop=0.5).cycles == 1493


def test_kepler_ratio_m_is_six():
    # K40: 192 SP / 32 LDST = 6. A block with K = 600 CP and M = 99: ceil(600/6) = 100 > 99, compute-intensive:
    # C_b = 0 + 1 + 26 + 100 + 0 = 127 with the K40's shared-load latency of 26 cycles.
    k40 = GpuSpec.model_validate("K40")
    t = kernel_time(Kernel("k", blocks=15, gl=0, sl=99, cp=600, gs=0, dram_bytes=0), k40)
    assert t.compute_intensive and t.block_cycles == 127 and t.cycles == 127 + 300


def test_gemm_search_never_beats_peak_and_counts_the_work():
    for m, n, k in ((4096, 4096, 4096), (64, 64, 100_352), (1568, 512, 4608), (256, 1000, 2048)):
        kern = gemm("g", m, n, k, 4, P40)
        t = kernel_time(kern, P40)
        peak = P40.sm_count * P40.sp_per_sm * 2 * P40.clock_mhz * 1e6  # FMA = 2 flops
        assert kern.flops == 2 * m * n * k
        assert kern.flops / t.seconds <= peak
        # The blocks cover the product: CP instructions x 32 lanes >= m * n * k multiply-adds.
        assert kern.cp * WARP * kern.blocks >= m * n * k


def test_big_square_gemm_runs_near_peak():
    # A 4096^3 SGEMM: the ideal queue should reach most of the P40's 11.76 TFLOP/s.
    kern = gemm("g", 4096, 4096, 4096, 4, P40)
    rate = kern.flops / kernel_time(kern, P40).seconds
    assert 0.8 * 11.76e12 < rate <= 11.76e12


def test_fft_is_considered_only_for_unit_stride():
    strided = Layer(type="conv", in_channels=3, out_channels=64, height=227, width=227, filter=11, stride=4)
    unit = Layer(type="conv", in_channels=192, out_channels=384, height=13, width=13, filter=3, padding="same")
    assert layer_time(strided, 0, 64, P40, 1.0, 32).forward.algorithm == "gemm"
    times = layer_time(unit, 1, 64, P40, 1.0, 32)
    assert times.forward.algorithm in ("gemm", "fft")
    # The faster one is kept: never slower than the GEMM alone.
    gemm_only = kernel_time(gemm("g", 64 * 13 * 13, 384, 192 * 9, 4, P40,
                                 dram_values=64 * 192 * 169 + 192 * 9 * 384 + 64 * 169 * 384), P40).seconds
    assert times.forward.seconds <= gemm_only + 1e-12


def test_first_weighted_layer_computes_no_input_gradient():
    conv = Layer(type="conv", in_channels=3, out_channels=64, height=224, width=224, filter=7, stride=2, padding="same")
    first = layer_time(conv, 0, 32, P40, 1.0, 32, needs_dx=False)
    later = layer_time(conv, 5, 32, P40, 1.0, 32, needs_dx=True)
    assert not any("dgrad" in k.kernel.name for k in first.backward.kernels)
    assert any("dgrad" in k.kernel.name for k in later.backward.kernels)
    assert first.backward.seconds < later.backward.seconds


@pytest.mark.parametrize("net", ["alexnet", "resnet50"])
@pytest.mark.parametrize("gpu", ["P40", "K40", "V100"])
def test_time_is_monotone_in_batch(net, gpu):
    from advisor.importers.spec_file import example_spec_path, load_spec

    spec = load_spec(example_spec_path(net))
    spec = spec.model_copy(update={"gpu": GpuSpec.model_validate(gpu)})
    totals = [predict_iteration(spec, 1, batch=b).total for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert all(a < b for a, b in zip(totals, totals[1:], strict=False)), totals
    # Per example the time does not grow with the batch (larger GEMMs fill the SMs better).
    per_example = [t / b for t, b in zip(totals, (1, 2, 4, 8, 16, 32, 64, 128), strict=True)]
    assert per_example[-1] <= per_example[0]


def test_dop_below_one_slows_every_layer():
    spec = parse_spec({"batch": 32, "gpu": "P40", "layers": [
        {"type": "conv", "in_channels": 64, "out_channels": 64, "height": 56, "width": 56, "filter": 3, "padding": "same"}]})
    ideal = predict_iteration(spec, 1, dop=1.0, memory_floor=False).total
    half = predict_iteration(spec, 1, dop=0.5, memory_floor=False).total
    assert half > 1.5 * ideal
    assert math.isfinite(half)
