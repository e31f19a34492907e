"""Accuracy of the synchronous PS model against real ``SyncReplicasOptimizer`` runs.

    python -m benchmarks.sync_accuracy [--model li2020-des-sync+contention] [--steps 400]
        [--param KEY=VALUE ...] [--order fifo|recorded] [--markdown]
    python -m benchmarks.sync_accuracy --held-out [--write-predictions]
    python -m benchmarks.sync_accuracy --one-gradient [--write-predictions]

For every measured run in ``tests/data/ps-sync`` (``<job>[_backup1].<repeat>.measured.json.gz``,
recorded by ``scripts/record_ps_truth.sh``) and its ``one-gradient`` folder it predicts each
measured W from the job's own one-worker trace (``<job>.trace.json.gz``, recorded by the
product's hook) at the run's link rate, with the run's TCP congestion control and queue as its
user would state them (cubic, 100 ms: the testbed's tbf), and the run's backup workers. It
prints measured (each repeat) and predicted per W with the error, then the median and maximum
|error| per job and over all.

Counted: examples of aggregated gradients per second (a backup worker's dropped gradient does
not count), which is what the recorder measures (``update_throughput``) and what the model
reports.

Two outcomes: at W = 2 with one backup worker an update takes one gradient (R = 1), and the
model reports two arrangements, drifting phases (its point: ``sync.py``'s module docstring) and
alternation (``arrangements.ONE_GRADIENT``). Each repeat's step log says which it showed
(``arrangements.alternated``); its error is taken against that outcome's throughput, as the
asynchronous model's W = 2 runs are (``benchmarks/model_error.py``).

``--write`` measures the model's error from these residuals and ships it
(``advisor/data/model_error/<model>.json``): split-conformal widths of |r| per regime of W
(W = 1, W >= 2; r = measured / predicted - 1 against the outcome the repeat showed, every repeat
its own residual; at W = 1 also the synchronous one-worker runs of ``tests/data/tracing-cost``,
each against the profile taken right before it), the alternating outcome's at W = 2 apart. No
constant of the model is fitted
to these runs, so every residual is out of sample; the coverage printed beside it is
cross-conformal: each job's points against widths measured without that job.

``--one-gradient`` scores ``tests/data/ps-sync/one-gradient`` instead (its README): three programs
at W = 1 and W = 2 with one backup worker (R = 1), recorded after the drifting arrangement was
built into the model and its predictions written down (``--one-gradient --write-predictions``):
each repeat against the arrangement its step log showed, and inside that outcome's interval.

``--held-out`` scores the programs of ``tests/data/ps-sync/held-out`` instead (its README): runs
recorded after every constant of the model was chosen, with the default model and with the
window off (``window_gain=0``, the model before it), each point against its interval widened by
the shipped widths. ``--write-predictions`` writes down the predictions of its traces for W = 1..8
(``predictions-before-measuring.json``) before any of its runs is measured.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.curve import CurveSettings
from advisor.core.model_error import ModelError, measured_error
from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, alternated
from advisor.core.sim_types import NetworkModel, StreamOrder
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors, write_model_error
from benchmarks.options import add_order_option, add_param_option, model_params

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "ps-sync"
HELD_OUT = DATA / "held-out"
ONE_GRADIENT = DATA / "one-gradient"  # W = 2 with one backup worker, recorded after its model (README)
MODEL = "li2020-des-sync+contention"  # the default for a synchronous trace (registry.DEFAULT_SYNC_MODEL)
LEVEL = 0.95
REGIMES: tuple[tuple[int, int | None], ...] = ((1, 1), (2, None))
OTHER_REGIMES: tuple[tuple[int, int | None], ...] = ((2, 2),)  # another outcome: only W = 2 has one
# <program>[_ps<N><placement>]_bw<rate>[_backup<B>].<repeat>: e.g. mlp_bw100.r1, mlp_ps2greedy_bw100.r1 (two-ps/)
RUN = re.compile(r"(?P<job>(?P<model>[a-z0-9]+)(?:_ps\d+[a-z]*)?_bw(?P<mbit>\d+))(?P<backup>_backup(?P<b>\d+))?"
                 r"\.(?P<repeat>r\d+)\.measured\.json\.gz")
WHAT_IF_WORKER_BPS = 10e9  # the what-if's worker link: the testbed leaves it unshaped


@dataclass(frozen=True)
class Point:
    """One job's measured W (every repeat) and its prediction."""

    job: str  # e.g. mlp_bw100_backup1
    workers: int
    measured: tuple[float, ...]
    predicted: float
    low: float
    high: float
    shown: tuple[bool, ...] = ()  # per repeat: its step log alternated (W = 2 only; else empty)
    alternative: float | None = None  # the alternating outcome's throughput, when the model reports one

    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured)

    def outcome(self, repeat: int) -> str | None:
        """The outcome repeat ``repeat`` is measured against where the model reports two:
        ``ALTERNATING`` when the run's step log alternated, else ``DRIFTING`` (the prediction's
        own at that point, with widths of its own); None (the prediction) elsewhere."""
        if self.alternative is None:
            return None
        alternated = self.shown[repeat] if repeat < len(self.shown) else False
        return ALTERNATING if alternated else DRIFTING

    def repeat_errors(self) -> list[float]:
        """(predicted - measured) / measured of each repeat, against the outcome it showed."""
        return [self.reference(i) / m - 1.0 for i, m in enumerate(self.measured)]

    def reference(self, repeat: int) -> float:
        """The throughput of the outcome repeat ``repeat`` showed (``outcome``)."""
        return self.alternative if self.outcome(repeat) == ALTERNATING and self.alternative else self.predicted

    @property
    def error(self) -> float:
        """(predicted - measured) / measured against the mean of the repeats, the prediction
        being the outcome they showed; repeats that showed different outcomes: the repeat's own
        error of largest size (an average of errors of opposite sign would hide both)."""
        refs = [self.reference(i) for i in range(len(self.measured))]
        if len(set(refs)) == 1:
            return refs[0] / self.mean - 1.0
        return max(self.repeat_errors(), key=abs)


