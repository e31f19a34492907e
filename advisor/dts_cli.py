"""``advisor dts SPEC.yaml``: the DTS simulator on a cluster/DNN/training spec (docs/models-dts.md).

The adapter around ``advisor.core.dts``: it reads the YAML file, hands the mapping to the core,
and prints a table or JSON (``advisor-dts/1``). Every problem with the file (unreadable, not
YAML, a field missing, zero or negative) is one ``ModelInputError`` line naming the file and
the field's path; the CLI exits 2 on it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from advisor.cli_args import SEED, int_at_least
from advisor.core.dts import ArchitectureResult, DtsResult, DtsSpec, parse_spec, simulate
from advisor.core.dts.simulate import DEFAULT_SAMPLES
from advisor.core.dts.spec import MODEL, expand_processors
from advisor.errors import ModelInputError

JSON_SCHEMA = "advisor-dts/1"


def add_parser(commands: Any) -> None:
    """Register ``dts`` on the CLI's subcommands."""
    cmd = commands.add_parser("dts", help="DTS: training time of PL, FL, SL, PSL and FSL on a cluster, with roles")
    cmd.add_argument("spec", type=Path, metavar="SPEC.yaml",
                     help="cluster, dnn and training (DTS Table I); e.g. advisor/data/dts-example.yaml")
    cmd.add_argument("--json", action="store_true", help=f"print the results as JSON ({JSON_SCHEMA})")
    cmd.add_argument("--samples", type=int_at_least(2), default=DEFAULT_SAMPLES,
                     help=f"Monte-Carlo draws of the fluctuations for the 95%% interval (default {DEFAULT_SAMPLES})")
    cmd.add_argument("--seed", type=SEED, default=0, help="random seed, an integer >= 0 (default 0)")
    cmd.add_argument("--max-paths", type=int_at_least(1), metavar="N",
                     help="allocation paths tried per architecture (default: the spec's max_paths)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    result = simulate(spec, samples=args.samples, seed=args.seed, max_paths=args.max_paths)
    print(json.dumps(to_json(result, args.spec), indent=2) if args.json else table(result, spec, args.spec))
    return 0


def read_spec(path: Path) -> DtsSpec:
    """The spec in ``path``; every problem is a ``ModelInputError`` naming the file (and the field)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ModelInputError(MODEL, f"{path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ModelInputError(MODEL, f"{path}: not valid YAML{where}: {problem}") from None
    return parse_spec(doc, source=str(path))


def to_json(result: DtsResult, path: Path) -> dict[str, Any]:
    return {"schema": JSON_SCHEMA, "spec": str(path), "best": result.best.architecture.value,
            "results": [_result_json(r) for r in result.results]}


def _result_json(r: ArchitectureResult) -> dict[str, Any]:
    i = r.interval
    return {
        "architecture": r.architecture.value,
        "seconds_per_batch": r.seconds_per_batch,
        "seconds_per_epoch": r.seconds_per_epoch,
        "batches_per_epoch": r.batches_per_epoch,
        "seconds_total": r.seconds_total,
        "roles": [{"processor": x.processor, "role": x.role} | ({"layers": x.layers} if x.layers else {})
                  for x in r.roles],
        "links": [list(link) for link in r.links],
        "paths": r.paths,
        "interval": {"level": i.level, "samples": i.samples, "seconds_per_batch": [i.batch_low_s, i.batch_high_s],
                     "seconds_per_epoch": [i.epoch_low_s, i.epoch_high_s], "mean_seconds_per_batch": i.batch_mean_s},
    }


def table(result: DtsResult, spec: DtsSpec, path: Path) -> str:
    t = spec.training
    lines = [f"DTS  {path.name}: {len(expand_processors(spec.cluster))} processors, {t.clients} clients, "
             f"batch {t.batch_size}, {t.batches_per_client} batches per client, {t.epochs} epochs",
             f"fluctuation: power +-{spec.cluster.power_fluctuation_pct:g} %, bandwidth "
             f"+-{spec.cluster.bandwidth_fluctuation_pct:g} %; 95 % intervals from "
             f"{result.results[0].interval.samples} draws",
             "(intervals are of the fluctuating times; a max() over clients takes the slowest draw, so they "
             "can sit above the nominal time)",
             "",
             f"{'arch':<5} {'s/batch':>10} {'95% interval':>21} {'batches':>8} {'s/epoch':>11} "
             f"{'95% interval':>23} {'total s':>11} {'paths':>6}"]
    for r in result.results:
        i = r.interval
        lines.append(f"{r.architecture.value:<5} {r.seconds_per_batch:>10.4g} "
                     f"{f'[{i.batch_low_s:.4g}, {i.batch_high_s:.4g}]':>21} {r.batches_per_epoch:>8} "
                     f"{r.seconds_per_epoch:>11.5g} {f'[{i.epoch_low_s:.5g}, {i.epoch_high_s:.5g}]':>23} "
                     f"{r.seconds_total:>11.5g} {r.paths:>6}")
    lines += ["", f"best: {result.best.architecture.value} ({result.best.seconds_per_epoch:.5g} s per epoch)", "",
              "roles:"]
    for r in result.results:
        roles = ", ".join(f"{x.role}={x.processor}" + (f" ({x.layers} layers)" if x.layers else "") for x in r.roles)
        lines.append(f"  {r.architecture.value:<4} {roles}")
    return "\n".join(lines)
