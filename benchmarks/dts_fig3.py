"""DTS Fig. 3 trade-offs in numbers, on the scenario the tests state (tests/core/test_dts_fig3.py),
and how long ``advisor dts`` takes on the bundled example and on 200 processors.

    python -m benchmarks.dts_fig3

Prints epoch times per architecture for 3 and 5 clients (Fig. 3a/b), the change when processing
power or link rate is halved at 5 GB/s (Fig. 3c), and FSL against PSL at 1.25 and 5 GB/s over
network sizes (Fig. 3d). The figures in docs/models-dts.md come from this command.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from advisor.core.dts import Architecture, DtsSpec, parse_spec, simulate
from advisor.dts_cli import read_spec
from tests.core.test_dts_fig3 import PARALLEL, SEQUENTIAL, epochs

ARCHS = [a.value for a in Architecture]


def main() -> None:
    print("Fig. 3a/b: epoch seconds, 13K GFLOP/s, 5 GB/s")
    print(f"{'clients':>8} " + " ".join(f"{a:>8}" for a in ARCHS) + f" {'seq-par gap':>12}")
    for clients in (3, 5):
        t = epochs(clients)
        gap = min(t[a] for a in SEQUENTIAL) - min(t[a] for a in PARALLEL)
        print(f"{clients:>8} " + " ".join(f"{t[a]:>8.0f}" for a in ARCHS) + f" {gap:>12.0f}")
    print("\nFig. 3c: epoch time x when halving, at 5 GB/s (3 clients)")
    for size in (0.5, 1.0, 2.0):
        base, power, links = epochs(size=size), epochs(gflop_per_s=6500, size=size), epochs(bandwidth=2.5, size=size)
        print(f"  size x{size:<4} GFLOP/s/2: " + " ".join(f"{a} {power[a] / base[a]:.2f}" for a in ARCHS)
              + " | GB/s/2: " + " ".join(f"{a} {links[a] / base[a]:.2f}" for a in ARCHS))
    print("\nFig. 3d: FSL / PSL epoch time (3 clients)")
    for size in (0.25, 0.5, 1.0, 2.0):
        slow, fast = epochs(bandwidth=1.25, size=size), epochs(bandwidth=5.0, size=size)
        print(f"  size x{size:<4} 1.25 GB/s: {slow['FSL'] / slow['PSL']:.3f}   5 GB/s: {fast['FSL'] / fast['PSL']:.3f}")
    example = Path(__file__).resolve().parents[1] / "advisor" / "data" / "dts-example.yaml"
    spec = read_spec(example)
    start = time.perf_counter()
    result = simulate(spec, samples=1000, seed=0)
    took = time.perf_counter() - start
    print(f"\nadvisor/data/dts-example.yaml: {took * 1000:.0f} ms for 5 architectures, "
          f"{sum(r.paths for r in result.results)} allocation paths, 1000 Monte-Carlo draws each")
    big = _large_cluster()
    start = time.perf_counter()
    result = simulate(big, samples=1000, seed=0)
    took = time.perf_counter() - start
    print(f"200 mixed processors, 40 clients: {took:.1f} s for 5 architectures, "
          f"{sum(r.paths for r in result.results)} allocation paths")


def _large_cluster() -> DtsSpec:
    rng = random.Random(1)
    procs = [{"name": f"p{i}", "gflop_per_s": rng.choice([500, 1000, 8000, 13000]),
              "memory_gb": rng.choice([8, 16, 32]), "bandwidth_gb_per_s": rng.choice([1.25, 5, 12.5])}
             for i in range(200)]
    return parse_spec({
        "cluster": {"processors": procs, "power_fluctuation_pct": 10, "bandwidth_fluctuation_pct": 10},
        "dnn": {"layers": 10, "gflop_per_sample": 630, "client_gflop_per_sample": 441, "server_gflop_per_sample": 189,
                "weights_gb": 2.4, "intermediate_gb": 0.2, "memory_gb": 12, "client_memory_gb": 8,
                "server_memory_gb": 5},
        "training": {"sample_gb": 0.1, "batch_size": 20, "batches_per_client": 100, "epochs": 1, "clients": 40}})


if __name__ == "__main__":
    main()
