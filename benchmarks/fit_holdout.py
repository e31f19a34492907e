"""Does a fitted (share_sigma, multi_flow_goodput) carry over to jobs and networks it did not see?

    python -m benchmarks.fit_holdout [--steps 400]

``advisor fit-contention`` fits one pair for a cluster from measured multi-worker throughput
(``core/models/ps_des/fit_contention.py``). Here it is fitted on one half of ``tests/data/ps-async/measured`` (by
congestion control, then by model) and predicts the other half with 1000 steps; printed: the
pair, the fit's own error, the held-out median and max |error|, and the same held-out error
with the product's defaults (1.0, 0.85). The defaults were fitted on all of this data, so
beside the held-out numbers they are an optimistic reference, not a fair competitor.
"""

from __future__ import annotations

import argparse
import statistics
import time

from advisor.core.models.ps_des.contention import MULTI_FLOW_GOODPUT, SHARE_SIGMA
from advisor.core.models.ps_des.fit_contention import DEFAULT_FIT_STEPS, FitCase, Observation, fit_contention
from advisor.importers.loader import load_profile
from benchmarks.accuracy import RUNS, Model, advice_request, measured, predict
from benchmarks.paths import PS_ASYNC_DATA

GROUPS: dict[str, list[tuple[str, str, float]]] = {}  # "cc/model" -> its measured runs
for _name, _cc, _queue in RUNS:
    if not _name.startswith("cubic_q20ms"):  # one run, one model: it has no twin to split against
        GROUPS.setdefault(f"{_cc}/{_name.split('/')[1].split('_')[0]}", []).append((_name, _cc, _queue))
SPLITS = [
    (["cubic/mlp", "cubic/cnn"], ["bbr/mlp", "bbr/cnn"]),
    (["bbr/mlp", "bbr/cnn"], ["cubic/mlp", "cubic/cnn"]),
    (["cubic/mlp", "bbr/mlp"], ["cubic/cnn", "bbr/cnn"]),
    (["cubic/cnn", "bbr/cnn"], ["cubic/mlp", "bbr/mlp"]),
]


def _cases(keys: list[str]) -> list[FitCase]:
    cases = []
    for key in keys:
        for name, cc, queue in GROUPS[key]:
            profile = load_profile(PS_ASYNC_DATA / "condensed" / cc / f"{key.split('/')[1]}_bw100.json.gz")
            observed = tuple(Observation(w, t) for w, ts in sorted(measured(PS_ASYNC_DATA / "measured" / name).items())
                             for t in ts)
            cases.append(FitCase(name, profile, advice_request([1], 100e6, Model(), 1000, cc, queue), observed))
    return cases


def held_out_errors(cases: list[FitCase], sigma: float, eta: float) -> list[float]:
    """|error| of the mean measured throughput per run and W, predicted with (sigma, eta)."""
    errors = []
    for c in cases:
        params = c.request.model.params
        by_w: dict[int, list[float]] = {}
        for o in c.observed:
            by_w.setdefault(o.workers, []).append(o.throughput)
        advice = predict(c.profile, sorted(by_w), 100e6, Model(share_sigma=sigma, multi_flow_goodput=eta), 1000,
                         params["congestion_control"], params["queue_s"])
        errors += [abs(advice.point(w).throughput / statistics.mean(v) - 1) for w, v in sorted(by_w.items())]
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_FIT_STEPS, help="fit steps per grid point")
    args = parser.parse_args()
    print(f"{'fitted on':<22} {'predicts':<22} {'sigma':>5} {'eta':>5} {'fit mean/max':>13} "
          f"{'held-out median/max':>20} {'defaults':>14} {'fit s':>6}")
    for fit_keys, hold_keys in SPLITS:
        t0 = time.perf_counter()
        fit = fit_contention(_cases(fit_keys), steps=args.steps)
        seconds = time.perf_counter() - t0
        held = _cases(hold_keys)
        ours = held_out_errors(held, fit.share_sigma, fit.multi_flow_goodput)
        dflt = held_out_errors(held, SHARE_SIGMA, MULTI_FLOW_GOODPUT)
        print(f"{'+'.join(fit_keys):<22} {'+'.join(hold_keys):<22} {fit.share_sigma:>5g} {fit.multi_flow_goodput:>5g} "
              f"{fit.best.mean_error:>6.1%}/{fit.best.max_error:<6.1%} "
              f"{statistics.median(ours):>10.1%}/{max(ours):<9.1%} "
              f"{statistics.median(dflt):>6.1%}/{max(dflt):<7.1%} {seconds:>6.1f}")
        for note in fit.notes:
            print(f"    note: {note}")


if __name__ == "__main__":
    main()
