"""Accuracy of the PS model with heterogeneous workers, against real runs.

    python -m benchmarks.heterogeneous_accuracy [--steps 1000] [--order fifo|recorded] [--markdown]

For every measured run in ``tests/data/ps-traces/heterogeneous`` (asynchronous PS, 1 PS at
100 Mbit/s, every second worker's accelerator emulated at half speed; its README says how they
were taken), ``tests/data/ps-sync/heterogeneous`` (the same, synchronous) and
``tests/data/ps-traces/heterogeneous-nic`` (asynchronous, every second worker's own link shaped to
50 Mbit/s, the others unshaped) it predicts each
measured W with the default model for the trace (``li2020-des+contention``, or
``li2020-des-sync+contention`` for a synchronous program) from the program's one-worker trace,
taken on a full-speed worker (``tests/data/ps-traces/<program>_ps1_bw100.trace.json.gz``,
``tests/data/ps-sync/<program>_bw100.trace.json.gz``), as a user would ask: the workers' speeds
stated (``--worker-speed 1,0.5,1,0.5,...``), or their links (``--worker-bandwidth
10Gbit/s,50Mbit/s,...``: an unshaped link is stated as ``UNSHAPED_BPS``, far above the PS link),
TCP cubic and the 100 ms queue. Beside it, the same trace predicted as if every worker were
the traced one: what stating the speeds or links is worth. Every point is also checked against its 95 % interval (the
model's shipped error, as a prediction widens it). Where the model reports two outcomes (W = 2
of a transfer-bound job: the workers drift, or alternate pulls and pushes), each run is measured
against the outcome its step log shows (``arrangements.alternated``), as the model's error is.

Nothing was fitted on these runs: the speeds and link rates are the recorder's (each slow
worker's emulated compute takes twice as long; each slow link is a 50 Mbit/s tbf both ways) and
every constant of the model is the one-PS testbed's. The model's predictions for the NIC runs
were written down before they were measured (``predictions-before-measuring.json`` there).
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.curve import CurveSettings
from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, alternated
from advisor.core.sim_types import NetworkModel, StreamOrder
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors
from benchmarks.multi_ps_accuracy import summary
from benchmarks.options import add_order_option
from benchmarks.paths import REPO

TRACES = REPO / "tests" / "data" / "ps-traces"
SYNC_TRACES = REPO / "tests" / "data" / "ps-sync"
DATA = TRACES / "heterogeneous"
SYNC_DATA = SYNC_TRACES / "heterogeneous"
NIC_DATA = TRACES / "heterogeneous-nic"
UNSHAPED_BPS = 10e9  # an unshaped veth between namespaces, stated as a 10 Gbit/s NIC: never the bottleneck
MODEL = "li2020-des+contention"
SYNC_MODEL = "li2020-des-sync+contention"  # registry.DEFAULT_SYNC_MODEL


@dataclass(frozen=True)
class Point:
    """One measured W of a heterogeneous run and its predictions."""

    run: str
    workers: int
    speeds: tuple[float, ...]  # of the W workers (empty: all as traced)
    links_bps: tuple[float, ...]  # of the W workers' own links (empty: none stated)
    measured: float
    predicted: float  # with the workers' speeds stated: the outcome the run showed
    low: float
    high: float
    homogeneous: float  # the same trace, every worker as the traced one
    outcome: str = "predicted"  # or the model's name of the outcome the run showed (two outcomes at W = 2)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def homogeneous_error(self) -> float:
        return self.homogeneous / self.measured - 1.0

    @property
    def kind(self) -> str:
        """Which set the point belongs to: "synchronous" (speeds under a barrier), "links"
        (asynchronous, heterogeneous NICs) or "asynchronous" (asynchronous, speeds)."""
        return "synchronous" if self.run.startswith("sync-") else "links" if self.links_bps else "asynchronous"

    @property
    def workers_stated(self) -> str:
        """What was stated of the W workers: their speeds, or their links in Mbit/s."""
        if self.links_bps:
            return ",".join("unshaped" if b >= UNSHAPED_BPS else f"{b / 1e6:g}M" for b in self.links_bps)
        return ",".join(f"{s:g}" for s in self.speeds)

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high


def _curve(trace: Path, meta: dict, workers: Sequence[int], speeds: tuple[float, ...], steps: int,
           model: str = MODEL, links_bps: tuple[float, ...] = (), order: StreamOrder = StreamOrder.FIFO) -> dict:
    """{W: {outcome: (throughput, low, high)}} of the default model with the shipped model error
    ("predicted" for a point with one outcome)."""
    request = AdviceRequest(
        network=NetworkModel(bandwidth_bps=float(meta["bw_mbit"]) * 1e6, order=order),
        model=ModelChoice(model, {"congestion_control": meta.get("congestion_control", "cubic"),
                                  "queue_s": float(meta.get("queue_ms", 100)) / 1e3}),
        side_by_side=(), worker_speeds=speeds, worker_bandwidths_bps=links_bps, model_error=load_model_errors(),
        curve=CurveSettings(workers=tuple(workers), steps=steps, warmup_steps=50, seed=0))
    advice = advise(load_profile(trace), request)
    out: dict[int, dict[str, tuple[float, float, float]]] = {}
    for w in workers:
        point = advice.point(w)
        out[w] = {"predicted": (point.throughput, point.low, point.high)}
        out[w] |= {o.name: (o.throughput, o.low, o.high) for o in point.outcomes}
    return out


def shown(step_log: Sequence[Sequence[Sequence[float]]], outcomes: dict) -> str:
    """The outcome a run showed where the model reports two: alternating if its two workers'
    step ends alternated, else the prediction's own (drifting)."""
    if ALTERNATING not in outcomes:
        return "predicted"
    ends = [[float(step[1]) for step in log] for log in step_log]
    return ALTERNATING if alternated(ends[0], ends[1]) else DRIFTING


