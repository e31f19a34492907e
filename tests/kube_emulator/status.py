"""Error answers shaped like the apiserver's: a ``kind: Status`` body with reason, code, message.

The message texts follow k8s.io/apimachinery/pkg/api/errors (``NewNotFound``, ``NewConflict``,
``NewAlreadyExists``, ``NewInvalid``, ``NewResourceExpired``, ``NewForbidden``...) so a client's
error handling meets the same words it would in a cluster.
"""

from __future__ import annotations

from typing import Any

from tests.kube_emulator.resources import ResourceType

OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"
REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answer: HTTP code plus the Status body (and extra headers, e.g. Retry-After)."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Failure", "message": self.message,
                                  "reason": self.reason, "code": self.code}
        if self.details is not None:
            status["details"] = self.details
        return status


def _details(res: ResourceType, name: str) -> dict[str, Any]:
    # StatusDetails.kind carries the *resource* (plural), as the apiserver does.
    details: dict[str, Any] = {"name": name, "kind": res.plural}
    if res.group:
        details["group"] = res.group
    return details


def not_found(res: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                    {"name": namespace, "kind": "namespaces"})


def already_exists(res: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))


def conflict(res: ResourceType, name: str, why: str = OPTIMISTIC_LOCK) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                    _details(res, name))


def invalid(res: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are (field, "Invalid value: ...: why") pairs, as field.ErrorList."""
    text = ", ".join(f"{field}: {why}" for field, why in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    details = _details(res, name)
    details["kind"] = res.kind
    details["causes"] = [{"reason": "FieldValueInvalid", "message": why, "field": field}
                         for field, why in causes]
    return ApiError(422, "Invalid", f'{res.qualified_kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old(requested: int, floor: int) -> ApiError:
    return expired(f"too old resource version: {requested} ({floor})")


def unsupported_patch(res: ResourceType) -> ApiError:
    accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    if not res.custom:
        accepted += ", application/strategic-merge-patch+json"
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: {accepted}")


def page_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def injected(code: int, res: ResourceType | None, verb: str, namespace: str | None, name: str | None,
             retry_after_s: int | None) -> ApiError:
    """The answer a real server gives for ``code`` (used by ``fail_next``)."""
    what = res.qualified if res else "the resource"
    if code == 403:
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        target = f'{what} "{name}"' if name else what
        group = res.group if res else ""
        plural = res.plural if res else ""
        msg = (f'{target} is forbidden: User "system:serviceaccount:advisor:advisor" cannot {verb} '
               f'resource "{plural}" in API group "{group}" {scope}')
        return ApiError(403, "Forbidden", msg, {"name": name or "", "kind": plural, "group": group})
    if code == 409 and res is not None:
        return conflict(res, name or "")
    if code == 404 and res is not None:
        return not_found(res, name or "")
    if code == 429:
        seconds = retry_after_s if retry_after_s is not None else 1
        return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                        {"retryAfterSeconds": seconds}, {"Retry-After": str(seconds)})
    if code == 500:
        return ApiError(500, "InternalError", "Internal error occurred: injected failure",
                        {"causes": [{"message": "injected failure"}]})
    reason = REASONS.get(code, "Unknown")
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return ApiError(code, reason, f"injected {reason} ({code})", {}, headers)
