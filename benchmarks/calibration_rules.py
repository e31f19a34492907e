"""Which update rule lets one observation correct a curve best? Measured on the repository's real curves.

    python -m benchmarks.calibration_rules [--quick] [--sync] [--noise 0.03] [--json out.json]

For every real curve (``benchmarks/real_curves.py``: 7 asynchronous-PS runs, 3 PS-trace runs, 8
all-reduce runs) the job is predicted as its owner would ask (the measured link rate and
congestion control), and also with one thing stated wrong: the bandwidth 2x too high for every
curve; for the PS curves another cluster's contention constants (share_sigma 0, multi_flow_goodput
1.0: even, lossless sharing); for the all-reduce curves a ring latency 10x too high. Then for each
measured W = k in turn, the job is "observed" at k (the measured mean, with ``--noise`` as its
relative noise) and each rule (``core/online_calibration.py``) updates the curve. Scored at the
*other* measured W (what the observation did not show): the median and 90th percentile of
|predicted / measured - 1|, how often the interval holds the measured mean, and the interval's
median relative width; at k itself, the interval's median width (it should approach the
observation's own noise, 2 x 1.96 x noise). ``none`` is the prediction before any observation.
The refit-condition rule is shown at three correlations rho between neighbouring W, the posterior
at four prior probabilities that the stated values are wrong (``MISSTATED``, the default, then
0.1, 0.03 and 1: the values always uncertain) and, with the values always uncertain, at a
narrower prior around them (tau 0.25).

The ``refit`` and ``none`` intervals are the grid curve's own (its simulation interval widened by
the model's measured error, as ``advise`` does), so no curve is predicted beyond the grid, which
every rule shares: one grid per curve and statement, kept for every k and rule.

``--sync`` scores the synchronous curves (``tests/data/ps-sync``, ``li2020-des-sync+contention``)
instead, with the PS curves' two wrong statements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from advisor.core.advice import AdviceRequest
from advisor.core.online_calibration import MISSTATED, Grid, Observation, Rule, calibrate
from advisor.importers.model_error_file import load_model_errors
from benchmarks.real_curves import RING_MODEL, RealCurve, every_curve

RHOS = (0.5, 0.7, 0.9)


@dataclass(frozen=True)
class Statement:
    """How the job's owner states it: as measured, or with one thing wrong."""

    name: str
    bandwidth_factor: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)


def statements(curve: RealCurve, quick: bool) -> list[Statement]:
    wrong = [Statement("bandwidth 2x", 2.0)]
    if curve.model == RING_MODEL:
        from advisor.core.models.ring_allreduce.model import framework_of

        # 10x the round latency of the profile's framework (gloo 0.3 ms, TF's gRPC ring 2.5 ms)
        wrong.append(Statement("latency 10x", params={"latency_s": 10 * framework_of(curve.load()).latency_s}))
    else:
        wrong.append(Statement("other constants", params={"share_sigma": 0.0, "multi_flow_goodput": 1.0}))
    return [Statement("as stated")] + ([] if quick else wrong)


@dataclass
class Scores:
    errors: list[float] = field(default_factory=list)
    covered: list[bool] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)
    widths_at_k: list[float] = field(default_factory=list)

    def add(self, table: dict[int, tuple[float, float, float]], truth: dict[int, float], k: int) -> None:
        for w, measured in truth.items():
            point, low, high = table[w]
            if w == k:
                self.widths_at_k.append((high - low) / point)
                continue
            self.errors.append(abs(point / measured - 1))
            self.covered.append(low <= measured <= high)
            self.widths.append((high - low) / point)

    def row(self) -> dict[str, float]:
        return {"median_error": statistics.median(self.errors), "p90_error": _q(self.errors, 0.9),
                "coverage": sum(self.covered) / len(self.covered), "width": statistics.median(self.widths),
                "width_at_k": statistics.median(self.widths_at_k)}


def _q(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q))


def grid_band(grid: Grid, row: int, request: AdviceRequest, model: str) -> dict[int, tuple[float, float, float]]:
    """The band ``advise`` would give with the grid row's values: the simulation's interval
    widened by the model's own measured error (none where it has not been measured)."""
    z = NormalDist().inv_cdf((1 + request.curve.confidence) / 2)
    error = request.error_of(model)
    out = {}
    for j, w in enumerate(grid.workers):
        mu, sd = float(grid.curves[row, j]), float(grid.sim_sd[row, j])
        low, high = mu * (1 - z * sd), mu * (1 + z * sd)
        if error is not None:
            low, high = error.widen(model, w, low, high)
        out[w] = (mu, low, high)
    return out


