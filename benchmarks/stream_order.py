"""One worker, replayed in the order the profile recorded or in release order: which reproduces a measured run?

    python -m benchmarks.stream_order [--steps N]

A one-worker profile of a TensorFlow PS job receives its pulls, and runs the ops that are ready
together, in an order that changes from step to step (the CNN of ``tests/data/ps-async``
received its two largest kernels last-first in 42 of its 97 traced steps, in layer order in 37).
The simulation's default order (``fifo``) serves the streams that are ready together, and runs
the computations, in the order they were released, the same in every step; ``--order recorded``
replays each sampled step's own order (``StreamOrder.RECORDED``). At W = 1 nothing else differs
between the two, so this benchmark prints, per one-PS trace with a measured one-worker run:

- the trace's own rate, batch / mean client wall time of its traced steps (``meta``'s
  ``client_steps_us``: what the profiled run itself achieved);
- the measured W = 1 throughput (the mean of the run's repeats);
- the W = 1 prediction of the default model for the trace's regime in each order, and its error
  against the measured run.

The traces: ``tests/data/ps-async`` (asynchronous, cubic and bbr, the MLP and the CNN),
``tests/data/ps-sync`` (synchronous, the MLP and the CNN at 100 and 50 Mbit/s) and its held-out
program (the MLP with four times its compute). docs/accuracy.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.core.advice import AdvicePoint, AdviceRequest, CurveSettings, ModelChoice, advise
from advisor.core.model_error import ModelErrors
from advisor.core.models import registry
from advisor.core.profile import Profile
from advisor.core.profile_check import traced_rate
from advisor.core.sim_types import NetworkModel, StreamOrder
from advisor.importers.loader import load_profile
from benchmarks.paths import PS_ASYNC_DATA
from benchmarks.sync_accuracy import DATA as SYNC, HELD_OUT, runs

ORDERS = (StreamOrder.FIFO, StreamOrder.RECORDED)


@dataclass(frozen=True)
class Trace:
    """A one-PS trace, its link rate and its measured one-worker throughput (repeats' mean)."""

    name: str
    path: Path
    bandwidth_bps: float
    measured: float


def traces() -> Iterator[Trace]:
    """Every one-PS trace with a measured W = 1 (module docstring)."""
    for cc in ("cubic", "bbr"):
        for program in ("mlp", "cnn"):
            found = [r["thr_window"] for run in sorted((PS_ASYNC_DATA / "measured" / cc).glob(f"{program}_bw100*.json"))
                     for r in json.loads(run.read_text())["results"] if r["W"] == 1]
            yield Trace(f"async {cc}/{program}", PS_ASYNC_DATA / "condensed" / cc / f"{program}_bw100.json.gz", 100e6,
                        statistics.fmean(found))
    for folder, label in ((SYNC, "sync"), (HELD_OUT, "sync held-out")):
        for job, by_w in sorted(runs(folder).items()):
            if "backup" in job or 1 not in by_w:
                continue
            mbit = float(job.rsplit("_bw", 1)[1])
            yield Trace(f"{label} {job}", folder / f"{job}.trace.json.gz", mbit * 1e6, statistics.fmean(by_w[1]))


def one_worker(trace: Trace, profile: Profile, order: StreamOrder, steps: int) -> float:
    """The W = 1 throughput of the default model of the profile's regime with the streams and ops in ``order``."""
    return one_worker_point(trace, profile, order, steps).throughput


def one_worker_point(trace: Trace, profile: Profile, order: StreamOrder, steps: int,
                     model_error: ModelErrors | None = None, model: str | None = None) -> AdvicePoint:
    """The W = 1 point of ``model`` (default: the default model of the profile's regime,
    ``registry.default_model_for``) in ``order``, its interval widened by ``model_error``."""
    model = model or registry.default_model_for(profile.job.kind.allreduce, profile.job.synchronous)
    advice = advise(profile, AdviceRequest(
        network=NetworkModel(bandwidth_bps=trace.bandwidth_bps, order=order), model=ModelChoice(model, {}),
        side_by_side=(), model_error=model_error,
        curve=CurveSettings(workers=(1,), steps=steps, warmup_steps=50, seed=0)))
    return advice.point(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="simulated steps (default 400)")
    args = parser.parse_args()
    print(f"{'trace':<28} {'own rate':>9} {'measured':>9}  " + "  ".join(f"{o.value:>17}" for o in ORDERS))
    errors: dict[StreamOrder, list[float]] = {o: [] for o in ORDERS}
    for t in traces():
        profile = load_profile(t.path)
        own = traced_rate(profile)
        cells = []
        for order in ORDERS:
            predicted = one_worker(t, profile, order, args.steps)
            errors[order].append(predicted / t.measured - 1)
            cells.append(f"{predicted:7.1f} ({errors[order][-1]:+5.1%})")
        own_text = f"{own:9.1f}" if own is not None else f"{'-':>9}"
        print(f"{t.name:<28} {own_text} {t.measured:9.1f}  " + "  ".join(f"{c:>17}" for c in cells))
    for order, found in errors.items():
        print(f"{order.value:<9} W = 1 against the measured run, {len(found)} traces: mean {statistics.fmean(found):+.1%}, "
              f"median |error| {statistics.median(abs(e) for e in found):.1%}, max {max(abs(e) for e in found):.1%}")


if __name__ == "__main__":
    main()
