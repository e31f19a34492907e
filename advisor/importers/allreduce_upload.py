"""Reading an all-reduce program's upload bundle (``advisor.profiling.allreduce_bundle``) into a
profile the ring model replays.

The profile is the same graph for every framework, built from the bundle's per-step facts:

- ``forward`` (worker): step start to the start of backward (forward pass, loss, anything
  before ``backward``);
- ``backward/NNNN`` (worker, a chain): backward cut at the moments gradients become ready, in
  the order they usually do (mean ready time over the steps; ties: the later parameter first,
  as backward runs), then ``backward/tail`` to backward's end;
- ``gradient/NAME`` (uplink, the gradient's bytes, ps 0): depends on the backward segment at
  whose end it is ready; it takes no time in a one-worker trace (there is nobody to reduce with);
- ``optimizer`` (worker): depends on every gradient, as the update waits for the last bucket;
- ``other`` (worker): the rest of the step as the loop saw it (``wall_us`` less forward,
  backward and optimizer), e.g. data loading: it runs after the update, before the next step.

So a step's ops add up to its ``wall_us`` exactly, and the ring model's W = 1 point is the
traced rate. The bundle's ``collectives`` (the per-step all-reduces besides the gradients', e.g.
Keras's metric reductions, version 3) go to ``job.collectives`` as their bytes, in order; a
bundle without them (version 1 or 2, or null) leaves it None, and the ring model assumes the
framework's own. A gradient that a step reports ready out of the usual order is taken at the end
of the segment that order gives it (its segment ends at the latest ready time so far), which
delays it by at most the reordering.

Every defect is a ``TraceImportError`` naming the place (``steps[3].grad_ready_us[7]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from advisor.core.profile import (
    BACKWARD_PREFIX, FORWARD_OP, GRADIENT_PREFIX, OPTIMIZER_OP, OTHER_OP, JobInfo, Operation, Profile, ProgramKind,
    Resource, StepTiming,
)
from advisor.errors import MissingTraceDataError, MultiWorkerTraceError, ProfileError, TraceFormatError
from advisor.importers.bundle_header import bundle_meta, check_bundle_header
from advisor.profiling.allreduce_bundle import (
    COLLECTIVE_FIELDS, FIELDS_BY_VERSION, FORMAT, KINDS, LINK_FIELDS, LINK_SOURCES, META_FIELDS, META_FIELDS_V3,
    STEP_FIELDS, cpu_per_step_ok,
)


def is_allreduce_upload(doc: object) -> bool:
    """Whether a decoded JSON document says it is an all-reduce bundle (of any version)."""
    return isinstance(doc, Mapping) and doc.get("format") == FORMAT


def read_allreduce_upload(doc: Any, *, origin: str, source: str | None = None) -> Profile:
    """The profile of a decoded bundle; ``origin`` names it in errors (a path, a request)."""
    if not isinstance(doc, Mapping):
        raise TraceFormatError(f"{origin}: an all-reduce bundle should be a JSON object, found {type(doc).__name__}")
    _check_header(doc, origin)
    kind = ProgramKind(doc["kind"])
    meta = _meta(doc, origin)
    link = _link(doc.get("link"), origin)
    names, sizes = _gradients(doc, origin)
    buckets = _buckets(doc.get("buckets"), len(names), origin)
    collectives = _collectives(doc.get("collectives"), origin)
    steps = _steps(doc, len(names), origin)
    ops, timings = _graph(names, sizes, steps)
    job = JobInfo(
        model=meta.get("model"), batch_size=meta["batch_size"], kind=kind, source=source or origin,
        buckets=None if buckets is None else tuple(tuple(GRADIENT_PREFIX + names[g] for g in b) for b in buckets),
        recorded_bandwidth_bps=None if link is None else link[0],
        recorded_bandwidth_source=None if link is None else link[1],
        collectives=collectives, cpu_s_per_step=meta.get("cpu_s_per_step"),
    )
    try:
        return Profile(job=job, ops=tuple(ops), steps=tuple(timings))
    except ValueError as exc:  # pydantic's ValidationError; should not happen after the checks above
        raise ProfileError(f"{origin}: {exc}") from None


def _check_header(doc: Mapping[str, Any], origin: str) -> None:
    check_bundle_header(doc, origin, label="all-reduce bundle", fmt=FORMAT, versions=FIELDS_BY_VERSION)
    kind = doc.get("kind")
    if kind not in KINDS:
        raise TraceFormatError(f"{origin}: kind should be one of {list(KINDS)}, found {kind!r}")


def _meta(doc: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    meta = bundle_meta(doc, origin, holds="batch size, world size")
    known = META_FIELDS if doc.get("version", 0) >= 4 else META_FIELDS_V3
    unknown = sorted(str(k) for k in meta if k not in known)
    if unknown:
        raise TraceFormatError(f"{origin}: unknown meta field(s) {unknown} for version {doc.get('version')}; "
                               f"meta has {sorted(known)}")
    if not cpu_per_step_ok(meta.get("cpu_s_per_step")):
        raise TraceFormatError(f"{origin}: meta.cpu_s_per_step should be CPU seconds >= 0 or null, "
                               f"found {meta['cpu_s_per_step']!r}")
    batch = meta.get("batch_size")
    if not _whole(batch) or batch < 1:
        raise TraceFormatError(f"{origin}: meta.batch_size should be a whole number >= 1, found {batch!r}")
    world = meta.get("world_size")
    if not _whole(world) or world < 1:
        raise TraceFormatError(f"{origin}: meta.world_size should be a whole number >= 1, found {world!r}")
    if world > 1:
        raise MultiWorkerTraceError(
            f"{origin}: recorded with world_size {world}; a profile needs a run with exactly 1 worker "
            "(with more, the trace holds the all-reduce waits the model is meant to predict)"
        )
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise TraceFormatError(f"{origin}: meta.model should be a string or null, found {model!r}")
    cap = meta.get("bucket_cap_bytes")
    if cap is not None and (not _whole(cap) or cap < 1):
        raise TraceFormatError(f"{origin}: meta.bucket_cap_bytes should be a whole number >= 1 or null, found {cap!r}")
    return meta


def _link(link: Any, origin: str) -> tuple[float, str] | None:
    """(rate in bit/s, its source) of the bundle's ``link``, or None (null, or a version 1 bundle);
    ``link.interface`` (which interface reported its speed) is checked and left to people."""
    if link is None:
        return None
    if not isinstance(link, Mapping):
        raise TraceFormatError(f"{origin}: link should be an object (rate_bps, source) or null, found {link!r}"[:300])
    unknown = sorted(str(k) for k in link if k not in LINK_FIELDS)
    if unknown:
        raise TraceFormatError(f"{origin}: unknown link field(s) {unknown}; link has {sorted(LINK_FIELDS)}")
    rate, where = link.get("rate_bps"), link.get("source")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise TraceFormatError(f"{origin}: link.rate_bps should be a number of bit/s > 0, found {rate!r}")
    if where not in LINK_SOURCES:
        raise TraceFormatError(f"{origin}: link.source should be one of {list(LINK_SOURCES)}, found {where!r}")
    name = link.get("interface")
    if name is not None and (not isinstance(name, str) or not name):
        raise TraceFormatError(f"{origin}: link.interface should be a non-empty string, found {name!r}")
    return float(rate), where


def _gradients(doc: Mapping[str, Any], origin: str) -> tuple[list[str], list[int]]:
    grads = _nonempty_list(doc, "gradients", origin, holds="the trainable parameters' sizes",
                           empty="the traced model has no trainable parameters")
    names: list[str] = []
    sizes: list[int] = []
    seen: set[str] = set()
    for i, g in enumerate(grads):
        where = f"{origin}: gradients[{i}]"
        if not isinstance(g, Mapping) or set(g) != {"name", "bytes"}:
            raise TraceFormatError(f"{where} should be an object with exactly name and bytes, found {g!r}"[:300])
        name, size = g["name"], g["bytes"]
        if not isinstance(name, str) or not name:
            raise TraceFormatError(f"{where}.name should be a non-empty string, found {name!r}")
        if name in seen:
            raise TraceFormatError(f"{where}.name {name!r} appears twice")
        if not _whole(size) or size < 1:
            raise TraceFormatError(f"{where}.bytes should be a whole number >= 1, found {size!r}")
        seen.add(name)
        names.append(name)
        sizes.append(size)
    return names, sizes


def _buckets(buckets: Any, n: int, origin: str) -> list[list[int]] | None:
    if buckets is None:
        return None
    if not isinstance(buckets, list) or not buckets:
        raise TraceFormatError(f"{origin}: buckets should be a non-empty list of lists of gradient positions, or null")
    placed: set[int] = set()
    for b, bucket in enumerate(buckets):
        if not isinstance(bucket, list) or not bucket:
            raise TraceFormatError(f"{origin}: buckets[{b}] should be a non-empty list of gradient positions")
        for g in bucket:
            if not _whole(g) or not 0 <= g < n:
                raise TraceFormatError(f"{origin}: buckets[{b}] holds {g!r}, not a gradient position 0..{n - 1}")
            if g in placed:
                raise TraceFormatError(f"{origin}: buckets place gradient {g} twice")
            placed.add(g)
    if len(placed) != n:
        missing = sorted(set(range(n)) - placed)
        raise TraceFormatError(f"{origin}: buckets leave out {len(missing)} gradient(s), e.g. position {missing[0]}")
    return buckets


def _collectives(collectives: Any, origin: str) -> tuple[int, ...] | None:
    """Bytes of each per-step all-reduce besides the gradients', in order; None when not recorded."""
    if collectives is None:
        return None
    if not isinstance(collectives, list):
        raise TraceFormatError(f"{origin}: collectives should be a list of {{name, bytes}} or null, "
                               f"found {type(collectives).__name__}")
    sizes = []
    for c, item in enumerate(collectives):
        where = f"{origin}: collectives[{c}]"
        if not isinstance(item, Mapping) or set(item) != COLLECTIVE_FIELDS:
            raise TraceFormatError(f"{where} should be an object with exactly name and bytes, found {item!r}"[:300])
        if not isinstance(item["name"], str) or not item["name"]:
            raise TraceFormatError(f"{where}.name should be a non-empty string, found {item['name']!r}")
        if not _whole(item["bytes"]) or item["bytes"] < 1:
            raise TraceFormatError(f"{where}.bytes should be a whole number >= 1, found {item['bytes']!r}")
        sizes.append(int(item["bytes"]))
    return tuple(sizes)


