"""The model's error on jobs its fit did not see, leave-one-job-out, shipped as interval widths.

    python -m benchmarks.model_error [--fit-steps 400] [--steps 1000] [--jobs 2] [--write [--out FOLDER]]

Over ``tests/data/ps-async/measured`` (real TensorFlow runs, 1 PS, W = 1..8, 100 Mbit/s): a *job* is
one model under one congestion control and queue (its repeated runs together: they are the same
job measured twice), five in all. For each job J, ``fit_contention`` fits (share_sigma,
multi_flow_goodput) to the other jobs' runs, with its default grid, and the default model with
those constants predicts J's runs (``--steps`` per worker, each run's congestion control and
queue, as ``benchmarks/accuracy.py``). Each (run, W) gives a residual r = measured / predicted - 1,
measured being the run's mean at that W.

Two outcomes: where the model reports two at W = 2 (drifting, the prediction; alternating, its
bound), each W = 2 run is measured against the one it showed, read from its step log
(``arrangements.alternated``: the share of one worker's step ends in the middle half of the
other's step, printed per run). Its residual joins that outcome's regime.

At W = 1 the residuals also hold the asynchronous one-worker runs of ``tests/data/tracing-cost``,
each against the profile taken right before it (``one_worker_extra``): how far a profile and
its own run differ, which one profile per job cannot show (docs/accuracy.md, what tracing costs).

Widths (``advisor/core/model_error.py``): per regime of W (1; 2; 3 and more) for the predicted
outcome, and W = 2 for the alternating one, the conformal quantile of |r| at 95 %, on both sides
(``--one-sided``: the quantiles of -r and r at 97.5 % each). Printed: every point; the widths;
and coverage of the measured values by (a) the simulation-only interval, (b) the widened
interval with the shipped widths (computed from these same residuals: in-sample), (c) the
widened interval with widths computed without the job's own residuals (cross-conformal:
honest). Coverage counts a point inside the interval of the outcome its run showed; "either"
counts it inside the interval of any outcome the prediction gives (the prediction's set).
``--write`` stores the widths and this validation in
``advisor/data/model_error/li2020-des+contention.json`` (``importers.model_error_file.write_model_error``;
``--out FOLDER`` elsewhere); each point keeps every outcome's simulated interval and probability,
for ``benchmarks/deadline_decisions.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from advisor.core.model_error import ModelError, measured_error
from advisor.core.models.ps_des.arrangements import ALTERNATING, MIDDLE_SHARE
from advisor.core.models.ps_des.fit_contention import DEFAULT_ETAS, DEFAULT_FIT_STEPS, DEFAULT_SIGMAS, FitCase, \
    Observation, fit_contention
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import SHIPPED, write_model_error
from benchmarks.accuracy import RUNS, Model, advice_request, measured, predict, runs_at
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.tracing_cost import one_worker_runs

MODEL = "li2020-des+contention"
LEVEL = 0.95
REGIMES: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, None))
OTHER_REGIMES: tuple[tuple[int, int | None], ...] = ((2, 2),)  # another outcome: only W = 2 has one


def jobs() -> dict[str, list[tuple[str, str, float]]]:
    """job -> its runs: one model under one congestion control and queue."""
    found: dict[str, list[tuple[str, str, float]]] = {}
    for name, cc, queue in RUNS:
        key = f"{name.split('/')[0]}/{name.split('/')[1].split('_')[0]}"
        found.setdefault(key, []).append((name, cc, queue))
    return found


def _profile(name: str, cc: str) -> Any:
    return load_profile(PS_ASYNC_DATA / "condensed" / cc / f"{name.split('/')[1].split('_')[0]}_bw100.json.gz")


def _case(name: str, cc: str, queue: float) -> FitCase:
    by_w = sorted(measured(PS_ASYNC_DATA / "measured" / name).items())
    observed = tuple(Observation(w, t) for w, ts in by_w for t in ts)
    return FitCase(name, _profile(name, cc), advice_request([1], 100e6, Model(), 1000, cc, queue), observed)


def fold(args: tuple[str, int, int, tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    """Fit without ``job``, predict its runs: one row per (run, W, outcome the run showed)."""
    job, fit_steps, steps, sigmas, etas = args
    everything = jobs()
    others = [_case(*run) for key, runs in everything.items() if key != job for run in runs]
    t0 = time.perf_counter()
    fit = fit_contention(others, sigmas=sigmas, etas=etas, steps=fit_steps)
    rows = []
    for name, cc, queue in everything[job]:
        reps = runs_at(PS_ASYNC_DATA / "measured" / name)
        model = Model(share_sigma=fit.share_sigma, multi_flow_goodput=fit.multi_flow_goodput)
        advice = predict(_profile(name, cc), sorted(reps), 100e6, model, steps, cc, queue)
        for w in sorted(reps):
            p = advice.point(w)
            outcomes = [{"name": o.name, "throughput": o.throughput, "sim_low": o.low, "sim_high": o.high,
                         "probability": o.probability, "known": o.known} for o in p.outcomes]
            for shown, values in _by_outcome(reps[w], [o["name"] for o in outcomes]).items():
                o = next(o for o in outcomes if o["name"] == shown)
                m = statistics.mean(t for t, _ in values)
                rows.append({"job": job, "run": name, "workers": w, "outcome": None if o is outcomes[0] else shown,
                             "middle_share": _mean_share(values), "measured": m, "predicted": o["throughput"],
                             "sim_low": o["sim_low"], "sim_high": o["sim_high"], "residual": m / o["throughput"] - 1,
                             "outcomes": outcomes})
    return {"job": job, "share_sigma": fit.share_sigma, "multi_flow_goodput": fit.multi_flow_goodput,
            "fit_seconds": time.perf_counter() - t0, "rows": rows}


def _by_outcome(reps: list[tuple[float, float | None]], names: list[str]) -> dict[str, list[tuple[float, float | None]]]:
    """The repetitions grouped by the outcome each showed: the alternating one when the model has
    it and the step log says so, else the prediction's (``names[0]``)."""
    grouped: dict[str, list[tuple[float, float | None]]] = {}
    for thr, share in reps:
        shown = ALTERNATING if ALTERNATING in names and share is not None and share >= MIDDLE_SHARE else names[0]
        grouped.setdefault(shown, []).append((thr, share))
    return grouped


