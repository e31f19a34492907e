"""The issue's speed target, measured on the product path: a whole W = 1..32 curve.

    python -m benchmarks.bench_curve [--target 0.02] [--min-steps 100]

For the synthetic Inception-scale step (about 200 tensors, 2,600 ops per step) it predicts
W = 1..32 with adaptive stopping (each point's 95 % interval within +-target), then with the
paper's fixed 1000 steps per worker, and prints the time, steps used and interval width per W
and in total. It does the same for the real traces in ../shared/data when they are there.
One process, one core (numba's compiled kernel; the first call loads its cache, timed apart).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from advisor.core.predict import CurveSettings, predict_curve
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.simulator import simulate
from benchmarks.synthetic import inception_like

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def run(name: str, profile: Profile, network: NetworkModel, cfg: CurveSettings, verbose: bool) -> float:
    start = time.perf_counter()
    points = predict_curve(profile, network, cfg, simulate)
    total = time.perf_counter() - start
    events = sum(p.events for p in points)
    widest = max(p.rel_halfwidth for p in points)
    mode = f"+-{cfg.target_rel_halfwidth:.0%} adaptive" if cfg.target_rel_halfwidth else f"{cfg.steps} fixed steps"
    print(f"{name:<34} {mode:<18} {total:>7.2f} s  {events / total / 1e6:>6.2f} Mevents/s  "
          f"widest interval +-{widest:.1%}")
    if verbose:
        print("      " + "  ".join(f"W{p.workers}:{p.steps}st/{p.rel_halfwidth:.1%}" for p in points))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--min-steps", type=int, default=100)
    parser.add_argument("--max-workers", type=int, default=32)
    parser.add_argument("--verbose", action="store_true", help="steps and interval per point")
    args = parser.parse_args()
    workers = tuple(range(1, args.max_workers + 1))
    inception = inception_like()
    net = NetworkModel(bandwidth_bps=10e9)
    t0 = time.perf_counter()
    simulate(inception, net, SimulationSettings(workers=1, steps=2, warmup_steps=0))
    print(f"warm-up (compile or load numba cache): {time.perf_counter() - t0:.2f} s")
    print(f"inception-like step: {len(inception.ops)} ops, {sum(o.bytes for o in inception.ops) / 2e6:.0f} MB each way, 10 Gbit/s")
    adaptive = CurveSettings(workers=workers, warmup_steps=50, target_rel_halfwidth=args.target,
                             min_steps=args.min_steps, max_steps=4000)
    run("inception-like W=1..%d" % args.max_workers, inception, net, adaptive, args.verbose)
    run("inception-like W=1..%d" % args.max_workers, inception, net,
        CurveSettings(workers=workers, steps=1000, warmup_steps=50), args.verbose)
    if DATA.exists():
        from advisor.importers.loader import load_profile

        for trace in ("cubic/mlp_bw100", "cubic/cnn_bw100"):
            profile = load_profile(DATA / "condensed" / f"{trace}.json.gz", bandwidth_bps=100e6)
            net100 = NetworkModel(bandwidth_bps=95e6)
            run(f"{trace} W=1..{args.max_workers}", profile, net100, adaptive, args.verbose)
            run(f"{trace} W=1..{args.max_workers}", profile, net100,
                CurveSettings(workers=workers, steps=1000, warmup_steps=50), args.verbose)


if __name__ == "__main__":
    main()
