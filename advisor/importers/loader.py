"""One entry point that turns any supported file into a profile, detecting its form by content.

Forms: the project's own profile (JSON, ``format: advisor-profile``); the upload bundle a
profiling run sends to the controller (JSON, ``format: advisor-trace-upload``, or
``advisor-allreduce-upload`` from a PyTorch DDP or Keras MultiWorkerMirroredStrategy program); the condensed
per-step dump; TensorFlow ``RunMetadata`` as protobuf-JSON lines (a ``.jsonl[.gz]`` file or a directory
holding ``runmetadata.jsonl.gz``); binary ``RunMetadata`` (``.pb`` files, or a directory of
them). A Chrome-trace timeline is recognised and refused with the reason.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from advisor.core.profile import Profile, parse_profile
from advisor.errors import ProfileError, TraceFormatError, TraceImportError
from advisor.importers.json_files import GZIP_MAGIC, read_json_document
from advisor.importers.tf_condensed import condensed_records, looks_condensed
from advisor.importers.tf_profile import build_profile_from_trace
from advisor.importers.tf_records import TraceRecords
from advisor.profiling.allreduce_bundle import FORMAT as ALLREDUCE_FORMAT
from advisor.profiling.bundle import FORMAT as UPLOAD_FORMAT

BUNDLED_EXAMPLE = Path(__file__).resolve().parent.parent / "data" / "example-mlp.profile.json.gz"
RUNMETADATA_NAMES = ("runmetadata.jsonl.gz", "runmetadata.jsonl")


def load_profile(
    path: Path | Sequence[Path], *, batch_size: int | None = None, bandwidth_bps: float | None = None
) -> Profile:
    """Read ``path`` in whichever supported form it is; ``batch_size``/``bandwidth_bps`` fill gaps.

    Several paths are read as the binary ``RunMetadata`` steps of one run, in order.
    """
    paths = [path] if isinstance(path, Path) else list(path)
    for p in paths:
        if not p.exists():
            raise ProfileError(f"{p}: no such file or directory")
    if len(paths) > 1 and any(p.suffix != ".pb" for p in paths):
        raise TraceFormatError("several files are read only as binary RunMetadata (.pb) steps of one run")
    path = paths[0] if len(paths) == 1 else paths[0].parent
    records = _trace_records(paths[0]) if len(paths) == 1 else _binary(paths)
    if isinstance(records, Profile):
        return records
    if bandwidth_bps is not None:
        records = replace(records, bandwidth_bps=bandwidth_bps)
    try:
        return build_profile_from_trace(records, batch_size=batch_size)
    except TraceImportError as exc:
        raise type(exc)(f"{path}: {exc}") from None


def _trace_records(path: Path) -> TraceRecords | Profile:
    if path.is_dir():
        return _directory(path)
    if path.suffix == ".pb":
        return _binary([path])
    head = _peek(path)
    if path.name.endswith((".jsonl", ".jsonl.gz")) or head.startswith(b'{"stepStats"'):
        return _jsonl(path)
    doc = read_json_document(path)
    if isinstance(doc, Mapping) and doc.get("format") == UPLOAD_FORMAT:
        return _upload(doc, path)
    if isinstance(doc, Mapping) and doc.get("format") == ALLREDUCE_FORMAT:
        from advisor.importers.allreduce_upload import read_allreduce_upload

        return read_allreduce_upload(doc, origin=str(path), source=path.name)
    if isinstance(doc, Mapping) and doc.get("format") is not None:
        return _own_profile(doc, path)
    if looks_condensed(doc):
        return condensed_records(doc, source=path.name)
    if isinstance(doc, Mapping) and "traceEvents" in doc:
        raise TraceFormatError(
            f"{path}: this is a Chrome-trace timeline, which drops tensor names and sizes; "
            "give the RunMetadata (step_stats with partition graphs) instead"
        )
    raise TraceFormatError(f"{path}: not a profile, a condensed dump, or TensorFlow RunMetadata")


def _own_profile(doc: Mapping[str, object], path: Path) -> Profile:
    try:
        return parse_profile(doc)
    except ProfileError as exc:
        raise ProfileError(f"{path}: {exc}") from None


def _directory(path: Path) -> TraceRecords:
    for name in RUNMETADATA_NAMES:
        if (path / name).is_file():
            return _jsonl(path / name)
    pbs = sorted(path.glob("*.pb"), key=_step_number)
    runs = {p.name[: p.name.rfind("step")] for p in pbs if "step" in p.name}
    if len(runs) > 1:
        raise TraceFormatError(
            f"{path}: the .pb files belong to {len(runs)} runs ({', '.join(sorted(runs))}...); "
            "name the files of one run"
        )
    if pbs:
        return _binary(pbs)
    raise TraceFormatError(f"{path}: a directory with neither runmetadata.jsonl[.gz] nor *.pb files")


def _step_number(p: Path) -> tuple[int, str]:
    digits = "".join(c if c.isdigit() else " " for c in p.stem).split()
    return (int(digits[-1]) if digits else 0, p.name)


def _jsonl(path: Path) -> TraceRecords:
    from advisor.importers.tf_runmetadata import read_runmetadata_jsonl

    return read_runmetadata_jsonl(path)


def _upload(doc: Mapping[str, object], path: Path) -> TraceRecords:
    from advisor.importers.trace_upload import read_trace_upload

    return read_trace_upload(doc, origin=str(path), source=path.name)


def _binary(paths: list[Path]) -> TraceRecords:
    from advisor.importers.tf_runmetadata import read_runmetadata_pb

    return read_runmetadata_pb(paths)


def _peek(path: Path, size: int = 64) -> bytes:
    try:
        with path.open("rb") as fh:
            head = fh.read(size)
        if head[:2] == GZIP_MAGIC:
            with gzip.open(path, "rb") as gz:
                head = gz.read(size)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    return head.lstrip()
