"""Reading the upload bundle a profiling run POSTs to the controller (``advisor.profiling``).

The bundle carries the same facts as a ``tests/data/ps-async/tf-native`` run directory (the steps'
``RunMetadata`` as protobuf-JSON dicts plus ``meta.json``) in one versioned document, so it is
checked here for its own shape and then handed to ``tf_runmetadata``'s documents-in reader:
a bundle and the directory it was made from give the same profile. The bytes come from the
network, so the gunzip is capped and every defect is a ``TraceImportError`` naming the place.

Checks beyond the directory form, because the bundle is written by our own recorder:
unknown top-level fields and versions are refused; ``meta.client_steps_us``, when present,
must list one entry per step; ``meta.n_workers`` above 1 is refused (only worker 0 uploads, so
such a trace would look single-worker while carrying the other workers' interference).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.errors import MissingTraceDataError, MultiWorkerTraceError, TraceFormatError
from advisor.importers.bundle_header import bundle_meta, check_bundle_header
from advisor.importers.json_files import GZIP_MAGIC
from advisor.importers.gzip_capped import GzipInvalid, GzipTooLarge, inflate_gzip
from advisor.importers.json_scan import LazyArray
from advisor.importers.tf_records import TraceRecords
from advisor.importers.tf_runmetadata import read_runmetadata_documents
from advisor.profiling.bundle import FORMAT, VERSION

MAX_BUNDLE_BYTES = 512 * 1024 * 1024  # decompressed JSON; about 2,000 steps of a 100-op model
STEPS_FIELD = "runmetadata"  # the traced steps: nearly all of a bundle's bytes
FIELDS = frozenset({"format", "version", "meta", STEPS_FIELD})


class BundleTooLargeError(TraceFormatError):
    """The bundle decompresses to more than the reader accepts (HTTP 413 at the controller)."""


def is_trace_upload(doc: object) -> bool:
    """Whether a decoded JSON document says it is an upload bundle (of any version)."""
    return isinstance(doc, Mapping) and doc.get("format") == FORMAT


def read_trace_upload(doc: Mapping[str, Any], *, origin: str, source: str | None = None) -> TraceRecords:
    """The trace records of a decoded bundle; ``origin`` names it in errors (a path, a request)."""
    if not isinstance(doc, Mapping):
        raise TraceFormatError(f"{origin}: an upload bundle should be a JSON object, found {type(doc).__name__}")
    check_bundle_header(doc, origin, label="upload bundle", fmt=FORMAT, versions={VERSION: FIELDS})
    meta = bundle_meta(doc, origin, holds="batch size, model, client step times")
    steps = _steps(doc, origin)
    _check_meta(meta, len(steps), origin)
    return read_runmetadata_documents(steps, meta, origin=origin, source=source)


def read_trace_upload_bytes(
    data: bytes, *, origin: str, source: str | None = None, max_bytes: int = MAX_BUNDLE_BYTES
) -> TraceRecords:
    """``read_trace_upload`` of a request body: gzipped (or plain) JSON of at most ``max_bytes``."""
    doc = decode_trace_upload(data, origin=origin, max_bytes=max_bytes)
    return read_trace_upload(doc, origin=origin, source=source)


def decode_trace_upload(data: bytes, *, origin: str, max_bytes: int = MAX_BUNDLE_BYTES) -> Any:
    """Gunzip (when gzipped) and parse; refuses more than ``max_bytes`` of JSON before reading it."""
    raw = _gunzip(data, origin, max_bytes) if data[:2] == GZIP_MAGIC else data
    if len(raw) > max_bytes:
        raise BundleTooLargeError(f"{origin}: the bundle is {len(raw)} bytes of JSON, more than {max_bytes}")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{origin}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{origin}: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise TraceFormatError(f"{origin}: JSON nested too deeply") from None


def _gunzip(data: bytes, origin: str, max_bytes: int) -> bytes:
    try:
        return inflate_gzip(data, max_bytes)
    except GzipTooLarge:
        raise BundleTooLargeError(f"{origin}: the bundle decompresses to more than {max_bytes} bytes") from None
    except GzipInvalid as exc:
        raise TraceFormatError(f"{origin}: {exc}") from None


def _steps(doc: Mapping[str, Any], origin: str) -> Sequence[Any]:
    steps = doc.get(STEPS_FIELD)
    if steps is None:
        raise MissingTraceDataError(f"{origin}: the bundle has no runmetadata (the traced steps)")
    if not isinstance(steps, (list, LazyArray)):  # LazyArray: from json_scan, decoded a step at a time
        raise TraceFormatError(f"{origin}: runmetadata should be a list of RunMetadata, found {type(steps).__name__}")
    if not steps:
        raise MissingTraceDataError(f"{origin}: runmetadata is empty: no step was traced")
    return steps


def _check_meta(meta: Mapping[str, Any], n_steps: int, origin: str) -> None:
    workers = meta.get("n_workers")
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise TraceFormatError(f"{origin}: meta.n_workers should be a whole number >= 1, found {workers!r}")
        if workers > 1:
            raise MultiWorkerTraceError(
                f"{origin}: recorded with {workers} workers; a profile needs a run with exactly 1 worker"
            )
    clients = meta.get("client_steps_us")
    if isinstance(clients, list) and len(clients) != n_steps:
        raise TraceFormatError(
            f"{origin}: meta.client_steps_us lists {len(clients)} steps but runmetadata holds {n_steps}"
        )