def _mean_share(values: list[tuple[float, float | None]]) -> float | None:
    shares = [s for _, s in values if s is not None and not math.isnan(s)]
    return statistics.mean(shares) if shares else None


def coverage(rows: list[dict[str, Any]], error: ModelError | None, either: bool = False) -> float:
    """The share of rows inside the widened interval of the outcome the run showed; ``either``:
    inside that of any outcome the prediction gives at its W."""
    inside = 0
    for r in rows:
        if either:
            spans = [_widened(error, r["workers"], o["sim_low"], o["sim_high"], None if i == 0 else o["name"])
                     for i, o in enumerate(r["outcomes"])]
        else:
            spans = [_widened(error, r["workers"], r["sim_low"], r["sim_high"], r["outcome"])]
        inside += any(low <= r["measured"] <= high for low, high in spans)
    return inside / len(rows)


def _widened(error: ModelError | None, workers: int, low: float, high: float, outcome: str | None) -> tuple[float, float]:
    return (low, high) if error is None else error.widen(MODEL, workers, low, high, outcome)


SYMMETRIC = [True]  # --one-sided sets it False


def residuals(rows: list[dict[str, Any]]) -> list[tuple[int, float, str | None]]:
    """``(W, r, outcome)`` of each row, as ``measured_error`` and ``write_model_error`` take them."""
    return [(r["workers"], r["residual"], r["outcome"]) for r in rows]


def widths(rows: list[dict[str, Any]], extra: Sequence[tuple[int, float, str | None]] = ()) -> ModelError:
    """The regimes' widths from ``rows`` and ``extra`` residuals of runs outside the folds (the
    one-worker runs of ``tests/data/tracing-cost``): the predicted outcome's per REGIMES, each
    other outcome's per OTHER_REGIMES."""
    return measured_error(MODEL, LEVEL, residuals(rows) + list(extra), REGIMES, OTHER_REGIMES, SYMMETRIC[0])


