"""The issue's speed target, measured on the product path: a whole W = 1..32 curve.

    python -m benchmarks.bench_curve [--target 0.02] [--repeat 3] [--jobs 1] [--model both] [--coverage]

Each curve is timed with the product's default model (the contention rules of
``advisor/core/models/ps_des/contention.py``, 5 ms request queue as for BBR or an unknown congestion control)
and with Li et al.'s equal sharing. For the synthetic Inception-scale step (about 200 tensors,
2,600 ops per step) it predicts W = 1..32 with adaptive stopping (each point's 95 % interval within +-target), then with the
paper's fixed 1000 steps per worker, and prints the time (median and fastest of ``--repeat``
runs), op-events/s, and the widest interval; ``--verbose`` adds steps and interval per W.
It does the same for the real traces in tests/data/ps-async. One process, one
core (numba's compiled kernel; the first call loads its cache, timed apart). ``--jobs N``
also times the curve split over N processes (points interleaved): an addition only, the
target is one core, and on a shared machine the gain is whatever the other cores spare.
``--coverage`` then checks the adaptive intervals of the Inception-scale curve at W = 1, 2, 4,
8, 16, 32: each against the mean of an independent fixed 2,000-step run (another seed), which
a 95 % interval should cover about 19 times in 20.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from advisor.core.curve import CurvePoint, CurveSettings, predict_curve
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ps_des.simulator import simulate
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.synthetic import inception_like


def run(name: str, profile: Profile, network: NetworkModel, cfg: CurveSettings, repeat: int, verbose: bool) -> float:
    """Time the curve ``repeat`` times; print one line (median time); return the median."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        points = _curve((profile, network, cfg))
        times.append(time.perf_counter() - start)
    _report(name, cfg, points, times, verbose)
    return statistics.median(times)


def run_parallel(name: str, profile: Profile, network: NetworkModel, cfg: CurveSettings, jobs: int) -> float:
    """The same curve over ``jobs`` processes, each taking every jobs-th W (same results)."""
    parts = [CurveSettings(**{**_fields(cfg), "workers": cfg.workers[i::jobs]}) for i in range(jobs)]
    start = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        done = list(pool.map(_curve, [(profile, network, part) for part in parts]))
    elapsed = time.perf_counter() - start
    points = sorted((p for part in done for p in part), key=lambda p: p.workers)
    _report(f"{name} ({jobs} processes)", cfg, tuple(points), [elapsed], False)
    return elapsed


def coverage(name: str, profile: Profile, network: NetworkModel, cfg: CurveSettings) -> None:
    """Do the adaptive intervals cover the mean of an independent, longer run?"""
    checked = [w for w in (1, 2, 4, 8, 16, 32) if w in cfg.workers]
    mine = {p.workers: p for p in _curve((profile, network, replace(cfg, workers=tuple(checked))))}
    other = replace(cfg, workers=tuple(checked), seed=cfg.seed + 1, target_rel_halfwidth=None, steps=2000)
    covered = 0
    for q in _curve((profile, network, other)):
        p = mine[q.workers]
        inside = p.low <= q.throughput <= p.high
        covered += inside
        print(f"      W={q.workers:<3} interval {p.low:9.1f}-{p.high:<9.1f} independent 2,000 steps {q.throughput:9.1f}"
              f"  {'covered' if inside else 'NOT covered'}")
    print(f"{name:<45} coverage: {covered} of {len(checked)} intervals cover the independent run's mean")


def _curve(args: tuple[Profile, NetworkModel, CurveSettings]) -> tuple[CurvePoint, ...]:
    """The curve of the equal-shares PS simulation on ``network`` as given: the contention rules,
    when wanted, are already in it (``MODELS`` below), so the model adds nothing of its own."""
    profile, network, cfg = args
    model = registry.get("li2020-des")
    return predict_curve(model, ModelInputs(profile=profile, network=network), registry.params_for(model), cfg)


