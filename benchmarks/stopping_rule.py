"""Is an adaptive point's first look long enough? Coverage and error of the stopping rule.

    python -m benchmarks.stopping_rule [--seeds 12] [--first 200 100] [--jobs 2]

An adaptive curve point (``core/curve.py``) is first run to ``min_steps`` steps per worker, then
continued until its 95 % batch-means interval is within +-2 %. A shorter first look saves most
of a curve's simulation (most points stop at the first look), but only if what the rule then
reports is still true. This measures it, per first-look length, with the product's default
model on the synthetic Inception-scale step (10 Gbit/s) and on the eight real traces of
``tests/data/ps-async`` (at their links' measured 95 Mbit/s or 47.5 Mbit/s, their own
congestion control):

- **reference**: per (profile, W), the mean of long fixed runs (``--reference-steps`` per worker,
  50 warm-up) under seeds no adaptive run uses; their own spread is printed;
- for each first look and seed: the adaptive point's estimate, interval and steps;
- **coverage**: how often the interval holds the reference (a 95 % interval: about 19 in 20);
- **within 2 %**: how often the estimate is within +-2 % of the reference (the issue's
  accuracy target; a point whose interval is within +-2 % should almost always be);
- **events**: op-events simulated, all points together (the cost).

Whole curves are not needed: the W values are spread over 1..32 (``--workers``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.synthetic import inception_like

REFERENCE_SEED0 = 10_000  # reference runs use seeds from here on; adaptive runs use 0..seeds-1


@dataclass(frozen=True)
class Case:
    name: str
    profile: Profile
    network: NetworkModel
    congestion: str


def cases() -> list[Case]:
    out = [Case("inception-like 10G", inception_like(), NetworkModel(bandwidth_bps=10e9), "unknown")]
    from advisor.importers.loader import load_profile

    for cc in ("cubic", "bbr"):
        for job in ("mlp", "cnn"):
            for bw in (100, 50):
                path = PS_ASYNC_DATA / "condensed" / cc / f"{job}_bw{bw}.json.gz"
                profile = load_profile(path, bandwidth_bps=bw * 1e6)
                out.append(Case(f"{cc}/{job}_bw{bw}", profile, NetworkModel(bandwidth_bps=bw * 0.95e6), cc))
    return out


def _points(args: tuple[Case, CurveSettings]) -> list[tuple[int, float, float, float, int, int]]:
    case, cfg = args
    model = registry.get(registry.DEFAULT_MODEL)
    params = registry.params_for(model, {"congestion_control": case.congestion})
    curve = predict_curve(model, ModelInputs(profile=case.profile, network=case.network), params, cfg)
    return [(p.workers, p.throughput, p.low, p.high, p.steps, p.events) for p in curve]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12, help="adaptive runs per (profile, W, first look)")
    parser.add_argument("--first", type=int, nargs="+", default=[200, 100], help="first-look lengths to compare")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32])
    parser.add_argument("--reference-steps", type=int, default=3000)
    parser.add_argument("--reference-seeds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="only the cases whose name contains this")
    parser.add_argument("--detail", action="store_true", help="also every point: seed, error, interval, steps")
    args = parser.parse_args()
    chosen = [c for c in cases() if args.only is None or args.only in c.name]
    workers = tuple(sorted(set(args.workers)))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        ref_tasks = [(c, CurveSettings(workers=workers, steps=args.reference_steps, warmup_steps=50, seed=REFERENCE_SEED0 + s))
                     for c in chosen for s in range(args.reference_seeds)]  # fmt: skip
        ref_runs = list(pool.map(_points, ref_tasks))
        adaptive = [(c, CurveSettings(workers=workers, warmup_steps=50, target_rel_halfwidth=0.02, min_steps=first,
                                      max_steps=4000, seed=s))
                    for first in args.first for c in chosen for s in range(args.seeds)]  # fmt: skip
        runs = list(pool.map(_points, adaptive))
    print(f"({time.perf_counter() - t0:.0f} s; reference: {args.reference_seeds} runs of {args.reference_steps} steps "
          f"per (profile, W); {args.seeds} adaptive runs per (profile, W, first look))")
    reference: dict[tuple[str, int], list[float]] = {}
    for (case, _), pts in zip(ref_tasks, ref_runs):
        for w, mean, *_ in pts:
            reference.setdefault((case.name, w), []).append(mean)
    spread = max(abs(v[0] - v[-1]) / statistics.fmean(v) for v in reference.values())
    print(f"reference runs: the largest difference between a (profile, W)'s reference seeds is {spread:.2%}")
    truth = {key: statistics.fmean(means) for key, means in reference.items()}
    summary(args.first, chosen, workers, adaptive, runs, truth)
    if args.detail:
        for (case, cfg), pts in zip(adaptive, runs):
            for w, mean, low, high, steps, _ in pts:
                ref = truth[(case.name, w)]
                print(f"{case.name} W={w} first look {cfg.min_steps} seed {cfg.seed}: error {mean / ref - 1:+.2%}, "
                      f"interval +-{(high - low) / 2 / mean:.2%}, {steps} steps, "
                      f"{'covers' if low <= ref <= high else 'MISSES'}")


def summary(firsts: Sequence[int], chosen: Sequence[Case], workers: Sequence[int], adaptive: list, runs: list,
            truth: dict[tuple[str, int], float]) -> None:
    """Per first look: coverage of ``truth`` (the reference mean per (case, W)) and share within 2 %
    over all points, then per W and per case."""
    rows: dict[int, list[tuple[str, int, bool, bool, float, int]]] = {f: [] for f in firsts}
    for (case, cfg), pts in zip(adaptive, runs):
        for w, mean, low, high, steps, events in pts:
            ref = truth[(case.name, w)]
            rows[cfg.min_steps].append((case.name, w, low <= ref <= high, abs(mean / ref - 1) <= 0.02,
                                        abs(mean / ref - 1), events))
    print(f"{'first look':>10} {'points':>7} {'coverage':>9} {'within 2%':>10} {'worst error':>12} {'Mevents':>9}")
    for first, r in rows.items():
        print(f"{first:>10} {len(r):>7} {sum(x[2] for x in r) / len(r):>9.1%} {sum(x[3] for x in r) / len(r):>10.1%} "
              f"{max(x[4] for x in r):>12.2%} {sum(x[5] for x in r) / 1e6:>9.0f}")
    for first, r in rows.items():
        print(f"first look {first}, per W (coverage / within 2 %):")
        print("   " + "  ".join(f"W{w}: {_share(r, lambda x: x[1] == w, 2)}/{_share(r, lambda x: x[1] == w, 3)}"
                                for w in workers))
        print(f"first look {first}, per case (coverage / within 2 %):")
        print("   " + "  ".join(f"{c.name}: {_share(r, lambda x: x[0] == c.name, 2)}/{_share(r, lambda x: x[0] == c.name, 3)}"
                                for c in chosen))


def _share(rows: list, keep, column: int) -> str:  # type: ignore[no-untyped-def]
    picked = [x[column] for x in rows if keep(x)]
    return f"{sum(picked) / len(picked):.0%}" if picked else "-"


if __name__ == "__main__":
    main()