def one_worker_extra(steps: int) -> tuple[list[dict[str, Any]], list[tuple[int, float, str | None]]]:
    """The one-worker runs of ``tests/data/tracing-cost`` (asynchronous), each predicted from the
    profile taken right before it: rows for the file and their (W, r, outcome) residuals. They
    show how far a profile and its own run differ, which one profile per job cannot
    (docs/accuracy.md); nothing is fitted at W = 1, so they join every fold's widths."""
    runs = one_worker_runs(synchronous=False, steps=steps)
    rows: list[dict[str, Any]] = [{"run": name, "workers": 1, "measured": m, "predicted": p, "residual": m / p - 1}
                                  for name, m, p in runs]
    return rows, [(1, m / p - 1, None) for _, m, p in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit-steps", type=int, default=DEFAULT_FIT_STEPS, help="fit steps per grid point")
    parser.add_argument("--steps", type=int, default=1000, help="steps per worker of the held-out predictions")
    parser.add_argument("--jobs", type=int, default=2, help="folds computed at once (processes)")
    parser.add_argument("--coarse", action="store_true", help="a 3 x 3 grid (a quick look, not the shipped data)")
    parser.add_argument("--one-sided", action="store_true", help="one-sided quantiles of -r and r, not of |r|")
    parser.add_argument("--rows", type=Path, help="reuse the points of an earlier --write (no fit; only the one-worker runs are simulated)")
    parser.add_argument("--write", action="store_true",
                        help=f"write {MODEL}.json in the shipped advisor/data/model_error (or --out)")
    parser.add_argument("--out", type=Path, default=SHIPPED, metavar="FOLDER",
                        help="the folder --write writes in (default: the shipped advisor/data/model_error)")
    args = parser.parse_args()
    SYMMETRIC[0] = not args.one_sided
    sigmas, etas = ((0.5, 1.0, 1.5), (0.75, 0.85, 0.95)) if args.coarse else (DEFAULT_SIGMAS, DEFAULT_ETAS)
    t0 = time.perf_counter()
    if args.rows:
        old = json.loads(args.rows.read_text())["validation"]
        folds = [{**f, "rows": [p for p in old["points"] if p["job"] == f["job"]]} for f in old["folds"]]
    else:
        tasks = [(job, args.fit_steps, args.steps, sigmas, etas) for job in jobs()]
        with ProcessPoolExecutor(args.jobs) as pool:
            folds = list(pool.map(fold, tasks))
    rows = [r for f in folds for r in f["rows"]]
    print(f"{len(folds)} folds, {len(rows)} points, {time.perf_counter() - t0:.0f} s")
    for f in folds:
        print(f"  without {f['job']:<18} fitted sigma {f['share_sigma']:g}, eta {f['multi_flow_goodput']:g} "
              f"({f['fit_seconds']:.0f} s)")
    print(f"{'run':<30} {'W':>2} {'outcome':>11} {'measured':>9} {'predicted':>9} {'sim interval':>19} {'r':>7}"
          f"  middle share")
    for r in rows:
        share = "" if r["middle_share"] is None else f"  {r['middle_share']:.2f}"
        print(f"{r['run']:<30} {r['workers']:>2} {r['outcome'] or '':>11} {r['measured']:>9.1f} {r['predicted']:>9.1f} "
              f"{r['sim_low']:>9.1f}-{r['sim_high']:<9.1f} {r['residual']:>+7.1%}{share}")
    extra_rows, extra = one_worker_extra(args.steps)
    for r in extra_rows:
        print(f"{r['run']:<30} {1:>2} {'':>11} {r['measured']:>9.1f} {r['predicted']:>9.1f} {'':>19} "
              f"{r['residual']:>+7.1%}  (a profile and its one-worker run, beside the folds)")
    error = widths(rows, extra)
    for g in error.regimes:
        print(f"{g.label:<16} n={g.n:<3} measured within -{g.down:.1%} / +{g.up:.1%} of the prediction"
              + ("" if g.exact else " (largest residual: too few for the conformal rank)"))
    held_out = {False: 0, True: 0}
    for f in folds:
        others = [r for g in folds if g is not f for r in g["rows"]]
        for either in held_out:
            held_out[either] += round(coverage(f["rows"], widths(others, extra), either) * len(f["rows"]))
    cov = {"simulation_only": coverage(rows, None), "shipped_in_sample": coverage(rows, error),
           "cross_conformal": held_out[False] / len(rows), "cross_conformal_either": held_out[True] / len(rows),
           "points": len(rows)}
    rel = [(r["sim_high"] - r["sim_low"]) / 2 / r["predicted"] for r in rows]
    spans = [_widened(error, r["workers"], r["sim_low"], r["sim_high"], r["outcome"]) for r in rows]
    wid = [(high - low) / 2 / r["predicted"] for r, (low, high) in zip(rows, spans)]
    print(f"coverage of the {len(rows)} measured points: simulation-only {cov['simulation_only']:.0%} "
          f"(median half-width {statistics.median(rel):.1%}), widened {cov['shipped_in_sample']:.0%} in-sample "
          f"(median half-width {statistics.median(wid):.1%}), cross-conformal {cov['cross_conformal']:.0%} in the "
          f"interval of the outcome the run showed, {cov['cross_conformal_either']:.0%} in either outcome's")
    if args.write:
        source = ("benchmarks/model_error.py: leave-one-job-out over tests/data/ps-async/measured "
                  f"({len(folds)} jobs, {len(rows)} points, fit grid {len(sigmas)}x{len(etas)} "
                  f"at {args.fit_steps} steps, predictions at {args.steps} steps; "
                  f"{'one-sided quantiles of -r, r' if args.one_sided else 'conformal quantile of |r|'})")
        source += "; W = 1 also the one-worker runs of tests/data/tracing-cost, each against its own profile"
        validation = {"coverage": cov, "folds": [{k: v for k, v in f.items() if k != "rows"} for f in folds],
                      "points": [_rounded(r) for r in rows], "one_worker_runs": [_rounded(r) for r in extra_rows]}
        _, out = write_model_error(MODEL, LEVEL, residuals(rows) + extra, REGIMES, source, validation,
                                   outcome_bounds=OTHER_REGIMES, symmetric=SYMMETRIC[0], folder=args.out)
        print(f"wrote {out}")


def _rounded(value: Any) -> Any:
    """Floats to 4 decimals, inside lists and mappings too (the file stays readable)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    main()
