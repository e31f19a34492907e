"""Reading and writing the project's own profile files (JSON, optionally gzipped).

The format is the ``Profile`` model itself (see ``docs/profile-format.md``); this module is
only the file edge: decoding, size and encoding errors become ``ProfileError`` naming the file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from advisor.core.profile import Profile, parse_profile
from advisor.errors import ProfileError
from advisor.importers.json_files import read_json_document


def read_profile(path: Path) -> Profile:
    """Load a profile file written by ``write_profile`` (or by hand, following the format)."""
    doc = read_json_document(path)
    try:
        return parse_profile(doc)
    except ProfileError as exc:
        raise ProfileError(f"{path}: {exc}") from None


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The profile as plain JSON data (defaults included, so the file is self-describing).

    ``input_shapes`` is left out where unknown, ``job.synchronous`` when False (an asynchronous
    PS or an all-reduce profile), ``job.worker_on_gpu`` when False and ``job.collectives``,
    ``job.variable_order``, ``job.untraced_walls_us`` and ``job.cpu_s_per_step`` where not recorded, so such a profile
    is written exactly as before the fields existed (older readers, which refuse unknown
    fields, still read it, and the controller's stored profiles keep their sha256)."""
    doc = profile.model_dump(mode="json")
    for flag in ("synchronous", "worker_on_gpu"):
        if not doc["job"].get(flag):
            doc["job"].pop(flag, None)
    for recorded in ("collectives", "variable_order", "untraced_walls_us", "cpu_s_per_step"):
        if doc["job"].get(recorded) is None:
            doc["job"].pop(recorded, None)
    for op in doc["ops"]:
        if op.get("input_shapes") is None:
            op.pop("input_shapes", None)
    return doc


def write_profile(profile: Profile, path: Path) -> None:
    """Write a profile; a name ending in ``.gz`` is gzipped."""
    text = json.dumps(profile_to_json(profile), separators=(",", ":"))
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
