"""Two workers on one PS: which arrangement each real run took, how often, and what it was worth.

    python -m benchmarks.w2_arrangements

No simulation (under a second). Three tables, over every W = 2 run with one PS that
``arrangements.TESTBED`` counts (``tests/data/ps-async/measured``'s MLP and the project's recordings
in ``tests/data/ps-traces``, ``tests/data/ps-arrangements`` and ``tests/data/ps-async-held-out``):

- **Runs**: each run's examples/s, its middle share (``arrangements.middle_share``: the share of one
  worker's step ends in the middle half of the other's step; 0.5 for random phases) and whether it
  alternated (``arrangements.alternated``).
- **Counts**: per network setting, the runs that alternated and Laplace's probability, recounted
  here and as the package ships it (``TESTBED``); the two must agree (the tests hold them).
- **A continuum**: each W = 2 run of ``tests/data/ps-arrangements`` against the straight line from
  the kept prediction's drifting outcome at middle share 0.5 to its alternating one at 1
  (measured / on the line - 1). ``benchmarks/predicted_first.py`` scores every point of that
  folder against the kept predictions.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, MIDDLE_SHARE, TESTBED, Count
from benchmarks.accuracy import runs_at
from benchmarks.paths import PS_ASYNC_DATA, REPO
from benchmarks.predicted_first import Point, points, two_worker_arrangement

DATA = REPO / "tests" / "data"
ARRANGEMENTS = DATA / "ps-arrangements"


@dataclass(frozen=True)
class Run:
    """One measured run at W workers: where it comes from, its rate and, at W = 2, its arrangement."""

    setting: str  # a key of TESTBED
    source: str  # its file, under tests/data
    workers: int
    throughput: float
    share: float | None  # the middle share (W = 2 only)
    alternated: bool = False  # its step log alternated (``arrangements.alternated``; W = 2 only)


def _recorded(setting: str, name: str) -> Iterator[Run]:
    """The runs of one of the project's files (``ps-traces`` format: steps as (start, end, step))."""
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
    for r in doc["results"]:
        share, shows = two_worker_arrangement(r["step_log"]) if r["W"] == 2 else (None, False)
        yield Run(setting, name, int(r["W"]), float(r["thr_window"]), share, shows)


def _ps_async(setting: str, name: str) -> Iterator[Run]:
    """The W = 2 runs of one of ps-async's files (``accuracy.runs_at``: the share after each run's
    own warm-up steps; alternated at ``MIDDLE_SHARE`` or more, as ``arrangements.alternated``)."""
    for thr, share in runs_at(PS_ASYNC_DATA / "measured" / name).get(2, []):
        yield Run(setting, f"ps-async/measured/{name}", 2, float(thr), share,
                  share is not None and share >= MIDDLE_SHARE)


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


def on_the_line(point: Point) -> float | None:
    """Where a W = 2 run with two kept outcomes would lie on the straight line from the drifting
    outcome at middle share 0.5 (random phases) to the alternating one at 1; None otherwise."""
    if point.share is None or len(point.outcomes) < 2:
        return None
    drift = next(float(o["throughput"]) for o in point.outcomes if o["name"] == DRIFTING)
    alt = next(float(o["throughput"]) for o in point.outcomes if o["name"] == ALTERNATING)
    return drift + (point.share - 0.5) / 0.5 * (alt - drift)


def main() -> None:
    found = runs()
    print(f"W = 2 runs of one PS with two outcomes (middle share: 0.5 random phases, >= {MIDDLE_SHARE} alternated)")
    print(f"{'setting':<24} {'source':<58} {'ex/s':>6} {'share':>6}  arrangement")
    for r in sorted((r for r in found if r.workers == 2), key=lambda r: (r.setting, r.share or 0)):
        print(f"{r.setting:<24} {r.source:<58} {r.throughput:>6.1f} {r.share:>6.2f}  "
              f"{ALTERNATING if r.alternated else DRIFTING}")
    print()
    print("counts per setting: recounted here / shipped (arrangements.TESTBED), Laplace's (k + 1) / (n + 2)")
    for setting, shipped in TESTBED.items():
        counted = recount(found, setting)
        print(f"  {setting:<24} {counted.alternated} of {counted.runs} / {shipped.alternated} of {shipped.runs}: "
              f"probability {shipped.probability:.0%}")
    print()
    print("the W = 2 runs of ps-arrangements against the line from the kept drifting outcome (share 0.5) to the "
          "alternating one (share 1): measured / on the line - 1")
    two = [p for p in points(ARRANGEMENTS) if on_the_line(p) is not None]
    for key in sorted({p.key for p in two}):
        runs_of_key = sorted((p for p in two if p.key == key), key=lambda p: p.share or 0)
        gaps = [p.measured / (on_the_line(p) or math.nan) - 1 for p in runs_of_key]
        print(f"  {key}: " + ", ".join(f"{p.measured:.1f} at {p.share or 0:.2f} ({g:+.1%})"
                                       for p, g in zip(runs_of_key, gaps))
              + f"; max |gap| {max(abs(g) for g in gaps):.1%}")
    print("(every point of the folder against its kept prediction: python -m benchmarks.predicted_first)")


if __name__ == "__main__":
    main()
