"""Reading a JSON file, gzipped or not, with errors that name the file and the place in it.

Every importer reads JSON documents the same way; only the error type differs (a profile's
problem is a ``ProfileError``, a trace's a ``TraceFormatError``), so the caller names it.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from advisor.errors import AdvisorError, ProfileError

GZIP_MAGIC = b"\x1f\x8b"


def read_json_document(path: Path, error: type[AdvisorError] = ProfileError) -> Any:
    """Decode a JSON file (gunzipped when it starts with the gzip magic); bad input raises ``error``."""
    try:
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise error(f"{path}: truncated or corrupt gzip data ({exc})") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
