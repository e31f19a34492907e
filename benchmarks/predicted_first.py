"""Asynchronous one-PS runs recorded after their predictions were kept: each point against them.

    python -m benchmarks.predicted_first

No simulation (under a second). Each folder holds one-worker traces recorded first, the
``advisor predict --json`` document of each (``prediction-<key>.json``), kept before any of the
folder's multi-worker runs, and the runs (``*.measured.json.gz``, the format of
``tests/data/ps-traces``): nothing the model ships was fitted on them.

- ``tests/data/ps-async-held-out``: the MLP and the CNN of ``scripts/record_ps_traces.py`` at
  W = 1..8, cubic with a 100 ms queue (``prediction-mlp.json``, ``prediction-cnn.json``);
- ``tests/data/ps-arrangements``: the MLP at W = 2 repeated and W = 1..4, cubic with a 20 ms and a
  100 ms queue and BBR (``prediction-q20.json``, ``prediction-q100.json``, ``prediction-bbr.json``;
  ``benchmarks/w2_arrangements.py`` reads the W = 2 runs further).

Per point: the error of the curve's value (predicted / measured - 1); where the point has two
outcomes (W = 2: drifting, alternating), the outcome the run showed (``arrangements.alternated``)
and the error against it; whether the run lies inside that outcome's interval, and inside any of
the point's outcomes' intervals; and how the workers' phases lay (``multi_ps_accuracy``'s order
parameter R1 over the window: near 1 in step, near 0 spread evenly over the step, beside its
value for independent uniform phases).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, alternated, middle_share
from benchmarks.multi_ps_accuracy import order_parameter, random_order_parameter
from benchmarks.paths import REPO

FOLDERS = (REPO / "tests" / "data" / "ps-async-held-out", REPO / "tests" / "data" / "ps-arrangements")


@dataclass(frozen=True)
class Point:
    """One measured run against the kept prediction of its trace."""

    folder: str
    source: str  # the measured file's name
    key: str  # the prediction it is scored against (prediction-<key>.json)
    workers: int
    measured: float
    share: float | None  # W = 2: the middle share of the two workers' step ends
    alternated: bool  # W = 2: its step log alternated (``arrangements.alternated``); else False
    outcomes: tuple[dict[str, Any], ...]  # the kept point's outcomes, the curve's value first
    order: float | None = None  # W >= 2: the order parameter R1 of the workers' phases over the window

    @property
    def predicted(self) -> float:
        return float(self.outcomes[0]["throughput"])

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def shown(self) -> dict[str, Any]:
        """The outcome the run showed: at a point with two, the alternating one when its step log
        alternated, else the drifting one; the only one otherwise."""
        if len(self.outcomes) == 1:
            return self.outcomes[0]
        name = ALTERNATING if self.alternated else DRIFTING
        return next((o for o in self.outcomes if o["name"] == name), self.outcomes[0])

    @property
    def shown_error(self) -> float:
        return float(self.shown["throughput"]) / self.measured - 1

    @property
    def inside(self) -> bool:
        return float(self.shown["low"]) <= self.measured <= float(self.shown["high"])

    @property
    def inside_any(self) -> bool:
        return any(float(o["low"]) <= self.measured <= float(o["high"]) for o in self.outcomes)


def prediction_key(measured_file: str) -> str:
    """The kept prediction a measured file is scored against: its network setting where its name
    has one after the link rate (``..._bw100_q20.r1...``: ``q20``; ``_bbr``: ``bbr``), else its
    program (``mlp_...``)."""
    setting = re.search(r"_bw\d+_([a-z0-9]+)\.", measured_file)
    return setting[1] if setting else measured_file.split("_", 1)[0]


def two_worker_arrangement(step_log: Sequence[Sequence[Sequence[float]]]) -> tuple[float, bool]:
    """A W = 2 run's middle share and whether it alternated (``arrangements.middle_share``,
    ``alternated``), from its step log in the format of ``tests/data/ps-traces`` (per worker, each
    step's (start, end, global step))."""
    a, b = ([float(step[1]) for step in worker] for worker in step_log)
    return middle_share(a, b), alternated(a, b)


def points(folder: Path) -> list[Point]:
    """Every run of ``folder``'s measured files against its kept prediction."""
    out = []
    for path in sorted(folder.glob("*.measured.json.gz")):
        key = prediction_key(path.name)
        curve = {int(p["workers"]): tuple(p["outcomes"])
                 for p in json.loads((folder / f"prediction-{key}.json").read_text())["curve"]}
        doc = json.loads(gzip.decompress(path.read_bytes()))
        skip = int(doc["meta"].get("window_skips_steps", 20))
        for r in doc["results"]:
            w, share, shows = int(r["W"]), None, False
            if w == 2:
                share, shows = two_worker_arrangement(r["step_log"])
            order = order_parameter(r["step_log"], skip) if w >= 2 else None
            out.append(Point(folder.name, path.name, key, w, float(r["thr_window"]), share, shows, curve[w], order))
    return out


def summary(found: Sequence[Point]) -> str:
    """Median and max |error|, against the curve's value and the outcome each run showed, and coverage."""
    errors = [abs(p.error) for p in found]
    shown = [abs(p.shown_error) for p in found]
    return (f"{len(found)} points: |error| median {statistics.median(errors):.1%}, max {max(errors):.1%}; against "
            f"the outcome each run showed median {statistics.median(shown):.1%}, max {max(shown):.1%}; inside the "
            f"interval of that outcome {sum(p.inside for p in found)} of {len(found)}, of any outcome "
            f"{sum(p.inside_any for p in found)}")


def _order(p: Point) -> str:
    """R1 beside its value for independent uniform phases; blank at W = 1."""
    return "" if p.order is None else f"{p.order:.2f} ({random_order_parameter(p.workers, 4000):.2f})"


def main() -> None:
    print("error = predicted / measured - 1; two outcomes at W = 2 (drifting, alternating): the run's by its step log")
    for folder in FOLDERS:
        found = points(folder)
        print(f"\n{folder.relative_to(REPO)}")
        if not found:
            print("  no run measured yet")
            continue
        print(f"{'prediction':<10} {'W':>2} {'measured':>8} {'share':>6} {'predicted':>9} {'error':>7}  "
              f"{'showed':<11} {'error':>7} {'inside':>6}  R1 (random)")
        for p in sorted(found, key=lambda p: (p.key, p.workers, p.share or 0)):
            share = f"{p.share:>6.2f}" if p.share is not None else f"{'':>6}"
            print(f"{p.key:<10} {p.workers:>2} {p.measured:>8.1f} {share} {p.predicted:>9.1f} {p.error:+7.1%}  "
                  f"{p.shown['name']:<11} {p.shown_error:+7.1%} {'yes' if p.inside else 'no':>6}  {_order(p)}")
        for key in sorted({p.key for p in found}):
            print(f"  {key}: {summary([p for p in found if p.key == key])}")
        print(f"  all: {summary(found)}")


if __name__ == "__main__":
    main()
