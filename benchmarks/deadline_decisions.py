"""Deadline decisions on jobs the model error never saw: how often the answer is confident, and what it costs.

    python -m benchmarks.deadline_decisions [--confidence P] [--sweep] [--several-ps] [--sync]

No simulation: it reads the leave-one-job-out predictions that ``benchmarks/model_error.py``
stored in ``advisor/data/model_error/li2020-des+contention.json`` (each run's W points predicted with contention
constants fitted without its job, every outcome with its simulated interval). For each run, the
intervals are widened by widths computed *without the run's own job* (cross-conformal), and the
W = 2 alternation probability is recounted without its runs (``arrangements.TESTBED``; every
setting was run on one job only, so held out it is unknown, 50 %): nothing the decision reads has
seen the answer.

Deadlines, per run: a throughput half-way and 90 % of the way from the measured T(1) to the
measured best (``benchmarks/accuracy.py``'s 14), and a *tight* one at 85 % of the best measured
throughput (7; a measured W meets each). Each is decided (a) on the point estimates and (b) by the
probability rule (``core/cost.decide``) at confidence P, then scored on the measurements: is the
answer confident; does the recommended W meet the deadline; its cost per example against the
cheapest measured W that meets it. Prices as ``benchmarks/accuracy.py``.

Calibration: for P = 0.5 ... 0.95, the share of the held-out points whose measured throughput
is at least the level-P lower bound of its belief (``Belief.quantile_at_least``): a stated
probability is honest when that share is at least P. ``--sweep`` decides the tight deadlines at
every P of that grid (what a higher confidence costs). docs/decisions.md has the figures.

``--several-ps`` decides the same three kinds of deadline on the 2-PS runs of
``tests/data/ps-traces`` (their held-out predictions, stored with the several-PS widths by
``benchmarks/multi_ps_accuracy.py --write``): each run's beliefs widened by the several-PS widths
measured without its placement's runs (cross-conformal), and, for comparison, by the one-PS
widths the model had before; one outcome per point (the runs' W = 2 did not alternate). Then the
held-out 2-PS runs (``tests/data/ps-traces/held-out``, recorded after the widths), predicted from
their own traces (about 6 s) with the shipped widths.

``--allreduce`` decides them on the all-reduce runs (``tests/data/allreduce``, about 10 s) that
some W > 1 speeds up: each predicted with the host's wait a step fitted without it, widened by the
ring's widths measured without it.

``--sync`` decides the same three kinds of deadline on the synchronous runs (``tests/data/ps-sync``
and its ``one-gradient`` folder, about a minute): each job predicted with the constants chosen
without it, its beliefs widened by the widths measured without it (``sync_runs``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core.belief import Belief, Outcome
from advisor.core.correction import Correction, plan_with_correction, resize_after
from advisor.core.cost import (DEFAULT_CONFIDENCE, SECONDS_PER_HOUR, Choice, Constraints, CostError, cost_optimal,
                               cost_per_example, decide)
from advisor.core.model_error import SEVERAL_PS, ModelError, measured_error
from advisor.core.models.ps_des.arrangements import TESTBED
from advisor.importers.model_error_file import load_model_errors, shipped_path
from benchmarks.accuracy import DEADLINE_LEVELS, EXAMPLES, PRICES
from benchmarks.model_error import LEVEL, MODEL, widths

TIGHT = 0.85  # a tight deadline needs this share of the best measured throughput
# One correction (core/correction.py): observed after this share of the deadline, a resize losing this share
# (``--window``, ``--restart`` change them)
WINDOW, RESTART = 0.03, 0.01  # about the controller's defaults (0.5 h, 10 min) on the 17-20 h tight deadlines
GRID = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)


@dataclass(frozen=True)
class Run:
    """One measured run, its held-out beliefs per W, and the measured throughput per W."""

    name: str
    job: str
    workers: list[int]
    predicted: list[float]
    beliefs: list[Belief]
    measured: dict[int, float]
    parameter_servers: int = 1  # priced per hour beside the workers (an all-reduce job has none)


def held_out_runs(points: list[dict[str, Any]], extra: Sequence[tuple[int, float, str | None]] = ()) -> list[Run]:
    """Every run with beliefs that saw neither its job's residuals nor its runs' arrangements
    (``extra``: residuals of other runs the shipped widths also hold, ``one_worker_extra``)."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        by_run.setdefault(p["run"], []).append(p)
    runs = []
    for name, rows in by_run.items():
        job = rows[0]["job"]
        error = widths([p for p in points if p["job"] != job], extra)
        per_w: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            per_w.setdefault(r["workers"], []).append(r)
        workers = sorted(per_w)
        beliefs = [Belief.of(_outcomes(per_w[w][0], error, job, points), LEVEL) for w in workers]
        measured = {w: statistics.mean(r["measured"] for r in per_w[w]) for w in workers}
        runs.append(Run(name, job, workers, [per_w[w][0]["outcomes"][0]["throughput"] for w in workers], beliefs,
                        measured))
    return runs