def runs(data: Path = DATA) -> dict[str, dict[int, list[float]]]:
    """Measured examples/s per job and W, every repeat: {job: {W: [thr, ...]}}."""
    return {job: {w: [thr for thr, _ in reps] for w, reps in by_w.items()} for job, by_w in _results(data).items()}


def arrangements(data: Path = DATA) -> dict[str, dict[int, list[bool]]]:
    """Whether each W = 2 repeat's step log alternated (``arrangements.alternated``), in the
    order of ``runs``: {job: {2: [alternated, ...]}}."""
    return {job: {w: [bool(a) for _, a in reps] for w, reps in by_w.items() if w == 2}
            for job, by_w in _results(data).items()}


@cache
def _results(data: Path) -> dict[str, dict[int, list[tuple[float, bool | None]]]]:
    """{job: {W: [(thr, alternated or None), ...]}} over every measured file, in name order; read
    once per folder (``runs`` and ``arrangements`` both ask; neither changes what it returns)."""
    out: dict[str, dict[int, list[tuple[float, bool | None]]]] = {}
    for path in sorted(data.glob("*.measured.json.gz")):
        m = RUN.fullmatch(path.name)
        if m is None:
            continue
        job = m["job"] + (m["backup"] or "")
        for r in json.loads(gzip.decompress(path.read_bytes()))["results"]:
            w = int(r["W"])
            shown = None
            if w == 2 and len(r.get("step_log") or ()) == 2:
                ends = [[float(step[1]) for step in worker] for worker in r["step_log"]]
                shown = alternated(ends[0], ends[1])
            out.setdefault(job, {}).setdefault(w, []).append((float(r["thr_window"]), shown))
    return out


def job_settings(job: str) -> tuple[str, float, int]:
    """(trace name, link rate in bit/s, backup workers) of a job name."""
    m = re.fullmatch(r"(?P<trace>[a-z0-9]+(?:_ps\d+[a-z]*)?_bw(?P<mbit>\d+))(_backup(?P<b>\d+))?", job)
    if m is None:
        raise ValueError(f"not a job name: {job}")
    return m["trace"], float(m["mbit"]) * 1e6, int(m["b"] or 0)


