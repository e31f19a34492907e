"""DTS Fig. 3 trade-offs in numbers, on the scenario the tests state (tests/core/test_dts_fig3.py),
and how long ``advisor dts`` takes on the bundled example.

    python -m benchmarks.dts_fig3

Prints epoch times per architecture for 3 and 5 clients (Fig. 3a/b), the change when processing
power or link rate is halved at 5 GB/s (Fig. 3c), and FSL against PSL at 1.25 and 5 GB/s over
network sizes (Fig. 3d). The figures in docs/models-dts.md come from this command.
"""

from __future__ import annotations

import time
from pathlib import Path

from advisor.core.dts import Architecture, simulate
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


if __name__ == "__main__":
    main()