def one_worker_extra(validation: dict[str, Any]) -> list[tuple[int, float, str | None]]:
    """The (W, r, outcome) residuals of the one-worker runs the shipped widths hold beside the
    points (``benchmarks/model_error.py``'s ``one_worker_runs``)."""
    return [(1, float(r["residual"]), None) for r in validation.get("one_worker_runs", [])]


def _outcomes(row: dict[str, Any], error: ModelError, job: str, points: list[dict[str, Any]]) -> list[Outcome]:
    """A point's outcomes widened by ``error``, the other outcome's probability recounted without ``job``."""
    outs = row["outcomes"]
    p_other = _held_out_probability(job, points) if len(outs) > 1 else 0.0
    found = []
    for i, o in enumerate(outs):
        low, high = error.widen(MODEL, row["workers"], o["sim_low"], o["sim_high"], None if i == 0 else o["name"])
        found.append(Outcome(o["name"], o["throughput"], low, high, 1 - p_other if i == 0 else p_other))
    return found


def _held_out_probability(job: str, points: list[dict[str, Any]]) -> float:
    """The alternation probability of ``job``'s setting counted without ``job``'s own runs
    (Laplace's (k + 1) / (n + 2) over the setting's other runs; 0.5 when it has none)."""
    count = next((c for c in TESTBED.values() if any(f.startswith(job + "_") for f in c.files)), None)
    if count is None:
        return 0.5
    mine = {f for f in count.files if f.startswith(job + "_")}
    alternated = sum(1 for p in points if p["run"] in mine and p["workers"] == 2 and p["outcome"] is not None)
    return (count.alternated - alternated + 1) / (count.runs - len(mine) + 2)


def several_ps_runs(one_ps_widths: bool = False) -> list[Run]:
    """The 2-PS runs with at least three measured W, each with beliefs that saw neither its
    placement's residuals (the several-PS widths measured without them) nor, with
    ``one_ps_widths``, any 2-PS run (the model's one-PS widths)."""
    from benchmarks import multi_ps_accuracy as mps  # its residual type and widths

    stored = mps.stored_residuals()
    runs = []
    for name in sorted({(x.placement, x.run) for x in stored}):
        rows = sorted((x for x in stored if (x.placement, x.run) == name), key=lambda x: x.workers)
        if len(rows) < 3:
            continue
        error = mps.model_widths() if one_ps_widths else \
            mps.as_predicted(mps.several_ps_error([x for x in stored if x.placement != name[0]]))
        runs.append(_one_outcome_run(f"{name[0]}/{name[1]}", name[0],
                                     [(x.workers, x.predicted, x.measured) for x in rows], error))
    return runs


def _one_outcome_run(name: str, job: str, points: Sequence[tuple[int, float, float]],
                     error: ModelError | None, model: str = MODEL, parameter_servers: int = 1) -> Run:
    """A run of (W, predicted, measured) points, each belief one outcome widened by ``error``
    (``model``'s)."""
    assert error is not None
    beliefs = [Belief.of([Outcome("predicted", p, *error.widen(model, w, p, p))], LEVEL) for w, p, _ in points]
    return Run(name, job, [w for w, _, _ in points], [p for _, p, _ in points], beliefs, {w: m for w, _, m in points},
               parameter_servers)


