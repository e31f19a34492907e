"""The ``advisor`` command line: a thin layer that reads files, calls the core and prints.

Every error the project raises on purpose (``AdvisorError``) is printed as one message
and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, replace
from enum import Enum
from pathlib import Path
from typing import Any

from advisor import allocate_cli, cli_output, dts_cli, fit_cli, jit_cache, opdb_cli, store_cli
from advisor.cli_args import (
    NORMAL, SEED, ArgumentParser, UsageError, argument_type, check_output, int_at_least, output_options, verbosity,
    writing,
)
from advisor.core.advice import DEFAULT_GOODPUT, Advice, AdviceRequest, ModelChoice, Overhead, advise, model_inputs
from advisor.core.bandwidth import resolve_bandwidth
from advisor.core.calibration import calibrate
from advisor.core.online_calibration import profile_anchored
from advisor.core.profile_check import anchored_note
from advisor.core.compare import compare
from advisor.core.correction import Correction
from advisor.core.cost import DEFAULT_CONFIDENCE, Constraints, CostError, Prices
from advisor.core.curve import CurveSettings
from advisor.core.model_error import ModelError, ModelErrors
from advisor.core.models import registry
from advisor.core.models.protocol import DEVICE_DB, Need
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError, StreamOrder
from advisor.core.summary import AllReduceSummary, ProfileSummary, summarize, summarize_allreduce, tracing_cost
from advisor.core.units import format_bandwidth, parse_bandwidth, parse_deadline, parse_duration
from advisor.errors import AdvisorError, EngineCacheWarning, ModelInputError
from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.model_error_file import load_model_errors
from advisor.importers.observed import read_observed
from advisor.importers.opdb_file import read_opdb
from advisor.importers.spec_file import read_spec_document
from advisor.importers.profile_file import write_profile
from advisor.parallel import PointPool
from advisor.plot import plot_advice
from advisor.report import advice_table, advice_to_json, compare_table, compare_to_json, decision_warning

EXIT_USAGE = 2
# where an adaptive curve starts (CurveSettings.min_steps); its warm-up must be shorter
ADAPTIVE_MIN_STEPS = CurveSettings(workers=(1,)).min_steps
MODEL_ERROR_HELP = ("widen each interval by the predicting model's measured error: FILE holds one model's, FOLDER one "
                    "<model>.json per model (default: the shipped held-out widths, advisor/data/model_error/; a model "
                    "without a file is not widened); off: simulation noise only")


def main(argv: Sequence[str] | None = None) -> int:
    jit_cache.prepare()  # before anything imports numba: a read-only shipped cache is copied where numba can use it
    _short_warnings()
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return EXIT_USAGE
    try:
        with cli_output.session(verbosity(args), logs=not getattr(args, "configures_logging", False)):
            return int(args.run(args))
    except AdvisorError as exc:
        print(f"advisor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _short_warnings() -> None:
    """The engine-cache warnings as one line each ("advisor: warning: ..."), others as Python shows them."""
    shown = warnings.showwarning
    if getattr(shown, "advisor_short", False):  # installed by an earlier main() in this process
        return

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, EngineCacheWarning):
            print(f"advisor: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    show.advisor_short = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="advisor", description=__doc__.splitlines()[0], parents=[output_options()])
    commands = parser.add_subparsers(title="commands")
    profile = commands.add_parser("profile", help="read, check and convert profiles and traces")
    profile_cmds = profile.add_subparsers(title="profile commands")

    inspect = profile_cmds.add_parser("inspect", help="summarise a profile or TensorFlow trace")
    _add_input(inspect)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(run=_inspect)

    convert = profile_cmds.add_parser("convert", help="import a TensorFlow trace into a profile file")
    _add_input(convert)
    convert.add_argument("-o", "--output", type=Path, required=True, help="profile file to write (.json or .json.gz)")
    convert.set_defaults(run=_convert)

    calib = commands.add_parser("calibrate", help="fit overhead (alpha, beta), HTTP/2 window and goodput to a profile")
    _add_input(calib)
    calib.add_argument("--json", action="store_true", help="print the fit as JSON")
    calib.set_defaults(run=_calibrate)

    predict = commands.add_parser("predict", help="predict throughput for W workers, saturation and cost-optimal W")
    _add_input(predict)
    _add_predict_options(predict)
    predict.set_defaults(run=_predict)

    models = commands.add_parser("models", help="list every throughput model, what it needs, its parameters and "
                                 "whether its model error is measured")
    models.add_argument("--json", action="store_true", help="print the list as JSON")
    models.add_argument("--model-error", metavar="FILE|FOLDER|off", default=None, help=MODEL_ERROR_HELP)
    models.set_defaults(run=_models)

    comp = commands.add_parser("compare", help="every applicable model's curve side by side, with errors against "
                                               "measured throughput (--observed)")
    _add_input(comp)
    _add_compare_options(comp)
    comp.set_defaults(run=_compare)

    fit_cli.add_parser(commands)
    store_cli.add_parser(commands)
    dts_cli.add_parser(commands)
    opdb_cli.add_parser(commands)
    allocate_cli.add_parser(commands)

    controller = commands.add_parser("controller", help="run the Kubernetes controller (see docs/controller.md)")
    controller.add_argument("--config", type=Path, help="settings YAML file (default: $ADVISOR_CONFIG_FILE)")
    controller.add_argument("--kubeconfig", type=Path, help="kubeconfig for development (default: in-cluster)")
    controller.add_argument("--context", help="kubeconfig context")
    controller.add_argument("--check-config", action="store_true", help="validate the settings, print them, exit")
    controller.set_defaults(run=_controller, configures_logging=True)

    job = commands.add_parser("predict-job", help="run one prediction for the controller (its prediction Jobs' pods)")
    job.add_argument("--controller", required=True, metavar="URL", help="the controller's base URL")
    job.add_argument("--key", required=True, help="the prediction key (its Job's name carries it)")
    job.add_argument("--retry-for", type=float, default=600.0, metavar="SECONDS",
                     help="keep retrying an unreachable controller this long (default 600)")
    job.set_defaults(run=_predict_job)
    return parser


def _controller(args: argparse.Namespace) -> int:
    """Imported lazily: the Kubernetes client and the scheduler are not needed to predict."""
    from advisor.controller.main import run_controller

    level = verbosity(args)
    return run_controller(config=args.config, kubeconfig=args.kubeconfig, context=args.context,
                          check_only=args.check_config,
                          log_level=None if level == NORMAL else logging.getLevelName(cli_output.log_level(level)))


def _predict_job(args: argparse.Namespace) -> int:
    """The bearer token comes from the environment (the Job's Secret), never from the command line."""
    from advisor.controller.pipeline.job_client import run_prediction_job, token_from_env

    return run_prediction_job(args.controller, args.key, token_from_env(), retry_for_s=args.retry_for)


def _add_predict_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--workers", type=parse_workers, default=parse_workers("1-16"), metavar="RANGE",
                     help="worker counts: 1-32, or 1,2,4,8, or 1-8,12,16 (default 1-16)")
    cmd.add_argument("--bandwidth", type=argument_type(_bandwidth_arg), metavar="RATE",
                     help="link capacity each way (a PS's link, or each worker's for all-reduce), e.g. 10Gbit/s, "
                          "or 'measure' to measure it from a PS profile's transfer times (default: the profile's "
                          "recorded rate, else measured; an all-reduce profile has no transfers to measure)")
    cmd.add_argument("--ps", type=int_at_least(1),
                     help="parameter servers to predict for (default: the profile's; another count is a what-if "
                          "only models that place variables on PS can answer)")
    cmd.add_argument("--price-worker", type=float, default=1.0, metavar="PER_HOUR", help="price per worker-hour")
    cmd.add_argument("--price-ps", type=float, default=0.0, metavar="PER_HOUR", help="price per PS-hour")
    cmd.add_argument("--examples", type=float, help="the job's size in examples, for --deadline/--budget")
    cmd.add_argument("--deadline", metavar="HOURS|TIME",
                     help="finish --examples within this many hours (e.g. 36), or by this time (e.g. "
                          "2030-06-01T18:00Z; UTC without a zone)")
    cmd.add_argument("--budget", type=float, help="spend at most this on --examples")
    cmd.add_argument("--confidence", type=argument_type(parse_probability), default=DEFAULT_CONFIDENCE, metavar="P",
                     help="recommend the cheapest W that meets --deadline and --budget with at least this "
                          f"probability, strictly between 0 and 1 (default {DEFAULT_CONFIDENCE}); when none "
                          "does, the W likeliest to, with a warning")
    cmd.add_argument("--resize-after", type=float, metavar="HOURS",
                     help="plan --deadline on one resize: the job is observed after HOURS at its first W and "
                          "resized once if it falls short (what the controller's auto mode with the closed loop "
                          "does); recommends the cheapest start whose plan meets it with --confidence")
    cmd.add_argument("--resize-loss", type=float, default=0.0, metavar="HOURS",
                     help="progress one resize loses (pods restart from a checkpoint), with --resize-after "
                          "(default 0)")
    cmd.add_argument("--max-workers", type=int_at_least(1), help="never recommend more workers than this")
    cmd.add_argument("--anchor", action="store_true",
                     help="take the profiling run's own examples/s as an observation at W = 1 (the closed loop's "
                          "posterior): for a prediction whose W = 1 it contradicts, e.g. a link stated faster than "
                          "the profile ran on (docs/decisions.md)")
    cmd.add_argument("--saturation-threshold", type=float, default=0.05, metavar="FRACTION",
                     help="saturation: one more worker adds less than this share of W=1 throughput (default 0.05)")
    sim = cmd.add_argument_group("simulation")
    sim.add_argument("--steps", type=int_at_least(1),
                     help="steps per worker, fixed, the --warmup included (must exceed it); default: adaptive, from "
                     f"{ADAPTIVE_MIN_STEPS} steps until the interval is within --target")
    sim.add_argument("--target", type=float, default=0.02, metavar="FRACTION",
                     help="relative half-width of the 95%% interval an adaptive run (no --steps) reaches "
                     "(default 0.02)")
    sim.add_argument("--warmup", type=int_at_least(0), default=50,
                     help="warm-up steps per worker, not measured; fewer than --steps, or than the "
                     f"{ADAPTIVE_MIN_STEPS} an adaptive run starts with (default 50)")
    sim.add_argument("--seed", type=SEED, default=0, help="random seed, an integer >= 0 (default 0)")
    sim.add_argument("--model-error", metavar="FILE|FOLDER|off", default=None, help=MODEL_ERROR_HELP)
    sim.add_argument("--jobs", type=int_at_least(0, "0 is as many as the CPU quota allows"), default=0, metavar="N",
                     help="processes that compute the worker counts (default 0: as many as the CPU quota allows; "
                          "the result is the same for any N)")
    sim.add_argument("--win", type=parse_window, metavar="BYTES|off",
                     help="HTTP/2 first-service window in bytes, or off (default off: whole streams)")
    sim.add_argument("--order", choices=[o.value for o in StreamOrder], default=StreamOrder.FIFO.value,
                     help="which pending stream a link serves next (default fifo)")
    sim.add_argument("--order-file", type=Path,
                     help="with --order custom (which needs it, and only it reads it): transfer names, one per line")
    sim.add_argument("--goodput", type=float, default=DEFAULT_GOODPUT, metavar="FRACTION",
                     help="share of the link rate TCP delivers as payload (default 0.95: Ethernet/IP/TCP framing "
                     "of 1500-byte packets carries 1448 of 1538 bytes on the wire)")
    _add_model_options(cmd)
    net = cmd.add_argument_group("contention between workers: parameters of the models that have them "
                                 f"(default model {registry.DEFAULT_MODEL}; see advisor models)")
    net.add_argument("--congestion", choices=["cubic", "reno", "bbr", "unknown"],
                     help="the pods' TCP congestion control (sysctl net.ipv4.tcp_congestion_control; default unknown)")
    net.add_argument("--queue", type=argument_type(parse_duration), metavar="TIME",
                     help="bottleneck queue depth, e.g. 20ms (tc qdisc latency); used with cubic or reno")
    net.add_argument("--share-sigma", type=float, metavar="SIGMA",
                     help="spread of TCP shares between workers (lognormal sigma, default 1)")
    net.add_argument("--multi-flow-goodput", type=float, metavar="FRACTION",
                     help="capacity of a link direction several workers share, a job with one PS (default 0.85)")
    net.add_argument("--multi-ps-flow-goodput", type=float, metavar="FRACTION",
                     help="the same for a job with several PS (default 1.0)")
    net.add_argument("--equal-shares", action="store_true",
                     help="Li et al.'s model: equal shares, no request queueing, full capacity "
                          f"(the same as --model {registry.EQUAL_SHARES_MODEL}; {registry.EQUAL_SHARES_SYNC_MODEL} "
                          "for a trace of SyncReplicasOptimizer)")
    sim.add_argument("--calibrate", action="store_true",
                     help="fit --alpha, --beta, --win and --goodput to the profile itself (needs its recorded bandwidth)")
    sim.add_argument("--alpha", type=float, default=0.0, metavar="US_PER_BYTE",
                     help="parsing overhead per byte (microseconds), see advisor calibrate")
    sim.add_argument("--beta", type=float, default=0.0, metavar="US", help="parsing overhead per tensor (us)")
    out = cmd.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the prediction as JSON (advisor-prediction/1)")
    out.add_argument("--plot", type=Path, metavar="PNG", help="write the curve as a PNG (needs matplotlib)")
    out.add_argument("--timeline", type=Path, metavar="JSON",
                     help="write a synthetic multi-worker timeline (Chrome trace, for Perfetto)")
    out.add_argument("--timeline-workers", type=int_at_least(1), default=4, metavar="W",
                     help="workers in --timeline (default 4)")


