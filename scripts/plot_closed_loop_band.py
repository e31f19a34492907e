"""Draw the curve and its interval before and after one observation (docs/decisions.md#the-closed-loop-how-a-running-job-corrects-its-own-curve).

    PYTHONPATH=. python scripts/plot_closed_loop_band.py [--out docs/img/closed-loop-band.png]

Two real jobs of ``tests/data/ps-async`` (``benchmarks/real_curves.py``), each predicted from its
own one-worker trace and observed once, through the controller's default update
(``core/online_calibration.py``, rule ``posterior``, the observation's noise 3 %):

- left, the CNN (cubic) with its bandwidth stated 2x too high, observed at W = 6: the curve
  comes down to the measurements and the interval narrows;
- right, the MLP (cubic) stated right, observed at W = 3: the curve stays, the interval at 3
  shrinks to the observation's noise and its neighbours' tighten.

The dots are the measured means (the observation is the one at the marked W).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.core.advice import AdviceRequest, advise
from advisor.core.online_calibration import Observation, calibrate
from advisor.importers.model_error_file import load_model_errors
from benchmarks.real_curves import RealCurve, ps_async

NOISE = 0.03


def panel(ax, curve: RealCurve, request: AdviceRequest, observe_at: int, title: str) -> None:  # noqa: ANN001
    profile = curve.load()
    before = advise(profile, request)
    truth = {w: curve.truth(w) for w in range(1, curve.max_workers + 1)}
    after = advise(profile, calibrate(profile, request, [Observation(observe_at, truth[observe_at], NOISE)]).request)
    ws = [p.workers for p in before.points]
    for advice, colour, label in ((before, "tab:red", "before"), (after, "tab:blue", "after one observation")):
        ax.fill_between(ws, [p.low for p in advice.points], [p.high for p in advice.points], color=colour, alpha=0.18)
        ax.plot(ws, [p.throughput for p in advice.points], color=colour, label=label)
    ax.plot(list(truth), list(truth.values()), "ko", markersize=4, label="measured")
    ax.plot([observe_at], [truth[observe_at]], "o", markersize=11, markerfacecolor="none", markeredgecolor="k",
            label=f"observed (W = {observe_at})")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("workers W")
    ax.set_ylabel("examples/s")
    ax.set_xticks(ws)
    ax.legend(fontsize=8, loc="upper left")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img/closed-loop-band.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {c.name: c for c in ps_async()}
    cnn, mlp = curves["ps-async/cubic/cnn_bw100"], curves["ps-async/cubic/mlp_bw100"]
    error = load_model_errors(None)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    panel(left, cnn, cnn.request(bandwidth_bps=2 * cnn.bandwidth_bps, model_error=error), 6,
          "CNN, bandwidth stated 200 Mbit/s (truly 100)")
    panel(right, mlp, mlp.request(model_error=error), 3, "MLP, stated right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