def held_out_several_ps_runs() -> list[Run]:
    """The 2-PS runs recorded after the several-PS widths were measured (``multi_ps_accuracy
    --held-out``), predicted from their own traces, with the shipped widths: held out as a whole."""
    from benchmarks import multi_ps_accuracy as mps

    error = load_model_errors().of(MODEL, SEVERAL_PS)
    rows = mps.held_out_rows()
    return [_one_outcome_run(name, name, sorted((r.workers, r.own, r.measured) for r in rows if r.run == name), error)
            for name in sorted({r.run for r in rows})]


def several_ps(confidence: float, shares: tuple[float, float] = (WINDOW, RESTART)) -> None:
    """``--several-ps``: the deadlines of the 2-PS runs, with the several-PS widths and with the
    one-PS ones, then of the held-out 2-PS runs with the shipped widths."""
    for label, one_ps in (("several-PS widths (held out by placement)", False), ("one-PS widths", True),
                          ("held-out runs (tests/data/ps-traces/held-out), shipped several-PS widths", None)):
        runs = several_ps_runs(one_ps) if one_ps is not None else held_out_several_ps_runs()
        print(f"\n2-PS runs, {label}: {len(runs)} runs, {sum(len(r.workers) for r in runs)} points; "
              + calibration_text(runs, (0.8, 0.9, 0.95)))
        decide_every(runs, confidence, shares=shares)


def sync_runs(steps: int = 400) -> list[Run]:
    """The synchronous runs (``tests/data/ps-sync`` and its ``one-gradient`` folder), one per job
    (its repeats' mean per W), each predicted with the constants chosen without it (the six jobs
    of ``ps-sync``: the share spread and the window gain together, leave-one-job-out as
    ``sync_accuracy --fit`` does; the one-gradient jobs, recorded after every constant: the
    defaults), widened by the widths measured without it, the alternation probability of a
    one-gradient point recounted without its repeats."""
    from benchmarks import sync_accuracy as sa

    held = sa.leave_one_job_out(sa.runs(), {"share_sigma": (0.5, 0.75, 1.0), "window_gain": (1.0, 1.25, 1.5)},
                                model=sa.MODEL, steps=steps, params={})
    points = {job: found for job, (_, found) in held.items()}
    shown = sa.arrangements(sa.ONE_GRADIENT)
    points.update({job: sa.predict(job, by_w, steps=steps, data=sa.ONE_GRADIENT, shown=shown)
                   for job, by_w in sa.runs(sa.ONE_GRADIENT).items()})
    every, extra = [p for found in points.values() for p in found], sa.one_worker_points(sa.MODEL, steps)
    runs = []
    for job, found in sorted(points.items()):
        error = sa.model_error([p for p in every if p.job != job] + extra, sa.MODEL, "held out")
        runs.append(Run(job, job, [p.workers for p in found], [p.predicted for p in found],
                        [Belief.of(_sync_outcomes(p, error), LEVEL) for p in found], {p.workers: p.mean for p in found}))
    return runs


def _sync_outcomes(p: Any, error: ModelError) -> list[Outcome]:
    """A synchronous point's outcomes widened by ``error``: one, or drifting and alternating with
    ``ONE_GRADIENT``'s probability counted without the point's own repeats (Laplace's rule)."""
    from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, ONE_GRADIENT

    if p.alternative is None:
        return [Outcome("predicted", p.predicted, *error.widen(error.model, p.workers, p.low, p.high))]
    mine = sum(p.shown)
    prob = (ONE_GRADIENT.alternated - mine + 1) / (ONE_GRADIENT.runs - len(p.shown) + 2)
    return [Outcome(DRIFTING, p.predicted, *error.widen(error.model, 2, p.low, p.high, DRIFTING), 1 - prob),
            Outcome(ALTERNATING, p.alternative, *error.widen(error.model, 2, p.alternative, p.alternative, ALTERNATING),
                    prob)]


def synchronous(confidence: float, shares: tuple[float, float] = (WINDOW, RESTART)) -> None:
    """``--sync``: the same deadlines on the synchronous runs, held out (``sync_runs``)."""
    runs = sync_runs()
    print(f"\nsynchronous runs, held out ({len(runs)} jobs, {sum(len(r.workers) for r in runs)} points): "
          + calibration_text(runs))
    decide_every(runs, confidence, answers=True, shares=shares)