def _add_model_options(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group("model (advisor models lists them)")
    group.add_argument("--model", metavar="NAME", help=f"the throughput model (default by the trace's regime: "
                       f"{registry.DEFAULT_MODEL} for asynchronous PS, {registry.DEFAULT_SYNC_MODEL} for "
                       f"SyncReplicasOptimizer, {registry.DEFAULT_ALLREDUCE_MODEL} for all-reduce)")
    group.add_argument("--model-param", action="append", metavar="KEY=VALUE",
                       help="a parameter of the model, e.g. share_sigma=0.5 (repeatable)")
    group.add_argument("--spec", type=Path, metavar="FILE.yaml",
                       help="inputs that are not a trace: layers, gpu, links (pei2019), cluster, dnn, training (dts); "
                            "e.g. advisor/data/resnet50.spec.yaml")
    group.add_argument("--device-db", type=Path, metavar="FILE",
                       help="an op database (advisor opdb build) that re-times compute for huang-replay")
    group.add_argument("--ps-placement", choices=["round-robin", "greedy-bytes"],
                       help="with --ps M other than the profile's: how variables are placed on the M PS "
                            "(round-robin: TensorFlow's default; greedy-bytes: its load balancer by size)")
    group.add_argument("--worker-speed", type=parse_speeds, metavar="LIST",
                       help="compute speed of each worker relative to the traced one, e.g. 1,1,0.5 "
                            "(heterogeneous workers; models that support them)")
    group.add_argument("--worker-bandwidth", type=parse_rates, metavar="LIST",
                       help="each worker's link rate, e.g. 10Gbit/s,10Gbit/s,1Gbit/s; one rate: every worker's "
                            "(models that support them)")


def _add_compare_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--workers", type=parse_workers, default=parse_workers("1-8"), metavar="RANGE",
                     help="worker counts (default 1-8)")
    cmd.add_argument("--bandwidth", type=argument_type(_bandwidth_arg), metavar="RATE",
                     help="link capacity each way, or 'measure' (default: recorded, else measured)")
    cmd.add_argument("--goodput", type=float, default=DEFAULT_GOODPUT, metavar="FRACTION",
                     help="share of the link rate TCP delivers as payload (default 0.95)")
    cmd.add_argument("--observed", type=Path, metavar="FILE",
                     help="measured throughput (the testbed's results[] with W and thr_window, or {W: ex/s}): "
                          "adds |error| per point and each model's median and max")
    cmd.add_argument("--models", metavar="NAMES", help="comma-separated models to compare (default: all)")
    cmd.add_argument("--model-param", action="append", metavar="MODEL.KEY=VALUE",
                     help="a parameter of one compared model, e.g. li2020-des+contention.share_sigma=0.3 "
                          "(repeatable; advisor models lists them); the others keep their defaults")
    cmd.add_argument("--spec", type=Path, metavar="FILE.yaml", help="layer or cluster spec, for the models that read one")
    cmd.add_argument("--steps", type=int_at_least(1), help="fixed steps per worker (default: adaptive)")
    cmd.add_argument("--target", type=float, default=0.02, metavar="FRACTION",
                     help="relative half-width an adaptive run reaches (default 0.02)")
    cmd.add_argument("--warmup", type=int_at_least(0), default=50, help="warm-up steps per worker (default 50)")
    cmd.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    cmd.add_argument("--json", action="store_true", help="print the comparison as JSON")


