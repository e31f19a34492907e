"""Accuracy of the synchronous PS model on jobs with two parameter servers (real runs).

    python -m benchmarks.sync_several_ps [--steps 400] [--param K=V ...] [--markdown] [--write]

For every measured run in ``tests/data/ps-sync/two-ps`` (``SyncReplicasOptimizer`` over all
workers, 2 PS with greedy placement by bytes (``_ps2greedy``) or TF's default round-robin
(``_ps2``), each PS link 100 Mbit/s, the workers' links unshaped; its README says how they were
taken) it predicts each measured W twice with the default synchronous model, as a user would
ask: from the job's own 2-PS trace, and by the ``--ps 2 --ps-placement`` what-if with the job's
placement from the one-PS trace of the same program
(``tests/data/ps-sync``), the workers' link stated as 10 Gbit/s. Both with TCP cubic and the
100 ms queue, as the testbed runs. It prints every point, then the median and maximum |error|
per program and over all.

Nothing of the model was fitted on these runs: the synchronous model's constants come from the
one-PS synchronous runs, and its multi-flow goodput on jobs with several PS is the one-PS value
measured on asynchronous jobs (``sync.SyncContentionParams``). So every residual is out of sample.

``--write`` ships the synchronous model's error for jobs with several PS
(``advisor/data/model_error/li2020-des-sync+contention@several-ps.json``, the scope the model
names when more than one PS carries bytes): a split-conformal width of |r| over W >= 2 from one
residual per measured repeat and W, r = measured / predicted - 1 against the prediction further
from it (own trace or what-if); W = 1 keeps the model's own width (one worker alone loads one
link, whatever the PS count). The coverage printed beside it is cross-conformal: each program's
points against the widths measured from the other's.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core.model_error import SEVERAL_PS, ModelError, measured_error
from benchmarks import multi_ps_accuracy
from benchmarks.multi_ps_accuracy import summary
from benchmarks.sync_accuracy import DATA, LEVEL, MODEL, Point, predict, runs

TWO_PS = DATA / "two-ps"
PLACEMENT = {"ps2greedy": "greedy-bytes", "ps2": "round-robin"}  # a job's name tag -> its what-if placement
REGIMES: tuple[tuple[int, int | None], ...] = ((2, None),)  # W >= 2; W = 1 is the model's own width


@dataclass(frozen=True)
class Residual:
    """One measured repeat's residual r = measured / predicted - 1, by the prediction further from it."""

    program: str  # the cross-conformal fold: mlp, cnn
    job: str
    workers: int
    measured: float
    predicted: float

    @property
    def r(self) -> float:
        return self.measured / self.predicted - 1.0


def points(*, what_if: bool, steps: int, params: Mapping[str, Any] | None = None) -> list[Point]:
    """Every measured point of the 2-PS synchronous runs, predicted from the job's own trace or by
    the what-if from its one-PS trace."""
    measured = runs(TWO_PS)
    out: list[Point] = []
    for job in sorted(measured):
        out += predict(job, measured[job], model=MODEL, steps=steps, params=params, data=TWO_PS,
                       what_if=(2, placement(job)) if what_if else None)
    return out


def placement(job: str) -> str:
    """The what-if placement of a job named ``<program>_<tag>_bw<rate>`` (``PLACEMENT``)."""
    tag = job.split("_")[1]
    if tag not in PLACEMENT:
        raise ValueError(f"{job}: no placement for the tag {tag!r} (one of {', '.join(PLACEMENT)})")
    return PLACEMENT[tag]


def residuals(own: Sequence[Point], other: Sequence[Point]) -> list[Residual]:
    """One residual per repeat and W, against the prediction (own trace, what-if) further from it."""
    out = []
    for a, b in zip(own, other, strict=True):
        assert (a.job, a.workers) == (b.job, b.workers)
        for m in a.measured:
            worse = max((a.predicted, b.predicted), key=lambda p: abs(m / p - 1))
            out.append(Residual(a.job.split("_", 1)[0], a.job, a.workers, m, worse))
    return out


def several_ps_error(found: Sequence[Residual], source: str = "") -> ModelError:
    """The scope's widths from ``found``: W >= 2, symmetric (module docstring)."""
    rows = [(x.workers, x.r, None) for x in found if x.workers >= 2]
    return measured_error(MODEL, LEVEL, rows, REGIMES, source=source, scope=SEVERAL_PS)


def cross_coverage(found: Sequence[Residual]) -> float:
    """Each program's points inside the widths measured from the other program's alone."""
    return multi_ps_accuracy.cross_coverage(found, lambda x: x.program, several_ps_error)


def table(own: Sequence[Point], other: Sequence[Point], markdown: bool) -> list[str]:
    lines = (["| job | W | measured ex/s (repeats) | own trace | error | what-if | error |",
              "|---|---|---|---|---|---|---|"] if markdown else
             [f"{'job':<22} {'W':>2} {'measured':>17} {'own':>7} {'error':>7} {'what-if':>7} {'error':>7}"])
    for a, b in zip(own, other, strict=True):
        reps = "/".join(f"{m:.1f}" for m in a.measured)
        lines.append(f"| {a.job} | {a.workers} | {reps} | {a.predicted:.1f} | {a.error:+.1%} | {b.predicted:.1f} | "
                     f"{b.error:+.1%} |" if markdown else
                     f"{a.job:<22} {a.workers:>2} {reps:>17} {a.predicted:>7.1f} {a.error:>+7.1%} "
                     f"{b.predicted:>7.1f} {b.error:>+7.1%}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=400, help="simulated steps per point (default 400)")
    parser.add_argument("--param", action="append", default=[], metavar="K=V", help="a model parameter")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--write", action="store_true", help="ship the several-PS widths (module docstring)")
    args = parser.parse_args(argv)
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    own = points(what_if=False, steps=args.steps, params=params)
    other = points(what_if=True, steps=args.steps, params=params)
    if not own:
        raise SystemExit(f"no measured run under {TWO_PS}")
    print(f"{MODEL} {params or ''}")
    print("\n".join(table(own, other, args.markdown)))
    print()
    for program in sorted({p.job.split("_", 1)[0] for p in own}):
        mine = [i for i, p in enumerate(own) if p.job.startswith(program + "_")]
        o, w = summary([own[i].error for i in mine]), summary([other[i].error for i in mine])
        print(f"{program}: own trace median |error| {o[0]:.1%}, max {o[1]:.1%}; what-if {w[0]:.1%}, {w[1]:.1%}")
    o, w = summary([p.error for p in own]), summary([p.error for p in other])
    print(f"all {len(own)} points: own trace median |error| {o[0]:.1%}, max {o[1]:.1%}; "
          f"what-if {w[0]:.1%}, {w[1]:.1%}")
    found = residuals(own, other)
    source = (f"python -m benchmarks.sync_several_ps --write: {len(found)} repeats of tests/data/ps-sync/two-ps "
              f"(SyncReplicasOptimizer, 2 PS, greedy and round-robin placement), each against the worse of own "
              f"trace and --ps 2 "
              f"what-if; nothing fitted on them")
    multi_ps_accuracy.report_widths(several_ps_error(found, source), found, cross_coverage(found), "repeats",
                                    "each program's points by the widths of the other's", args.write)


if __name__ == "__main__":
    main()
