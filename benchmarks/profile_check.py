"""Does the profile catch a wrong statement? The prediction's W = 1 against the profiling run's own rate.

    python -m benchmarks.profile_check [--sync]

For every real PS curve (``benchmarks/real_curves.py``: 7 asynchronous one-PS runs, 3 PS-trace
runs with 1 and 2 PS) the job is predicted as its owner would state it and with one thing stated
wrong (the link 2x too fast; another cluster's contention constants), as
``benchmarks/calibration_rules.py`` does. Per curve and statement it prints the prediction's
W = 1, the profile's own rate (``core/profile_check.py``: batch / mean client wall of its traced
steps; these profiles have no untraced tail), their gap and whether it contradicts (beyond the
model's W = 1 width plus tracing's allowance). Then, per statement, the error at the measured
W >= 2 of the prediction as made and of the prediction the product makes (anchored on the
profile's rate where the check contradicts, as ``advisor predict --anchor`` and the controller
do; as made elsewhere): median and 90th percentile of |predicted / measured - 1|, and how often
the interval holds the measured mean. Then the false alarms: every other profile in the
repository whose link rate is known (``every_profile``: the synchronous, 2-PS, held-out,
tracing-cost and Keras all-reduce profiles, none of which set the limit), predicted at W = 1 at
the rate it was recorded on: how many the check contradicts. About 70 s (one calibration grid per
contradicted curve).
``--sync`` checks the synchronous curves (``tests/data/ps-sync``) instead, without the false
alarms (whose profiles include them). docs/decisions.md has the figures.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from advisor.core.advice import AdviceRequest, CurveSettings, ModelChoice, advise
from advisor.core.models import registry
from advisor.core.online_calibration import profile_anchored
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors
from benchmarks.calibration_rules import Scores, statements
from benchmarks.paths import REPO
from benchmarks.real_curves import RING_MODEL, every_curve

DATA = REPO / "tests" / "data"
TRACING_COST_BPS = 100e6  # tests/data/tracing-cost/README.md: the CNN at 100 Mbit/s


def every_profile() -> Iterator[tuple[Path, float]]:
    """(profile, the link rate it was recorded on) for every profile outside the real curves'
    (its name's ``bw<Mbit/s>``; the tracing-cost profiles' README's 100 Mbit/s)."""
    for path in sorted(DATA.glob("ps-sync/**/*.trace.json.gz")) + sorted(DATA.glob("ps-traces/*/*.trace.json.gz")) \
            + sorted(DATA.glob("allreduce/*/profile.json.gz")):
        found = re.search(r"bw(\d+)", str(path.relative_to(DATA)))
        if found:
            yield path, float(found.group(1)) * 1e6
    for path in sorted(DATA.glob("tracing-cost/*.trace.json.gz")):
        yield path, TRACING_COST_BPS


def false_alarms() -> None:
    """Every other profile at its own link rate: its W = 1 gap, and whether the check contradicts it."""
    print(f"\n{'profile (at its own link rate)':<58} {'model':<27} {'W=1':>7} {'profile':>8} {'gap':>7}")
    contradicted = total = 0
    for path, bps in every_profile():
        profile = load_profile(path)
        model = registry.default_model_for(profile.job.kind.allreduce, profile.job.synchronous)
        advice = advise(profile, AdviceRequest(network=NetworkModel(bandwidth_bps=bps), model=ModelChoice(model, {}),
                                               side_by_side=(), curve=CurveSettings(workers=(1,), steps=300,
                                                                                    warmup_steps=50)))
        check = advice.profile_check
        if check is None:
            print(f"{str(path.relative_to(DATA)):<58} {model:<27} (the profile records no client wall)")
            continue
        total += 1
        contradicted += check.contradicts
        print(f"{str(path.relative_to(DATA)):<58} {model:<27} {check.predicted:>7.1f} {check.rate.throughput:>8.1f} "
              f"{check.gap:>+7.1%}{'  contradicted' if check.contradicts else ''}")
    print(f"contradicted: {contradicted} of {total}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync", action="store_true", help="the synchronous curves (tests/data/ps-sync) instead")
    args = parser.parse_args()
    totals: dict[tuple[str, str], Scores] = {}
    print(f"{'curve':<34} {'statement':<16} {'W=1 predicted':>13} {'profile':>8} {'gap':>7}  contradicts")
    for curve in [c for c in every_curve(args.sync) if c.model != RING_MODEL]:
        profile = curve.load()
        truth = {w: curve.truth(w) for w in curve.measured}
        for statement in statements(curve, quick=False):
            request = curve.request(bandwidth_bps=curve.bandwidth_bps * statement.bandwidth_factor,
                                    params=statement.params, model_error=load_model_errors(None))
            made = advise(profile, request)
            check = made.profile_check
            assert check is not None, f"{curve.name}: the profile records no client wall time"
            product = made
            if check.contradicts:
                product = advise(profile, profile_anchored(profile, request, check))
            print(f"{curve.name:<34} {statement.name:<16} {check.predicted:>13.1f} {check.rate.throughput:>8.1f} "
                  f"{check.gap:>+7.1%}  {'yes: anchored' if check.contradicts else 'no'}")
            for label, advice in (("as made", made), ("the product's", product)):
                points = {p.workers: (p.throughput, p.low, p.high) for p in advice.points}
                totals.setdefault((statement.name, label), Scores()).add(points, truth, 1)
    print(f"\nat the measured W >= 2: {'statement':<16} {'prediction':<14} {'median':>7} {'p90':>7} {'in interval':>11}")
    for (name, label), s in totals.items():
        r = s.row()
        print(f"{'':<23} {name:<16} {label:<14} {r['median_error']:>7.1%} {r['p90_error']:>7.1%} "
              f"{r['coverage']:>11.0%}")
    if not args.sync:
        false_alarms()


if __name__ == "__main__":
    main()