def rules() -> list[tuple[str, Rule, float, float, float]]:
    """(label, rule, rho, prior width, prior probability of misstated values)."""
    return ([("refit", Rule.REFIT, 0.7, 0.5, MISSTATED), ("condition", Rule.CONDITION, 0.7, 0.5, MISSTATED)]
            + [(f"refit-condition rho={r:g}", Rule.REFIT_CONDITION, r, 0.5, MISSTATED) for r in RHOS]
            + [(f"posterior eps={e:g}", Rule.POSTERIOR, 0.7, 0.5, e) for e in (MISSTATED, 0.1, 0.03, 1.0)]
            + [("posterior eps=1 tau=0.25", Rule.POSTERIOR, 0.7, 0.25, 1.0)])


def evaluate(curve: RealCurve, statement: Statement, noise: float, cache: dict[Hashable, Grid]) -> dict[str, Scores]:
    profile = curve.load()
    request = curve.request(bandwidth_bps=curve.bandwidth_bps * statement.bandwidth_factor, params=statement.params,
                            model_error=load_model_errors(None))
    truth = {w: curve.truth(w) for w in curve.measured}
    scores: dict[str, Scores] = {"none": Scores()}
    key = (curve.name, statement.name)
    for k in sorted(truth):
        observed = [Observation(k, truth[k], noise)]
        for name, rule, rho, width, misstated in rules():
            result = calibrate(profile, request, observed, rule=rule, rho=rho, prior_width=width,
                               misstated=misstated, cache=cache, cache_key=key)
            if result.request.posterior is not None:
                table = dict(result.request.posterior.table)
            else:
                grid = cache[next(c for c in cache if c[0] == key)]
                row = int(np.argmin(np.abs(grid.values - np.asarray(list(result.values.values()))[None, :])
                                    .sum(axis=1)))
                table = grid_band(grid, row, request, curve.model)
            scores.setdefault(name, Scores()).add(table, truth, k)
        grid = cache[next(c for c in cache if c[0] == key)]
        scores["none"].add(grid_band(grid, grid.stated_row, request, curve.model), truth, k)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the curves as stated (no wrong statements)")
    parser.add_argument("--noise", type=float, default=0.03, help="relative noise of an observation (default 0.03)")
    parser.add_argument("--only", metavar="TEXT", default="", help="only the curves whose name contains TEXT")
    parser.add_argument("--sync", action="store_true", help="the synchronous curves (tests/data/ps-sync) instead")
    parser.add_argument("--json", metavar="FILE", help="also write the scores as JSON")
    args = parser.parse_args()
    cache: dict[Hashable, Grid] = {}
    totals: dict[str, dict[str, Scores]] = {}
    started = time.perf_counter()
    for curve in [c for c in every_curve(args.sync) if args.only in c.name]:
        for statement in statements(curve, args.quick):
            t0 = time.perf_counter()
            scores = evaluate(curve, statement, args.noise, cache)
            family = f"{curve.name.split('/')[0]}, {statement.name}"
            for name, s in scores.items():
                total = totals.setdefault(family, {}).setdefault(name, Scores())
                for attr in ("errors", "covered", "widths", "widths_at_k"):
                    getattr(total, attr).extend(getattr(s, attr))
            print(f"# {curve.name}, {statement.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"\nobservation noise {args.noise:g} (an interval at k of {2 * 1.96 * args.noise:.0%} is the noise's own); "
          f"{time.perf_counter() - started:.0f} s in all\n")
    print(f"{'curves, statement':<34} {'rule':<20} {'median err':>10} {'p90 err':>8} {'coverage':>9} {'width':>6} "
          f"{'width at k':>10}")
    overall: dict[str, Scores] = {}
    out: dict[str, Any] = {}
    for family, by_rule in totals.items():
        for name, s in by_rule.items():
            r = s.row()
            out.setdefault(family, {})[name] = r
            print(f"{family:<34} {name:<20} {r['median_error']:>10.1%} {r['p90_error']:>8.1%} {r['coverage']:>9.0%} "
                  f"{r['width']:>6.0%} {r['width_at_k']:>10.0%}")
            total = overall.setdefault(name, Scores())
            for attr in ("errors", "covered", "widths", "widths_at_k"):
                getattr(total, attr).extend(getattr(s, attr))
        print()
    for name, s in overall.items():
        r = s.row()
        out.setdefault("all", {})[name] = r
        print(f"{'all':<34} {name:<20} {r['median_error']:>10.1%} {r['p90_error']:>8.1%} {r['coverage']:>9.0%} "
              f"{r['width']:>6.0%} {r['width_at_k']:>10.0%}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
