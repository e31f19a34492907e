"""Accuracy against the real testbed: predicted vs measured throughput for W = 1..8.

    python -m benchmarks.accuracy [--steps 1000] [--measure-bandwidth] [--order fifo|recorded] [--param K=V ...]
        [--json out.json]

For every measured run in ``tests/data/ps-async/measured`` it predicts from the 1-worker trace of
the same model and congestion control (``condensed/<cc>/<model>_bw100``; the 20 ms-queue runs
use the cubic trace, since only the queue differs), prints predicted vs measured per W with the
error, the median and maximum |error|, and how much costlier per example the recommended W is
than the best measured W: with no constraint, and with deadlines that need a throughput W = 1
cannot give (half and 90 % of the way from the measured W = 1 throughput to the measured best),
where it also says whether the recommended W meets the deadline on the measurements. Then it
checks bandwidth transfer: a 100 Mbit/s trace predicting
50 Mbit/s against the 50 Mbit/s trace itself. With ``--measure-bandwidth`` the link rate is not
given (100 Mbit/s, the testbed's shaping) but measured from each trace (``core/bandwidth.py``),
as for a user who does not know it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from advisor.core.advice import Advice, AdviceRequest, Overhead, advise
from advisor.core.bandwidth import estimate_bandwidth
from advisor.core.models.ps_des.arrangements import MIDDLE_SHARE, middle_share
from advisor.core.models.ps_des.contention import MULTI_FLOW_GOODPUT, SHARE_SIGMA, CongestionControl, Contention
from advisor.core.models.ps_des.model import contention_choice
from advisor.core.cost import Constraints, CostError, Prices, cost_optimal, cost_per_example
from advisor.core.curve import CurveSettings
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, StreamOrder
from advisor.importers.loader import load_profile
from benchmarks.options import add_order_option, add_param_option, model_params
from benchmarks.paths import PS_ASYNC_DATA

PRICES = Prices(worker_per_hour=3.06, ps_per_hour=0.40)  # the example prices
DEADLINE_LEVELS = (0.5, 0.9)  # needed throughput: this far from measured T(1) to the measured best
EXAMPLES = 1e7  # the job's size for the deadline scenarios (any size gives the same choices)
# (measured file, the run's congestion control and bottleneck queue as its user would state them:
# tests/data/ps-async/README.md, tc tbf with a 100 ms queue, 20 ms for cubic_q20ms). The 20 ms-queue runs
# use the cubic trace: only the queue differs, and a 1-worker trace does not see it.
RUNS = [
    ("cubic/mlp_bw100.json", "cubic", 0.1),
    ("cubic/mlp_bw100_repeat.json", "cubic", 0.1),
    ("cubic/cnn_bw100.json", "cubic", 0.1),
    ("bbr/mlp_bw100.json", "bbr", 0.1),
    ("bbr/mlp_bw100_repeat.json", "bbr", 0.1),
    ("bbr/cnn_bw100.json", "bbr", 0.1),
    ("cubic_q20ms/mlp_bw100.json", "cubic", 0.02),
]


@dataclass(frozen=True)
class Model:
    """The product's default network model settings, as evaluated here."""

    goodput: float = 0.95  # tests/data/ps-async/README.md: TCP goodput about 95 % of the shaped rate
    overhead: Overhead = Overhead()
    win_bytes: float | None = None
    equal_shares: bool = False  # Li et al.'s model instead of the contention rules
    seed: int = 0
    share_sigma: float = SHARE_SIGMA
    multi_flow_goodput: float = MULTI_FLOW_GOODPUT
    order: StreamOrder = StreamOrder.FIFO  # the simulation's stream order (docs/accuracy.md, one worker)
    params: Mapping[str, Any] = field(default_factory=dict)  # more parameters of the contention model (--param)


def measured(path: Path) -> dict[int, list[float]]:
    by_w: dict[int, list[float]] = {}
    for r in json.loads(path.read_text())["results"]:
        by_w.setdefault(r["W"], []).append(r["thr_window"])
    return by_w


def runs_at(path: Path) -> dict[int, list[tuple[float, float | None]]]:
    """W -> each repetition's (throughput, middle share of its step log): the share is given at
    W = 2 only (``arrangements.middle_share``), after the run's own warm-up steps."""
    found: dict[int, list[tuple[float, float | None]]] = {}
    for r in json.loads(path.read_text())["results"]:
        share = None
        if r["W"] == 2 and len(r.get("step_log") or {}) == 2:
            a, b = ([step[1] for step in steps][r.get("skip", 0):] for steps in r["step_log"].values())
            share = middle_share(a, b)
        found.setdefault(r["W"], []).append((r["thr_window"], share))
    return found


def predict(profile: Profile, workers: list[int], bandwidth: float, model: Model, steps: int,
            cc: str = "unknown", queue_s: float | None = None) -> Advice:
    return advise(profile, advice_request(workers, bandwidth, model, steps, cc, queue_s))


