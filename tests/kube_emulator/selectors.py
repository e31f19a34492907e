"""Label and field selectors with the apiserver's grammar and matching rules.

Label selectors (k8s.io/apimachinery/pkg/labels): comma-separated requirements ``k=v``,
``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not exist),
``k>n``/``k<n``. ``!=`` and ``notin`` also match objects without the key, as upstream.
Field selectors: ``metadata.name`` and ``metadata.namespace`` everywhere (``=``, ``==``, ``!=``),
plus the few extra fields some built-in kinds register; any other field is a 400, as upstream
("field label not supported").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.kube_emulator.status import bad_request

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|!=|=|>|<)\s*([^\s!=<>(),]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Extra selectable fields of built-in kinds (each kind's GetAttrs / field label conversion).
EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "status.phase", "status.podIP", "status.nominatedNodeName"),
    "events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    "secrets": ("type",),
    "namespaces": ("status.phase",),
    "jobs": ("status.successful",),
}


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _check_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
        raise bad_request(f"unable to parse requirement: values[0]: Invalid value: {value!r}: "
                          "a valid label must be an empty string or consist of alphanumeric characters, "
                          "'-', '_' or '.', and must start and end with an alphanumeric character")


def _requirement(text: str) -> Matcher:
    if m := _SET_RE.match(text):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        for v in values:
            _check_value(v)
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _OP_RE.match(text):
        key, op, value = m.groups()
        if op in (">", "<"):
            if not value.lstrip("-").isdigit():
                raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {value!r}")
            return _numeric(key, op, int(value))
        _check_value(value)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _KEY_RE.match(text):
        negate, key = m.group(1) == "!", m.group(2)
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: invalid label selector term {text.strip()!r}")


def _numeric(key: str, op: str, bound: int) -> Matcher:
    def match(labels: Mapping[str, Any]) -> bool:
        raw = labels.get(key)
        if raw is None or not str(raw).lstrip("-").isdigit():
            return False
        return int(raw) > bound if op == ">" else int(raw) < bound
    return match


def label_matcher(selector: str | None) -> Matcher | None:
    """A predicate over an object's labels, or None when the selector selects everything."""
    if not selector or not selector.strip():
        return None
    reqs = [_requirement(part) for part in _split_top(selector)]
    return lambda labels: all(req(labels) for req in reqs)


def field_matcher(selector: str | None, plural: str, namespaced: bool) -> Callable[[Mapping[str, Any]], bool] | None:
    """A predicate over a whole object, or None when the selector selects everything."""
    if not selector or not selector.strip():
        return None
    allowed = {"metadata.name", *(("metadata.namespace",) if namespaced else ()), *EXTRA_FIELDS.get(plural, ())}
    terms: list[tuple[str, bool, str]] = []
    for part in _split_top(selector):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        field, op, value = m.groups()
        if field not in allowed:
            raise bad_request(f'field label not supported: {field}')
        terms.append((field, op == "!=", value))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, f) != v) if neg else (field_value(obj, f) == v) for f, neg, v in terms)
    return match


def field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, Mapping):  # events' "source" selects source.component
        return str(node.get("component", ""))
    return str(node)

