"""Reading and writing op database files (``advisor opdb build``), JSON, optionally gzipped.

The database itself is ``advisor.core.huang.opdb``; this module is the file edge: it checks
the format name and version, validates every entry (pydantic, ``OpEntry``) and turns every
problem into an ``OpDatabaseFileError`` that names the file and the entry. Format::

    {"format": "advisor-opdb", "version": 1, "device": "<label>", "sources": ["<profile>", ...],
     "entries": [{"op_type": "MatMul", "device": "worker", "input_shapes": [[32, 784], [784, 384]],
                  "node": null, "count": 98, "mean_us": 1234.5, "std_us": 40.1,
                  "min_us": 1180.0, "max_us": 1420.0}, ...]}
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from advisor.core.huang.opdb import OpDatabase, OpEntry, OpEstimateError
from advisor.errors import AdvisorError
from advisor.importers.json_files import read_json_document

FORMAT: Final = "advisor-opdb"
VERSION: Final = 1


class OpDatabaseFileError(AdvisorError, ValueError):
    """An op database file cannot be read or is not a valid database; names the file."""


def opdb_to_json(db: OpDatabase) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "device": db.device_label,
        "sources": list(db.sources),
        "entries": [e.model_dump(mode="json") for e in db.entries],
    }


def opdb_from_json(doc: object, where: str = "<op database>") -> OpDatabase:
    """Validate decoded JSON as an op database."""
    if not isinstance(doc, Mapping):
        raise OpDatabaseFileError(f"{where}: an op database is a JSON object, not {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise OpDatabaseFileError(f"{where}: not an op database: 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise OpDatabaseFileError(f"{where}: unsupported op database version {doc.get('version')!r}; this advisor reads {VERSION}")
    unknown = set(doc) - {"format", "version", "device", "sources", "entries"}
    if unknown:
        raise OpDatabaseFileError(f"{where}: unknown field(s) {sorted(unknown)}")
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise OpDatabaseFileError(f"{where}: 'entries' must be a list")
    entries = []
    for i, item in enumerate(raw):
        try:
            entries.append(OpEntry.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '<entry>'}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise OpDatabaseFileError(f"{where}: entries[{i}]: {problems}") from None
    device = doc.get("device", "as profiled")
    sources = doc.get("sources", [])
    if not isinstance(device, str) or not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise OpDatabaseFileError(f"{where}: 'device' must be a string and 'sources' a list of strings")
    try:
        return OpDatabase(tuple(entries), device, tuple(sources))
    except OpEstimateError as exc:
        raise OpDatabaseFileError(f"{where}: {exc}") from None


def read_opdb(path: Path) -> OpDatabase:
    """Load a database written by ``write_opdb``."""
    return opdb_from_json(read_json_document(path, OpDatabaseFileError), str(path))


def write_opdb(db: OpDatabase, path: Path) -> None:
    """Write ``db``; a name ending in ``.gz`` is gzipped."""
    data = json.dumps(opdb_to_json(db), separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