def advice_request(workers: list[int], bandwidth: float, model: Model, steps: int,
                   cc: str = "unknown", queue_s: float | None = None) -> AdviceRequest:
    """How this benchmark asks for a prediction: the model's settings, the run's network."""
    choice = contention_choice(None if model.equal_shares else Contention(
        CongestionControl(cc), queue_s, model.share_sigma, model.multi_flow_goodput))
    return AdviceRequest(
        model=replace(choice, params={**choice.params, **model.params}) if not model.equal_shares else choice,
        network=NetworkModel(bandwidth_bps=bandwidth, win_bytes=model.win_bytes, order=model.order),
        curve=CurveSettings(workers=tuple(workers), steps=steps, warmup_steps=50, seed=model.seed),
        overhead=model.overhead,
        prices=PRICES,
        goodput=model.goodput,
    )


def evaluate_run(name: str, cc: str, queue_s: float | None, model: Model, steps: int,
                 measure_bandwidth: bool = False) -> dict:
    meas = measured(PS_ASYNC_DATA / "measured" / name)
    model_name = Path(name).name.split("_")[0]
    profile = load_profile(PS_ASYNC_DATA / "condensed" / cc / f"{model_name}_bw100.json.gz")
    workers = sorted(meas)
    bandwidth = estimate_bandwidth(profile).bps if measure_bandwidth else 100e6
    t0 = time.perf_counter()
    advice = predict(profile, workers, bandwidth, model, steps, cc, queue_s)
    seconds = time.perf_counter() - t0
    equal = predict(profile, workers, bandwidth, replace(model, equal_shares=True), steps)
    # whether each W = 2 repeat's step log alternated (``arrangements.alternated``; NaN: never)
    shown = [share is not None and share >= MIDDLE_SHARE
             for _, share in runs_at(PS_ASYNC_DATA / "measured" / name).get(2, [])]
    rows = []
    for w in workers:
        p = advice.point(w)
        m = statistics.mean(meas[w])
        # against the outcome each repeat showed: the alternating one where the model reports it and
        # the repeat's step log alternated, else the prediction (as benchmarks/model_error.py measures)
        refs = [p.alternating if w == 2 and p.alternating and a else p.throughput
                for a in (shown if w == 2 else [False] * len(meas[w]))]
        outcome_error = statistics.fmean(ref / x - 1 for ref, x in zip(refs, meas[w]))
        rows.append({"W": w, "measured": m, "measured_all": meas[w], "predicted": p.throughput,
                     "low": p.low, "high": p.high, "error": (p.throughput - m) / m, "alternating": p.alternating,
                     "outcome_error": outcome_error,
                     "equal_shares_error": (equal.point(w).throughput - m) / m,
                     "cynthia_error": (p.cynthia - m) / m, "phase_error": (p.phase_queueing - m) / m})
    costs = {w: cost_per_example(PRICES, w, 1, statistics.mean(meas[w])) for w in workers}
    best = min(costs, key=costs.__getitem__)
    rec, rec_equal = advice.recommended.workers, equal.recommended.workers
    means = {w: statistics.mean(meas[w]) for w in workers}
    return {"run": name, "rows": rows, "seconds": seconds, "bandwidth": bandwidth, "recommended": rec,
            "best_measured": best,
            "cost_excess": costs[rec] / costs[best] - 1, "equal_shares_cost_excess": costs[rec_equal] / costs[best] - 1,
            "deadlines": [deadline_case(level, means, [p.throughput for p in advice.points]) for level in DEADLINE_LEVELS]}


def deadline_case(level: float, measured_thr: dict[int, float], predicted_thr: list[float]) -> dict:
    """A deadline that needs ``level`` of the way from measured T(1) to the measured best: the W
    the prediction recommends for it, the cheapest W that meets it on the measurements, the
    cost excess of the former (measured costs), and by how much it misses the deadline if it does."""
    workers = sorted(measured_thr)
    needed = measured_thr[1] + level * (max(measured_thr.values()) - measured_thr[1])
    limits = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / needed / 3600)
    best = cost_optimal(workers, [measured_thr[w] for w in workers], PRICES, constraints=limits).workers
    try:
        rec: int | None = cost_optimal(workers, predicted_thr, PRICES, constraints=limits).workers
    except CostError:  # the prediction says no W meets it
        rec = None
    cost = {w: cost_per_example(PRICES, w, 1, measured_thr[w]) for w in workers}
    return {"level": level, "needed": needed, "recommended": rec, "best_measured": best,
            "cost_excess": None if rec is None else cost[rec] / cost[best] - 1,
            "shortfall": None if rec is None else max(0.0, 1 - measured_thr[rec] / needed)}


