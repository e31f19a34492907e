"""The ring all-reduce model's whole W = 1..32 curve: its time and the curve itself.

    python3 -m benchmarks.bench_ring [--target 0.02] [--repeat 3] [--max-workers 32] [--fixed]

For the synthetic Inception-scale step (benchmarks/synthetic.py, about 200 gradients, 10 Gbit/s
links) and for the real traces in tests/data/ps-async (at their 100 Mbit/s), it runs
both registered ring models (flat; hierarchical with 8 GPUs per node) for W = 1..32 with the
curve's adaptive stopping (``core.curve.run_point``: each point's 95 % interval within
+-target, 200 steps first, 50 warm-up) and prints the time of the whole curve (median of
``--repeat``), then the curve: throughput and interval per W. ``--fixed`` also times the
paper's fixed 1000 steps per point. One process, plain numpy (no compiled kernel).
"""

from __future__ import annotations

import argparse
import statistics
import time

from advisor.core.curve import CurvePoint, CurveSettings, run_point
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ring_allreduce import HIERARCHICAL, RING, HierarchicalParams, RingAllReduce, RingParams
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.synthetic import inception_like


def curve(model: RingAllReduce, inputs: ModelInputs, params: RingParams, cfg: CurveSettings) -> list[CurvePoint]:
    """One point per W, each from one run continued until its interval is narrow enough."""
    model.check(inputs, params)
    return [run_point(model.start(inputs, params, w, cfg.seed), w, cfg) for w in cfg.workers]


def timed(name: str, model: RingAllReduce, inputs: ModelInputs, params: RingParams, cfg: CurveSettings,
          repeat: int) -> list[CurvePoint]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        points = curve(model, inputs, params, cfg)
        times.append(time.perf_counter() - start)
    mode = f"+-{cfg.target_rel_halfwidth:.0%} adaptive" if cfg.target_rel_halfwidth else f"{cfg.steps} fixed steps"
    steps = sum(p.steps for p in points)
    widest = max(p.rel_halfwidth for p in points)
    print(f"{name:<48} {mode:<16} {statistics.median(times):6.3f} s (min {min(times):.3f}, n={repeat})  "
          f"{steps:>6} steps  widest interval +-{widest:.1%}")
    return points


def show(points: list[CurvePoint], bound: list[float]) -> None:
    for p, b in zip(points, bound, strict=True):
        print(f"      W={p.workers:<3} {p.throughput:10.1f} ex/s  [{p.low:10.1f}, {p.high:10.1f}]  "
              f"link bound {b:10.1f}  steps {p.steps}")


def bench(label: str, profile: Profile, network: NetworkModel, goodput: float, args: argparse.Namespace) -> None:
    workers = tuple(range(1, args.max_workers + 1))
    inputs = ModelInputs(profile=profile, network=network, goodput=goodput)
    adaptive = CurveSettings(workers=workers, warmup_steps=50, target_rel_halfwidth=args.target, min_steps=200,
                             max_steps=4000)
    fixed = CurveSettings(workers=workers, steps=1000, warmup_steps=50)
    for model, params in ((RING, RingParams()), (HIERARCHICAL, HierarchicalParams(gpus_per_node=8))):
        name = f"{label} {model.name}"
        points = timed(name, model, inputs, params, adaptive, args.repeat)
        if args.fixed:
            timed(name, model, inputs, params, fixed, args.repeat)
        show(points, [model.link_bound(inputs, params, w) for w in workers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--max-workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fixed", action="store_true", help="also time 1000 fixed steps per point")
    args = parser.parse_args()
    inception = inception_like()
    start = time.perf_counter()  # the first interval imports scipy.stats: not the model's time
    curve(RING, ModelInputs(profile=inception, network=NetworkModel(bandwidth_bps=10e9)), RingParams(),
          CurveSettings(workers=(1, 2), target_rel_halfwidth=args.target))
    print(f"warm-up (imports): {time.perf_counter() - start:.2f} s")
    grads = sum(o.bytes for o in inception.ops if o.resource.value == "uplink")
    bench(f"inception-like ({grads / 1e6:.0f} MB gradients, 10 Gbit/s)", inception,
          NetworkModel(bandwidth_bps=10e9), 1.0, args)
    from advisor.importers.loader import load_profile

    for trace in ("cubic/mlp_bw100", "cubic/cnn_bw100"):
        profile = load_profile(PS_ASYNC_DATA / "condensed" / f"{trace}.json.gz")
        bench(f"{trace} (100 Mbit/s x 0.95)", profile, NetworkModel(bandwidth_bps=100e6), 0.95, args)


if __name__ == "__main__":
    main()
