"""Deadlines decided on point estimates against deadlines decided at the interval's low end.

    python -m benchmarks.deadline_decisions

No simulation: it reads the leave-one-job-out predictions that ``benchmarks/model_error.py``
stored in ``advisor/data/model_error.json`` (each run's W points predicted with contention
constants fitted without its job). Per run, two deadlines as in ``benchmarks/accuracy.py``: a
throughput half-way, and 90 % of the way, from the measured T(1) to the measured best. Each is
decided (a) on the point estimates (the advisor before issue 14) and (b) at the interval's low
end on expected cost, the interval being the simulation's widened by widths computed *without
the run's own job* (cross-conformal, so the widths have not seen the answer). Then scored on the
measurements: does the recommended W meet the deadline, and at what cost per example against
the cheapest measured W that meets it. Prices as ``benchmarks/accuracy.py``.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from advisor.core.cost import Constraints, CostError, cost_optimal, cost_per_example
from advisor.core.model_error import ModelError, regime_widths
from advisor.importers.model_error_file import SHIPPED
from benchmarks.accuracy import DEADLINE_LEVELS, EXAMPLES, PRICES
from benchmarks.model_error import LEVEL, MODEL, REGIMES


def decide(rows: list[dict[str, Any]], error: ModelError | None, limits: Constraints) -> int | None:
    workers = [r["workers"] for r in rows]
    thr = [r["predicted"] for r in rows]
    try:
        if error is None:
            return cost_optimal(workers, thr, PRICES, constraints=limits).workers
        bounds = [error.widen(MODEL, r["workers"], r["sim_low"], r["sim_high"]) for r in rows]
        return cost_optimal(workers, thr, PRICES, constraints=limits, lows=[b[0] for b in bounds],
                            highs=[b[1] for b in bounds], confidence=LEVEL).workers
    except CostError:
        return None


def main() -> None:
    points = json.loads(SHIPPED.read_text())["validation"]["points"]
    runs: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        runs.setdefault(p["run"], []).append(p)
    results: dict[str, list[dict[str, Any]]] = {"point estimate": [], "low end, expected cost": []}
    for run, rows in runs.items():
        rows.sort(key=lambda r: r["workers"])
        job = rows[0]["job"]
        others = [(p["workers"], p["residual"]) for p in points if p["job"] != job]
        error = ModelError(MODEL, LEVEL, regime_widths(others, REGIMES, LEVEL))
        measured = {r["workers"]: r["measured"] for r in rows}
        for level in DEADLINE_LEVELS:
            needed = measured[1] + level * (max(measured.values()) - measured[1])
            limits = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / needed / 3600)
            best = cost_optimal(sorted(measured), [measured[w] for w in sorted(measured)], PRICES,
                                constraints=limits).workers
            cost = {w: cost_per_example(PRICES, w, 1, t) for w, t in measured.items()}
            for name, err in (("point estimate", None), ("low end, expected cost", error)):
                rec = decide(rows, err, limits)
                results[name].append({"run": run, "level": level, "rec": rec, "best": best,
                                      "met": rec is not None and measured[rec] >= needed * (1 - 1e-9),
                                      "excess": None if rec is None else cost[rec] / cost[best] - 1})
    for name, cases in results.items():
        met = sum(c["met"] for c in cases)
        none = sum(c["rec"] is None for c in cases)
        missed = len(cases) - met - none
        excess = [c["excess"] for c in cases if c["met"]]
        print(f"{name:<24} {len(cases)} deadlines: met {met}, missed {missed}, no W recommended {none}; "
              f"cost excess when met: median {statistics.median(excess):.0%}, max {max(excess):.0%}, "
              f"cheapest in {sum(e == 0 for e in excess)}")
        print("    " + "  ".join(f"{c['run'].split('.')[0]}@{c['level']}:{c['rec']}/{c['best']}" for c in cases))


if __name__ == "__main__":
    main()