def bandwidth_transfer(cc: str, model_name: str, model: Model, steps: int) -> dict:
    """Predict 50 Mbit/s from the 100 Mbit/s trace and from the 50 Mbit/s trace itself."""
    workers = [1, 2, 3, 4, 6, 8]
    traces = PS_ASYNC_DATA / "condensed" / cc
    from100 = predict(load_profile(traces / f"{model_name}_bw100.json.gz"), workers, 50e6, model, steps, cc, 0.1)
    from50 = predict(load_profile(traces / f"{model_name}_bw50.json.gz"), workers, 50e6, model, steps, cc, 0.1)
    rows = [{"W": w, "from_100": from100.point(w).throughput, "from_50": from50.point(w).throughput} for w in workers]
    for r in rows:
        r["difference"] = r["from_100"] / r["from_50"] - 1
    return {"trace": f"{cc}/{model_name}", "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per worker (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    add_order_option(parser)
    parser.add_argument("--measure-bandwidth", action="store_true",
                        help="measure each trace's link rate instead of giving the testbed's 100 Mbit/s")
    add_param_option(parser)
    args = parser.parse_args()
    model = Model(seed=args.seed, order=StreamOrder(args.order), params=model_params(args.param))
    results = [evaluate_run(name, cc, queue, model, args.steps, args.measure_bandwidth) for name, cc, queue in RUNS]
    print("error: the product's model (contention rules); equal: Li et al.'s equal sharing; then two coarse baselines")
    print(f"{'run':<28} {'W':>2} {'measured':>17} {'predicted':>9} {'interval':>15} {'error':>7} {'equal':>7} "
          f"{'Cynthia':>8} {'phases':>7}  W=2 alternating")
    for res in results:
        for r in res["rows"]:
            shown = "/".join(f"{x:.0f}" for x in r["measured_all"])
            alt = f"  up to {r['alternating']:.0f}" if r["alternating"] else ""
            print(f"{res['run']:<28} {r['W']:>2} {shown:>17} {r['predicted']:>9.1f} "
                  f"{r['low']:>7.1f}-{r['high']:<7.1f} {r['error']:>+7.1%} {r['equal_shares_error']:>+7.1%} "
                  f"{r['cynthia_error']:>+8.1%} {r['phase_error']:>+7.1%}{alt}")
        print(f"{'':<28} recommended W={res['recommended']}, best measured W={res['best_measured']}, "
              f"cost excess {res['cost_excess']:+.1%} (equal shares {res['equal_shares_cost_excess']:+.1%})  "
              f"at {res['bandwidth'] / 1e6:.1f} Mbit/s ({res['seconds']:.1f} s)")
        for d in res["deadlines"]:
            got = "no W (predicted)" if d["recommended"] is None else (
                f"W={d['recommended']}, cost excess {d['cost_excess']:+.1%}, "
                + ("meets it" if not d["shortfall"] else f"misses it by {d['shortfall']:.1%}"))
            print(f"{'':<28} deadline needing {d['needed']:.0f} ex/s: best measured W={d['best_measured']}; "
                  f"recommended {got}")
    rows = [r for res in results for r in res["rows"]]
    for label, key in (("contention rules", "error"), ("equal shares", "equal_shares_error")):
        errors = [abs(r[key]) for r in rows]
        print(f"\n|error| over {len(errors)} points, {label}: median {statistics.median(errors):.1%}, max {max(errors):.1%}")
    plain = [abs(r["error"]) for r in rows if not r["alternating"]]
    flagged = [r for r in rows if r["alternating"]]
    inside = sum(1 for r in flagged if r["low"] * 0.95 <= r["measured"] <= r["alternating"] * 1.05)
    print(f"  contention rules, the {len(plain)} points without an alternating report: median "
          f"{statistics.median(plain):.1%}, max {max(plain):.1%}; the {len(flagged)} W=2 points with one: measured "
          f"inside [interval low, alternating] (+-5 %, the testbed's run-to-run spread) for {inside}")
    shown = [abs(r["outcome_error"]) for r in rows]
    print(f"  contention rules against the outcome each run's step log showed (a W=2 run that alternated against "
          f"the alternating outcome): median {statistics.median(shown):.1%}, max {max(shown):.1%}")
    print(f"cost excess of the recommended W: max {max(r['cost_excess'] for r in results):+.1%} "
          f"(equal shares {max(r['equal_shares_cost_excess'] for r in results):+.1%})")
    cases = [d for r in results for d in r["deadlines"]]
    chosen = [d for d in cases if d["recommended"] is not None]
    misses = [d for d in chosen if d["shortfall"]]
    print(f"with a deadline W=1 cannot meet ({len(cases)} cases): recommended = cheapest measured W in "
          f"{sum(1 for d in chosen if d['recommended'] == d['best_measured'])}, max cost excess "
          f"{max((d['cost_excess'] for d in chosen), default=0):+.1%}; deadline missed on the measurements in "
          f"{len(misses)} (worst by {max((d['shortfall'] for d in misses), default=0):.1%}); no W predicted in "
          f"{len(cases) - len(chosen)}")
    transfers = [bandwidth_transfer(cc, m, model, args.steps) for cc in ("cubic", "bbr") for m in ("mlp", "cnn")]
    print("\n50 Mbit/s predicted from the 100 Mbit/s trace vs from the 50 Mbit/s trace")
    for t in transfers:
        diffs = ", ".join(f"W={r['W']}: {r['from_100']:.0f}/{r['from_50']:.0f} ({r['difference']:+.1%})" for r in t["rows"])
        print(f"  {t['trace']:<10} {diffs}")
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "bandwidth_transfer": transfers}, indent=2))


if __name__ == "__main__":
    main()