def parse_speeds(text: str) -> tuple[float, ...]:
    """'1,1,0.5' -> (1.0, 1.0, 0.5): compute multipliers, each finite and > 0."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read speeds {text!r}; write e.g. 1,1,0.5") from None
    if not all(0 < v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"every speed must be a finite number > 0, got {text!r}")
    return values


def parse_rates(text: str) -> tuple[float, ...]:
    """'10Gbit/s,1Gbit/s' -> bits/s per worker."""
    try:
        return tuple(parse_bandwidth(v.strip()) for v in text.split(","))
    except AdvisorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _models(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    errors = _model_error(args)
    for model in registry.all_models():
        params = [{"name": k, "type": _type_name(f.annotation), "default": _jsonable(f.default),
                   "description": f.description or ""} for k, f in model.Params.model_fields.items()]
        calibration = [{"name": c.name, "low": c.low, "high": c.high, "grid": list(c.grid), "log": c.log,
                        "description": c.description} for c in model.calibration]
        rows.append({"name": model.name, "description": model.description,
                     "needs": sorted(n.value for n in model.needs), "params": params,
                     "calibration": calibration, "calibration_note": model.calibration_note,
                     "model_error": _model_error_row(model.name, errors, args)})
    if args.json:
        print(json.dumps({"default": registry.DEFAULT_MODEL, "defaults": _defaults_by_regime(), "models": rows},
                         indent=2))
        return 0
    marks: dict[str, list[str]] = {}
    for regime, name in _defaults_by_regime().items():
        marks.setdefault(name, []).append(regime)
    for r in rows:
        # the default (asynchronous PS, and any trace before its regime is known); the other regimes' by name
        mark = (" (default)" if r["name"] == registry.DEFAULT_MODEL else
                f" (default for {' and '.join(marks[r['name']])} traces)" if r["name"] in marks else "")
        print(f"{r['name']}{mark}\n  {r['description']}\n  needs: {', '.join(r['needs'])}")
        for p in r["params"]:
            print(f"  --model-param {p['name']}=  {p['type']}, default {p['default']}: {p['description']}")
        # what a running job's observed throughput corrects (the controller's closed loop)
        if r["calibration"]:
            print("  calibrated from observed throughput: " + ", ".join(
                f"{c['name']} {c['low']:g}..{c['high']:g}" for c in r["calibration"]))
        else:
            print(f"  not calibrated from observed throughput: {r['calibration_note']}")
        e = r["model_error"]
        if e["measured"]:
            print(f"  model error: measured from {e['points']} points, at {e['level']:.0%}: " + ", ".join(
                f"{g['label']} -{g['down']:.1%}/+{g['up']:.1%}" for g in e["regimes"]))
        else:
            print(f"  model error: not measured ({e['why_not']}): its intervals leave it out")
        for scope, g in e.get("scopes", {}).items():  # the jobs whose inputs the model misses differently
            print(f"  model error with {scope}: measured from {g['points']} points, at {g['level']:.0%}: " + ", ".join(
                f"{x['label']} -{x['down']:.1%}/+{x['up']:.1%}" for x in g["regimes"]))
    return 0


def _defaults_by_regime() -> dict[str, str]:
    """The model a prediction uses when none is named, per regime of the trace (registry.default_model_for)."""
    return {"asynchronous PS": registry.default_model_for(False, synchronous=False),
            "synchronous PS": registry.default_model_for(False, synchronous=True),
            "all-reduce": registry.default_model_for(True)}


def _model_error_row(model: str, errors: ModelErrors | None, args: argparse.Namespace) -> dict[str, Any]:
    """Whether ``model``'s error is measured in ``errors`` (from how many points), else why not."""
    error = None if errors is None else errors.of(model)
    scopes = {} if errors is None else {e.scope: _measured_row(e) for e in errors if e.model == model and e.scope}
    if error is None:
        given = getattr(args, "model_error", None)
        if errors is None:
            why = "--model-error off"
        elif given and not Path(given).is_dir():
            why = f"{given} holds the error of {', '.join(errors.models)} only"
        else:
            why = f"no {model}.json in {given}" if given else f"no {model}.json in the shipped advisor/data/model_error"
        return {"measured": False, "why_not": why, **({"scopes": scopes} if scopes else {})}
    return {"measured": True, **_measured_row(error), **({"scopes": scopes} if scopes else {})}


