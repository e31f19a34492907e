"""Accuracy of the ring all-reduce model against real all-reduce runs measured on this machine.

    python3 -m benchmarks.allreduce_accuracy [--markdown] [--steps 1000] [--param latency_s=0.002]
        [--fit-latency CONFIG]

For every ``tests/data/allreduce/<config>/`` (``profile.json.gz``: the one-worker bundle the
framework's hook uploaded; ``measured.json``: examples/s at W = 1..4 with how they were taken;
``scripts/record_allreduce_ddp.py`` writes the DDP ones) it predicts each measured W with the
``ring-allreduce`` model from the profile at the recorded link rate (nominal rate x the
product's default TCP goodput, 0.95, as ``advisor predict`` does) and prints predicted vs
measured per W with the error, then the median and maximum |error| per configuration and over
all. The model's default parameters are used unless ``--param`` overrides one;
``--fit-latency CONFIG`` fits the per-round latency on that configuration alone and reports
the error on the others separately (an honest hold-out).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core.advice import DEFAULT_GOODPUT
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.sim_types import NetworkModel
from advisor.importers.uploads import profile_from_upload

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "allreduce"
MODEL = "ring-allreduce"


@dataclass(frozen=True)
class Row:
    """One measured point and its prediction."""

    config: str
    kind: str
    workers: int
    measured: float  # examples/s
    spread: tuple[float, float]
    predicted: float

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0


def configs(data: Path = DATA) -> list[Path]:
    """The configuration folders that hold both a profile and measurements."""
    if not data.is_dir():
        return []
    return sorted(d for d in data.iterdir() if (d / "profile.json.gz").is_file() and (d / "measured.json").is_file())


def predict(folder: Path, *, steps: int = 1000, params: Mapping[str, Any] | None = None) -> list[Row]:
    """Predicted vs measured for every measured W of one configuration."""
    measured = json.loads((folder / "measured.json").read_text())
    doc = json.loads(gzip.decompress((folder / "profile.json.gz").read_bytes()))
    profile = profile_from_upload(doc, origin=str(folder / "profile.json.gz"))
    model = registry.get(MODEL)
    defaults = registry.params_for(model)
    chosen = defaults.model_validate({**defaults.model_dump(exclude_unset=True), **(params or {})}) if params else defaults
    inputs = ModelInputs(profile=profile, recorded=profile,
                         network=NetworkModel(bandwidth_bps=float(measured["bandwidth_bps"])), goodput=DEFAULT_GOODPUT)
    model.check(inputs, chosen)
    points = sorted(measured["points"], key=lambda p: p["workers"])
    curve = predict_curve(model, inputs, chosen,
                          CurveSettings(workers=tuple(p["workers"] for p in points), steps=steps, seed=1))
    return [Row(config=folder.name, kind=str(measured["kind"]), workers=int(p["workers"]),
                measured=float(p["examples_per_s"]), spread=(float(p["spread"][0]), float(p["spread"][1])),
                predicted=c.throughput) for p, c in zip(points, curve, strict=True)]


def summary(rows: Sequence[Row]) -> tuple[float, float]:
    """Median and maximum |error| of ``rows``."""
    errors = [abs(r.error) for r in rows]
    return statistics.median(errors), max(errors)


def fit_latency(folder: Path, *, steps: int, grid: Sequence[float] = tuple(i * 2.5e-4 for i in range(21))) -> float:
    """The ring's per-round ``latency_s`` (0 to 5 ms by 0.25 ms) with the smallest mean |error|
    over ``folder``'s multi-worker points (W = 1 has no rounds)."""
    def cost(latency: float) -> float:
        rows = [r for r in predict(folder, steps=steps, params={"latency_s": latency}) if r.workers > 1]
        return statistics.fmean(abs(r.error) for r in rows)
    return min(grid, key=cost)


def table(rows: Sequence[Row], markdown: bool) -> str:
    lines = []
    if markdown:
        lines += ["| configuration | kind | W | measured ex/s (spread) | predicted ex/s | error |",
                  "|---|---|---|---|---|---|"]
    else:
        lines.append(f"{'configuration':<16} {'kind':<12} {'W':>2} {'measured':>10} {'spread':>19} "
                     f"{'predicted':>10} {'error':>7}")
    for r in rows:
        spread = f"[{r.spread[0]:.1f}, {r.spread[1]:.1f}]"
        if markdown:
            lines.append(f"| {r.config} | {r.kind} | {r.workers} | {r.measured:.1f} {spread} | {r.predicted:.1f} | "
                         f"{r.error:+.1%} |")
        else:
            lines.append(f"{r.config:<16} {r.kind:<12} {r.workers:>2} {r.measured:>10.1f} {spread:>19} "
                         f"{r.predicted:>10.1f} {r.error:>+7.1%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per point")
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="override a ring-allreduce parameter (a float), e.g. latency_s=0.002")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of configurations")
    parser.add_argument("--fit-latency", metavar="CONFIG",
                        help="fit latency_s on this configuration only and report the others as held out")
    args = parser.parse_args(argv)
    params = {k: float(v) for k, v in (p.split("=", 1) for p in args.param)}
    folders = configs(args.data)
    if not folders:
        raise SystemExit(f"no configuration with profile.json.gz and measured.json under {args.data}")
    if args.fit_latency:
        (fit_on,) = [f for f in folders if f.name == args.fit_latency] or [None]
        if fit_on is None:
            raise SystemExit(f"no configuration {args.fit_latency!r} under {args.data}")
        params["latency_s"] = fit_latency(fit_on, steps=args.steps)
        print(f"latency_s fitted on {fit_on.name}: {params['latency_s'] * 1e3:.2f} ms per ring round")
    rows = [row for folder in folders for row in predict(folder, steps=args.steps, params=params)]
    print(f"{MODEL}" + (f" with {params}" if params else " (default parameters)")
          + f", link rate x goodput {DEFAULT_GOODPUT}")
    print(table(rows, args.markdown))
    print()
    for folder in folders:
        med, worst = summary([r for r in rows if r.config == folder.name])
        print(f"{folder.name}: median |error| {med:.1%}, max {worst:.1%}")
    med, worst = summary(rows)
    print(f"all {len(rows)} points: median |error| {med:.1%}, max {worst:.1%}")
    if args.fit_latency:
        held = [r for r in rows if r.config != args.fit_latency]
        if held:
            med, worst = summary(held)
            print(f"held out ({len(held)} points, not {args.fit_latency}): median |error| {med:.1%}, max {worst:.1%}")


if __name__ == "__main__":
    main()
