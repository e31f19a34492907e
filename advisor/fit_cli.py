"""``advisor fit-contention``: fit share_sigma and multi_flow_goodput to throughput a cluster measured.

One job on the command line (``PROFILE --observed 2=130,3=150``) or several in a YAML file
(``--jobs jobs.yaml``, format below); the fit itself is ``core/models/ps_des/fit_contention.py``. The result
is printed with the settings to paste into ``advisor predict`` and the controller.

jobs.yaml::

    jobs:
      - profile: mlp.json.gz          # relative to this file
        observed: {2: 131, 3: 150, 4: [158, 161]}   # workers: examples/s (a list for repeats)
        bandwidth: 10Gbit/s           # optional: else recorded in the profile, else measured
        congestion: cubic             # optional (cubic, reno, bbr, unknown)
        queue: 100ms                  # optional: bottleneck queue depth
        batch_size: 32                # optional: when the trace does not say
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from advisor import cli_output
from advisor.cli_args import SEED, argument_type, int_at_least
from advisor.core.advice import DEFAULT_GOODPUT, AdviceRequest, ModelChoice, Overhead
from advisor.core.bandwidth import resolve_bandwidth
from advisor.core.models.ps_des.contention import CongestionControl
from advisor.core.models.ps_des.model import CONTENTION
from advisor.core.models.ps_des.fit_contention import (
    DEFAULT_ETAS, DEFAULT_FIT_STEPS, DEFAULT_SIGMAS, ContentionFit, FitCase, Observation, fit_contention,
)
from advisor.core.curve import CurveSettings
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from advisor.core.units import parse_bandwidth, parse_duration
from advisor.errors import AdvisorError
from advisor.file_fields import Duration, Rate, load_yaml
from advisor.importers.loader import load_profile

JSON_SCHEMA = "advisor-contention-fit/1"


class JobsFileError(AdvisorError, ValueError):
    """The --jobs file or --observed list cannot be read; the message names the place."""


class _Job(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: Path
    observed: dict[int, float | list[float]] = Field(min_length=1)
    bandwidth: Rate | None = None
    congestion: CongestionControl = CongestionControl.UNKNOWN
    queue: Duration | None = None
    batch_size: int | None = Field(default=None, gt=0)


class _JobsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[_Job] = Field(min_length=1)


def add_parser(commands: Any) -> None:
    """Register ``fit-contention`` on the CLI's subcommands."""
    cmd = commands.add_parser("fit-contention", help="fit share_sigma and multi_flow_goodput to measured throughput")
    cmd.add_argument("profile", nargs="*", type=Path, help="one job's profile or trace (with --observed)")
    cmd.add_argument("--observed", type=parse_observed, metavar="W=EX_PER_S,...",
                     help="that job's measured throughput, e.g. 2=131,3=150,4=158,4=161 (repeats allowed)")
    cmd.add_argument("--jobs", type=Path, metavar="YAML", help="several jobs, each with its profile and measurements")
    cmd.add_argument("--batch-size", type=int_at_least(1), help="examples per step, when the trace does not say")
    cmd.add_argument("--bandwidth", type=argument_type(parse_bandwidth), metavar="RATE",
                     help="PS link capacity each way (default: recorded in the profile, else measured)")
    cmd.add_argument("--congestion", choices=[c.value for c in CongestionControl], default="unknown",
                     help="the pods' TCP congestion control (default unknown)")
    cmd.add_argument("--queue", type=argument_type(parse_duration), metavar="TIME",
                     help="bottleneck queue depth, e.g. 100ms")
    cmd.add_argument("--goodput", type=float, default=DEFAULT_GOODPUT, metavar="FRACTION",
                     help=f"share of the link rate TCP delivers as payload (default {DEFAULT_GOODPUT:g})")
    cmd.add_argument("--alpha", type=float, default=0.0, metavar="US_PER_BYTE", help="parsing overhead per byte (us)")
    cmd.add_argument("--beta", type=float, default=0.0, metavar="US", help="parsing overhead per tensor (us)")
    cmd.add_argument("--steps", type=int_at_least(1), default=DEFAULT_FIT_STEPS,
                     help=f"simulated steps per worker and grid point (default {DEFAULT_FIT_STEPS})")
    cmd.add_argument("--seed", type=SEED, default=0, help="random seed, an integer >= 0 (default 0)")
    cmd.add_argument("--sigmas", type=_floats, default=DEFAULT_SIGMAS, metavar="LIST",
                     help="share_sigma grid (default " + ",".join(f"{s:g}" for s in DEFAULT_SIGMAS) + ")")
    cmd.add_argument("--etas", type=_floats, default=DEFAULT_ETAS, metavar="LIST",
                     help="multi_flow_goodput grid (default " + ",".join(f"{e:g}" for e in DEFAULT_ETAS) + ")")
    cmd.add_argument("--json", action="store_true", help=f"print the fit as JSON ({JSON_SCHEMA})")
    cmd.set_defaults(run=run)