def predict(job: str, measured: Mapping[int, Sequence[float]], *, model: str = MODEL, steps: int = 400,
            params: Mapping[str, Any] | None = None, data: Path = DATA,
            shown: Mapping[str, Mapping[int, Sequence[bool]]] | None = None,
            what_if: tuple[int, str] | None = None, order: StreamOrder = StreamOrder.FIFO) -> list[Point]:
    """The prediction of every measured W of ``job``; ``shown`` (``arrangements``): which
    outcome each W = 2 repeat showed. ``what_if`` (PS count, placement): predict a several-PS
    job from the one-PS trace of the same program (``DATA``) by the ``--ps`` what-if instead of
    from its own trace, the workers' link stated (``WHAT_IF_WORKER_BPS``)."""
    trace, bps, backup = job_settings(job)
    chosen: dict[str, Any] = {"congestion_control": "cubic", "queue_s": 0.1, **(params or {})}
    servers, worker_bps = None, None
    if what_if is None:
        profile = load_profile(data / f"{trace}.trace.json.gz")
    else:
        profile = load_profile(DATA / f"{re.sub(r'_ps[0-9]+[a-z]*', '', trace)}.trace.json.gz")
        servers, worker_bps = what_if[0], WHAT_IF_WORKER_BPS
        chosen["ps_placement"] = what_if[1]
    if backup:
        chosen["backup_workers"] = backup
    if "contention" not in model:
        chosen = {k: v for k, v in chosen.items() if k not in ("congestion_control", "queue_s")}
    workers = tuple(sorted(measured))
    # W = 1 too: the model's second outcome at W = 2 is read off it (``sync.PsDesSync.outlook``)
    advice = advise(profile, AdviceRequest(
        network=NetworkModel(bandwidth_bps=bps, worker_bandwidth_bps=worker_bps, order=order), model=ModelChoice(model, chosen),
        side_by_side=(), parameter_servers=servers,
        curve=CurveSettings(workers=tuple(sorted({1, *workers})), steps=steps, warmup_steps=50, seed=0)))
    job_shown: Mapping[int, Sequence[bool]] = (shown or {}).get(job, {})
    out = []
    for w in workers:
        point = advice.point(w)
        other = next((o.throughput for o in point.outcomes if o.name == ALTERNATING), None)
        out.append(Point(job, w, tuple(measured[w]), point.throughput, point.low, point.high,
                         tuple(job_shown.get(w, ())), other))
    return out


def summary(points: Sequence[Point]) -> tuple[float, float]:
    """Median and maximum |error| of ``points``."""
    errors = [abs(p.error) for p in points]
    return statistics.median(errors), max(errors)


def aggregating(p: Point) -> bool:
    """Whether the point's updates aggregate several gradients (R >= 2) or W = 1: not the R = 1
    < W points, where no barrier holds the workers in step and the model says it does not
    predict the arrangement they fall into (``sync.PsDesSync.outlook``)."""
    return p.workers == 1 or p.workers - job_settings(p.job)[2] >= 2


def residuals(points: Sequence[Point]) -> list[tuple[int, float, str | None]]:
    """(W, measured / predicted - 1, outcome) of every repeat, against the outcome it showed
    (None: the prediction where it has one outcome; ``DRIFTING`` or ``ALTERNATING`` at W = 2 with
    one gradient per update, each with widths of its own)."""
    return [(p.workers, m / p.reference(i) - 1, p.outcome(i)) for p in points for i, m in enumerate(p.measured)]


def model_error(points: Sequence[Point], model: str, source: str = "") -> ModelError:
    """The widths of ``points``' residuals: the prediction's per ``REGIMES``, each other
    outcome's (drifting, alternating) per ``OTHER_REGIMES``."""
    return measured_error(model, LEVEL, residuals(points), REGIMES, OTHER_REGIMES, True, source)


def leave_one_job_out(measured: Mapping[str, Mapping[int, Sequence[float]]], grids: Mapping[str, Sequence[float]],
                      *, model: str, steps: int, params: Mapping[str, Any],
                      order: StreamOrder = StreamOrder.FIFO) -> dict[str, tuple[tuple[float, ...], list[Point]]]:
    """For each job, the values of the parameters ``grids`` names chosen together (every
    combination of their grids; ties: the first in grid order) by the smallest median |error|
    over the OTHER jobs' points, and the job's points predicted with them: {job: (values, points)}."""
    shown = arrangements()
    combos = list(itertools.product(*grids.values()))
    by_value = {v: {job: predict(job, measured[job], model=model, steps=steps,
                                 params={**params, **dict(zip(grids, v))}, shown=shown, order=order)
                    for job in measured} for v in combos}
    out = {}
    for job in measured:
        def cost(v: tuple[float, ...], job: str = job) -> float:
            return statistics.median(abs(p.error) for other, pts in by_value[v].items() if other != job for p in pts)
        best = min(combos, key=cost)
        out[job] = (best, by_value[best][job])
    return out