def _measured_row(error: ModelError) -> dict[str, Any]:
    return {"points": error.points, "level": error.level, "source": error.source,
            "regimes": [{"label": g.label, "workers_min": g.workers_min, "workers_max": g.workers_max,
                         "outcome": g.outcome, "down": g.down, "up": g.up, "n": g.n, "exact": g.exact}
                        for g in error.regimes]}


def _type_name(annotation: object) -> str:
    """'float', 'float | None', "Literal['a', 'b']", or an enum's values as 'cubic|reno|...'."""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "|".join(str(m.value) for m in annotation)
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _jsonable(value: object) -> object:
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def _compare(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.models.split(",")] if args.models else list(registry.names())
    for name in names:
        registry.get(name)  # an unknown name lists the valid ones, before anything is read or run
    params = _compare_params(args.model_param or (), names)
    observed = read_observed(args.observed) if args.observed else {}
    spec = read_spec_document(args.spec) if args.spec else None
    profile = _load(args) if args.profile or spec is None else None
    bandwidth, source, note = _bandwidth(args, profile)
    if note:
        cli_output.note(note)
    request = AdviceRequest(network=None if bandwidth is None else NetworkModel(bandwidth_bps=bandwidth),
                            curve=_curve_settings(args), goodput=args.goodput, side_by_side=(), spec=spec)
    cli_output.detail("comparing %s; parameters %s", ", ".join(names), params or "as default")
    with cli_output.progress("predicted", "models") as progress:
        curves = compare(profile, request, names, progress, params)
    if args.json:
        print(json.dumps(compare_to_json(profile, bandwidth, source, curves, observed), indent=2))
    else:
        print(compare_table(profile, bandwidth, curves, observed, args.workers))
    return 0


