"""batch/v1 Jobs as the apiserver's job strategy treats them: defaults, the generated selector,
and the validation a client can trip.

From kubernetes v1.31: ``pkg/apis/batch/v1/defaults.go`` (SetDefaults_Job: parallelism and
completions 1, backoffLimit 6, completionMode NonIndexed, suspend false, podReplacementPolicy
TerminatingOrFailed), ``pkg/registry/batch/job/strategy.go`` (generateSelector: the pod template
gets ``batch.kubernetes.io/controller-uid``/``job-name`` and their legacy forms, the selector
matches the uid) and ``pkg/apis/batch/validation/validation.go`` (restartPolicy OnFailure or
Never, non-negative counts and durations, an immutable template and selector). Pod-spec
defaulting beyond ``restartPolicy`` is not emulated.
"""

from __future__ import annotations

import json
from typing import Any

UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_UID_LABEL, LEGACY_NAME_LABEL = "controller-uid", "job-name"
_NON_NEGATIVE = ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
_IMMUTABLE = ("template", "selector", "completionMode")

Causes = list[tuple[str, str]]


def is_job(group: str, plural: str) -> bool:
    return (group, plural) == ("batch", "jobs")


def default_job(obj: dict[str, Any]) -> None:
    """SetDefaults_Job and generateSelector, on a Job being created (its uid already set)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("parallelism") is None and spec.get("completions") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    if spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({UID_LABEL: meta["uid"], LEGACY_UID_LABEL: meta["uid"],
                   NAME_LABEL: meta["name"], LEGACY_NAME_LABEL: meta["name"]})
    spec["selector"] = {"matchLabels": {UID_LABEL: meta["uid"]}}


def job_causes(obj: dict[str, Any], old: dict[str, Any] | None) -> Causes:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    causes: Causes = []
    pod = ((spec.get("template") or {}).get("spec")) or {}
    if not pod.get("containers"):
        causes.append(("spec.template.spec.containers", "Required value"))
    restart = pod.get("restartPolicy") or "Always"  # the pod spec default
    if restart not in ("OnFailure", "Never"):
        causes.append(("spec.template.spec.restartPolicy",
                       f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"'))
    for name in _NON_NEGATIVE:
        value = spec.get(name)
        if isinstance(value, int) and value < 0:
            causes.append((f"spec.{name}", f"Invalid value: {value}: must be greater than or equal to 0"))
    if old is not None:
        old_spec = old.get("spec") or {}
        for name in _IMMUTABLE:
            if spec.get(name) != old_spec.get(name):
                shown = json.dumps(spec.get(name), separators=(",", ":"))[:200]
                causes.append((f"spec.{name}", f"Invalid value: {shown}: field is immutable"))
    return causes
