"""The annotations the controller writes on a TFJob: the contract users and tools read.

All live under ``training-advisor.io/`` (``tfjob.PREFIX``) and are documented in
docs/controller.md. Like the Vertical Pod Autoscaler's status, a recommendation (target, bounds,
uncapped target) and conditions with reasons; unlike it, in annotations, because a TFJob's
status belongs to the training operator. ``annotation_patch`` returns only what changed, so a
reconcile that finds nothing new writes nothing (and bumps no resourceVersion).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from advisor.controller.pipeline.deadline import DECISION, deadline_json
from advisor.controller.pipeline.policy import Recommendation, throughput_at
from advisor.controller.jobs.tfjob import PREFIX, TFJobView, rfc3339
from advisor.controller.state.formats import STATE_FORMAT, STATE_FORMAT_ANNOTATION

PHASE = PREFIX + "phase"  # Pending | Profiling | Predicting | Predicted | Failed
REASON = PREFIX + "reason"  # CamelCase reason, then ": " and a message for Failed
OBSERVED_GENERATION = PREFIX + "observed-generation"
CONDITIONS = PREFIX + "conditions"
RECOMMENDATION = PREFIX + "recommendation"  # {"target","lowerBound","upperBound","uncappedTarget"}
RECOMMENDED_WORKERS = PREFIX + "recommended-workers"
SATURATION_WORKERS = PREFIX + "saturation-workers"
THROUGHPUT_RECOMMENDED = PREFIX + "throughput-at-recommended"  # {"value","lower","upper"} examples/s
THROUGHPUT_CURRENT = PREFIX + "throughput-at-current"
CURRENT_WORKERS = PREFIX + "current-workers"
CURVE = PREFIX + "curve"  # [[W, throughput, lower, upper], ...] examples/s
MODEL = PREFIX + "model"
BANDWIDTH = PREFIX + "bandwidth"  # the link capacity predicted for, and where it came from
PROFILE = PREFIX + "profile"  # sha256 of the profile the prediction used
PROFILED_GENERATION = PREFIX + "profiled-generation"
TEMPLATE_HASH = PREFIX + "template-hash"
PREDICTED_AT = PREFIX + "predicted-at"
PROFILING_RUN = PREFIX + "profiling-run"
PROFILING_STARTED = PREFIX + "profiling-started"  # RFC 3339: when the current profiling try started
PROFILING_ATTEMPTS = PREFIX + "profiling-attempts"  # JSON [{"attempt", "run", "reason"}]: tries that ended
SUSPENDED_BY_ADVISOR = PREFIX + "suspended-by-advisor"
LAST_RESIZE = PREFIX + "last-resize"
CURVE_SOURCE = PREFIX + "curve-source"  # profile | refit (controller/pipeline/refit.py)
REFIT = PREFIX + "refit"  # the online refit behind the curve: points used, constants before and after
# cluster mode (controller/pipeline/allocation.py): the job's share of its pool, and why
ALLOCATED_WORKERS = PREFIX + "allocated-workers"  # an integer; 0 while it waits for room
ALLOCATION = PREFIX + "allocation"  # {"pool", "status", "workers", "ownOptimum", "reason"}
# DECISION (deadline.py): {"workers","probability","confidence","confident","neededThroughput",...} for a job
# with a deadline
WORKER_SPEEDS = PREFIX + "worker-speeds"  # the per-worker speeds and links the curve is for (node_speeds)
PHASES = ("Pending", "Profiling", "Predicting", "Predicted", "Failed")


def compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def status_annotations(
    view: TFJobView, phase: str, reason: str, *, now: float, message: str = ""
) -> dict[str, str]:
    """Phase, reason, observed generation and VPA-style conditions for ``phase``."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    text = f"{reason}: {message}" if message else reason
    wanted = {
        "ProfileAvailable": phase in ("Predicting", "Predicted"),
        "RecommendationProvided": phase == "Predicted",
    }
    previous = {c.get("type"): c for c in _conditions(view.annotations)}
    conditions = []
    for kind, ok in wanted.items():
        status = "True" if ok else "False"
        old = previous.get(kind, {})
        since = old.get("lastTransitionTime") if old.get("status") == status else rfc3339(now)
        conditions.append({"type": kind, "status": status, "reason": reason, "message": message[:200],
                           "lastTransitionTime": since})
    return {PHASE: phase, REASON: text[:1024], OBSERVED_GENERATION: str(view.generation),
            CONDITIONS: compact(conditions), STATE_FORMAT_ANNOTATION: str(STATE_FORMAT)}


