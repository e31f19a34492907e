"""The curve as a PNG: prediction with its interval band, linear scaling, decisions marked.

matplotlib is an optional extra (``pip install 'advisor[plot]'``); it is imported only here
and only when a plot is asked for, with the Agg backend so no display is needed.
"""

from __future__ import annotations

from pathlib import Path

from advisor.core.advice import Advice
from advisor.errors import AdvisorError


class PlotUnavailableError(AdvisorError):
    """matplotlib is not installed."""


def plot_advice(advice: Advice, path: Path, title: str = "") -> None:
    """Write the throughput curve of ``advice`` to ``path`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailableError("plots need matplotlib: pip install 'advisor[plot]'") from None
    w = [p.workers for p in advice.points]
    thr = [p.throughput for p in advice.points]
    per_worker = advice.points[0].throughput / advice.points[0].workers
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.fill_between(w, [p.low for p in advice.points], [p.high for p in advice.points], alpha=0.25, label="interval")
    ax.plot(w, thr, "o-", label=f"predicted ({advice.model})")
    ax.plot(w, [per_worker * x for x in w], "--", color="grey", label="linear scaling")
    for name, style in zip(sorted({n for p in advice.points for n in p.models}), (":", "-.", "--", (0, (1, 3)))):
        ax.plot(w, [p.models.get(name, float("nan")) for p in advice.points], linestyle=style, label=name)
    for p in advice.points:  # a point with two outcomes: the other one with its own interval
        for o in p.outcomes[1:]:
            ax.errorbar([p.workers + 0.08], [o.throughput], yerr=[[o.throughput - o.low], [o.high - o.throughput]],
                        fmt="v", color="purple", capsize=3,
                        label=f"W={p.workers} {o.name} (probability {o.probability:.0%})")
    sat = advice.point(advice.saturation_workers)
    rec = advice.point(advice.recommended.workers)
    ax.plot([sat.workers], [sat.throughput], "s", ms=11, mfc="none", mec="red", label=f"saturation W={sat.workers}")
    label = "cost-optimal" if advice.recommended.confident else "likeliest to meet the deadline"
    ax.plot([rec.workers], [rec.throughput], "*", ms=14, color="green", label=f"{label} W={rec.workers}")
    ax.set_ylim(0, max([*thr, *(o.high for p in advice.points for o in p.outcomes)]) * 1.3)
    ax.set_xlabel("workers W")
    ax.set_ylabel("throughput (examples/s)")
    ax.set_title(title or "Predicted training throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
