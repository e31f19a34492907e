"""Pei et al. 2019 Tables 6 and 8 against the pei2019 model, with the assumptions the paper leaves out.

Assumptions (stated because the paper does not give them):
- Table 6 batches: AlexNet 256, ResNet-50 32, the batches of the paper's Fig. 7.
- Networks: AlexNet as tf_cnn_benchmarks builds it, ResNet-50 v1 (advisor/data/*.spec.yaml).
- Table 8: global batch 128 split over the GPUs (iteration time halves with 2 GPUs in the table, so
  the global batch is fixed); links: four independent PCIe 3.0 x16 buses (the paper's testbed),
  12 GB/s each (bandwidthTest-class pinned copies), 10 us per transfer, host averaging at 10 GB/s.
Cells the model misses are marked xfail (strict) with the measured figure, so that they stay
visible and a change that fixes them is noticed; nothing was tuned to the tables.
"""

from __future__ import annotations

import pytest

from benchmarks.pei_tables import TABLE6, TABLE8, table6, table8

# Cells outside 20 %: (network, gpu, column) -> why (model figure from python3 -m benchmarks.pei_tables).
TABLE6_MISSES = {
    ("resnet50", "P40", 0): "+47 %: batch norm, ReLU and residual sums are memory-bound on the P40's 346 GB/s",
    ("resnet50", "P40", 1): "+41 %: as the forward pass; the paper's queue has no memory floor",
    ("alexnet", "K40", 1): "-20.5 %: forward-backward is 2.8x the forward here (no input gradient for conv1, FFT "
                            "backward), 3.3x in the table",
}


@pytest.fixture(scope="module")
def t6():
    return table6()


@pytest.fixture(scope="module")
def t8():
    return table8()


@pytest.mark.parametrize("net", ["alexnet", "resnet50"])
@pytest.mark.parametrize("gpu", ["P40", "K80", "K40"])
@pytest.mark.parametrize("column", [0, 1], ids=["forward", "forward-backward"])
def test_table6_within_20_percent(t6, net, gpu, column, request):
    why = TABLE6_MISSES.get((net, gpu, column))
    if why:
        request.applymarker(pytest.mark.xfail(strict=True, reason=why))
    assert t6[(net, gpu)][column] == pytest.approx(TABLE6[(net, gpu)][column], rel=0.20)


@pytest.mark.parametrize("column", [0, 1], ids=["forward", "forward-backward"])
@pytest.mark.parametrize("net", ["alexnet", "resnet50"])
def test_table6_p40_is_fastest(t6, net, column):
    p40 = t6[(net, "P40")][column]
    assert 1.5 * p40 < t6[(net, "K80")][column] and 1.5 * p40 < t6[(net, "K40")][column]


@pytest.mark.parametrize("column", [0, 1], ids=["forward", "forward-backward"])
def test_table6_order_resnet50(t6, column):
    mine = sorted(("P40", "K80", "K40"), key=lambda g: t6[("resnet50", g)][column])
    paper = sorted(("P40", "K80", "K40"), key=lambda g: TABLE6[("resnet50", g)][column])
    assert mine == paper == ["P40", "K40", "K80"]


@pytest.mark.xfail(strict=True, reason="K80 and K40 are 1-3 % apart in the table and 1-2 % apart here, in the "
                   "other order: the model gives the K40 (2880 cores at 745 MHz) a slight edge over one K80 GK210 "
                   "(2496 at 875 MHz) on AlexNet's FFT and memory-bound kernels")
@pytest.mark.parametrize("column", [0, 1], ids=["forward", "forward-backward"])
def test_table6_order_alexnet(t6, column):
    mine = sorted(("P40", "K80", "K40"), key=lambda g: t6[("alexnet", g)][column])
    paper = sorted(("P40", "K80", "K40"), key=lambda g: TABLE6[("alexnet", g)][column])
    assert mine == paper


TABLE8_MISSES = {
    ("ps", 0): "-25 %: 0.54 s at a global batch of 128; 0.728 s would need a batch near 170, which the paper never names",
    ("nccl", 0): "-25 %: as PS mode (the same single-GPU iteration)",
    ("ps", 2): "-6 %: 3.60x; broadcasting 102 MB of ResNet-50 weights over 12 GB/s PCIe costs 8.5 ms per iteration",
}


@pytest.mark.parametrize("mode", ["ps", "nccl"])
@pytest.mark.parametrize("column", [0, 1, 2], ids=["1-gpu-seconds", "speedup-2", "speedup-4"])
def test_table8_within_5_percent(t8, mode, column, request):
    why = TABLE8_MISSES.get((mode, column))
    if why:
        request.applymarker(pytest.mark.xfail(strict=True, reason=why))
    assert t8[mode][column] == pytest.approx(TABLE8[mode][column], rel=0.05)


def test_table8_shape(t8):
    # Invariants that hold whatever the link figures: sub-linear speed-up, NCCL's ring beats PS's
    # broadcast at 4 GPUs on separate links, the same single-GPU time in both modes.
    for mode in ("ps", "nccl"):
        _, s2, s4 = t8[mode]
        assert 1 < s2 < 2 and s2 < s4 < 4
    assert t8["ps"][0] == pytest.approx(t8["nccl"][0])