def prediction_annotations(
    view: TFJobView, prediction: Mapping[str, Any], rec: Recommendation, *, profile_sha: str, predicted_at: float,
    profiled_generation: int,
) -> dict[str, str]:
    """Everything a finished prediction tells about the job, compact enough for annotations."""
    current = throughput_at(prediction, view.workers)
    at_target = throughput_at(prediction, rec.target)
    curve = [[int(p["workers"]), _r(p["throughput"]), _r(p["low"]), _r(p["high"])] for p in prediction["curve"]]
    out = {
        RECOMMENDATION: compact({"target": rec.target, "lowerBound": rec.lower, "upperBound": rec.upper,
                                 "uncappedTarget": rec.uncapped}),
        RECOMMENDED_WORKERS: str(rec.target),
        SATURATION_WORKERS: str(int(prediction["saturation_workers"])),
        THROUGHPUT_RECOMMENDED: compact({k: _r(v) for k, v in (at_target or {}).items()}),
        THROUGHPUT_CURRENT: compact({k: _r(v) for k, v in current.items()}) if current else "null",
        CURRENT_WORKERS: str(view.workers),
        CURVE: compact(curve),
        MODEL: str(prediction["model"]),
        PROFILE: f"sha256:{profile_sha}",
        PROFILED_GENERATION: str(profiled_generation),
        TEMPLATE_HASH: view.template_hash,
        PREDICTED_AT: rfc3339(predicted_at),
    }
    refit = prediction.get("refit")
    out[CURVE_SOURCE] = "refit" if isinstance(refit, Mapping) else "profile"
    if isinstance(refit, Mapping):
        out[REFIT] = compact({**refit, "profile": f"sha256:{profile_sha}"})
    elif REFIT in view.annotations:
        out[REFIT] = "null"  # a curve from the profile alone again (refit turned off, a new profile)
    if rec.deadline is not None and rec.confidence is not None:  # the job asked for a deadline (deadline.py)
        out[DECISION] = deadline_json(rec.deadline.choice, rec.confidence, rec.deadline.plan, rec.deadline.deadline)
    elif DECISION in view.annotations:
        out[DECISION] = "null"  # the deadline annotations were removed
    speeds = prediction.get("worker_speeds")
    if isinstance(speeds, Mapping):
        out[WORKER_SPEEDS] = compact(speeds)
    elif WORKER_SPEEDS in view.annotations:
        out[WORKER_SPEEDS] = "null"  # every worker as traced again (node_speeds turned off)
    network = prediction.get("network")
    if isinstance(network, Mapping) and network.get("bandwidth_bps"):
        out[BANDWIDTH] = compact({"bps": _r(network["bandwidth_bps"]),
                                  "source": str(network.get("bandwidth_source", "given"))})
    return out


def annotation_patch(current: Mapping[str, str], desired: Mapping[str, str | None]) -> dict[str, Any] | None:
    """A JSON merge patch changing only the annotations that differ (None removes); None if nothing does."""
    changed = {k: v for k, v in desired.items() if current.get(k) != v}
    return {"metadata": {"annotations": changed}} if changed else None


def _conditions(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    try:
        doc = json.loads(annotations.get(CONDITIONS, "[]"))
    except json.JSONDecodeError:
        return []
    return [c for c in doc if isinstance(c, dict)] if isinstance(doc, list) else []


def _r(x: Any) -> float:
    return round(float(x), 2)
