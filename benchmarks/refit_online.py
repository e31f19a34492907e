"""Does an online refit from one observed worker count predict the job's other worker counts better?

    python -m benchmarks.refit_online [--steps 1000]

The controller's online refit (``advisor/controller/pipeline/refit.py``) moves one job's contention
constants to the throughput it was observed at (``core/models/ps_des/refit.py``), usually at
a single W. Here, for every run in ``tests/data/ps-async/measured`` and every W >= 3 it measured (W = 2
can alternate, W = 1 informs nothing), the refit is given that one point (the mean of its
measurements) and then predicts the run's *other* W >= 2 with 1000 steps. Printed per run: the
median and max |error| at those other W with the product's defaults (1.0, 0.85) and after each
one-point refit, the constants each refit chose, and the refit's time. The defaults were fitted
on all of this data, so they are an optimistic reference; a refit that made the other points
worse would show here. ``gap`` is the defaults' error at the refit's own W: the controller refits
only when it exceeds ``refit_tolerance`` (0.1 by default), so the last line sums up the other
points' error under that rule (a gap within it keeps the defaults).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from advisor.core.advice import advise
from advisor.core.models.ps_des.fit_contention import DEFAULT_FIT_STEPS, Observation
from advisor.core.models.ps_des.refit import refit_contention
from advisor.importers.loader import load_profile
from benchmarks.accuracy import RUNS, Model, advice_request, measured
from benchmarks.paths import PS_ASYNC_DATA

TOLERANCE = 0.1  # the controller's refit_tolerance default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per worker of the predictions compared")
    parser.add_argument("--fit-steps", type=int, default=DEFAULT_FIT_STEPS, help="steps per grid pair of the refit")
    args = parser.parse_args()
    print(f"{'run':<30} {'refit at':>8} {'gap':>6} {'sigma':>5} {'eta':>5} {'others before med/max':>22} "
          f"{'after med/max':>14} {'refit s':>7}")
    all_before: list[float] = []
    all_after: list[float] = []
    ruled: list[float] = []  # after, where the gap exceeded the tolerance; before elsewhere
    for name, cc, queue in RUNS:
        model_name = name.split("/")[1].split("_")[0]
        profile = load_profile(PS_ASYNC_DATA / "condensed" / cc / f"{model_name}_bw100.json.gz")
        by_w = {w: statistics.mean(v) for w, v in measured(PS_ASYNC_DATA / "measured" / name).items()}
        shown = sorted(w for w in by_w if w >= 2)
        request = advice_request(shown, 100e6, Model(), args.steps, cc, queue)
        before = advise(profile, request)
        for at in [w for w in shown if w >= 3]:
            others = [w for w in shown if w != at]
            t0 = time.perf_counter()
            refit = refit_contention(profile, request, (Observation(at, by_w[at]),), steps=args.fit_steps)
            seconds = time.perf_counter() - t0
            after = advise(profile, replace(request, model=refit.choice()))
            err_b = [abs(before.point(w).throughput / by_w[w] - 1) for w in others]
            err_a = [abs(after.point(w).throughput / by_w[w] - 1) for w in others]
            all_before += err_b
            all_after += err_a
            gap = before.point(at).throughput / by_w[at] - 1
            ruled += err_a if abs(gap) > TOLERANCE else err_b
            print(f"{name:<30} {'W=' + str(at):>8} {gap:>+6.0%} {refit.params.share_sigma:>5g} {refit.params.multi_flow_goodput:>5g} "
                  f"{statistics.median(err_b):>13.1%}/{max(err_b):<8.1%} "
                  f"{statistics.median(err_a):>6.1%}/{max(err_a):<7.1%} {seconds:>7.1f}")
    blank = f"{'':>8} {'':>6} {'':>5} {'':>5}"
    print(f"{'all':<30} {blank} {statistics.median(all_before):>13.1%}/{max(all_before):<8.1%} "
          f"{statistics.median(all_after):>6.1%}/{max(all_after):<7.1%}")
    print(f"{'all, refit when gap > 10 %':<30} {blank} {statistics.median(all_before):>13.1%}/{max(all_before):<8.1%} "
          f"{statistics.median(ruled):>6.1%}/{max(ruled):<7.1%}")


if __name__ == "__main__":
    main()
