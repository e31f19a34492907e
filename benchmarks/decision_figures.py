"""The figures of docs/decisions.md: how a deadline is decided with a stated confidence.

    python -m benchmarks.decision_figures [--out docs/img] [--confidence 0.9]

No simulation: the held-out predictions of ``benchmarks/deadline_decisions.py`` (each run
predicted without its job, its intervals widened by widths that did not see it).

- ``decision-deadline.png``: one run's predicted curve, each outcome's 95 % band, the measured
  points, the tight deadline's rate (85 % of the best measured throughput), every W's probability
  of reaching it and the W chosen at the confidence P;
- ``decision-two-outcomes.png``: the throughput at W = 2 as the mixture of its two outcomes
  (drifting, alternating), the rate a deadline needs, and the probability of reaching it;
- ``decision-plan.png``: the same tight deadline counting on one resize (``core/correction.py``,
  the window and loss of ``benchmarks/deadline_decisions.py``): each start's probability alone
  and with the resize, and the plan's rule from the throughput observed at its start to the W
  it resizes to, with the measured one.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from statistics import NormalDist

from advisor.core.belief import Belief
from advisor.core.correction import Correction, best_plan, plans, resize_after
from advisor.core.cost import DEFAULT_CONFIDENCE, Constraints, decide, meet_probabilities
from advisor.importers.model_error_file import shipped_path
from benchmarks.accuracy import EXAMPLES, PRICES
from benchmarks.deadline_decisions import RESTART, TIGHT, WINDOW, Run, held_out_runs, one_worker_extra
from benchmarks.model_error import MODEL

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
CURVE_RUN = "cubic/mlp_bw100.json"
MIXTURE_RUN = "bbr/mlp_bw100.json"


def deadline_figure(run: Run, confidence: float, path: Path) -> None:
    """Curve, bands, measured points, the deadline's rate, P(meet) per W, the chosen W."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    need = TIGHT * max(run.measured.values())
    c = Constraints(examples=EXAMPLES, deadline_hours=EXAMPLES / need / 3600, confidence=confidence)
    choice = decide(run.workers, run.predicted, PRICES, constraints=c, beliefs=run.beliefs)
    chances = meet_probabilities(run.workers, run.predicted, PRICES, run.beliefs, constraints=c)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, gridspec_kw={"width_ratios": [3, 2]})
    for w, belief in zip(run.workers, run.beliefs):
        for k, (weight, s) in enumerate(belief.parts):
            z = NormalDist().inv_cdf(0.975)
            x = w + 0.1 * k
            ax.errorbar([x], [s.mode], yerr=[[z * s.sigma_low], [z * s.sigma_high]], fmt="o" if k == 0 else "v",
                        color="tab:blue" if k == 0 else "purple", alpha=0.4 + 0.6 * weight, capsize=3)
    ax.plot(run.workers, run.predicted, "-", color="tab:blue", label="predicted (held out), 95 % band")
    ax.plot([], [], "v", color="purple", label="W = 2 if the workers alternate")
    ax.plot(run.workers, [run.measured[w] for w in run.workers], "x", ms=9, color="black", label="measured")
    ax.axhline(need, color="red", ls="--", label=f"deadline needs {need:.0f} ex/s")
    ax.plot([choice.workers], [choice.throughput], "*", ms=16, color="green",
            label=f"recommended W = {choice.workers} (P >= {confidence:g})")
    ax.set_xlabel("workers W")
    ax.set_ylabel("throughput (examples/s)")
    ax.set_title(f"{run.name.removesuffix('.json')}: a tight deadline")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    colors = ["green" if o.workers == choice.workers else "tab:grey" for o in chances]
    bx.bar([str(o.workers) for o in chances], [o.p_meet or 0 for o in chances], color=colors)
    bx.axhline(confidence, color="red", ls="--", label=f"confidence P = {confidence:g}")
    for i, o in enumerate(chances):
        bx.text(i, (o.p_meet or 0) + 0.02, f"{o.p_meet or 0:.2f}", ha="center", fontsize=8)
    bx.set_ylim(0, 1.1)
    bx.set_xlabel("workers W")
    bx.set_ylabel("P(throughput >= the rate needed)")
    bx.set_title("the cheapest W with P >= the confidence")
    bx.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def mixture_figure(run: Run, path: Path) -> None:
    """The W = 2 density as two weighted split normals, a rate, and the mass above it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    belief: Belief = run.beliefs[run.workers.index(2)]
    lo = min(s.mode - 4 * s.sigma_low for _, s in belief.parts)
    hi = max(s.mode + 4 * s.sigma_high for _, s in belief.parts)
    xs = [lo + (hi - lo) * i / 600 for i in range(601)]
    norm = NormalDist()

    def density(weight: float, mode: float, a: float, b: float, x: float) -> float:
        sigma = a if x < mode else b
        return weight * 2 / (a + b) * norm.pdf((x - mode) / sigma) if sigma > 0 else 0.0

    parts = [[density(w, s.mode, s.sigma_low, s.sigma_high, x) for x in xs] for w, s in belief.parts]
    total = [sum(col) for col in zip(*parts)]
    rate = 0.85 * max(run.measured.values())
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for (weight, s), ys, name, color in zip(belief.parts, parts, ("drifting", "alternating"), ("tab:blue", "purple")):
        ax.fill_between(xs, ys, alpha=0.2, color=color, label=f"{name}: mode {s.mode:.0f} ex/s, probability {weight:.2f}")
    ax.plot(xs, total, color="black", lw=1, label="the mixture")
    ax.fill_between([x for x in xs if x >= rate], [t for x, t in zip(xs, total) if x >= rate], facecolor="none",
                    hatch="//", edgecolor="green", label=f"P(T >= {rate:.0f}) = {belief.p_at_least(rate):.2f}")
    ax.axvline(rate, color="red", ls="--")
    ax.axvline(run.measured[2], color="black", ls=":", label=f"measured {run.measured[2]:.0f} ex/s")
    ax.set_xlabel("throughput at W = 2 (examples/s)")
    ax.set_ylabel("probability density")
    ax.set_title(f"{run.name.removesuffix('.json')}, W = 2: two outcomes (held out)")
    ax.set_ylim(0, max(total) * 1.25 if total and math.isfinite(max(total)) else 1)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plan_figure(run: Run, confidence: float, path: Path) -> None:
    """Each start's P alone and with one resize, the one-shot W and the plan's start; the plan's
    rule from the start's observed throughput to the W it moves to, and the measured one."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    need = TIGHT * max(run.measured.values())
    hours = EXAMPLES / need / 3600
    c = Constraints(examples=EXAMPLES, deadline_hours=hours, confidence=confidence)
    alone = decide(run.workers, run.predicted, PRICES, constraints=c, beliefs=run.beliefs)
    found = plans(run.workers, run.predicted, PRICES, run.beliefs, constraints=c,
                  correction=Correction(WINDOW * hours, RESTART * hours))
    plan = best_plan(found)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    xs = range(len(found))
    ax.bar([x - 0.2 for x in xs], [p.alone for p in found], 0.4, color="tab:grey", label="the start alone")
    ax.bar([x + 0.2 for x in xs], [p.choice.p_meet or 0 for p in found], 0.4,
           color=["green" if p.workers == plan.workers else "tab:olive" for p in found],
           label=f"with one resize after {WINDOW:.0%} of the deadline")
    ax.axhline(confidence, color="red", ls="--", label=f"confidence P = {confidence:g}")
    ax.set_xticks(list(xs), [str(p.workers) for p in found])
    ax.set_ylim(0, 1.15)
    ax.set_xlabel("starting W")
    ax.set_ylabel("P(meets the deadline)")
    ax.set_title(f"one-shot: W = {alone.workers}; counting on a resize: start at W = {plan.workers}")
    ax.legend(fontsize=8, loc="upper left")
    top = max(run.measured[plan.workers], need) * 1.08
    observed = [need * 0.6 + (top - need * 0.6) * i / 400 for i in range(401)]
    bx.step(observed, [resize_after(plan, t) for t in observed], where="post", color="tab:blue",
            label="W after the window, by what the start ran at")
    bx.axvline(need, color="red", ls="--", label=f"the deadline's rate, {need:.0f} ex/s: stay above it")
    measured = run.measured[plan.workers]
    bx.plot([measured], [resize_after(plan, measured)], "x", ms=10, color="black",
            label=f"measured at W = {plan.workers}: {measured:.0f} ex/s")
    bx.set_xlim(observed[0], observed[-1])
    bx.set_ylim(0, max(run.workers) + 1)
    bx.set_xlabel(f"throughput observed at W = {plan.workers} (examples/s)")
    bx.set_ylabel("workers for the rest of the job")
    bx.set_title(f"{run.name.removesuffix('.json')}: the plan ({len(plan.fallbacks)} ranges)")
    bx.grid(alpha=0.3)
    bx.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="directory to write the PNGs in (default docs/img)")
    parser.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE)
    args = parser.parse_args()
    validation = json.loads(shipped_path(MODEL).read_text())["validation"]
    runs = {r.name: r for r in held_out_runs(validation["points"], one_worker_extra(validation))}
    deadline_figure(runs[CURVE_RUN], args.confidence, args.out / "decision-deadline.png")
    mixture_figure(runs[MIXTURE_RUN], args.out / "decision-two-outcomes.png")
    plan_figure(runs[CURVE_RUN], args.confidence, args.out / "decision-plan.png")
    print(f"wrote {args.out / 'decision-deadline.png'}, {args.out / 'decision-two-outcomes.png'} and "
          f"{args.out / 'decision-plan.png'}")


if __name__ == "__main__":
    main()
