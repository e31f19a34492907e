"""The upload bundle of an all-reduce program's profiling run (PyTorch DDP, TF2 Keras with
MultiWorkerMirroredStrategy): one versioned JSON document, written by the hooks in the training
program and read by ``advisor.importers.allreduce_upload``.

A parameter-server trace needs every ``RecvTensor`` record; an all-reduce job needs much less.
The ring model (``advisor.core.models.ring_allreduce``) replays, per step: the compute before
backward, the moment each gradient becomes ready during backward, each gradient's size, how the
framework groups gradients into buckets, and the work after the last bucket (the optimizer
step and whatever the program does before its next step), and the other all-reduces the
framework runs every step besides the gradients' (Keras reduces every logged metric across the
workers as a sum and a count: small, but each pays the ring's 2(W-1) rounds). So that is all a
bundle holds; it is the same for both frameworks, and only the hooks that fill it differ::

    {"format": "advisor-allreduce-upload", "version": 4,
     "kind": "pytorch-ddp" | "tf-mwms",
     "meta": {"batch_size": 64, "model": "resnet18", "world_size": 1,
              "framework": "torch 2.13.0", "bucket_cap_bytes": 26214400,
              "cpu_s_per_step": 0.041},
     "link": {"rate_bps": 1e10, "source": "controller-setting"} | null,
     "gradients": [{"name": "fc.weight", "bytes": 2052000}, ...],
     "buckets": [[11, 10], [9, 8, 7], ...] | null,
     "collectives": [{"name": "loss/sum", "bytes": 4}, {"name": "loss/count", "bytes": 8}] | null,
     "steps": [{"index": 3, "wall_us": 41250.0, "backward_start_us": 15010.0,
                "backward_end_us": 36200.0, "grad_ready_us": [..one per gradient..],
                "optimizer_us": [36900.0, 2100.0]}, ...]}

Times are microseconds relative to the step's start (the moment the previous step ended, or
the first traced step began); ``wall_us`` is the step as the training loop saw it, start to
the next step's start, so everything the loop does between steps (data loading, logging)
counts. ``gradients`` lists the trainable parameters in registration order; ``buckets`` lists
gradient positions per bucket in the order the framework reduces them (DDP's reducer), or null
when the framework does not expose them. ``collectives`` lists the per-step all-reduces besides
the gradients', in the order they run (after the gradients'), ``[]`` for none, or null when the
hook does not know them (the ring model then assumes the framework's own: docs/models-ring.md).
``meta.world_size`` must be 1: the profile is of one
worker alone, with no communication to measure, which is also why the link rate travels in the
bundle: ``link`` is the rate of the worker's link each way and where it came from
(``advisor.profiling.link``: the controller's setting, or the interface's reported speed, which
then names the ``interface``), or null when the run did not know it. ``meta.cpu_s_per_step`` is
the CPU time (all the process's threads) the worker spent per step over untraced steps, or
absent or null when not measured: workers that share a host's cores wait for it once they need
more than the host has (docs/models-ring.md, "Workers that share a host's cores"). Version 1 is
version 2 without ``link``, version 2 is version 3 without ``collectives``, version 3 is version 4
without ``meta.cpu_s_per_step``; readers take all four. The encoded form is gzip (zero timestamp)
of compact JSON: the same trace always gives the same bytes.

This module needs only the standard library: it runs inside the user's training image.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.profiling.link import SOURCES

FORMAT = "advisor-allreduce-upload"
VERSION = 4
KINDS = ("pytorch-ddp", "tf-mwms")
FIELDS_V1 = frozenset({"format", "version", "kind", "meta", "gradients", "buckets", "steps"})
FIELDS_V2 = FIELDS_V1 | {"link"}
FIELDS = FIELDS_V2 | {"collectives"}
FIELDS_BY_VERSION = {1: FIELDS_V1, 2: FIELDS_V2, 3: FIELDS, VERSION: FIELDS}  # what each version a reader takes may hold
META_FIELDS_V3 = frozenset({"batch_size", "model", "world_size", "framework", "bucket_cap_bytes"})
META_FIELDS = META_FIELDS_V3 | {"cpu_s_per_step"}  # version 4 on
LINK_FIELDS = frozenset({"rate_bps", "source", "interface"})
COLLECTIVE_FIELDS = frozenset({"name", "bytes"})
LINK_SOURCES = SOURCES  # where a recorded link rate came from (advisor.profiling.link)
STEP_FIELDS = frozenset({"index", "wall_us", "backward_start_us", "backward_end_us", "grad_ready_us", "optimizer_us"})


def cpu_per_step_ok(value: Any) -> bool:
    """Whether ``value`` can be a bundle's ``meta.cpu_s_per_step``: null, or finite CPU seconds >= 0."""
    return value is None or (not isinstance(value, bool) and isinstance(value, (int, float))
                             and math.isfinite(value) and value >= 0)