def one_worker_points(model: str = MODEL, steps: int = 400) -> list[Point]:
    """The synchronous one-worker runs of ``tests/data/tracing-cost``, each predicted from the
    profile taken right before it: W = 1 residuals beside the jobs' here, for the shipped widths
    (they show how far a profile and its own run differ, which one profile per job cannot:
    docs/accuracy.md)."""
    from benchmarks.tracing_cost import one_worker_runs  # it reads this module's MODEL

    return [Point(name, 1, (measured,), predicted, predicted, predicted, (), None)
            for name, measured, predicted in one_worker_runs(synchronous=True, steps=steps, model=model)]


def held_out_coverage(points: Sequence[Point], model: str, extra: Sequence[Point] = ()) -> tuple[int, int]:
    """(repeats inside their widened interval, repeats), each job's against the widths measured
    without it and with ``extra`` (cross-conformal)."""
    inside = total = 0
    for job in sorted({p.job for p in points}):
        others = [p for p in points if p.job != job] + list(extra)
        found, n = repeats_inside([q for q in points if q.job == job], model_error(others, model, "held out"), model)
        inside, total = inside + found, total + n
    return inside, total


def repeats_inside(points: Sequence[Point], error: ModelError, model: str) -> tuple[int, int]:
    """(repeats inside the interval of the outcome each showed, widened by ``error``; repeats)."""
    inside = total = 0
    for p in points:
        for i, m in enumerate(p.measured):
            # the outcome's interval: the simulation's (no model error asked for), or the alternative's point
            ref = p.reference(i)
            low, high = (ref, ref) if p.outcome(i) == ALTERNATING else (p.low, p.high)
            low, high = error.widen(model, p.workers, low, high, p.outcome(i))
            inside += low <= m <= high
            total += 1
    return inside, total


def table(points: Sequence[Point], markdown: bool = False) -> str:
    lines = (["| job | W | measured ex/s (repeats) | predicted | error |", "|---|---|---|---|---|"] if markdown
             else [f"{'job':<20} {'W':>2} {'measured':>9} {'repeats':>17} {'predicted':>9} {'error':>7}"])
    for p in points:
        reps = "/".join(f"{m:.1f}" for m in p.measured)
        lines.append(f"| {p.job} | {p.workers} | {p.mean:.1f} ({reps}) | {p.predicted:.1f} | {p.error:+.1%} |"
                     if markdown else
                     f"{p.job:<20} {p.workers:>2} {p.mean:>9.1f} {reps:>17} {p.predicted:>9.1f} {p.error:>+7.1%}")
    return "\n".join(lines)


def write_predictions(data: Path = HELD_OUT, steps: int = 400, workers: Sequence[int] = range(1, 9),
                      backup: int = 0) -> Path:
    """The default model's predictions of every trace in ``data`` at ``workers`` (with ``backup``
    backup workers: jobs ``<trace>_backup<b>``), each outcome's, written down
    (``predictions-before-measuring.json``) before its runs are measured."""
    out: dict[str, Any] = {"model": MODEL, "steps": steps, "jobs": {}}
    for trace in sorted(data.glob("*.trace.json.gz")):
        job = trace.name.removesuffix(".trace.json.gz") + (f"_backup{backup}" if backup else "")
        points = predict(job, {w: [] for w in workers}, steps=steps, data=data)
        out["jobs"][job] = [{"workers": p.workers, "predicted": round(p.predicted, 2), "low": round(p.low, 2),
                             "high": round(p.high, 2),
                             **({} if p.alternative is None else {"alternating": round(p.alternative, 2)})}
                            for p in points]
    path = data / "predictions-before-measuring.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path