def _add_input(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "profile",
        nargs="*",
        type=Path,
        help="profile, condensed dump, RunMetadata .jsonl[.gz], one run's .pb files, or a directory "
        "holding one of them (default: the bundled example, an MLP traced at 100 Mbit/s)",
    )
    cmd.add_argument("--batch-size", type=int_at_least(1), help="examples per step, when the trace does not say")
    cmd.add_argument(
        "--recorded-bandwidth", type=argument_type(parse_bandwidth), metavar="RATE",
        help="link capacity when the trace was recorded (a PS's link), e.g. 100Mbit/s",
    )


def parse_workers(text: str) -> tuple[int, ...]:
    """'1-8,12,16' -> (1, 2, ..., 8, 12, 16)."""
    found: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            lo, hi = int(first), int(last or first)
        except ValueError:
            raise argparse.ArgumentTypeError(f"cannot read worker counts {text!r}; write e.g. 1-32 or 1,2,4,8") from None
        if hi < lo:
            raise argparse.ArgumentTypeError(f"the range {part.strip()!r} is reversed: write {hi}-{lo}")
        found.update(range(lo, hi + 1))
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1, got {text!r}")
    return tuple(sorted(found))


def parse_window(text: str) -> float | None:
    """'off' -> None (flow control off), else a positive byte count."""
    if text.lower() in ("off", "none", "0"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a byte count or 'off', got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the window must be > 0 bytes, got {text!r}")
    return value


def _load(args: argparse.Namespace) -> Profile:
    paths = args.profile or [BUNDLED_EXAMPLE]
    if not args.profile:
        cli_output.note("(no profile given: using the bundled example %s)", BUNDLED_EXAMPLE.name)
    return load_profile(paths, batch_size=args.batch_size, bandwidth_bps=args.recorded_bandwidth)


def _inspect(args: argparse.Namespace) -> int:
    profile = _load(args)
    if profile.job.kind.allreduce:  # no parameter server and no timed transfers: told in its own terms
        reduced = summarize_allreduce(profile)
        summary: dict[str, Any] = asdict(reduced)
        text = render_allreduce_summary(profile, reduced)
    else:
        plain = summarize(profile)
        summary = asdict(plain)
        text = render_summary(profile, plain)
    if args.json:
        print(json.dumps({"job": profile.job.model_dump(mode="json"), "summary": summary}, indent=2))
    else:
        print(text)
    return 0


def _convert(args: argparse.Namespace) -> int:
    check_output("-o", args.output)
    profile = _load(args)
    with writing("-o", args.output):
        write_profile(profile, args.output)
    print(f"wrote {args.output}: {len(profile.ops)} ops x {len(profile.steps)} steps")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    profile = _load(args)
    c = calibrate(profile)
    if args.json:
        print(json.dumps({k: v for k, v in asdict(c).items() if k != "candidates"}, indent=2))
        return 0
    win = "off (whole streams)" if c.win_bytes is None else f"{c.win_bytes:,.0f} B"
    print(f"overhead     alpha = {c.alpha_us_per_byte * 1e3:.4f} us/kB, beta = {c.beta_us:.0f} us per transfer")
    print(f"HTTP/2 WIN   {win}")
    print(f"goodput      {c.goodput:.2f} of the recorded bandwidth")
    print(f"fit          {c.transfers} transfer records; end-time error {c.mean_abs_error_us / 1000:.2f} ms mean, "
          f"{c.median_rel_error:.1%} median, {c.p95_rel_error:.1%} p95")
    print(f"use          advisor predict ... --alpha {c.alpha_us_per_byte:.6g} --beta {c.beta_us:.6g} "
          f"--win {c.win_bytes or 'off'} --goodput {c.goodput:g}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    check_output("--plot", args.plot)  # before the simulations, not after
    check_output("--timeline", args.timeline)
    spec = read_spec_document(args.spec) if args.spec else None
    profile = _load(args) if _wants_profile(args, spec) else None
    if args.calibrate and profile is not None:
        c = calibrate(profile)
        args.alpha, args.beta, args.win, args.goodput = c.alpha_us_per_byte, c.beta_us, c.win_bytes, c.goodput
    bandwidth, source, note = _bandwidth(args, profile)
    request = _advice_request(args, profile, bandwidth, spec)
    regime = _regime_note(args, profile)
    for told in (note, regime):
        if told:
            cli_output.note(told)
    try:
        with PointPool(args.jobs) as pool, cli_output.progress("simulated", "worker counts") as progress:
            cli_output.detail("model %s, parameters %s; %d worker count(s) on %d process(es)", request.model.name,
                              dict(request.model.params) or "as default", len(request.curve.workers), pool.jobs)
            advice = advise(profile, request, progress, pool)
            if args.anchor:
                request, advice, anchored = _anchor(profile, request, advice, progress, pool)
                cli_output.note(anchored)
                note = "; ".join(n for n in (note, anchored) if n)
    except SimulationSettingsError as exc:  # the core names its field; the user wrote the file
        if request.network and request.network.order is StreamOrder.CUSTOM and "custom_order" in str(exc):
            raise SimulationSettingsError(str(exc).replace("custom_order", f"--order-file {args.order_file}")) from None
        raise
    if args.json:
        doc = advice_to_json(profile, request, advice, bandwidth_source=source)
        doc["notes"] += [n for n in (note, regime) if n]
        print(json.dumps(doc, indent=2))
    else:
        print(advice_table(profile, request, advice))
    warning = decision_warning(advice, request)
    if warning:
        cli_output.warning(warning)
    if args.plot:
        with writing("--plot", args.plot):
            plot_advice(advice, args.plot, title=f"{_job_name(profile, args)}: predicted throughput")
        cli_output.note("wrote %s", args.plot)
    if args.timeline:
        _write_timeline(args, profile, request)
    return 0


def _anchor(profile: Profile | None, request: AdviceRequest, advice: Advice, progress: Any,
            pool: PointPool) -> tuple[AdviceRequest, Advice, str]:
    """``--anchor``: the request conditioned on the profile's own rate at W = 1, its advice, and
    the note that says so (``core/profile_check.py``)."""
    check = advice.profile_check
    if check is None:
        raise ModelInputError(request.model.name, "--anchor needs the W = 1 point (--workers from 1), a profile "
                                                  "whose steps record their client wall time, and a prediction of "
                                                  "the traced configuration (not a what-if: another PS count, a PS "
                                                  "program as all-reduce)")
    anchored = profile_anchored(profile, request, check)
    return anchored, replace(advise(profile, anchored, progress, pool), profile_check=check), anchored_note(check)


def _wants_profile(args: argparse.Namespace, spec: dict | None) -> bool:
    """A profile is read when one is given, or when there is no spec, or when the model reads one
    (else a spec-only model such as pei2019 or dts predicts from the spec alone)."""
    if args.profile or spec is None:
        return True
    return Need.PROFILE in registry.get(_model_name(args)).needs


def _job_name(profile: Profile | None, args: argparse.Namespace) -> str:
    if profile is not None:
        return profile.job.model or "job"
    return Path(args.spec).stem if getattr(args, "spec", None) else "job"


def _bandwidth_arg(text: str) -> float | str:
    return "measure" if text.strip().lower() == "measure" else parse_bandwidth(text)


def _bandwidth(args: argparse.Namespace, profile: Profile | None) -> tuple[float | None, str, str | None]:
    """(link rate, where it came from, a note when measured): --bandwidth, else recorded, else
    measured; without a profile only --bandwidth (None: the models that need it say so)."""
    given = args.bandwidth if isinstance(args.bandwidth, float) else None
    if profile is None:
        if args.bandwidth == "measure":
            raise SimulationSettingsError("--bandwidth measure needs a profile to measure it from")
        return given, "given", None
    return resolve_bandwidth(profile, given, args.goodput, measure=args.bandwidth == "measure")


def _advice_request(args: argparse.Namespace, profile: Profile | None, bandwidth: float | None,
                    spec: dict | None = None) -> AdviceRequest:
    order = StreamOrder(args.order)
    custom = _custom_order(args) if order is StreamOrder.CUSTOM else ()
    if order is not StreamOrder.CUSTOM and args.order_file is not None:
        raise SimulationSettingsError(f"--order-file is read only with --order custom, not --order {order.value}: "
                                      "add --order custom, or drop --order-file")
    links, common = _worker_links(args.worker_bandwidth or (), bandwidth)
    network = None if bandwidth is None else NetworkModel(bandwidth_bps=bandwidth, win_bytes=args.win, order=order,
                                                          custom_order=custom, worker_bandwidth_bps=common)
    return AdviceRequest(
        network=network,
        curve=_curve_settings(args),
        overhead=Overhead(args.alpha, args.beta),
        prices=Prices(args.price_worker, args.price_ps),
        constraints=Constraints(args.max_workers, args.examples, _deadline_hours(args), args.budget, args.confidence),
        saturation_threshold=args.saturation_threshold,
        goodput=args.goodput,
        model=_model_choice(args, profile),
        worker_speeds=args.worker_speed or (),
        worker_bandwidths_bps=links,
        parameter_servers=args.ps,
        spec=spec,
        extras=_extras(args),
        model_error=_model_error(args),
        correction=_correction(args),
    )


def _correction(args: argparse.Namespace) -> Correction | None:
    """--resize-after and --resize-loss as a Correction (core/correction.py); None without them."""
    if args.resize_after is None:
        if args.resize_loss:
            raise CostError("--resize-loss is read only with --resize-after: add it, or drop --resize-loss")
        return None
    if args.deadline is None:
        raise CostError("--resize-after plans a deadline's resize: give --examples and --deadline too")
    try:
        return Correction(args.resize_after, args.resize_loss)
    except CostError as exc:
        raise CostError(f"--resize-after {args.resize_after:g} --resize-loss {args.resize_loss:g}: {exc}") from None


def _worker_links(rates: tuple[float, ...], bandwidth: float | None) -> tuple[tuple[float, ...], float | None]:
    """``--worker-bandwidth`` as (per-worker rates, common worker link). One rate is every worker's
    link, stated once (``NetworkModel.worker_bandwidth_bps``): read as worker 0's alone, it would
    leave the others at the default link and quietly change a what-if's answer."""
    if len(rates) == 1 and bandwidth is not None:
        return (), rates[0]
    return rates, None


def _deadline_hours(args: argparse.Namespace) -> float | None:
    """--deadline as hours from now (a time is read against this machine's clock)."""
    if args.deadline is None:
        return None
    try:
        return parse_deadline(args.deadline, time.time())
    except AdvisorError as exc:
        raise UsageError(f"--deadline: {exc}") from None


def parse_probability(text: str) -> float:
    """A probability strictly between 0 and 1 (a decision's confidence)."""
    try:
        value = float(text)
    except ValueError:
        raise CostError(f"expected a probability such as 0.9, got {text!r}") from None
    if not 0 < value < 1:
        raise CostError(f"must be a probability strictly between 0 and 1 (e.g. 0.9), got {text!r}: 1 would ask "
                        "for certainty, which no prediction gives, and 0 for nothing")
    return value


def _extras(args: argparse.Namespace) -> dict[str, Any]:
    """Loaded inputs some models read: the op database of --device-db (under its key)."""
    if getattr(args, "device_db", None) is None:
        return {}
    return {DEVICE_DB: read_opdb(args.device_db)}


def _model_error(args: argparse.Namespace) -> ModelErrors | None:
    """The measured model errors --model-error names: a file (one model), a folder of
    <model>.json files, off (None), or by default the shipped ones."""
    given = getattr(args, "model_error", None)
    if given is not None and given.strip().lower() == "off":
        return None
    return load_model_errors(Path(given) if given else None)


def _model_name(args: argparse.Namespace, profile: Profile | None = None) -> str:
    """--model, else the default for the profile's regime (the ring for an all-reduce program's
    trace, the synchronous PS simulation for a trace of SyncReplicasOptimizer)."""
    if args.model:
        return str(args.model)
    synchronous = profile is not None and profile.job.synchronous
    if args.equal_shares:
        return registry.equal_shares_model(synchronous)
    return registry.default_model_for(profile is not None and profile.job.kind.allreduce, synchronous)


def _regime_note(args: argparse.Namespace, profile: Profile | None) -> str | None:
    """What to tell when the trace's regime chose the model: no --model and a synchronous trace."""
    if args.model or profile is None or not profile.job.synchronous:
        return None
    return (f"the trace is of a synchronous program (SyncReplicasOptimizer: its token queue and gradient "
            f"accumulators are in the trace): predicting with {_model_name(args, profile)}; --model chooses another")


# the flags that set a model parameter (of the models whose Params have it), and that parameter
MODEL_PARAM_FLAGS = {"congestion": "congestion_control", "queue": "queue_s", "share_sigma": "share_sigma",
                    "multi_flow_goodput": "multi_flow_goodput", "multi_ps_flow_goodput": "multi_ps_flow_goodput",
                    "ps_placement": "ps_placement"}


def _model_choice(args: argparse.Namespace, profile: Profile | None = None) -> ModelChoice:
    """--model (or --equal-shares), --model-param k=v and the contention flags, as one choice."""
    equal_shares = (registry.EQUAL_SHARES_MODEL, registry.EQUAL_SHARES_SYNC_MODEL)
    if args.equal_shares and args.model not in (None, *equal_shares):
        raise SimulationSettingsError(f"--equal-shares means --model {' or '.join(equal_shares)} (by the trace's "
                                      f"regime), not --model {args.model}: drop one")
    name = _model_name(args, profile)
    model = registry.get(name)
    params: dict[str, str | float | None] = {}
    for flag, field in MODEL_PARAM_FLAGS.items():
        value = getattr(args, flag, None)
        if value is None or (args.equal_shares and name in equal_shares):
            continue  # --equal-shares ignores the contention flags, as it always did
        if field not in model.Params.model_fields:
            raise ModelInputError(name, f"--{flag.replace('_', '-')} sets the parameter {field}, which this model "
                                        f"does not have (see advisor models)")
        params[field] = value
    for text in args.model_param or ():
        _, key, value = split_model_param(text)
        params[key] = value
    choice = ModelChoice(name, params)
    choice.resolve()  # refuse bad parameters before the profile is simulated
    return choice


def split_model_param(text: str, scoped: bool = False) -> tuple[str, str, str | None]:
    """``--model-param``: 'KEY=VALUE' (predict) or, ``scoped``, 'MODEL.KEY=VALUE' (compare) ->
    (model or '', key, value); 'none' or 'null' is None. The model's ``Params`` convert and
    check the value; here only the form is checked."""
    left, sep, value = text.partition("=")
    model, dot, key = left.strip().rpartition(".") if scoped else ("", "", left.strip())
    if not sep or not key.strip() or (scoped and not model.strip()):
        form, example = ("MODEL.KEY=VALUE", "li2020-des+contention.share_sigma=0.3") if scoped else \
            ("KEY=VALUE", "share_sigma=0.5")
        raise UsageError(f"--model-param {text!r}: write {form}, e.g. {example}")
    return model.strip(), key.strip(), None if value.strip().lower() in ("none", "null") else value.strip()


def _compare_params(texts: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, str | None]]:
    """Each compared model's ``--model-param MODEL.KEY=VALUE``, checked before anything runs: the
    model exists, is one of those compared, has the key, and takes the value."""
    params: dict[str, dict[str, str | None]] = {}
    for text in texts:
        model, key, value = split_model_param(text, scoped=True)
        try:
            registry.get(model)
        except ModelInputError as exc:
            raise UsageError(f"--model-param {text!r}: {exc}") from None
        if model not in names:
            raise UsageError(f"--model-param {text!r}: {model} is not compared (the models compared: "
                             f"{', '.join(names)}); add it to --models or drop the parameter")
        params.setdefault(model, {})[key] = value
    for model, values in params.items():
        try:
            registry.params_for(registry.get(model), values)
        except ModelInputError as exc:
            raise UsageError(f"--model-param: {exc}") from None
    return params


def _custom_order(args: argparse.Namespace) -> tuple[str, ...]:
    """The transfer names of --order-file, one per line, blank lines skipped."""
    if args.order_file is None:
        raise SimulationSettingsError("--order custom needs --order-file with the transfer names in order")
    try:
        text = args.order_file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SimulationSettingsError(f"--order-file {args.order_file}: cannot read it ({why})") from None
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not names:
        raise SimulationSettingsError(f"--order-file {args.order_file} names no transfers: write one name per line")
    return names


def _curve_settings(args: argparse.Namespace) -> CurveSettings:
    """Fixed --steps, or adaptive (no --steps); the warm-up is checked here to name the flags."""
    if not 0 < args.target < 1:  # also with --steps, which does not use it: a wrong value is a mistake
        raise SimulationSettingsError(f"--target must be a fraction in (0, 1), e.g. 0.02 for +-2 %, got {args.target}")
    if args.steps is None:
        if args.warmup >= ADAPTIVE_MIN_STEPS:
            raise SimulationSettingsError(
                f"--warmup {args.warmup} must be less than the {ADAPTIVE_MIN_STEPS} steps an adaptive run (no --steps) "
                "starts with: lower --warmup, or give --steps for a fixed run longer than the warm-up")
        return CurveSettings(workers=args.workers, warmup_steps=args.warmup, seed=args.seed,
                             target_rel_halfwidth=args.target)
    if args.warmup >= args.steps:
        raise SimulationSettingsError(
            f"--warmup {args.warmup} must be less than --steps {args.steps}: the warm-up steps are part of each "
            "worker's --steps and are not measured")
    return CurveSettings(workers=args.workers, steps=args.steps, warmup_steps=args.warmup, seed=args.seed)


def _write_timeline(args: argparse.Namespace, profile: Profile | None, request: AdviceRequest) -> None:
    model, params = request.model.resolve()
    timeline = getattr(model, "timeline", None)
    if timeline is None:
        raise ModelInputError(model.name, "--timeline: this model draws no timeline (the PS simulations do)")
    trace = timeline(model_inputs(profile, request), params, args.timeline_workers, 20, args.seed)
    with writing("--timeline", args.timeline):
        args.timeline.write_text(json.dumps(trace))
    cli_output.note("wrote %s (%d workers, 20 steps each)", args.timeline, args.timeline_workers)


def render_summary(profile: Profile, s: ProfileSummary) -> str:
    """The human-readable form of ``advisor profile inspect``."""
    job = profile.job
    bw = format_bandwidth(job.recorded_bandwidth_bps) if job.recorded_bandwidth_bps else "unknown"
    lines = [
        f"profile      {job.model or '?'} (source: {job.source or '?'})",
        f"batch size   {job.batch_size} examples/step; {job.parameter_servers} parameter server(s); "
        f"recorded at {bw}",
        "training     " + ("synchronous PS (SyncReplicasOptimizer: token queue and gradient accumulators in the trace)"
                           if job.synchronous else "asynchronous PS (no SyncReplicasOptimizer in the trace)"),
        f"steps        {s.steps} used, {s.skipped_steps} skipped as incomplete",
        "ops/step     " + ", ".join(f"{n} {r}" for r, n in s.ops_by_resource.items()),
    ]
    for key, nbytes in sorted(s.bytes_per_step.items()):
        lines.append(f"bytes/step   {key:<13} {nbytes:>14,d} B in {s.transfers_per_step[key]} transfers")
    for res, spread in s.compute_us.items():
        lines.append(f"compute      {res:<13} {_ms(spread.mean)} mean, {_ms(spread.median)} median per step")
    lines.append(f"step time    recorded span {_ms(s.step_us.median)} median (p10 {_ms(s.step_us.p10)}, p90 {_ms(s.step_us.p90)})")
    if s.wall_us is not None:
        lines.append(f"             client wall   {_ms(s.wall_us.median)} median")
    if s.untraced_wall_us is not None:
        traced_longer = tracing_cost(profile)
        cost = "" if traced_longer is None else f"; the traced steps' mean is {traced_longer:+.1%} longer (tracing's cost)"
        lines.append(f"             untraced      {_ms(s.untraced_wall_us.mean)} mean over "
                     f"{len(profile.job.untraced_walls_us or ())} steps timed after the traced ones{cost}")
    cp = s.critical_path
    parts = ", ".join(f"{r} {_ms(v)}" for r, v in cp.by_resource_us.items())
    lines.append(f"critical path {_ms(cp.length_us)} through {len(cp.ops)} ops ({parts})")
    lines.append(f"              {cp.ops[0]} -> ... -> {cp.ops[-1]}" if cp.ops else "")
    return "\n".join(lines)


def render_allreduce_summary(profile: Profile, s: AllReduceSummary) -> str:
    """``advisor profile inspect`` of an all-reduce profile: what the ring model replays."""
    job = profile.job
    link = (f"{format_bandwidth(s.link_bps)} each way, recorded ({s.link_source or 'source not said'})"
            if s.link_bps else "not recorded: give --bandwidth RATE to predict")
    if s.buckets is None:
        buckets = "not recorded: the model groups the gradients by bucket_mb (default 25 MiB)"
    else:
        shown = ", ".join(f"{b:,d}" for b in s.buckets[:8]) + (f" and {len(s.buckets) - 8} more" if len(s.buckets) > 8
                                                               else "")
        buckets = f"{len(s.buckets)}, as the framework laid them out, in reduce order: {shown} B"
    lines = [
        f"profile      {job.model or '?'} (source: {job.source or '?'})",
        f"kind         {s.kind}: {s.framework}, synchronous all-reduce (no parameter servers)",
        f"batch size   {job.batch_size} examples/step per worker",
        f"link         {link}",
        f"gradients    {s.gradients} tensors, {s.gradient_bytes:,d} B per step",
        f"buckets      {buckets}",
        f"steps        {s.steps} used, {s.skipped_steps} skipped as incomplete",
    ]
    for phase, spread in s.phases_us.items():
        lines.append(f"{phase:<12} {_ms(spread.mean)} mean, {_ms(spread.median)} median per step")
    what = "client wall" if s.step_is_wall else "recorded span"
    lines.append(f"step time    {what} {_ms(s.step_us.median)} median (p10 {_ms(s.step_us.p10)}, "
                 f"p90 {_ms(s.step_us.p90)}), {_ms(s.step_us.mean)} mean")
    return "\n".join(lines)


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
