"""The header every upload bundle starts with (``format``, ``version``, and no field the version
does not define) and its ``meta`` object, checked the same way for each bundle kind, so that a
bundle of the wrong kind or version is refused with the same words whichever reader meets it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.errors import MissingTraceDataError, TraceFormatError


def check_bundle_header(doc: Mapping[str, Any], origin: str, *, label: str, fmt: str,
                        versions: Mapping[int, frozenset[str]]) -> int:
    """The version of ``doc``; ``TraceFormatError`` naming ``origin`` unless it is a ``fmt`` bundle
    of one of ``versions`` (version -> the fields it may hold) with only that version's fields;
    ``label`` names the kind in messages ("upload bundle")."""
    found_fmt = doc.get("format")
    if found_fmt != fmt:
        found = "no format field" if found_fmt is None else f"format {found_fmt!r}"
        raise TraceFormatError(f"{origin}: not an {label}: {found}, expected {fmt!r}")
    found_version = doc.get("version")
    if isinstance(found_version, bool) or not isinstance(found_version, int):
        raise TraceFormatError(f"{origin}: version should be an integer, found {found_version!r}")
    fields = versions.get(found_version)
    if fields is None:
        known = [str(v) for v in sorted(versions)]
        readable = " and ".join(known) if len(known) <= 2 else ", ".join(known[:-1]) + " and " + known[-1]
        raise TraceFormatError(f"{origin}: {label} version {found_version} is not supported "
                               f"(this reader reads {readable})")
    unknown = sorted(str(k) for k in doc if k not in fields)
    if unknown:
        raise TraceFormatError(f"{origin}: unknown field(s) {unknown}; a version {found_version} bundle has "
                               f"{sorted(fields)}")
    return found_version


def bundle_meta(doc: Mapping[str, Any], origin: str, *, holds: str) -> Mapping[str, Any]:
    """The bundle's ``meta`` object; ``MissingTraceDataError`` without one (``holds`` says what it
    would hold, e.g. "batch size, world size"), ``TraceFormatError`` when it is not an object."""
    meta = doc.get("meta")
    if meta is None:
        raise MissingTraceDataError(f"{origin}: the bundle has no meta ({holds})")
    if not isinstance(meta, Mapping):
        raise TraceFormatError(f"{origin}: meta should be an object, found {type(meta).__name__}")
    return meta
