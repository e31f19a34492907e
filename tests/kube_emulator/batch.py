"""batch/v1 Jobs as the apiserver's job strategy treats them: defaults, the generated selector,
and the validation a client can trip.

From kubernetes v1.31: ``pkg/apis/batch/v1/defaults.go`` (SetDefaults_Job: parallelism and
completions 1, backoffLimit 6, completionMode NonIndexed, suspend false, podReplacementPolicy
TerminatingOrFailed), ``pkg/registry/batch/job/strategy.go`` (generateSelector: the pod template
gets ``batch.kubernetes.io/controller-uid``/``job-name`` and their legacy forms, the selector
matches the uid) and ``pkg/apis/batch/validation/validation.go`` (restartPolicy OnFailure or
Never, non-negative counts and durations, an immutable template and selector; a
``podFailurePolicy`` as validatePodFailurePolicy checks it, with ``restartPolicy: Never``).
Pod-spec defaulting beyond ``restartPolicy`` is not emulated.
"""

from __future__ import annotations

import json
import re
from typing import Any

UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_UID_LABEL, LEGACY_NAME_LABEL = "controller-uid", "job-name"
_NON_NEGATIVE = ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
_IMMUTABLE = ("template", "selector", "completionMode")
_POLICY_ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

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
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
            if isinstance(pattern, dict) and not pattern.get("status"):
                pattern["status"] = "True"
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
    if spec.get("podFailurePolicy") is not None:
        if restart != "Never":
            causes.append(("spec.template.spec.restartPolicy",
                           f'Invalid value: "{restart}": only "Never" is supported when podFailurePolicy is specified'))
        names = {c.get("name") for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]}
        for i, rule in enumerate((spec["podFailurePolicy"] or {}).get("rules") or []):
            causes.extend(_rule_causes(rule, f"spec.podFailurePolicy.rules[{i}]", names))
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


def _rule_causes(rule: dict[str, Any], path: str, containers: set[Any]) -> Causes:
    """validatePodFailurePolicyRule (non-indexed Jobs: FailIndex is refused)."""
    causes: Causes = []
    action = rule.get("action")
    if not action:
        causes.append((f"{path}.action", f"Required value: valid values: {list(_POLICY_ACTIONS)}"))
    elif action == "FailIndex":
        causes.append((f"{path}.action", 'Invalid value: "FailIndex": The action FailIndex is only allowed for '
                                         "Indexed jobs"))
    elif action not in _POLICY_ACTIONS:
        causes.append((f"{path}.action", f'Unsupported value: "{action}"'))
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
    if codes is not None:
        causes.extend(_exit_code_causes(codes, f"{path}.onExitCodes", containers))
    for j, pattern in enumerate(conditions):
        if not _QUALIFIED_NAME.match(str(pattern.get("type") or "")):
            causes.append((f"{path}.onPodConditions[{j}].type", "Invalid value: must be a qualified name"))
        if pattern.get("status") not in ("True", "False", "Unknown"):
            causes.append((f"{path}.onPodConditions[{j}].status", f'Unsupported value: "{pattern.get("status")}"'))
    if codes is not None and conditions:
        causes.append((path, "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"))
    if codes is None and not conditions:
        causes.append((path, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"))
    return causes


def _exit_code_causes(codes: dict[str, Any], path: str, containers: set[Any]) -> Causes:
    causes: Causes = []
    operator, values = codes.get("operator"), codes.get("values") or []
    if operator not in ("In", "NotIn"):
        causes.append((f"{path}.operator", f'Unsupported value: "{operator}": supported values: "In", "NotIn"'))
    name = codes.get("containerName")
    if name is not None and name not in containers:
        causes.append((f"{path}.containerName", f'Invalid value: "{name}": must be one of the container or '
                                                "initContainer names in the pod template"))
    if not values:
        causes.append((f"{path}.values", "Invalid value: []: at least one value is required"))
    for k, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append((f"{path}.values[{k}]", "Invalid value: 0: must not be 0 for the In operator"))
        if value in values[:k]:
            causes.append((f"{path}.values[{k}]", f"Duplicate value: {value}"))
    if values != sorted(values):
        causes.append((f"{path}.values", f"Invalid value: {values}: must be ordered"))
    return causes