def one_gradient(steps: int, markdown: bool) -> None:
    """``--one-gradient``: the runs of ``ONE_GRADIENT`` (W = 1 and W = 2 with one backup worker),
    each repeat against the outcome its step log showed and inside that outcome's interval
    widened by widths measured without them (on ``DATA``'s runs and the one-worker runs: what
    shipped when their predictions were written down)."""
    measured, shown = runs(ONE_GRADIENT), arrangements(ONE_GRADIENT)
    before = [p for job, by_w in sorted(runs().items()) for p in predict(job, by_w, steps=steps, shown=arrangements())]
    error = model_error([*before, *one_worker_points(MODEL, steps)], MODEL, "without the one-gradient runs")
    every = [p for job in sorted(measured)
             for p in predict(job, measured[job], steps=steps, data=ONE_GRADIENT, shown=shown)]
    print(table(every, markdown))
    med, worst = summary(every)
    inside, total = repeats_inside(every, error, MODEL)
    print(f"{len(every)} points: median |error| {med:.1%}, max {worst:.1%} (against the outcome each repeat showed); "
          f"{inside} of {total} repeats inside the interval with widths measured without them")
    for p in every:
        if p.workers == 2:
            showed = ", ".join(p.outcome(i) or DRIFTING for i in range(len(p.measured)))
            other = "" if p.alternative is None else f", alternating {p.alternative:.1f}"
            errors = ", ".join(f"{e:+.1%}" for e in p.repeat_errors())
            print(f"{p.job} W = 2: drifting {p.predicted:.1f}{other}; measured "
                  f"{'/'.join(f'{m:.1f}' for m in p.measured)}, the repeats showed: {showed}; each repeat's error "
                  f"against it: {errors}")
    repeats = [abs(e) for p in every if p.workers == 2 for e in p.repeat_errors()]
    print(f"W = 2, {len(repeats)} repeats against the outcome each showed: median |error| "
          f"{statistics.median(repeats):.1%}, max {max(repeats):.1%}")


