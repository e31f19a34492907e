"""Format versions of the state the controller keeps in the cluster, and the rule for a newer one.

Why: during a rolling upgrade (or a rollback) an older controller may lead while a newer one has
written a job's state. Each piece of state carries the format it was written in:

- the job's run annotations (``training-advisor.io/phase``, ``profiling-run``...): the annotation
  ``STATE_FORMAT_ANNOTATION``, written with every status patch;
- the profile record ConfigMap (state/records.py): ``RECORD_FORMAT_ANNOTATION``;
- the SQLite store (state/store.py): ``PRAGMA user_version`` (its ``SCHEMA_VERSION``).

A format without its annotation is 1: what every controller wrote before formats were versioned
(its variants are kept as fixtures in tests/data/state-formats/, which today's code reads). A
controller that meets a format newer than it knows leaves that state untouched and says so
(``StateFormatError``: a Warning event on the job and a log line; the store refuses to open):
writing it in the older format would lose what the newer one recorded. Bump a format when a
change would be misread by the previous release, and keep reading every older one.
"""

from __future__ import annotations

from advisor.controller.jobs.tfjob import PREFIX
from advisor.errors import StateFormatError

STATE_FORMAT = 2  # the job's annotations; 1: unversioned (every release before this field)
RECORD_FORMAT = 2  # the profile record; 1: unversioned
STATE_FORMAT_ANNOTATION = PREFIX + "state-format"
RECORD_FORMAT_ANNOTATION = PREFIX + "record-format"


def check_format(what: str, written: str | None, known: int) -> int:
    """The format ``written`` (None: unversioned, 1); ``StateFormatError`` naming ``what`` when it
    is newer than ``known`` or unreadable (a version this code cannot even parse is not its own)."""
    if written is None:
        return 1
    try:
        version = int(written)
    except ValueError:
        version = -1
    if version < 1 or version > known:
        raise StateFormatError(f"{what} is in format {written!r}, newer than this controller knows (up to {known}):"
                               " written by a newer version of the advisor; left untouched until one leads")
    return version
