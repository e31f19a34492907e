"""The ``advisor`` command line: a thin layer that reads files, calls the core and prints.

Every error the project raises on purpose (``AdvisorError``) is printed as one message
and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from advisor.core.profile import Profile
from advisor.core.summary import ProfileSummary, summarize
from advisor.core.units import format_bandwidth, parse_bandwidth
from advisor.errors import AdvisorError
from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import write_profile

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except AdvisorError as exc:
        print(f"advisor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="advisor", description=__doc__.splitlines()[0])
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
    return parser


def _add_input(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "profile",
        nargs="*",
        type=Path,
        help="profile, condensed dump, RunMetadata .jsonl[.gz], one run's .pb files, or a directory "
        "holding one of them (default: the bundled example, an MLP traced at 100 Mbit/s)",
    )
    cmd.add_argument("--batch-size", type=int, help="examples per step, when the trace does not say")
    cmd.add_argument(
        "--recorded-bandwidth", type=parse_bandwidth, metavar="RATE",
        help="PS link capacity when the trace was recorded, e.g. 100Mbit/s",
    )


def _load(args: argparse.Namespace) -> Profile:
    paths = args.profile or [BUNDLED_EXAMPLE]
    if not args.profile:
        print(f"(no profile given: using the bundled example {BUNDLED_EXAMPLE.name})", file=sys.stderr)
    return load_profile(paths, batch_size=args.batch_size, bandwidth_bps=args.recorded_bandwidth)


def _inspect(args: argparse.Namespace) -> int:
    profile = _load(args)
    summary = summarize(profile)
    if args.json:
        print(json.dumps({"job": profile.job.model_dump(mode="json"), "summary": asdict(summary)}, indent=2))
    else:
        print(render_summary(profile, summary))
    return 0


def _convert(args: argparse.Namespace) -> int:
    profile = _load(args)
    write_profile(profile, args.output)
    print(f"wrote {args.output}: {len(profile.ops)} ops x {len(profile.steps)} steps")
    return 0


def render_summary(profile: Profile, s: ProfileSummary) -> str:
    """The human-readable form of ``advisor profile inspect``."""
    job = profile.job
    bw = format_bandwidth(job.recorded_bandwidth_bps) if job.recorded_bandwidth_bps else "unknown"
    lines = [
        f"profile      {job.model or '?'} (source: {job.source or '?'})",
        f"batch size   {job.batch_size} examples/step; {job.parameter_servers} parameter server(s); "
        f"recorded at {bw}",
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
    cp = s.critical_path
    parts = ", ".join(f"{r} {_ms(v)}" for r, v in cp.by_resource_us.items())
    lines.append(f"critical path {_ms(cp.length_us)} through {len(cp.ops)} ops ({parts})")
    lines.append(f"              {cp.ops[0]} -> ... -> {cp.ops[-1]}" if cp.ops else "")
    return "\n".join(lines)


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