def build_allreduce_bundle(
    kind: str,
    meta: Mapping[str, Any],
    gradients: Sequence[tuple[str, int]],
    steps: Sequence[Mapping[str, Any]],
    buckets: Sequence[Sequence[int]] | None = None,
    link: Mapping[str, Any] | None = None,
    collectives: Sequence[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """The bundle of ``steps`` (dicts with ``STEP_FIELDS``) for ``gradients`` (name, bytes);
    ``link`` is the recorded link rate (``advisor.profiling.link.link_rate``), None if unknown;
    ``collectives`` the per-step all-reduces besides the gradients' (name, bytes), None if unknown.

    Raises ``ValueError`` on a shape the importer would refuse, so that a hook fails in the
    training program, where the user sees it, rather than at the controller.
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    if not gradients:
        raise ValueError("a bundle needs at least one gradient (a trainable parameter)")
    if not steps:
        raise ValueError("a bundle needs at least one traced step")
    for i, step in enumerate(steps):
        missing = sorted(STEP_FIELDS - set(step))
        if missing:
            raise ValueError(f"step {i} lacks {missing}")
        if len(step["grad_ready_us"]) != len(gradients):
            raise ValueError(f"step {i} has {len(step['grad_ready_us'])} gradient ready times for "
                             f"{len(gradients)} gradients")
    if link is not None:
        rate = link.get("rate_bps")
        if set(link) - LINK_FIELDS or link.get("source") not in LINK_SOURCES or isinstance(rate, bool) or not (
                isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"link should be {{rate_bps > 0, source in {LINK_SOURCES}}}, got {dict(link)!r}")
    if not cpu_per_step_ok(meta.get("cpu_s_per_step")):
        raise ValueError(f"meta.cpu_s_per_step should be CPU seconds >= 0 or None, got {meta['cpu_s_per_step']!r}")
    unknown = sorted(set(meta) - META_FIELDS)
    if unknown:
        raise ValueError(f"unknown meta field(s) {unknown}; meta has {sorted(META_FIELDS)}")
    for name, size in collectives or ():
        if not name or isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a collective needs a name and bytes >= 1, got {(name, size)!r}")
    return {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "meta": dict(meta),
        "link": None if link is None else dict(link),
        "gradients": [{"name": str(name), "bytes": int(size)} for name, size in gradients],
        "buckets": None if buckets is None else [[int(g) for g in bucket] for bucket in buckets],
        "collectives": None if collectives is None else [{"name": str(n), "bytes": int(b)} for n, b in collectives],
        "steps": [{key: step[key] for key in sorted(STEP_FIELDS)} for step in steps],
    }


def encode_allreduce_bundle(bundle: Mapping[str, Any]) -> bytes:
    """The request body: gzip (zero timestamp) of the bundle's compact JSON."""
    text = json.dumps(bundle, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return gzip.compress(text.encode(), mtime=0)