def parse_observed(text: str) -> tuple[Observation, ...]:
    """'2=131,3=150,4=158' -> observations (a worker count may repeat)."""
    found = []
    for part in text.split(","):
        w, sep, thr = part.strip().partition("=")
        try:
            found.append(Observation(int(w), float(thr)))
        except (ValueError, SimulationSettingsError) as exc:
            raise argparse.ArgumentTypeError(
                f"cannot read {part.strip()!r} in --observed: write WORKERS=EXAMPLES_PER_S, e.g. 2=131 ({exc})"
            ) from None
        if not sep:
            raise argparse.ArgumentTypeError(f"--observed {part.strip()!r} lacks '=': write e.g. 2=131")
    return tuple(found)


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read the numbers {text!r}; write e.g. 0.5,1,1.5") from None
    if not values:
        raise argparse.ArgumentTypeError("the list is empty")
    return values


def run(args: argparse.Namespace) -> int:
    warmup = CurveSettings(workers=(1,)).warmup_steps  # what _request's curves use
    if args.steps <= warmup:
        raise SimulationSettingsError(f"--steps {args.steps} must exceed the {warmup} warm-up steps each simulation "
                                      "starts with (they are not measured)")
    cases, notes = _cases(args)
    for note in notes:
        cli_output.note(note)
    with cli_output.progress("fitted", "grid points") as progress:
        fit = fit_contention(cases, sigmas=args.sigmas, etas=args.etas, steps=args.steps, progress=progress)
    print(json.dumps(fit_to_json(fit), indent=2) if args.json else fit_table(fit))
    return 0


def _cases(args: argparse.Namespace) -> tuple[list[FitCase], list[str]]:
    if args.jobs is not None:
        if args.profile or args.observed:
            raise JobsFileError("give either --jobs or a PROFILE with --observed, not both")
        jobs, base = _read_jobs(args.jobs), args.jobs.parent
        specs = [(f"{args.jobs.name}: jobs[{i}]", base / j.profile,
                  _observations(j.observed, f"{args.jobs}: jobs[{i}]"),
                  parse_bandwidth(j.bandwidth) if j.bandwidth else args.bandwidth, j.congestion,
                  parse_duration(j.queue) if j.queue else args.queue, j.batch_size or args.batch_size)
                 for i, j in enumerate(jobs)]
    else:
        if not args.profile or not args.observed:
            raise JobsFileError("give a PROFILE and its --observed throughput (or --jobs FILE for several jobs)")
        specs = [(", ".join(p.name for p in args.profile), args.profile, args.observed, args.bandwidth,
                  CongestionControl(args.congestion), args.queue, args.batch_size)]
    cases, notes = [], []
    for name, paths, observed, bandwidth, congestion, queue, batch_size in specs:
        profile = load_profile(paths, batch_size=batch_size)
        bps, _, note = resolve_bandwidth(profile, bandwidth, args.goodput)
        if note:
            notes.append(f"{name}: {note}")
        cases.append(FitCase(name, profile, _request(args, bps, congestion, queue), observed))
    return cases, notes


def _read_jobs(path: Path) -> list[_Job]:
    doc = load_yaml(path, JobsFileError)
    try:
        return _JobsFile.model_validate(doc).jobs
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'top level'}: {e['msg']}" for e in exc.errors())
        raise JobsFileError(f"{path}: {problems}") from None
    except AdvisorError as exc:  # a bandwidth or duration that does not parse, from the validators
        raise JobsFileError(f"{path}: {exc}") from None


