"""One reader for every upload bundle a profiling run can send, chosen by the bundle's ``format``:
a parameter-server trace (``advisor-trace-upload``: TensorFlow ``RunMetadata``) or an all-reduce
program's trace (``advisor-allreduce-upload``: PyTorch DDP, TF2 Keras with
MultiWorkerMirroredStrategy). The controller and the CLI ask this module, not the readers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.profile import Profile
from advisor.errors import TraceFormatError
from advisor.importers.allreduce_upload import is_allreduce_upload, read_allreduce_upload
from advisor.importers.trace_upload import is_trace_upload, read_trace_upload
from advisor.profiling.allreduce_bundle import FORMAT as ALLREDUCE_FORMAT
from advisor.profiling.bundle import FORMAT as PS_FORMAT

FORMATS = (PS_FORMAT, ALLREDUCE_FORMAT)


def is_upload(doc: object) -> bool:
    """Whether a decoded JSON document is an upload bundle of a kind this reader knows."""
    return is_trace_upload(doc) or is_allreduce_upload(doc)


def profile_from_upload(doc: Any, *, origin: str, source: str | None = None) -> Profile:
    """The profile of a decoded bundle of either format; errors are ``TraceImportError``/``ProfileError``
    naming ``origin``."""
    if is_allreduce_upload(doc):
        return read_allreduce_upload(doc, origin=origin, source=source)
    if is_trace_upload(doc):
        from advisor.importers.tf_profile import build_profile_from_trace

        return build_profile_from_trace(read_trace_upload(doc, origin=origin, source=source))
    fmt = doc.get("format") if isinstance(doc, Mapping) else None
    found = "no format field" if fmt is None else f"format {fmt!r}"
    raise TraceFormatError(f"{origin}: not an upload bundle: {found}, expected one of {list(FORMATS)}")