def _steps(doc: Mapping[str, Any], n: int, origin: str) -> list[Mapping[str, Any]]:
    steps = _nonempty_list(doc, "steps", origin, holds="the traced steps", empty="no step was traced")
    for k, step in enumerate(steps):
        where = f"{origin}: steps[{k}]"
        if not isinstance(step, Mapping):
            raise TraceFormatError(f"{where} should be an object, found {type(step).__name__}")
        missing = sorted(STEP_FIELDS - set(step))
        if missing:
            raise MissingTraceDataError(f"{where} lacks {missing}")
        unknown = sorted(str(key) for key in step if key not in STEP_FIELDS)
        if unknown:
            raise TraceFormatError(f"{where}: unknown field(s) {unknown}")
        if not _whole(step["index"]) or step["index"] < 0:
            raise TraceFormatError(f"{where}.index should be a whole number >= 0, found {step['index']!r}")
        wall = _time(step["wall_us"], f"{where}.wall_us")
        if wall <= 0:
            raise TraceFormatError(f"{where}.wall_us should be > 0, found {wall!r}")
        start = _time(step["backward_start_us"], f"{where}.backward_start_us")
        end = _time(step["backward_end_us"], f"{where}.backward_end_us")
        if end < start:
            raise TraceFormatError(f"{where}: backward ends ({end} us) before it starts ({start} us)")
        opt = step["optimizer_us"]
        if not isinstance(opt, list) or len(opt) != 2:
            raise TraceFormatError(f"{where}.optimizer_us should be [start, duration], found {opt!r}"[:300])
        opt_start = _time(opt[0], f"{where}.optimizer_us[0]")
        opt_dur = _time(opt[1], f"{where}.optimizer_us[1]")
        if opt_start < end:
            raise TraceFormatError(f"{where}: the optimizer starts ({opt_start} us) before backward ends ({end} us)")
        if end + opt_dur > wall * (1 + 1e-9) + 1.0:
            raise TraceFormatError(f"{where}: backward ends at {end} us and the optimizer takes {opt_dur} us, "
                                   f"more than the step's wall_us {wall}")
        ready = step["grad_ready_us"]
        if not isinstance(ready, list) or len(ready) != n:
            got = len(ready) if isinstance(ready, list) else type(ready).__name__
            raise TraceFormatError(f"{where}.grad_ready_us should list {n} times (one per gradient), found {got}")
        for g, t in enumerate(ready):
            value = _time(t, f"{where}.grad_ready_us[{g}]")
            if not start - 1.0 <= value <= end + 1.0:  # 1 us of clock rounding either side
                raise TraceFormatError(f"{where}.grad_ready_us[{g}] = {value} us lies outside backward "
                                       f"[{start}, {end}] us")
    return steps


