"""``advisor store``: read the controller's store: which jobs it profiled, and their profiles.

Why: the profiles the controller collected are what ``advisor predict`` and
``advisor fit-contention`` take, and they live in the controller's SQLite file on its volume.
Run it where the file is, e.g. ``kubectl exec deploy/advisor -- advisor store export ns/job >
job.json``. It finds the file as the controller does (``--config``, ``$ADVISOR_CONFIG_FILE``,
the ``ADVISOR_`` environment) unless ``--store`` names it, and never creates or changes one
(SQLite's WAL mode lets it read while the controller writes).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from advisor import cli_output
from advisor.cli_args import writing
from advisor.errors import AdvisorError


class StoreCommandError(AdvisorError, ValueError):
    """No store file there, or no such job in it; the message says which."""


def add_parser(commands: Any) -> None:
    """Register ``store list`` and ``store export`` on the CLI's subcommands."""
    store = commands.add_parser("store", help="list the jobs the controller profiled; export their profiles")
    cmds = store.add_subparsers(title="store commands")
    listing = cmds.add_parser("list", help="every profiling run in the store: job, generation, state, profile")
    _add_store(listing)
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    listing.set_defaults(run=_list)
    export = cmds.add_parser("export", help="write a job's profile (the project's profile format)")
    export.add_argument("job", metavar="NAMESPACE/NAME", help="the TFJob")
    export.add_argument("--generation", type=int, help="which generation's profile (default: the latest profiled)")
    export.add_argument("-o", "--output", type=Path, help="file to write (.json or .json.gz; default: stdout)")
    _add_store(export)
    export.set_defaults(run=_export)


def _add_store(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--store", type=Path, help="the SQLite file (default: the controller's store_path setting)")
    cmd.add_argument("--config", type=Path, help="controller settings YAML (default: $ADVISOR_CONFIG_FILE)")


def _open(args: argparse.Namespace) -> Any:
    from advisor.controller.state.store import Store  # the controller's own reader of the file

    path = args.store
    if path is None:
        from advisor.controller.settings import load_settings

        path = load_settings(args.config).store_path
    if not Path(path).is_file():
        raise StoreCommandError(f"no advisor store at {path}: give --store, or run this where the controller runs")
    return Store(path)


def _list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rows = [{"namespace": r.namespace, "name": r.name, "generation": r.generation, "uid": r.uid,
                 "state": r.state, "reason": r.reason, "profiling_job": r.profiling_job,
                 "profile_sha256": sha, "updated": r.updated}
                for r, sha in store.runs_with_profile()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("(no profiling runs in the store)")
        return 0
    print(f"{'job':<40} {'gen':>4} {'state':<10} {'profile':<14} updated")
    for r in rows:
        sha = f"sha256:{r['profile_sha256'][:7]}" if r["profile_sha256"] else "-"
        when = datetime.fromtimestamp(r["updated"], UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        print(f"{r['namespace'] + '/' + r['name']:<40} {r['generation']:>4} {r['state']:<10} {sha:<14} {when}")
    return 0


def _export(args: argparse.Namespace) -> int:
    namespace, sep, name = args.job.partition("/")
    if not (sep and namespace and name):
        raise StoreCommandError(f"name the job as NAMESPACE/NAME, got {args.job!r}")
    with _open(args) as store:
        runs = store.runs_with_profile(namespace, name)
        profiled = [r for r, sha in runs if sha is not None]
        if args.generation is not None:
            profiled = [r for r in profiled if r.generation == args.generation]
        if not profiled:
            have = ", ".join(f"generation {r.generation} ({r.state})" for r, _ in runs) or "no runs"
            which = f" generation {args.generation}" if args.generation is not None else ""
            raise StoreCommandError(f"the store holds no profile of {namespace}/{name}{which}: it has {have}")
        run = max(profiled, key=lambda r: (r.generation, r.updated))
        text = store.profile_json(run.uid, run.generation)
    if text is None:  # garbage collection removed it between the two reads
        raise StoreCommandError(f"the profile of {namespace}/{name} generation {run.generation} was just removed")
    if args.output is None:
        sys.stdout.write(text + "\n")
        return 0
    from advisor.importers.profile_file import write_profile
    from advisor.core.profile import parse_profile

    with writing("-o", args.output):
        write_profile(parse_profile(json.loads(text)), args.output)
    cli_output.note("wrote %s: %s/%s generation %d", args.output, namespace, name, run.generation)
    return 0
