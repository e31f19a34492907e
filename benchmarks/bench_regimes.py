"""The PS simulator's regimes (docs/models-ps-regimes.md): a whole W = 1..32 curve per regime.

    python -m benchmarks.bench_regimes [--target 0.02] [--max-workers 32] [--repeat 1] [--no-data]

Rows, each the product's adaptive curve (each point's 95 % interval within +-target, from the
product's first look of 200 steps, warm-up 50, at most 4,000) with the contention rules, timed
on one core, with the throughput at W = 1, 8 and 32:

- ``async``: today's model (li2020-des+contention), the yardstick;
- ``sync R=W``: li2020-des-sync+contention, every worker's gradient in each update;
- ``sync 1 backup``: the same with backup_workers=1 (R = W - 1);
- ``hetero speed``: async with every other worker at half speed (1, 0.5, 1, 0.5, ...);
- ``hetero nic``: async with every fourth worker behind a NIC at 1/10 of the link rate;
- ``2 PS rr`` / ``2 PS greedy``: async on 2 PS from the one-PS profile (placement.py).

On the synthetic Inception-scale step (``benchmarks.synthetic.inception_like``, 2,600 ops, 95 MB
each way, 10 Gbit/s; a variable op is added per layer so the what-if can place it) and on the
real MLP and CNN traces of tests/data/ps-async (cubic, 100 Mbit/s; ``--no-data`` leaves them
out). The first call compiles or loads numba's cache and is timed apart.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from advisor.core.curve import CurvePoint, CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import Operation, Profile, Resource, StepTiming
from advisor.core.sim_types import NetworkModel
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.synthetic import inception_like


def with_variables(profile: Profile) -> Profile:
    """``profile`` with a ``VarHandleOp`` per pull (its variable) that the pull and its layer's
    update depend on (inception_like names them pull<i> and apply<i>), taking no time."""
    pulls = [op.name for op in profile.ops if op.resource is Resource.DOWNLINK]
    var = {name: f"var/{name.removeprefix('pull')}" for name in pulls}
    new = [Operation(name=v, resource=Resource.PS, ps=0, op_type="VarHandleOp") for v in var.values()]
    for op in profile.ops:
        extra: tuple[str, ...] = ()
        if op.name in var:
            extra = (var[op.name],)
        elif op.resource is Resource.PS and op.name.startswith("apply") and f"pull{op.name[5:]}" in var:
            extra = (var[f"pull{op.name[5:]}"],)
        new.append(op.model_copy(update={"deps": op.deps + extra}) if extra else op)
    zeros = (0.0,) * len(var)
    steps = tuple(StepTiming(index=s.index, start_us=zeros + s.start_us, duration_us=zeros + s.duration_us)
                  for s in profile.steps)  # fmt: skip
    return Profile(job=profile.job, ops=tuple(new), steps=steps)


def regimes(max_workers: int) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(row, model, model params, ModelInputs fields) per regime."""
    halves = tuple(1.0 if w % 2 == 0 else 0.5 for w in range(max_workers))
    return [
        ("async", "li2020-des+contention", {}, {}),
        ("sync R=W", "li2020-des-sync+contention", {}, {}),
        ("sync 1 backup", "li2020-des-sync+contention", {"backup_workers": 1}, {}),
        ("hetero speed", "li2020-des+contention", {}, {"worker_speeds": halves}),
        ("hetero nic", "li2020-des+contention", {}, {"nic_tenth": True}),
        ("2 PS rr", "li2020-des+contention", {}, {"parameter_servers": 2}),
        ("2 PS greedy", "li2020-des+contention", {"ps_placement": "greedy-bytes"}, {"parameter_servers": 2}),
    ]


def run(name: str, profile: Profile, bandwidth: float, cfg: CurveSettings, repeat: int) -> None:
    for row, model_name, params, fields in regimes(max(cfg.workers)):
        fields = dict(fields)
        if fields.pop("nic_tenth", False):
            slow = (bandwidth / 10 if w % 4 == 3 else bandwidth for w in range(max(cfg.workers)))
            fields["worker_bandwidths_bps"] = tuple(slow)
        inputs = ModelInputs(profile=profile, network=NetworkModel(bandwidth_bps=bandwidth), **fields)
        model = registry.get(model_name)
        p = registry.params_for(model, params)
        model.check(inputs, p)
        times, points = [], ()
        for _ in range(repeat):
            start = time.perf_counter()
            points = predict_curve(model, inputs, p, cfg)
            times.append(time.perf_counter() - start)
        _report(f"{name} {row}", points, times)


def _report(name: str, points: tuple[CurvePoint, ...], times: list[float]) -> None:
    by = {q.workers: q.throughput for q in points}
    events = sum(q.events for q in points)
    median = statistics.median(times)
    thr = "  ".join(f"W{w}={by[w]:.0f}" for w in (1, 8, 32) if w in by)
    widest = max(q.rel_halfwidth for q in points)
    print(f"{name:<36} {median:>7.2f} s  {events / 1e6:>6.0f} Mevents  widest +-{widest:.1%}  ex/s {thr}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--max-workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="time each curve this many times (median)")
    parser.add_argument("--no-data", action="store_true", help="skip the real traces")
    args = parser.parse_args()
    cfg = CurveSettings(workers=tuple(range(1, args.max_workers + 1)), warmup_steps=50,
                        target_rel_halfwidth=args.target, max_steps=4000)  # fmt: skip
    inception = with_variables(inception_like())
    t0 = time.perf_counter()
    warm = CurveSettings(workers=(2,), steps=60, warmup_steps=5)
    for _, model_name, params, _fields in regimes(2)[:2]:
        model = registry.get(model_name)
        predict_curve(model, ModelInputs(profile=inception, network=NetworkModel(bandwidth_bps=10e9)),
                      registry.params_for(model, params), warm)  # fmt: skip
    print(f"warm-up (compile or load numba cache): {time.perf_counter() - t0:.2f} s")
    print(f"curve W=1..{args.max_workers}, +-{args.target:.0%} adaptive, contention rules; "
          "time, events, widest interval, ex/s")
    run("inception-like 10Gb/s", inception, 10e9, cfg, args.repeat)
    if not args.no_data:
        from advisor.importers.loader import load_profile

        for trace in ("cubic/mlp_bw100", "cubic/cnn_bw100"):
            profile = load_profile(PS_ASYNC_DATA / "condensed" / f"{trace}.json.gz", bandwidth_bps=100e6)
            run(trace, profile, 100e6, cfg, args.repeat)


if __name__ == "__main__":
    main()