def links_of(meta: dict) -> tuple[float, ...]:
    """Each worker's stated link rate (bit/s) from the recorder's ``worker_mbits`` (None: unshaped)."""
    return tuple(UNSHAPED_BPS if m is None else float(m) * 1e6 for m in meta.get("worker_mbits", ()))


def points(folders: Sequence[Path] = (DATA, SYNC_DATA, NIC_DATA), steps: int = 1000,
           order: StreamOrder = StreamOrder.FIFO) -> list[Point]:
    """Every measured point of every heterogeneous run, with its predictions. Each distinct
    request is simulated once (seeded: a repeat's curve, and the as-traced curve every run of a
    program shares, are the same)."""
    out: list[Point] = []
    curves: dict[tuple, dict] = {}

    def curve(trace: Path, meta: dict, workers: Sequence[int], speeds: tuple[float, ...], model: str,
              links: tuple[float, ...] = ()) -> dict:
        key = (trace, meta["bw_mbit"], meta.get("congestion_control"), meta.get("queue_ms"), tuple(workers), speeds,
               links, model)
        if key not in curves:
            curves[key] = _curve(trace, meta, workers, speeds, steps, model, links, order)
        return curves[key]

    for path in sorted(p for data in folders for p in data.glob("*.measured.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        meta = doc["meta"]
        speeds = tuple(float(s) for s in meta.get("worker_speeds", ()))
        links = links_of(meta)
        sync = bool(meta.get("sync"))
        model = SYNC_MODEL if sync else MODEL
        trace = (SYNC_TRACES / f"{meta['model']}_bw{int(meta['bw_mbit'])}.trace.json.gz" if sync else
                 TRACES / f"{meta['model']}_ps1_bw{int(meta['bw_mbit'])}.trace.json.gz")
        results = {int(r["W"]): r for r in doc["results"]}
        workers = sorted(results)
        stated = curve(trace, meta, workers, speeds, model, links)
        same = curve(trace, meta, workers, (), model)
        name = ("sync-" if sync else "") + path.name.removesuffix(".measured.json.gz")
        for w in workers:
            outcome = shown(results[w]["step_log"], stated[w])
            out.append(Point(name, w, speeds[:w], links[:w], float(results[w]["thr_window"]), *stated[w][outcome],
                             same[w]["predicted"][0], outcome))
    return out


KINDS = {"asynchronous": "asynchronous, speeds", "synchronous": "synchronous, speeds",
         "links": "asynchronous, links"}


def table(found: Sequence[Point], markdown: bool) -> list[str]:
    head = (["| run | W | speeds or links | measured | predicted (95 %) | error | all as traced | error |",
             "|---|---|---|---|---|---|---|---|"] if markdown else
            [f"{'run':<26} {'W':>2} {'measured':>8} {'predicted':>9} {'95% interval':>15} {'error':>7} {'in':>3} "
             f"{'as traced':>9} {'error':>7}"])
    for p in found:
        head.append(f"| {p.run} | {p.workers} | {p.workers_stated} | {p.measured:.1f} | {p.predicted:.1f} ({p.low:.1f}-"
                    f"{p.high:.1f}) | {p.error:+.1%} | {p.homogeneous:.1f} | {p.homogeneous_error:+.1%} |"
                    if markdown else
                    f"{p.run:<26} {p.workers:>2} {p.measured:>8.1f} {p.predicted:>9.1f} {p.low:>7.1f}-{p.high:<7.1f} "
                    f"{p.error:>+7.1%} {'yes' if p.inside else 'NO':>3} {p.homogeneous:>9.1f} "
                    f"{p.homogeneous_error:>+7.1%}" + ("" if p.outcome == "predicted" else f"  ({p.outcome})"))
    return head


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per worker (default 1000)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_order_option(parser)
    args = parser.parse_args(argv)
    found = points(steps=args.steps, order=StreamOrder(args.order))
    if not found:
        raise SystemExit(f"no measured run under {DATA}")
    print("\n".join(table(found, args.markdown)))
    for run in sorted({p.run for p in found}):
        mine = [p for p in found if p.run == run]
        s, h = summary([p.error for p in mine]), summary([p.homogeneous_error for p in mine])
        print(f"{run}: stated median |error| {s[0]:.1%}, max {s[1]:.1%}; as if every worker were the traced one "
              f"{h[0]:.1%}, {h[1]:.1%}")
    for kind, what in KINDS.items():
        mine = [p for p in found if p.kind == kind]
        if not mine:
            continue
        s, h = summary([p.error for p in mine]), summary([p.homogeneous_error for p in mine])
        inside = sum(p.inside for p in mine)
        print(f"{what}, {len(mine)} points: stated median |error| {s[0]:.1%}, max {s[1]:.1%}, {inside} of "
              f"{len(mine)} inside the 95 % interval; as if every worker were the traced one {h[0]:.1%}, {h[1]:.1%}")


if __name__ == "__main__":
    main()