def _fields(cfg: CurveSettings) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def _report(name: str, cfg: CurveSettings, points: tuple[CurvePoint, ...], times: list[float], verbose: bool) -> None:
    events = sum(p.events for p in points)
    widest = max(p.rel_halfwidth for p in points)
    median = statistics.median(times)
    mode = f"+-{cfg.target_rel_halfwidth:.0%} adaptive" if cfg.target_rel_halfwidth else f"{cfg.steps} fixed steps"
    spread = f" (min {min(times):.2f}, n={len(times)})" if len(times) > 1 else ""
    print(f"{name:<45} {mode:<18} {median:>7.2f} s{spread}  {events / median / 1e6:>6.2f} Mevents/s  "
          f"{events / 1e6:>6.0f} Mevents  widest interval +-{widest:.1%}")  # fmt: skip
    if verbose:
        print("      " + "  ".join(f"W{p.workers}:{p.steps}st/{p.rel_halfwidth:.1%}" for p in points))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.02)
    product_min = CurveSettings(workers=(1,)).min_steps
    parser.add_argument("--min-steps", type=int, default=product_min,
                        help=f"steps of an adaptive point's first look (default {product_min}, as advisor predict)")
    parser.add_argument("--coverage", action="store_true",
                        help="check the adaptive intervals against independent 2,000-step runs")
    parser.add_argument("--max-workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="time each curve this many times (median)")
    parser.add_argument("--jobs", type=int, default=1, help="also time the adaptive curve over this many processes")
    parser.add_argument("--no-fixed", action="store_true", help="skip the fixed-steps curves")
    parser.add_argument("--verbose", action="store_true", help="steps and interval per point")
    parser.add_argument("--model", choices=["contention", "equal", "both"], default="both",
                        help="the product's default (contention rules), Li et al.'s equal sharing, or both")
    args = parser.parse_args()
    workers = tuple(range(1, args.max_workers + 1))
    contention = registry.get("li2020-des+contention")
    models = {"contention": lambda n: contention.network(  # type: ignore[attr-defined]
                  ModelInputs(network=n), registry.params_for(contention)), "equal": lambda n: n}
    chosen = [m for m in models if args.model in (m, "both")]
    inception = inception_like()
    t0 = time.perf_counter()
    for m in chosen:
        simulate(inception, models[m](NetworkModel(bandwidth_bps=10e9)), SimulationSettings(workers=2, steps=2, warmup_steps=0))
    print(f"warm-up (compile or load numba cache): {time.perf_counter() - t0:.2f} s")
    print(f"inception-like step: {len(inception.ops)} ops, {sum(o.bytes for o in inception.ops) / 2e6:.0f} MB each way, 10 Gbit/s")
    adaptive = CurveSettings(workers=workers, warmup_steps=50, target_rel_halfwidth=args.target,
                             min_steps=args.min_steps, max_steps=4000)  # fmt: skip
    fixed = CurveSettings(workers=workers, steps=1000, warmup_steps=50)
    for m in chosen:
        net = models[m](NetworkModel(bandwidth_bps=10e9))
        name = f"inception-like W=1..{args.max_workers} {m}"
        run(name, inception, net, adaptive, args.repeat, args.verbose)
        if args.jobs > 1:
            run_parallel(name, inception, net, adaptive, args.jobs)
        if not args.no_fixed:
            run(name, inception, net, fixed, args.repeat, args.verbose)
        if args.coverage:
            coverage(name, inception, net, adaptive)
    from advisor.importers.loader import load_profile

    for trace in ("cubic/mlp_bw100", "cubic/cnn_bw100"):
        profile = load_profile(PS_ASYNC_DATA / "condensed" / f"{trace}.json.gz", bandwidth_bps=100e6)
        for m in chosen:
            net100 = models[m](NetworkModel(bandwidth_bps=95e6))
            name = f"{trace} W=1..{args.max_workers} {m}"
            run(name, profile, net100, adaptive, args.repeat, args.verbose)
            if not args.no_fixed:
                run(name, profile, net100, fixed, args.repeat, args.verbose)


if __name__ == "__main__":
    main()
