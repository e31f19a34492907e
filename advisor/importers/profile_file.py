"""Reading and writing the project's own profile files (JSON, optionally gzipped).

The format is the ``Profile`` model itself (see ``docs/profile-format.md``); this module is
only the file edge: decoding, size and encoding errors become ``ProfileError`` naming the file.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from advisor.core.profile import Profile, parse_profile
from advisor.errors import ProfileError

GZIP_MAGIC = b"\x1f\x8b"


def read_json_document(path: Path) -> Any:
    """Decode a JSON file, gzipped or not, with errors that name the file and position."""
    try:
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ProfileError(f"{path}: truncated or corrupt gzip data ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_profile(path: Path) -> Profile:
    """Load a profile file written by ``write_profile`` (or by hand, following the format)."""
    doc = read_json_document(path)
    try:
        return parse_profile(doc)
    except ProfileError as exc:
        raise ProfileError(f"{path}: {exc}") from None


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The profile as plain JSON data (defaults included, so the file is self-describing)."""
    return profile.model_dump(mode="json")


def write_profile(profile: Profile, path: Path) -> None:
    """Write a profile; a name ending in ``.gz`` is gzipped."""
    text = json.dumps(profile_to_json(profile), separators=(",", ":"))
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
