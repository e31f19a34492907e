"""What tracing costs a step, and how far one profile's own rate is from a measured run.

    python -m benchmarks.tracing_cost [--steps N]

The profiling hook times ``ADVISOR_PROFILE_UNTRACED_STEPS`` (20) steps without tracing after the
traced ones, so a profile says what ``FULL_TRACE`` cost its steps. ``tests/data/tracing-cost``
holds five repeats of the CNN at 100 Mbit/s, asynchronous and synchronous, each a profile and a
measured one-worker run taken right after it (its README). Per profile this prints the traced
steps' own rate (batch / mean client wall), the untraced steps' rate, what tracing cost (the
traced steps' mean wall over the untraced ones'), the measured W = 1 throughput, and the W = 1
prediction of the default model of the regime in release (``fifo``) and recorded order, and
whether the measured run lies inside the ``fifo`` point's interval widened by the shipped model
error (what ``advisor predict`` prints). docs/accuracy.md has the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

from advisor.core.profile_check import traced_rate
from advisor.core.sim_types import StreamOrder
from advisor.core.summary import tracing_cost
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors
from benchmarks.paths import REPO
from benchmarks.stream_order import ORDERS, Trace, one_worker_point

DATA = REPO / "tests" / "data" / "tracing-cost"


def one_worker_runs(synchronous: bool, steps: int = 400, model: str | None = None) -> list[tuple[str, float, float]]:
    """(profile, measured, predicted) of every W = 1 run here of one regime, predicted from the
    profile taken right before it as ``advisor predict`` does (``model``, by default the regime's
    default model; ``fifo``): W = 1 residuals beside those of the accuracy sets, for the shipped
    widths (``benchmarks/model_error.py``, ``benchmarks/sync_accuracy.py --write``)."""
    found = []
    for path in sorted(DATA.glob("*.trace.json.gz")):
        profile = load_profile(path)
        if profile.job.synchronous != synchronous:
            continue
        name = path.name.removesuffix(".trace.json.gz")
        measured = measured_one_worker(DATA / f"{name}.measured.json.gz")
        point = one_worker_point(Trace(name, path, 100e6, measured), profile, StreamOrder.FIFO, steps, model=model)
        found.append((f"tracing-cost/{name}", measured, point.throughput))
    return found


def measured_one_worker(path: Path) -> float:
    """The W = 1 throughput of a measured run file."""
    results = json.loads(gzip.decompress(path.read_bytes()))["results"]
    return float(next(r["thr_window"] for r in results if r["W"] == 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="simulated steps (default 400)")
    args = parser.parse_args()
    print(f"{'profile':<14} {'traced':>7} {'untraced':>8} {'tracing':>8} {'measured':>8}  "
          + "  ".join(f"{o.value:>15}" for o in ORDERS) + "  inside the shipped W = 1 interval")
    errors = load_model_errors()
    for path in sorted(DATA.glob("*.trace.json.gz")):
        name = path.name.removesuffix(".trace.json.gz")
        profile = load_profile(path)
        walls, traced, cost = profile.job.untraced_walls_us, traced_rate(profile), tracing_cost(profile)
        if walls is None or traced is None or cost is None:
            raise SystemExit(f"{path}: no untraced steps or no client times recorded")
        untraced = profile.job.batch_size / (statistics.fmean(walls) * 1e-6)
        measured = measured_one_worker(DATA / f"{name}.measured.json.gz")
        trace = Trace(name, path, 100e6, measured)
        cells = []
        for order in ORDERS:
            point = one_worker_point(trace, profile, order, args.steps, errors)
            cells.append(f"{point.throughput:5.1f} ({point.throughput / measured - 1:+5.1%})")
            if order is StreamOrder.FIFO:
                inside = f"{'yes' if point.low <= measured <= point.high else 'no'} ({point.low:.1f}-{point.high:.1f})"
        print(f"{name:<14} {traced:7.1f} {untraced:8.1f} {cost:+8.1%} {measured:8.1f}  "
              + "  ".join(f"{c:>15}" for c in cells) + f"  {inside}")


if __name__ == "__main__":
    main()
