"""Two workers on one PS: which arrangement each real run took, how often, and what it was worth.

    python -m benchmarks.w2_arrangements

No simulation (under a second). Three tables, over every W = 2 run of the one-PS MLP that
``arrangements.TESTBED`` counts (``tests/data/ps-async/measured`` and the project's recordings in
``tests/data/ps-traces`` and ``tests/data/ps-arrangements``):

- **Runs**: each run's examples/s, its middle share (``arrangements.middle_share``: the share of one
  worker's step ends in the middle half of the other's step; 0.5 for random phases) and whether it
  alternated (``arrangements.alternated``).
- **Counts**: per network setting, the runs that alternated and Laplace's probability, recounted
  here and as the package ships it (``TESTBED``); the two must agree (the tests hold them).
- **Predicted first** (``tests/data/ps-arrangements/prediction-q*.json``: ``advisor predict --json``
  of the 20 ms profile and of the 100 ms one, taken before any multi-worker run of that folder):
  each measured point's error against the curve's value and against the outcome the run showed,
  whether it lies inside that outcome's interval, and, at W = 2, how far the run lies from the
  straight line from the drifting outcome at middle share 0.5 to the alternating one at 1
  (measured / on the line - 1).
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, TESTBED, Count, middle_share
from advisor.core.models.ps_des.arrangements import alternated as shows_alternation
from benchmarks.paths import PS_ASYNC_DATA, REPO

DATA = REPO / "tests" / "data"
ARRANGEMENTS = DATA / "ps-arrangements"
PREDICTIONS = {"loss-based, short queue": ARRANGEMENTS / "prediction-q20.json",
               "loss-based, deep queue": ARRANGEMENTS / "prediction-q100.json"}


@dataclass(frozen=True)
class Run:
    """One measured run at W workers: where it comes from, its rate and, at W = 2, its arrangement."""

    setting: str  # a key of TESTBED
    source: str  # its file, under tests/data
    workers: int
    throughput: float
    share: float | None  # the middle share (W = 2 only)

    @property
    def alternated(self) -> bool:
        return self.share is not None and self.share >= 0.75


def _recorded(setting: str, name: str) -> Iterator[Run]:
    """The runs of one of the project's files (``ps-traces`` format: steps as (start, end, step))."""
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
    for r in doc["results"]:
        share = None
        if r["W"] == 2:
            a, b = ([step[1] for step in worker] for worker in r["step_log"])
            a, b = list(a), list(b)
            share = middle_share(a, b)
            assert shows_alternation(a, b) == (share >= 0.75)
        yield Run(setting, name, int(r["W"]), float(r["thr_window"]), share)


def _ps_async(setting: str, name: str) -> Iterator[Run]:
    """The W = 2 runs of one of ps-async's files (steps per worker, after the run's ``skip``)."""
    for r in json.loads((PS_ASYNC_DATA / "measured" / name).read_text())["results"]:
        if r["W"] == 2:
            a, b = ([s[1] for s in steps][r["skip"]:] for steps in r["step_log"].values())
            yield Run(setting, f"ps-async/measured/{name}", 2, float(r["thr_window"]), middle_share(list(a), list(b)))


def runs() -> list[Run]:
    """Every run of the files ``TESTBED`` counts (the project's at every W they hold)."""
    out: list[Run] = []
    for setting, count in TESTBED.items():
        for name in count.files:
            out.extend(_ps_async(setting, name))
        for name in count.recorded:
            out.extend(_recorded(setting, name))
    return out


def recount(found: list[Run], setting: str) -> Count:
    """``setting``'s count recounted from its W = 2 runs."""
    two = [r for r in found if r.setting == setting and r.workers == 2]
    return Count(TESTBED[setting].setting, sum(r.alternated for r in two), len(two), ())


def _prediction(path: Path) -> dict[int, list[dict[str, Any]]]:
    """{W: outcomes} of a kept prediction (one outcome named "predicted" where the point has one)."""
    doc = json.loads(path.read_text())
    return {int(p["workers"]): p["outcomes"] for p in doc["curve"]}


