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
    for p in advice.points:  # a bimodal point: the other outcome, from the interval up to it
        if p.alternating is not None:
            ax.plot([p.workers, p.workers], [p.high, p.alternating], color="purple", lw=1.5)
            ax.plot([p.workers], [p.alternating], "v", color="purple",
                    label=f"W={p.workers} if the workers alternate")
    sat = advice.point(advice.saturation_workers)
    rec = advice.point(advice.recommended.workers)
    ax.plot([sat.workers], [sat.throughput], "s", ms=11, mfc="none", mec="red", label=f"saturation W={sat.workers}")
    ax.plot([rec.workers], [rec.throughput], "*", ms=14, color="green", label=f"cost-optimal W={rec.workers}")
    ax.set_ylim(0, max(max(thr), max(max(p.high, p.alternating or 0) for p in advice.points)) * 1.3)
    ax.set_xlabel("workers W")
    ax.set_ylabel("throughput (examples/s)")
    ax.set_title(title or "Predicted training throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