def held_out(steps: int, markdown: bool) -> None:
    """``--held-out``: the held-out programs' runs, the default model beside the window off, each
    repeat against its interval widened by the shipped widths."""
    measured, shown = runs(HELD_OUT), arrangements(HELD_OUT)
    error = load_model_errors().of(MODEL)
    assert error is not None, f"{MODEL} ships no model error"
    for label, params in (("default", {}), ("window off (window_gain=0)", {"window_gain": 0.0})):
        every = [p for job in sorted(measured)
                 for p in predict(job, measured[job], steps=steps, params=params, data=HELD_OUT, shown=shown)]
        print(f"{MODEL} {label}")
        print(table(every, markdown))
        med, worst = summary(every)
        inside = sum(lo <= m <= hi for p in every for m in p.measured
                     for lo, hi in [error.widen(MODEL, p.workers, p.low, p.high)])
        total = sum(len(p.measured) for p in every)
        print(f"held out, {len(every)} points: median |error| {med:.1%}, max {worst:.1%}; {inside} of {total} "
              f"repeats inside the interval with the shipped widths\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--steps", type=int, default=400, help="simulated steps per point")
    add_param_option(parser)
    parser.add_argument("--job", action="append", default=[], help="only these jobs")
    add_order_option(parser)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--fit", metavar="NAME=V1,V2,...", action="append", default=[],
                        help="also report leave-one-job-out: NAME chosen on the other jobs from these values "
                             "(repeated: the parameters chosen together, every combination)")
    parser.add_argument("--write", action="store_true", help="ship the model's measured error (module docstring)")
    parser.add_argument("--held-out", action="store_true", help="score the held-out programs (module docstring)")
    parser.add_argument("--one-gradient", action="store_true",
                        help="score the runs with one gradient per update recorded after their model (docstring)")
    parser.add_argument("--write-predictions", action="store_true",
                        help="with --held-out or --one-gradient: write down its traces' predictions before measuring")
    args = parser.parse_args(argv)
    if args.held_out:
        if args.write_predictions:
            print(f"wrote {write_predictions(steps=args.steps)}")
        else:
            held_out(args.steps, args.markdown)
        return
    if args.one_gradient:
        if args.write_predictions:
            print(f"wrote {write_predictions(ONE_GRADIENT, args.steps, (1, 2), backup=1)}")
        else:
            one_gradient(args.steps, args.markdown)
        return
    params = model_params(args.param)
    measured, shown = runs(), arrangements()
    every: list[Point] = []
    for job in sorted(measured):
        if args.job and job not in args.job:
            continue
        points = predict(job, measured[job], model=args.model, steps=args.steps, params=params, shown=shown,
                         order=StreamOrder(args.order))
        every += points
    # and the runs with one gradient per update recorded after their rule (their own traces)
    one_shown = arrangements(ONE_GRADIENT)
    for job, by_w in sorted(runs(ONE_GRADIENT).items()):
        if not args.job or job in args.job:
            every += predict(job, by_w, model=args.model, steps=args.steps, params=params, data=ONE_GRADIENT,
                             shown=one_shown, order=StreamOrder(args.order))
    print(f"{args.model} {params or ''}{'' if args.order == 'fifo' else ' order ' + args.order}")
    print(table(every, args.markdown))
    print()
    for job in sorted({p.job for p in every}):
        med, worst = summary([p for p in every if p.job == job])
        print(f"{job:<20} median |error| {med:.1%}, max {worst:.1%}")
    if every:
        med, worst = summary(every)
        print(f"all {len(every)} points: median |error| {med:.1%}, max {worst:.1%}")
        kept = [p for p in every if aggregating(p)]
        med, worst = summary(kept)
        print(f"the {len(kept)} points whose updates aggregate (not W = 2 with a backup, R = 1): "
              f"median |error| {med:.1%}, max {worst:.1%}")
        two = [(p, p.alternative, m) for p in every if p.alternative is not None for m in p.measured]
        if two:
            between = sum(p.low <= m <= alternative for p, alternative, m in two)
            print(f"the {len(two)} repeats of points with two outcomes: {between} between the drifting outcome's "
                  f"interval low and the alternating outcome")
        for p in every:
            if p.alternative is not None:
                showed = ", ".join(p.outcome(i) or "" for i in range(len(p.measured)))
                errors = ", ".join(f"{e:+.1%}" for e in p.repeat_errors())
                print(f"{p.job} W = {p.workers}: two outcomes, drifting {p.predicted:.1f}, alternating "
                      f"{p.alternative:.1f}; measured {'/'.join(f'{m:.1f}' for m in p.measured)}, the repeats "
                      f"showed: {showed}; each repeat's error against it: {errors}")
    if args.fit:
        grids = {name: [float(v) for v in values.split(",")] for name, values in (f.split("=", 1) for f in args.fit)}
        chosen = {job: measured[job] for job in measured if not args.job or job in args.job}
        held = leave_one_job_out(chosen, grids, model=args.model, steps=args.steps, params=params,
                                 order=StreamOrder(args.order))
        print("\nleave-one-job-out: " + ", ".join(f"{n} chosen from {g}" for n, g in grids.items())
              + " on the other jobs")
        for job, (value, points) in sorted(held.items()):
            med, worst = summary(points)
            chosen_values = ", ".join(f"{n}={v:g}" for n, v in zip(grids, value))
            print(f"{job:<20} {chosen_values}: median |error| {med:.1%}, max {worst:.1%}")
        med, worst = summary([p for _, pts in held.values() for p in pts])
        print(f"all held out: median |error| {med:.1%}, max {worst:.1%}")
        med, worst = summary([p for _, pts in held.values() for p in pts if aggregating(p)])
        print(f"held out, the points whose updates aggregate: median |error| {med:.1%}, max {worst:.1%}")
    extra = one_worker_points(args.model, args.steps) if args.write or len({p.job for p in every}) > 1 else []
    if len({p.job for p in every}) > 1:
        inside, total = held_out_coverage(every, args.model, extra)
        print(f"held-out coverage at {LEVEL:.0%}: {inside} of {total} measured repeats inside their interval "
              f"({inside / total:.0%}), each job against widths measured without it")
    if args.write:
        error, path = write_model_error(
            args.model, LEVEL, residuals([*every, *extra]), REGIMES,
            f"benchmarks/sync_accuracy.py --write: {len(every)} points of {len({p.job for p in every})} jobs in "
            f"tests/data/ps-sync and its one-gradient folder (SyncReplicasOptimizer, W = 1..8, every repeat a "
            f"residual against the outcome its "
            f"step log showed; nothing fitted); W = 1 also the {len(extra)} synchronous one-worker runs of "
            f"tests/data/tracing-cost, each against its own profile",
            {"points": [{"job": p.job, "workers": p.workers, "measured": list(p.measured),
                         "predicted": round(p.predicted, 4),
                         **({"alternating": round(p.alternative, 4),
                             "shown": [p.outcome(i) or DRIFTING for i in range(len(p.measured))]}
                            if p.alternative is not None else {})} for p in every],
             "one_worker_runs": [{"job": p.job, "measured": list(p.measured), "predicted": round(p.predicted, 4)}
                                 for p in extra]},
            outcome_bounds=OTHER_REGIMES, symmetric=True)
        print(f"wrote {path}: " + ", ".join(f"{g.label} -{g.down:.1%}/+{g.up:.1%}" for g in error.regimes))


if __name__ == "__main__":
    main()
