"""Accuracy against the real testbed: predicted vs measured throughput for W = 1..8.

    python -m benchmarks.accuracy [--steps 1000] [--json out.json]

For every measured run in ``../shared/data/measured`` it predicts from the 1-worker trace of
the same model and congestion control (``condensed/<cc>/<model>_bw100``; the 20 ms-queue runs
use the cubic trace, since only the queue differs), prints predicted vs measured per W with the
error, the median and maximum |error|, and how much costlier per example the recommended W is
than the best measured W. Then it checks bandwidth transfer: a 100 Mbit/s trace predicting
50 Mbit/s against the 50 Mbit/s trace itself. Needs ``../shared/data`` beside the repository.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from advisor.core.advice import Advice, AdviceRequest, Overhead, advise
from advisor.core.cost import Prices, cost_per_example
from advisor.core.predict import CurveSettings
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from advisor.core.simulator import simulate
from advisor.importers.loader import load_profile

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PRICES = Prices(worker_per_hour=3.06, ps_per_hour=0.40)  # the example prices
RUNS = [  # (measured file, trace congestion control)
    ("cubic/mlp_bw100.json", "cubic"),
    ("cubic/mlp_bw100_repeat.json", "cubic"),
    ("cubic/cnn_bw100.json", "cubic"),
    ("bbr/mlp_bw100.json", "bbr"),
    ("bbr/mlp_bw100_repeat.json", "bbr"),
    ("bbr/cnn_bw100.json", "bbr"),
    ("cubic_q20ms/mlp_bw100.json", "cubic"),
]


@dataclass(frozen=True)
class Model:
    """The product's default network model settings, as evaluated here."""

    goodput: float = 0.95  # shared/data README: TCP goodput about 95 % of the shaped rate
    overhead: Overhead = Overhead()
    win_bytes: float | None = None


def measured(path: Path) -> dict[int, list[float]]:
    by_w: dict[int, list[float]] = {}
    for r in json.loads(path.read_text())["results"]:
        by_w.setdefault(r["W"], []).append(r["thr_window"])
    return by_w


def predict(profile: Profile, workers: list[int], bandwidth: float, model: Model, steps: int) -> Advice:
    request = AdviceRequest(
        network=NetworkModel(bandwidth_bps=bandwidth, win_bytes=model.win_bytes),
        curve=CurveSettings(workers=tuple(workers), steps=steps, warmup_steps=50),
        overhead=model.overhead,
        prices=PRICES,
        goodput=model.goodput,
    )
    return advise(profile, request, simulate)


def evaluate_run(name: str, cc: str, model: Model, steps: int) -> dict:
    meas = measured(DATA / "measured" / name)
    model_name = Path(name).name.split("_")[0]
    profile = load_profile(DATA / "condensed" / cc / f"{model_name}_bw100.json.gz")
    workers = sorted(meas)
    t0 = time.perf_counter()
    advice = predict(profile, workers, 100e6, model, steps)
    rows = []
    for w in workers:
        p = advice.point(w)
        m = statistics.mean(meas[w])
        rows.append({"W": w, "measured": m, "measured_all": meas[w], "predicted": p.throughput,
                     "low": p.low, "high": p.high, "error": (p.throughput - m) / m,
                     "cynthia_error": (p.cynthia - m) / m, "phase_error": (p.phase_queueing - m) / m})
    costs = {w: cost_per_example(PRICES, w, 1, statistics.mean(meas[w])) for w in workers}
    best = min(costs, key=costs.__getitem__)
    rec = advice.recommended.workers
    return {"run": name, "rows": rows, "seconds": time.perf_counter() - t0, "recommended": rec,
            "best_measured": best, "cost_excess": costs[rec] / costs[best] - 1}


def bandwidth_transfer(cc: str, model_name: str, model: Model, steps: int) -> dict:
    """Predict 50 Mbit/s from the 100 Mbit/s trace and from the 50 Mbit/s trace itself."""
    workers = [1, 2, 3, 4, 6, 8]
    from100 = predict(load_profile(DATA / "condensed" / cc / f"{model_name}_bw100.json.gz"), workers, 50e6, model, steps)
    from50 = predict(load_profile(DATA / "condensed" / cc / f"{model_name}_bw50.json.gz"), workers, 50e6, model, steps)
    rows = [{"W": w, "from_100": from100.point(w).throughput, "from_50": from50.point(w).throughput} for w in workers]
    for r in rows:
        r["difference"] = r["from_100"] / r["from_50"] - 1
    return {"trace": f"{cc}/{model_name}", "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per worker (default 1000)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if not DATA.exists():
        raise SystemExit(f"needs the real traces at {DATA}")
    model = Model()
    results = [evaluate_run(name, cc, model, args.steps) for name, cc in RUNS]
    errors = []
    print(f"{'run':<28} {'W':>2} {'measured':>17} {'predicted':>9} {'interval':>15} {'error':>7} {'Cynthia':>8} {'phases':>7}")
    for res in results:
        for r in res["rows"]:
            errors.append(abs(r["error"]))
            shown = "/".join(f"{x:.0f}" for x in r["measured_all"])
            print(f"{res['run']:<28} {r['W']:>2} {shown:>17} {r['predicted']:>9.1f} "
                  f"{r['low']:>7.1f}-{r['high']:<7.1f} {r['error']:>+7.1%} {r['cynthia_error']:>+8.1%} {r['phase_error']:>+7.1%}")
        print(f"{'':<28} recommended W={res['recommended']}, best measured W={res['best_measured']}, "
              f"cost excess {res['cost_excess']:+.1%}  ({res['seconds']:.1f} s)")
    print(f"\n|error| over {len(errors)} points: median {statistics.median(errors):.1%}, max {max(errors):.1%}")
    transfers = [bandwidth_transfer(cc, m, model, args.steps) for cc in ("cubic", "bbr") for m in ("mlp", "cnn")]
    print("\n50 Mbit/s predicted from the 100 Mbit/s trace vs from the 50 Mbit/s trace")
    for t in transfers:
        diffs = ", ".join(f"W={r['W']}: {r['from_100']:.0f}/{r['from_50']:.0f} ({r['difference']:+.1%})" for r in t["rows"])
        print(f"  {t['trace']:<10} {diffs}")
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "bandwidth_transfer": transfers}, indent=2))


if __name__ == "__main__":
    main()
