"""``advisor opdb``: build and inspect op databases (Huang et al.'s offline profiling database).

``advisor opdb build PROFILES... -o db.json`` reads profiles or TensorFlow traces (any form
``advisor profile convert`` reads) and stores (op type, input shapes, device kind) -> time
statistics (``advisor.core.huang.opdb``); ``advisor opdb show db.json`` prints its entries per
op type and the linear fit of each. A database is used by the ``huang-replay`` model
(``--device-db``) to time the compute of a job on the device it was profiled on.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from advisor.cli_args import check_output, int_at_least, writing
from advisor.core.huang.opdb import build_database, summary
from advisor.importers.loader import load_profile
from advisor.importers.opdb_file import read_opdb, write_opdb


def add_parser(commands: Any) -> None:
    """Register ``opdb build`` and ``opdb show`` on the CLI's subcommands."""
    opdb = commands.add_parser("opdb", help="build and inspect op databases (op type, shapes, device) -> time")
    cmds = opdb.add_subparsers(dest="opdb_command", metavar="COMMAND")
    build = cmds.add_parser("build", help="build an op database from profiles or traces")
    build.add_argument("profiles", nargs="+", type=Path, metavar="PROFILE", help="profiles or TensorFlow traces")
    build.add_argument("-o", "--output", type=Path, required=True, metavar="DB", help="database file to write (.json[.gz])")
    build.add_argument("--device", default="as profiled", metavar="LABEL",
                       help="what the profiles ran on, e.g. 'cpu-2core' or 'V100' (stored for people)")
    build.add_argument("--batch-size", type=int_at_least(1), help="examples per step, when a trace does not say")
    build.set_defaults(run=_build)
    show = cmds.add_parser("show", help="summarise an op database: entries and linear fit per op type")
    show.add_argument("db", type=Path, metavar="DB")
    show.set_defaults(run=_show)


def _build(args: argparse.Namespace) -> int:
    check_output("--output", args.output)
    profiles = [load_profile(p, batch_size=args.batch_size) for p in args.profiles]
    db = build_database(profiles, device_label=args.device, sources=tuple(str(p) for p in args.profiles))
    with writing("--output", args.output):
        write_opdb(db, args.output)
    counts = summary(db)
    print(f"wrote {args.output}: {counts['entries']} entries of {counts['op_types']} op types "
          f"({counts['fitted_types']} with a linear fit, {counts['per_node']} kept per node) from {len(profiles)} profile(s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    db = read_opdb(args.db)
    counts = summary(db)
    print(f"{args.db}: device {db.device_label!r}, {counts['entries']} entries, sources: {', '.join(db.sources) or '-'}")
    per_type = Counter((e.op_type, e.device) for e in db.entries)
    print(f"{'op type':<36} {'device':<7} {'entries':>7}  fit t = a + b x elements")
    for (op_type, device), n in sorted(per_type.items()):
        fit = db.fits.get((op_type, device))
        text = f"a = {fit.intercept_us:.1f} us, b = {fit.slope_us_per_element:.3g} us ({fit.points} shape(s))" if fit else "per node"
        print(f"{op_type:<36} {device:<7} {n:>7}  {text}")
    return 0