def allreduce_runs() -> list[Run]:
    """The scored all-reduce configurations of ``tests/data/allreduce`` with at least three
    measured W whose best measured W is more than one (the others run fastest alone), each predicted as ``allreduce_accuracy`` holds it out (the host's wait a step
    fitted without it; configurations predicted first: the defaults), widened by the ring's widths
    measured without it (cross-conformal, the shipped regimes of W), one outcome per point, no PS."""
    from benchmarks import allreduce_accuracy as ar

    rows, _ = ar.rows_with_holdout(ar.configs())
    scored = [r for r in rows if not r.caveat]
    runs = []
    for config in sorted({r.config for r in scored}):
        mine = sorted((r for r in scored if r.config == config), key=lambda r: r.workers)
        if len(mine) < 3 or max(mine, key=lambda r: r.measured).workers == 1:
            continue  # a job no W > 1 speeds up asks no deadline question that W = 1 does not answer
        others = [(r.workers, r.measured / (r.held_out or r.predicted) - 1, None) for r in scored if r.config != config]
        error = measured_error(ar.MODEL, LEVEL, others, ar.ERROR_REGIMES, None, True, "held out", None)
        runs.append(_one_outcome_run(config, config, [(r.workers, r.held_out or r.predicted, r.measured) for r in mine],
                                     error, ar.MODEL, parameter_servers=0))
    return runs


def allreduce(confidence: float, shares: tuple[float, float] = (WINDOW, RESTART)) -> None:
    """``--allreduce``: the deadlines of the all-reduce runs, held out."""
    runs = allreduce_runs()
    print(f"\nall-reduce runs (DDP, Keras MWMS), held out: {len(runs)} runs, {sum(len(r.workers) for r in runs)} "
          "points; " + calibration_text(runs, (0.8, 0.9, 0.95)))
    decide_every(runs, confidence, answers=True, shares=shares)


def decide_every(runs: Sequence[Run], confidence: float, answers: bool = False,
                 shares: tuple[float, float] = (WINDOW, RESTART)) -> None:
    """Every run's deadlines decided at ``confidence``, alone and counting on one resize (after
    ``shares`` of the deadline: the window, what the resize loses): one report line per kind and
    over all, and with ``answers`` each run's recommended W beside the cheapest measured W that meets it."""
    cases: dict[str, list[dict[str, Any]]] = {}
    corrected: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for name, needed in deadlines(run):
            cases.setdefault(name, []).append(score(run, needed, confidence))
            corrected.setdefault(name, []).append(score_corrected(run, needed, confidence, shares))
    _print_cases(cases, answers, point=True,
                 legend="(run:recommended/cheapest measured W meeting it; ? = no W reached P, the likeliest given)")
    print(f"with one correction (observed after {shares[0]:.0%} of the deadline, a resize losing {shares[1]:.0%} of it):")
    _print_cases(corrected, answers, point=False,
                 legend="(run:starting W[>W it was resized to]/cheapest measured W meeting it; ? = no plan reached P)")


def _print_cases(cases: dict[str, list[dict[str, Any]]], answers: bool, *, point: bool, legend: str) -> None:
    """One report line per kind of deadline and over all; with ``answers``, each run's W (and
    the W it was resized to, where a plan moved it) beside the cheapest measured W, then ``legend``."""
    for name, found in cases.items():
        report(name, found, point=point)
    report("all", [c for found in cases.values() for c in found], point=point)
    if answers:
        for name, found in cases.items():
            print(f"  {name:<8} " + "  ".join(f"{c['run'].split('.')[0]}:{c['rec']}{'' if c['confident'] else '?'}"
                                              f"{'>' + str(c['then']) if c.get('then', c['rec']) != c['rec'] else ''}"
                                              f"/{c['best']}" for c in found))
        print("  " + legend)


def calibration(runs: Sequence[Run], grid: Sequence[float] = GRID) -> dict[float, float]:
    """Per level P, the share of held-out points measured at or above their level-P lower bound."""
    pairs = [(b, r.measured[w]) for r in runs for w, b in zip(r.workers, r.beliefs)]
    return {p: sum(m >= b.quantile_at_least(p) for b, m in pairs) / len(pairs) for p in grid}