def _observations(observed: dict[int, float | list[float]], where: str) -> tuple[Observation, ...]:
    out = []
    for w, values in sorted(observed.items()):
        for v in values if isinstance(values, list) else [values]:
            try:
                out.append(Observation(w, v))
            except SimulationSettingsError as exc:
                raise JobsFileError(f"{where}.observed: {exc}") from None
    return tuple(out)


def _request(args: argparse.Namespace, bandwidth: float, congestion: CongestionControl,
             queue: float | None) -> AdviceRequest:
    return AdviceRequest(
        network=NetworkModel(bandwidth_bps=bandwidth),
        curve=CurveSettings(workers=(1,), seed=args.seed),
        overhead=Overhead(args.alpha, args.beta),
        goodput=args.goodput,
        model=ModelChoice(CONTENTION, {"congestion_control": congestion.value, "queue_s": queue}),
    )


def fit_to_json(fit: ContentionFit) -> dict[str, Any]:
    """The fit as a stable document (schema ``advisor-contention-fit/1``, README)."""
    def num(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "schema": JSON_SCHEMA,
        "share_sigma": fit.share_sigma,
        "goodput_param": fit.goodput_param,
        fit.goodput_param: fit.multi_flow_goodput,
        "mean_abs_error": fit.best.mean_error,
        "max_abs_error": fit.best.max_error,
        "before": {"share_sigma": num(fit.before.share_sigma), fit.goodput_param: num(fit.before.multi_flow_goodput),
                   "mean_abs_error": fit.before.mean_error, "max_abs_error": fit.before.max_error},
        "observations": [
            {"job": o.case, "workers": o.observation.workers, "measured": o.observation.throughput,
             "predicted_before": o.predicted_before, "predicted_after": o.predicted_after,
             "error_before": o.error_before, "error_after": o.error_after, "scored": o.scored,
             "why_not_scored": o.why_not_scored or None}
            for o in fit.observations
        ],
        "grid": [{"share_sigma": g.share_sigma, fit.goodput_param: g.multi_flow_goodput,
                  "mean_abs_error": g.mean_error, "max_abs_error": g.max_error} for g in fit.grid],
        "notes": list(fit.notes),
    }


def fit_table(fit: ContentionFit) -> str:
    """The readable form: the fitted pair, each observation before and after, and how to use it."""
    b, a = fit.before, fit.best
    own = "each job's own" if math.isnan(b.share_sigma) else f"sigma {b.share_sigma:g}, eta {b.multi_flow_goodput:g}"
    lines = [
        f"fitted       share_sigma = {fit.share_sigma:g}, {fit.goodput_param} = {fit.multi_flow_goodput:g}",
        f"error        mean {a.mean_error:.1%}, max {a.max_error:.1%} (before, {own}: mean {b.mean_error:.1%}, "
        f"max {b.max_error:.1%})",
        "",
        f"{'job':<30} {'W':>3} {'measured':>9} {'before':>8} {'error':>7} {'after':>8} {'error':>7}",
    ]
    for o in fit.observations:
        mark = "" if o.scored else "  (not scored)"
        lines.append(f"{o.case[-30:]:<30} {o.observation.workers:>3} {o.observation.throughput:>9.1f} "
                     f"{o.predicted_before:>8.1f} {o.error_before:>+7.1%} {o.predicted_after:>8.1f} "
                     f"{o.error_after:>+7.1%}{mark}")
    reasons = sorted({o.why_not_scored for o in fit.observations if o.why_not_scored})
    notes = [*reasons, *fit.notes]
    if notes:
        lines += ["", *(f"note: {n}" for n in notes)]
    flag = fit.goodput_param.replace("_", "-")
    setting = (f"multi_flow_goodput: {fit.multi_flow_goodput:g}" if fit.goodput_param == "multi_flow_goodput"
               else f"model_params: {{{fit.goodput_param}: {fit.multi_flow_goodput:g}}}")
    lines += ["",
              f"use          advisor predict ... --share-sigma {fit.share_sigma:g} --{flag} {fit.multi_flow_goodput:g}",
              f"             controller settings: share_sigma: {fit.share_sigma:g}, {setting}"]
    return "\n".join(lines)