def predicted_first(found: list[Run]) -> list[dict[str, Any]]:
    """Each run of ps-arrangements against the kept prediction of its queue."""
    rows = []
    for setting, path in PREDICTIONS.items():
        curve = _prediction(path)
        for r in found:
            if r.setting != setting or not r.source.startswith("ps-arrangements"):
                continue
            outcomes = curve[r.workers]
            head = outcomes[0]
            shown = next((o for o in outcomes if o["name"] == (ALTERNATING if r.alternated else DRIFTING)), head)
            row = {"run": r, "predicted": head["throughput"], "error": head["throughput"] / r.throughput - 1,
                   "shown": shown["name"], "shown_error": shown["throughput"] / r.throughput - 1,
                   "inside": shown["low"] <= r.throughput <= shown["high"],
                   "inside_any": any(o["low"] <= r.throughput <= o["high"] for o in outcomes)}
            if r.share is not None and len(outcomes) > 1:
                drift = next(o["throughput"] for o in outcomes if o["name"] == DRIFTING)
                alt = next(o["throughput"] for o in outcomes if o["name"] == ALTERNATING)
                on_line = drift + (r.share - 0.5) / 0.5 * (alt - drift)
                row["line"], row["line_error"] = on_line, r.throughput / on_line - 1
            rows.append(row)
    return rows


def main() -> None:
    found = runs()
    print("W = 2 runs of the one-PS MLP (middle share: 0.5 random phases, >= 0.75 alternated)")
    print(f"{'setting':<24} {'source':<58} {'ex/s':>6} {'share':>6}  arrangement")
    for r in sorted((r for r in found if r.workers == 2), key=lambda r: (r.setting, r.share or 0)):
        print(f"{r.setting:<24} {r.source:<58} {r.throughput:>6.1f} {r.share:>6.2f}  "
              f"{ALTERNATING if r.alternated else DRIFTING}")
    print()
    print("counts per setting: recounted here / shipped (arrangements.TESTBED), Laplace's (k + 1) / (n + 2)")
    for setting, shipped in TESTBED.items():
        mine = recount(found, setting)
        print(f"  {setting:<24} {mine.alternated} of {mine.runs} / {shipped.alternated} of {shipped.runs}: "
              f"probability {shipped.probability:.0%}")
    print()
    rows = predicted_first(found)
    print("predicted first (prediction-q20.json, prediction-q100.json), error = predicted / measured - 1")
    print(f"{'setting':<24} {'W':>2} {'ex/s':>6} {'share':>6} {'predicted':>9} {'error':>7}  "
          f"{'showed':<11} {'error':>7} {'inside':>6}  {'on the line':>11}")
    for row in sorted(rows, key=lambda x: (x["run"].setting, x["run"].workers, x["run"].share or 0)):
        r = row["run"]
        line = f"{row['line']:>6.1f} {row['line_error']:+6.1%}" if "line" in row else ""
        share = f"{r.share:>6.2f}" if r.share is not None else f"{'':>6}"
        print(f"{r.setting:<24} {r.workers:>2} {r.throughput:>6.1f} {share} {row['predicted']:>9.1f} "
              f"{row['error']:+7.1%}  {row['shown']:<11} {row['shown_error']:+7.1%} {'yes' if row['inside'] else 'no':>6}"
              f"  {line}")
    errors = [abs(x["error"]) for x in rows]
    shown = [abs(x["shown_error"]) for x in rows]
    print(f"{len(rows)} points: |error| median {statistics.median(errors):.1%}, max {max(errors):.1%}; against the "
          f"outcome each run showed median {statistics.median(shown):.1%}, max {max(shown):.1%}; inside the interval "
          f"of that outcome {sum(x['inside'] for x in rows)} of {len(rows)}, of any outcome "
          f"{sum(x['inside_any'] for x in rows)}")
    for setting in PREDICTIONS:
        on = [abs(x["line_error"]) for x in rows if "line_error" in x and x["run"].setting == setting]
        if on:
            print(f"  {setting}: the {len(on)} W = 2 runs against the line from drifting (share 0.5) to "
                  f"alternating (share 1): max |gap| {max(on):.1%}")


if __name__ == "__main__":
    main()