def calibration_text(runs: Sequence[Run], grid: Sequence[float] = GRID) -> str:
    """``calibration`` as every report line says it."""
    return "measured >= the level-P lower bound " + ", ".join(
        f"P={p:g}: {share:.0%}" for p, share in calibration(runs, grid).items())


def deadlines(run: Run) -> list[tuple[str, float]]:
    """(set, throughput needed) for the run: the two ways from T(1) to the best, and the tight one."""
    best, one = max(run.measured.values()), run.measured[run.workers[0]]
    return [(f"way {level:g}", one + level * (best - one)) for level in DEADLINE_LEVELS] + [("tight", TIGHT * best)]


def cheapest_measured(run: Run, hours: float | None) -> int:
    """The W of least measured cost per example that makes ``EXAMPLES`` within ``hours`` on the measurements."""
    return cost_optimal(run.workers, [run.measured[w] for w in run.workers], PRICES,
                        parameter_servers=run.parameter_servers,
                        constraints=Constraints(examples=EXAMPLES, deadline_hours=hours)).workers


def score(run: Run, needed: float, confidence: float) -> dict[str, Any]:
    """Both rules' answers to one deadline, scored on the measurements."""
    limits = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / needed / 3600, confidence=confidence)
    ps = run.parameter_servers
    best = cheapest_measured(run, limits.deadline_hours)
    cost = {w: cost_per_example(PRICES, w, ps, run.measured[w]) for w in run.workers}
    try:
        point: int | None = cost_optimal(run.workers, run.predicted, PRICES, parameter_servers=ps,
                                         constraints=limits).workers
    except CostError:
        point = None
    choice: Choice = decide(run.workers, run.predicted, PRICES, parameter_servers=ps, constraints=limits,
                            beliefs=run.beliefs)
    return {"run": run.name, "needed": needed, "best": best, "point": point, "rec": choice.workers,
            "confident": choice.confident, "p": choice.p_meet,
            "met": run.measured[choice.workers] >= needed * (1 - 1e-9),
            "gap": cost[choice.workers] / cost[best] - 1,
            "point_met": point is not None and run.measured[point] >= needed * (1 - 1e-9),
            "point_gap": None if point is None else cost[point] / cost[best] - 1}


def score_corrected(run: Run, needed: float, confidence: float,
                    shares: tuple[float, float] = (WINDOW, RESTART)) -> dict[str, Any]:
    """The plan with one correction (``core/correction.py``) played on the measurements: the
    starting W runs for the window at its measured throughput, then the plan's resize for that
    observation, if any, runs the rest at the measured throughput of its W. Met: the examples
    done in time; cost: the whole run's, per example, against the cheapest measured W's alone."""
    hours = EXAMPLES / needed / SECONDS_PER_HOUR
    k = Correction(shares[0] * hours, shares[1] * hours)
    limits = Constraints(examples=EXAMPLES, deadline_hours=hours, confidence=confidence)
    ps = run.parameter_servers
    plan = plan_with_correction(run.workers, run.predicted, PRICES, run.beliefs, parameter_servers=ps,
                                constraints=limits, correction=k)
    best = cheapest_measured(run, hours)
    start = plan.workers
    then = resize_after(plan, run.measured[start])
    if then == start:
        met = run.measured[start] >= needed * (1 - 1e-9)
        cost = cost_per_example(PRICES, start, ps, run.measured[start])
    else:
        rest = EXAMPLES - run.measured[start] * k.window_hours * SECONDS_PER_HOUR
        met = run.measured[then] * (hours - k.window_hours - k.restart_hours) * SECONDS_PER_HOUR >= rest * (1 - 1e-9)
        cost = (PRICES.hourly(start, ps) * k.window_hours
                + PRICES.hourly(then, ps) * (k.restart_hours + rest / run.measured[then] / SECONDS_PER_HOUR)) / EXAMPLES
    return {"run": run.name, "needed": needed, "best": best, "point": None, "rec": start, "then": then,
            "confident": plan.choice.confident, "p": plan.choice.p_meet, "met": met,
            "gap": cost / cost_per_example(PRICES, best, ps, run.measured[best]) - 1,
            "point_met": False, "point_gap": None}


