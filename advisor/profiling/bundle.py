"""The upload bundle: one traced profiling run as a single versioned JSON document.

The recorder in the training program writes it and the controller's importer
(``advisor.importers.trace_upload``) reads it, so its name, version and byte form live here,
in a module that needs only the standard library (it runs inside the user's training image
and inside the controller, which has no TensorFlow).

    {"format": "advisor-trace-upload", "version": 1,
     "meta": {...the keys of meta.json the importer reads...},
     "runmetadata": [<protobuf-JSON dict of each traced step's RunMetadata>, ...]}

Partition graphs are kept on the first step only: they are the same every step and make up
most of a step's size. The encoded form is gzip with a zero timestamp and compact JSON, so the
same trace always gives the same bytes (a retried upload is byte-identical).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

FORMAT = "advisor-trace-upload"
VERSION = 1
PARTITION_GRAPHS = "partitionGraphs"
_SEPARATORS = (",", ":")


def build_bundle(run_metadata: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The bundle of the traced steps' ``RunMetadata`` dicts (in step order) and the run's meta."""
    steps = list(strip_repeated_graphs(run_metadata))
    if not steps:
        raise ValueError("a bundle needs at least one traced step")
    return {"format": FORMAT, "version": VERSION, "meta": dict(meta), "runmetadata": steps}


def encode_bundle(bundle: Mapping[str, Any]) -> bytes:
    """The request body: gzip of the bundle's compact JSON (deterministic bytes)."""
    head = {key: value for key, value in bundle.items() if key != "runmetadata"}
    return _encode(head, bundle.get("runmetadata", ()))


def encode_steps(run_metadata: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> bytes:
    """``encode_bundle(build_bundle(run_metadata, meta))`` holding one step's dict at a time.

    The recorder keeps each step as compact serialized protobuf and converts it only here, so
    a large model's hundred steps never sit in memory as Python dicts all at once.
    """
    head = {"format": FORMAT, "version": VERSION, "meta": dict(meta)}
    body, count = _encode_counted(head, strip_repeated_graphs(run_metadata))
    if count == 0:
        raise ValueError("a bundle needs at least one traced step")
    return body


def strip_repeated_graphs(run_metadata: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """The steps, with the partition graphs dropped from all but the first."""
    for i, doc in enumerate(run_metadata):
        if i and PARTITION_GRAPHS in doc:
            doc = {key: value for key, value in doc.items() if key != PARTITION_GRAPHS}
        yield doc


def _encode(head: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]) -> bytes:
    return _encode_counted(head, steps)[0]


def _encode_counted(head: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]) -> tuple[bytes, int]:
    buffer = io.BytesIO()
    count = 0
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        opening = _dumps(head)[:-1]  # the head object without its closing brace
        gz.write(opening.encode() + (b',"runmetadata":[' if head else b'"runmetadata":['))
        for count, step in enumerate(steps, start=1):
            gz.write((b"," if count > 1 else b"") + _dumps(step).encode())
        gz.write(b"]}")
    return buffer.getvalue(), count


def _dumps(value: object) -> str:
    return json.dumps(value, separators=_SEPARATORS, allow_nan=False)
