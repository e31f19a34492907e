"""DTS eq. 1-5 computed by hand on small clusters whose memory forces the roles.

One workload for all five (round numbers so the arithmetic stays visible):
  batch 10, sample 0.25 GB, 2 clients, 5 batches per client, 2 epochs;
  DNN: 4 layers, 1 GFLOP/sample forward (client 0.6, server 0.4), backward = 2 x forward,
  weights 2 GB (client side 0.5, server side 1.5), 0.5 GB/sample at the split,
  memory 8 GB whole, 4 GB client side, 6 GB server side; 4 bytes per weight.
A compute term is batch x GFLOP/sample / GFLOP/s; a transfer is GB / min(the two links' GB/s).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from advisor.core.dts import Architecture, allocate, parse_spec, simulate
from advisor.core.dts import equations


def proc(name: str, gflop: float, bw: float, mem: float) -> dict[str, Any]:
    return {"name": name, "gflop_per_s": gflop, "bandwidth_gb_per_s": bw, "memory_gb": mem}


def spec(arch: str, processors: list[dict[str, Any]]) -> Any:
    return parse_spec({
        "cluster": {"processors": processors},
        "dnn": {"layers": 4, "gflop_per_sample": 1.0, "memory_gb": 8.0, "client_gflop_per_sample": 0.6,
                "server_gflop_per_sample": 0.4, "client_memory_gb": 4.0, "server_memory_gb": 6.0,
                "weights_gb": 2.0, "client_weights_gb": 0.5, "intermediate_gb": 0.5},
        "training": {"sample_gb": 0.25, "batch_size": 10, "batches_per_client": 5, "epochs": 2, "clients": 2},
        "architectures": [arch],
    })


def roles(result: Any) -> dict[str, str]:
    return {r.role: r.processor for r in result.roles}


def test_eq1_pipeline() -> None:
    # Each layer needs 8/4 = 2 GB: p1 (5 GB) holds 2 layers, p2 (4.5 GB) 2, p3 (3 GB) 1. Ranked by GFLOP/s,
    # p1 then p2 hold all 4; every other choice adds a slower stage or a boundary. All links 1 GB/s.
    #   stage 1 (p1, 2 layers): fetch 10 x 0.25 / 1 = 2.5; F = 10 x (1 x 2/4) / 100 = 0.05; B = 0.1;
    #                           write 2 x 10 x 0.5 / 1 = 10 (activations on, gradients back)
    #   stage 2 (p2, 2 layers): F = 5 / 50 = 0.1; B = 0.2
    #   T_PL = 2.5 + 0.05 + 0.1 + 10 + 0.1 + 0.2 = 12.95 s; epoch = 2 clients x 5 batches = 10 batches.
    s = spec("PL", [proc("p1", 100, 1, 5), proc("p2", 50, 1, 4.5), proc("p3", 10, 1, 3)])
    r = simulate(s, samples=2).results[0]
    assert r.seconds_per_batch == pytest.approx(12.95)
    assert r.batches_per_epoch == 10 and r.seconds_per_epoch == pytest.approx(129.5)
    assert r.seconds_total == pytest.approx(259.0)
    assert [(x.processor, x.layers) for x in r.roles] == [("p1", 2), ("p2", 2)]
    assert r.links == (("p1", "p2"),)


def test_eq2_federated() -> None:
    # Clients need the whole DNN (8 GB): only c1, c2 (10 GB); the server holds 2 x 2 GB weights: s (5 GB).
    #   c1: F = 10 x 1 / 100 = 0.1, B = 0.2 -> 0.3;   c2: F = 10 / 50 = 0.2, B = 0.4 -> 0.6   => max 0.6
    #   exchange (2 GB up, 2 GB down): c1 4 / min(1, 4) = 4; c2 4 / min(2, 4) = 2            => max 4
    #   T_avg: 2 models x 2 GB / 4 B = 1 GFLOP of additions / 20 GFLOP/s = 0.05
    #   T_FL = 0.6 + 4 + 0.05 = 4.65 s (the two maxima come from different clients)
    s = spec("FL", [proc("c1", 100, 1, 10), proc("c2", 50, 2, 10), proc("s", 20, 4, 5)])
    r = simulate(s, samples=2).results[0]
    assert r.seconds_per_batch == pytest.approx(4.65)
    assert r.batches_per_epoch == 5 and r.seconds_per_epoch == pytest.approx(23.25)
    got = roles(r)
    assert got["server"] == "s" and {got["client 1"], got["client 2"]} == {"c1", "c2"}


SPLIT = [proc("s", 200, 4, 10), proc("c1", 100, 1, 5), proc("c2", 50, 2, 5)]  # only s has the 6 GB server side


def test_eq3_split() -> None:
    #   fetch: c1 10 x 0.25 / 1 = 2.5; c2 2.5 / 2 = 1.25
    #   client F, B: c1 10 x 0.6 / 100 = 0.06, 0.12; c2 6 / 50 = 0.12, 0.24
    #   2 T_tr (10 x 0.5 GB each way): c1 10 / min(1, 4) = 10; c2 10 / min(2, 4) = 5
    #   server per client: F = 10 x 0.4 / 200 = 0.02, B = 0.04
    #   sum: c1 2.5 + 0.06 + 0.12 + 10 + 0.06 = 12.74; c2 1.25 + 0.12 + 0.24 + 5 + 0.06 = 6.67 -> 19.41
    #   (n - 1) T_trw: client-side weights 0.5 GB / min(1, 2) = 0.5
    #   T_SL = 19.91 s
    r = simulate(spec("SL", SPLIT), samples=2).results[0]
    assert r.seconds_per_batch == pytest.approx(19.91)
    assert r.seconds_per_epoch == pytest.approx(99.55)
    assert roles(r)["server"] == "s"
    assert {frozenset(link) for link in r.links} == {frozenset(p) for p in (("c1", "s"), ("c2", "s"), ("c1", "c2"))}


def test_eq4_parallel_split() -> None:
    #   max over clients of fetch + F + B + 2 T_tr: c1 2.5 + 0.06 + 0.12 + 10 = 12.68; c2 6.61 -> 12.68
    #   the server works through both clients' batches: 2 x (0.02 + 0.04) = 0.12
    #   T_PSL = 12.80 s
    r = simulate(spec("PSL", SPLIT), samples=2).results[0]
    assert r.seconds_per_batch == pytest.approx(12.80)


def test_eq5_federated_split() -> None:
    # Edge servers need the 6 GB server side: e1, e2 (7 GB). Clients need 4 GB: c1, c2 (5 GB) -- e1, e2
    # are taken. The server averages 1.5 GB models (2 x 1.5 = 3 GB): s (3.5 GB).
    #   path c1: fetch 2.5 + F 0.06 + B 0.12 + 2 T_tr 10 / min(1, 4) = 10 + edge F 10 x 0.4 / 200 = 0.02
    #            + edge B 0.04 + upload 1.5 / min(4, 4) = 0.375 -> 13.115
    #   path c2: 1.25 + 0.12 + 0.24 + 5 + 0.02 + 0.04 + 0.375 = 7.045
    #   T_avg: 2 x 1.5 GB / 4 B = 0.75 GFLOP / 20 = 0.0375
    #   T_FSL = 13.115 + 0.0375 = 13.1525 s
    s = spec("FSL", [proc("e1", 200, 4, 7), proc("e2", 200, 4, 7), proc("c1", 100, 1, 5), proc("c2", 50, 2, 5),
                     proc("s", 20, 4, 3.5)])
    r = simulate(s, samples=2).results[0]
    assert r.seconds_per_batch == pytest.approx(13.1525)
    got = roles(r)
    assert got["server"] == "s" and {got["client 1"], got["client 2"]} == {"c1", "c2"}
    assert {got["edge server 1"], got["edge server 2"]} == {"e1", "e2"}


def test_equations_take_their_maxima_and_sums_per_sample_row() -> None:
    # Two Monte-Carlo rows, two clients. FL row 0: max(1+2, 2+2) + max(3, 1) + 0.5 = 7.5;
    # row 1: max(1+1, 5+1) + max(1, 1) + 0 = 7.
    f = np.array([[1.0, 2.0], [1.0, 5.0]])
    b = np.array([[2.0, 2.0], [1.0, 1.0]])
    ex = np.array([[3.0, 1.0], [1.0, 1.0]])
    assert equations.fl(f, b, ex, np.array([0.5, 0.0])).tolist() == [7.5, 7.0]
    # PSL row 0: max(1+2+3, 2+2+1) = 6 + server (1 + 1) + (2 + 2) = 12
    one = np.ones((2, 2))
    assert equations.psl(np.zeros((2, 2)), f, b, ex, one, f * 2)[0] == pytest.approx(6 + 2 + 6)


def test_allocation_reports_its_paths() -> None:
    a = allocate(Architecture.FL, spec("FL", [proc("c1", 100, 1, 10), proc("c2", 50, 2, 10), proc("s", 20, 4, 5)]))
    assert a.paths == 1  # memory forces the only assignment