@dataclass(frozen=True)
class Summary:
    """One rule's figures over a set of deadlines."""

    deadlines: int
    unsure: int  # no W reached the confidence: the likeliest was given, with a warning
    sure: int
    sure_met: int  # confident answers whose W met the deadline on the measurements
    within_5: int  # confident answers that met it at a cost within 5 % of the cheapest measured W that does
    gaps: tuple[float, ...]  # cost gap of the confident answers that met it
    unsure_met: int

    @classmethod
    def of(cls, cases: Sequence[dict[str, Any]]) -> Summary:
        sure = [c for c in cases if c["confident"]]
        gaps = tuple(c["gap"] for c in sure if c["met"])
        return cls(len(cases), len(cases) - len(sure), len(sure), sum(c["met"] for c in sure),
                   sum(g <= 0.05 + 1e-9 for g in gaps), gaps,
                   sum(c["met"] for c in cases if not c["confident"]))


def report(name: str, cases: list[dict[str, Any]], point: bool = True) -> None:
    """One line per set of deadlines: the rule's figures, and with ``point`` the point estimates'."""
    s = Summary.of(cases)
    answered = [c for c in cases if c["point"] is not None]
    gap = f"max {max(s.gaps):+.0%}, median {statistics.median(s.gaps):+.0%}" if s.gaps else "none"
    print(f"{name:<8} {s.deadlines:>2} deadlines | no confident answer {s.unsure} ({s.unsure / s.deadlines:.0%}); "
          f"confident {s.sure}: met {s.sure_met}, cost within 5 % of the cheapest measured W meeting it "
          f"{s.within_5} (gap {gap}); the likeliest met it {s.unsure_met} of {s.unsure}"
          + (f" | point estimates: no W {s.deadlines - len(answered)}, met {sum(c['point_met'] for c in answered)} "
             f"of {len(answered)}" if point else ""))


def sweep(runs: Sequence[Run]) -> None:
    """The tight deadlines decided at every confidence of the grid: what each level costs and gives."""
    print("tight deadlines by confidence P: no confident answer | confident answers that met the deadline | "
          "within 5 % of the cheapest | median cost gap")
    for p in GRID:
        s = Summary.of([score(r, needed, p) for r in runs for name, needed in deadlines(r) if name == "tight"])
        gap = f"{statistics.median(s.gaps):+.0%}" if s.gaps else "-"
        print(f"  P={p:<5g} {s.unsure}/{s.deadlines} | {s.sure_met}/{s.sure} | {s.within_5}/{s.sure} | {gap}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                        help=f"the confidence P of the decisions (default {DEFAULT_CONFIDENCE})")
    parser.add_argument("--sweep", action="store_true", help="also decide the tight deadlines at every P of the grid")
    parser.add_argument("--several-ps", action="store_true",
                        help="also decide the deadlines of the 2-PS runs (module docstring)")
    parser.add_argument("--sync", action="store_true",
                        help="also decide the deadlines of the synchronous runs, held out (module docstring)")
    parser.add_argument("--allreduce", action="store_true",
                        help="also decide the deadlines of the all-reduce runs, held out (module docstring)")
    parser.add_argument("--window", type=float, default=WINDOW,
                        help=f"the correction's window, a share of the deadline (default {WINDOW})")
    parser.add_argument("--restart", type=float, default=RESTART,
                        help=f"what a resize loses, a share of the deadline (default {RESTART})")
    args = parser.parse_args()
    shares = (args.window, args.restart)
    validation = json.loads(shipped_path(MODEL).read_text())["validation"]
    runs = held_out_runs(validation["points"], one_worker_extra(validation))
    print(f"held-out calibration ({sum(len(r.workers) for r in runs)} points): " + calibration_text(runs))
    print(f"confidence {args.confidence:g}; prices {PRICES.worker_per_hour}/h per worker, {PRICES.ps_per_hour}/h per PS")
    decide_every(runs, args.confidence, answers=True, shares=shares)
    if args.sweep:
        sweep(runs)
    if args.several_ps:
        several_ps(args.confidence, shares)
    if args.sync:
        synchronous(args.confidence, shares)
    if args.allreduce:
        allreduce(args.confidence, shares)


if __name__ == "__main__":
    main()
