"""Accuracy of the synchronous PS model against real ``SyncReplicasOptimizer`` runs.

    python -m benchmarks.sync_accuracy [--model li2020-des-sync+contention] [--steps 400]
        [--param KEY=VALUE ...] [--markdown]

For every measured run in ``tests/data/ps-sync`` (``<job>[_backup1].<repeat>.measured.json.gz``,
recorded by ``scripts/record_ps_truth.sh``) it predicts each measured W from the job's own
one-worker trace (``<job>.trace.json.gz``, recorded by the product's hook) at the run's link
rate, with the run's TCP congestion control and queue as its user would state them (cubic,
100 ms: the testbed's tbf), and the run's backup workers. It prints measured (each repeat) and
predicted per W with the error, then the median and maximum |error| per job and over all.

Counted: examples of aggregated gradients per second (a backup worker's dropped gradient does
not count), which is what the recorder measures (``update_throughput``) and what the model
reports.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.curve import CurveSettings
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "ps-sync"
MODEL = "li2020-des-sync+contention"
RUN = re.compile(r"(?P<job>(?P<model>[a-z0-9]+)_bw(?P<mbit>\d+))(?P<backup>_backup(?P<b>\d+))?\.(?P<repeat>r\d+)"
                 r"\.measured\.json\.gz")


@dataclass(frozen=True)
class Point:
    """One job's measured W (every repeat) and its prediction."""

    job: str  # e.g. mlp_bw100_backup1
    workers: int
    measured: tuple[float, ...]
    predicted: float
    low: float
    high: float

    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured, against the mean of the repeats."""
        return self.predicted / self.mean - 1.0


def runs(data: Path = DATA) -> dict[str, dict[int, list[float]]]:
    """Measured examples/s per job and W, every repeat: {job: {W: [thr, ...]}}."""
    out: dict[str, dict[int, list[float]]] = {}
    for path in sorted(data.glob("*.measured.json.gz")):
        m = RUN.fullmatch(path.name)
        if m is None:
            continue
        job = m["job"] + (m["backup"] or "")
        for r in json.loads(gzip.decompress(path.read_bytes()))["results"]:
            out.setdefault(job, {}).setdefault(int(r["W"]), []).append(float(r["thr_window"]))
    return out


def job_settings(job: str) -> tuple[str, float, int]:
    """(trace name, link rate in bit/s, backup workers) of a job name."""
    m = re.fullmatch(r"(?P<trace>[a-z0-9]+_bw(?P<mbit>\d+))(_backup(?P<b>\d+))?", job)
    if m is None:
        raise ValueError(f"not a job name: {job}")
    return m["trace"], float(m["mbit"]) * 1e6, int(m["b"] or 0)


def predict(job: str, measured: Mapping[int, Sequence[float]], *, model: str = MODEL, steps: int = 400,
            params: Mapping[str, Any] | None = None, data: Path = DATA) -> list[Point]:
    """The prediction of every measured W of ``job``."""
    trace, bps, backup = job_settings(job)
    profile = load_profile(data / f"{trace}.trace.json.gz")
    chosen: dict[str, Any] = {"congestion_control": "cubic", "queue_s": 0.1, **(params or {})}
    if backup:
        chosen["backup_workers"] = backup
    if "contention" not in model:
        chosen = {k: v for k, v in chosen.items() if k not in ("congestion_control", "queue_s")}
    workers = tuple(sorted(measured))
    advice = advise(profile, AdviceRequest(
        network=NetworkModel(bandwidth_bps=bps), model=ModelChoice(model, chosen), side_by_side=(),
        curve=CurveSettings(workers=workers, steps=steps, warmup_steps=50, seed=0)))
    return [Point(job, w, tuple(measured[w]), advice.point(w).throughput, advice.point(w).low, advice.point(w).high)
            for w in workers]


def summary(points: Sequence[Point]) -> tuple[float, float]:
    """Median and maximum |error| of ``points``."""
    errors = [abs(p.error) for p in points]
    return statistics.median(errors), max(errors)


def table(points: Sequence[Point], markdown: bool = False) -> str:
    lines = (["| job | W | measured ex/s (repeats) | predicted | error |", "|---|---|---|---|---|"] if markdown
             else [f"{'job':<20} {'W':>2} {'measured':>9} {'repeats':>17} {'predicted':>9} {'error':>7}"])
    for p in points:
        reps = "/".join(f"{m:.1f}" for m in p.measured)
        lines.append(f"| {p.job} | {p.workers} | {p.mean:.1f} ({reps}) | {p.predicted:.1f} | {p.error:+.1%} |"
                     if markdown else
                     f"{p.job:<20} {p.workers:>2} {p.mean:>9.1f} {reps:>17} {p.predicted:>9.1f} {p.error:>+7.1%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--steps", type=int, default=400, help="simulated steps per point")
    parser.add_argument("--param", action="append", default=[], metavar="K=V", help="a model parameter")
    parser.add_argument("--job", action="append", default=[], help="only these jobs")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    measured = runs()
    every: list[Point] = []
    for job in sorted(measured):
        if args.job and job not in args.job:
            continue
        points = predict(job, measured[job], model=args.model, steps=args.steps, params=params)
        every += points
    print(f"{args.model} {params or ''}")
    print(table(every, args.markdown))
    print()
    for job in sorted({p.job for p in every}):
        med, worst = summary([p for p in every if p.job == job])
        print(f"{job:<20} median |error| {med:.1%}, max {worst:.1%}")
    if every:
        med, worst = summary(every)
        print(f"all {len(every)} points: median |error| {med:.1%}, max {worst:.1%}")


if __name__ == "__main__":
    main()