def _graph(names: Sequence[str], sizes: Sequence[int],
           steps: Sequence[Mapping[str, Any]]) -> tuple[list[Operation], list[StepTiming]]:
    """The op graph and per-step timings of the module docstring."""
    n = len(names)
    ready = np.array([[float(t) for t in s["grad_ready_us"]] for s in steps])  # (K, G)
    starts = np.array([float(s["backward_start_us"]) for s in steps])
    ends = np.array([float(s["backward_end_us"]) for s in steps])
    ready = np.clip(ready, starts[:, None], ends[:, None])
    order = np.lexsort((-np.arange(n), ready.mean(axis=0)))  # usual ready order; ties: later parameter first
    seg_end = np.maximum.accumulate(ready[:, order], axis=1)  # (K, G): end of segment j
    seg_start = np.concatenate((starts[:, None], seg_end[:, :-1]), axis=1)
    segs = [f"{BACKWARD_PREFIX}{j:04d}" for j in range(n)]
    tail_op = BACKWARD_PREFIX + "tail"
    ops = [Operation(name=FORWARD_OP, resource=Resource.WORKER)]
    for j, seg in enumerate(segs):
        ops.append(Operation(name=seg, resource=Resource.WORKER, deps=(segs[j - 1] if j else FORWARD_OP,)))
    ops.append(Operation(name=tail_op, resource=Resource.WORKER, deps=(segs[-1],)))
    grad_ops = [GRADIENT_PREFIX + names[g] for g in order]
    for j, g in enumerate(order):
        ops.append(Operation(name=grad_ops[j], resource=Resource.UPLINK, ps=0, bytes=int(sizes[g]), deps=(segs[j],)))
    ops.append(Operation(name=OPTIMIZER_OP, resource=Resource.WORKER, deps=(tail_op, *grad_ops)))
    ops.append(Operation(name=OTHER_OP, resource=Resource.WORKER, deps=(OPTIMIZER_OP,)))
    timings = []
    for k, step in enumerate(steps):
        opt_start, opt_dur = (float(v) for v in step["optimizer_us"])
        wall = float(step["wall_us"])
        forward = starts[k]
        tail = ends[k] - seg_end[k, -1]
        other = max(0.0, wall - (ends[k] + opt_dur))
        start_us = [0.0, *seg_start[k].tolist(), float(seg_end[k, -1]), *seg_end[k].tolist(), opt_start,
                    opt_start + opt_dur]
        duration_us = [forward, *(seg_end[k] - seg_start[k]).tolist(), tail, *([0.0] * n), opt_dur, other]
        timings.append(StepTiming(index=int(step["index"]), start_us=tuple(start_us), duration_us=tuple(duration_us),
                                  wall_us=wall))
    return ops, timings


def _nonempty_list(doc: Mapping[str, Any], field: str, origin: str, *, holds: str, empty: str) -> list[Any]:
    """``doc[field]``, a list with something in it; else the error naming what is missing."""
    value = doc.get(field)
    if value is None:
        raise MissingTraceDataError(f"{origin}: the bundle has no {field} ({holds})")
    if not isinstance(value, list):
        raise TraceFormatError(f"{origin}: {field} should be a list, found {type(value).__name__}")
    if not value:
        raise MissingTraceDataError(f"{origin}: {field} is empty: {empty}")
    return value


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise TraceFormatError(f"{where} should be a finite number of microseconds >= 0, found {value!r}")
    return float(value)
