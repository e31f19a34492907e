"""The apiserver's checks that a client of ours can plausibly trip, with its error texts.

Object metadata (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): names, label keys and
values, the 256 KiB annotation budget, owner references, finalizers added during deletion.
Per kind: Secret data must be base64 with valid keys (and ``stringData`` folds into ``data``);
core/v1 Events pass the legacy namespace check, and the stricter events.k8s.io/v1 rules
(``note`` at most 1024 characters...) apply to new-style events (pkg/apis/core/validation/
events.go); batch/v1 Jobs as in ``batch.py``; Lease and Event MicroTimes must have exactly six
fractional digits, since Go parses them with the layout ``2006-01-02T15:04:05.000000Z07:00``. A
JSON type error (a number where a string belongs) is a 400 from decoding, as upstream;
validation failures are 422.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from tests.kube_emulator import batch
from tests.kube_emulator.resources import ResourceType
from tests.kube_emulator.status import bad_request, invalid

SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
MICROTIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
ANNOTATIONS_LIMIT = 256 * 1024
SECRET_LIMIT = 1024 * 1024
NOTE_LIMIT = 1024

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
             "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
             "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")

Causes = list[tuple[str, str]]


def _qualified_name_problems(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems = []
    if prefix and (len(prefix) > 253 or not SUBDOMAIN_RE.match(prefix)):
        problems.append("prefix part " + SUBDOMAIN_MSG)
    if not name or len(name) > 63 or not QUALIFIED_NAME_RE.match(name):
        problems.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                        "and end with an alphanumeric character, and be at most 63 characters")
    return problems


def _string_map(meta: dict[str, Any], field: str) -> dict[str, str]:
    value = meta.get(field) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad_request(f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} "
                          "of type map[string]string")
    return value


def metadata_causes(res: ResourceType, obj: dict[str, Any]) -> Causes:
    meta = obj["metadata"]
    causes: Causes = []
    name = meta.get("name", "")
    name_re = DNS_LABEL_RE if res.plural == "namespaces" else SUBDOMAIN_RE
    if len(name) > 253 or not name_re.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": {SUBDOMAIN_MSG}'))
    for key, value in _string_map(meta, "labels").items():
        for problem in _qualified_name_problems(key):
            causes.append(("metadata.labels", f'Invalid value: "{key}": {problem}'))
        if len(value) > 63:
            causes.append(("metadata.labels", f'Invalid value: "{value}": must be no more than 63 characters'))
        elif not LABEL_VALUE_RE.match(value):
            causes.append(("metadata.labels", f'Invalid value: "{value}": {LABEL_MSG}'))
    annotations = _string_map(meta, "annotations")
    for key in annotations:
        for problem in _qualified_name_problems(key):
            causes.append(("metadata.annotations", f'Invalid value: "{key}": {problem}'))
    if sum(len(k) + len(v) for k, v in annotations.items()) > ANNOTATIONS_LIMIT:
        causes.append(("metadata.annotations", f"Too long: must have at most {ANNOTATIONS_LIMIT} bytes"))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(field):
                causes.append((f"metadata.ownerReferences[{i}].{field}", "Required value"))
    return causes


def finalizer_causes(old: dict[str, Any], new: dict[str, Any]) -> Causes:
    if not old["metadata"].get("deletionTimestamp"):
        return []
    added = sorted(set(new["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or []))
    if not added:
        return []
    quoted = ", ".join(f'"{f}"' for f in added)
    return [("metadata.finalizers",
             f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{quoted}}}")]


def _microtime(res: ResourceType, value: Any) -> None:
    if value is None or (isinstance(value, str) and MICROTIME_RE.match(value)):
        return
    rest = value[19:] if isinstance(value, str) else value
    raise bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: parsing time '
                      f'"{value}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "{rest}" as ".000000"')


def normalize_kind(res: ResourceType, obj: dict[str, Any]) -> Causes:
    """Kind-specific decoding checks (400 raised here) and validation causes (returned)."""
    if res.plural == "secrets":
        return _secret(res, obj)
    if res.plural == "leases":
        spec = obj.get("spec") or {}
        for field in ("acquireTime", "renewTime"):
            _microtime(res, spec.get(field))
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and not isinstance(duration, int):
            raise bad_request(f"json: cannot unmarshal {type(duration).__name__} into Go struct field "
                              "LeaseSpec.spec.leaseDurationSeconds of type int32")
        return []
    if res.plural == "events":
        _microtime(res, obj.get("eventTime"))
        return _events_k8s_io(obj) if res.group == "events.k8s.io" else _core_event(obj)
    return []


def _secret(res: ResourceType, obj: dict[str, Any]) -> Causes:
    data = dict(obj.get("data") or {})
    for key, text in (obj.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(text).encode()).decode()
    causes: Causes = []
    size = 0
    for key, value in data.items():
        if not isinstance(value, str):
            raise bad_request(f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data for key {key}')
        try:
            size += len(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise bad_request(f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data ({exc})') from None
        if not CONFIG_KEY_RE.match(key):
            causes.append((f"data[{key}]", f"Invalid value: \"{key}\": a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                           "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
    if size > SECRET_LIMIT:
        causes.append(("data", f"Too long: must have at most {SECRET_LIMIT} bytes"))
    if data:
        obj["data"] = data
    obj.setdefault("type", "Opaque")
    return causes


def _core_event(obj: dict[str, Any]) -> Causes:
    namespace = obj["metadata"].get("namespace", "")
    involved = (obj.get("involvedObject") or {}).get("namespace", "")
    causes: Causes = []
    mismatch = ("involvedObject.namespace", f'Invalid value: "{involved}": does not match event.namespace')
    if not obj.get("eventTime"):
        if (involved and involved != namespace) or (not involved and namespace not in ("", "default")):
            causes.append(mismatch)
        return causes
    if not involved and namespace not in ("default", "kube-system"):
        causes.append(mismatch)
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field):
            causes.append((field, "Required value"))
    if len(obj.get("message") or "") > NOTE_LIMIT:
        causes.append(("message", f'Invalid value: "": can have at most {NOTE_LIMIT} characters'))
    return causes


def _events_k8s_io(obj: dict[str, Any]) -> Causes:
    causes: Causes = []
    if not obj.get("eventTime"):
        causes.append(("eventTime", "Required value"))
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field):
            causes.append((field, "Required value"))
    if obj.get("type") not in ("Normal", "Warning"):
        causes.append(("type", f'Invalid value: "": has invalid value: {obj.get("type")}'))
    if len(obj.get("note") or "") > NOTE_LIMIT:
        causes.append(("note", f'Invalid value: "": can have at most {NOTE_LIMIT} characters'))
    return causes


def check(res: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise the apiserver's 400/422 for ``obj`` (``old`` set on updates)."""
    causes = normalize_kind(res, obj) + metadata_causes(res, obj)
    if old is not None:
        causes += finalizer_causes(old, obj)
    if batch.is_job(res.group, res.plural):
        causes += batch.job_causes(obj, old)
    if causes:
        raise invalid(res, obj["metadata"].get("name", ""), causes)

