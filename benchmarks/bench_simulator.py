"""Simulator speed: time and op-events/s per W, and the fast/reference speed ratio.

Run from the repository root: ``python -m benchmarks.bench_simulator [--steps 1000 200] [--repeat 3]``.
An op-event is the completion of one chunk of one profile operation (a merged compute
chain counts as its operations), so events/s compare across engines.
The first call compiles (or loads numba's cache); it is timed separately as "warm-up".
With ``--repeat N`` each run is timed N times and the median is shown (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import time

from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.models.ps_des.simulator import simulate, simulate_reference_engine
from benchmarks.synthetic import inception_like, tiny_mlp

WORKERS = (1, 2, 4, 8, 16, 32)


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def curve(name: str, profile: Profile, network: NetworkModel, steps: int, repeat: int = 1) -> float:
    """Print one line per W (median of ``repeat`` timings); return the total time."""
    total = 0.0
    print(f"\n{name}: {len(profile.ops)} ops/step, {steps} steps per worker")
    print(f"{'W':>4} {'time s':>9} {'Mevents/s':>10} {'ex/s':>10}")
    for w in WORKERS:
        sim = SimulationSettings(workers=w, steps=steps, warmup_steps=min(50, steps // 5))
        runs = [_timed(simulate, profile, network, sim) for _ in range(repeat)]
        result, dt = runs[0][0], statistics.median(t for _, t in runs)
        total += dt
        print(f"{w:>4} {dt:>9.3f} {result.events / dt / 1e6:>10.2f} {result.throughput(sim.warmup_steps):>10.1f}")
    print(f"total {total:.2f} s")
    return total


def ratio(profile: Profile, network: NetworkModel) -> None:
    sim = SimulationSettings(workers=4, steps=5, warmup_steps=1)
    fast, t_fast = _timed(simulate, profile, network, sim)
    _, t_ref = _timed(simulate_reference_engine, profile, network, sim)
    print(f"\nfast/reference at W=4, 5 steps ({fast.events} events): "
          f"fast {t_fast * 1e3:.1f} ms, reference {t_ref * 1e3:.0f} ms, speed-up x{t_ref / t_fast:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 200])
    parser.add_argument("--repeat", type=int, default=1, help="time each run this many times (median)")
    args = parser.parse_args()
    inception = inception_like()
    mlp = tiny_mlp()
    gbit = NetworkModel(bandwidth_bps=1e9)
    _, warm = _timed(simulate, mlp, gbit, SimulationSettings(workers=2, steps=2, warmup_steps=0))
    print(f"warm-up (compile or load numba cache): {warm:.2f} s")
    for steps in args.steps:
        curve("Inception-scale synthetic step, 1 Gbit/s", inception, gbit, steps, args.repeat)
        curve("tiny MLP-shaped step, 100 Mbit/s", mlp, NetworkModel(bandwidth_bps=1e8), steps, args.repeat)
    ratio(inception_like(layers=40), gbit)


if __name__ == "__main__":
    main()
