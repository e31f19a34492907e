"""Send an encoded bundle to the controller, retrying only what a retry can fix.

It runs inside the user's training program, so it must never take training down: every
outcome, including an unreachable controller, comes back as an ``UploadResult`` that the
caller logs. Server errors (5xx) and connection failures are retried with capped exponential
backoff inside a bounded total time; any 4xx is final (a bad token or a refused trace does not
improve by sending it again). The body is sent byte-identical on every attempt, so a retry
after a lost 202 is the same trace, not "a different trace" (409).

Standard library only (``urllib.request``): the training image may have nothing else.
Redirects are not followed: urllib would turn a redirected POST into a bodiless GET and carry
the bearer token to wherever the redirect points.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("advisor.profiling")

_MESSAGE_LIMIT = 64 * 1024  # bytes of a response body read for its message
_LOGGED_MESSAGE = 500  # characters of a server message put in the log


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to keep trying. No attempt starts after ``total_s``; waits double up to the cap."""

    attempts: int = 5
    first_delay_s: float = 1.0
    max_delay_s: float = 16.0
    total_s: float = 120.0
    timeout_s: float = 60.0  # per request (urllib applies it to each socket operation)


@dataclass(frozen=True, slots=True)
class UploadResult:
    """What became of an upload: ``ok`` only on a 2xx answer."""

    ok: bool
    status: int | None  # the last HTTP status, None when no answer came
    message: str  # the server's message, or what went wrong
    attempts: int
    profile_id: str | None = None


def ship(
    url: str, body: bytes, token_file: str | Path, *, policy: RetryPolicy | None = None
) -> UploadResult:
    """Read the bearer token and upload ``body``; never raises for I/O or HTTP failures."""
    try:
        token = read_token(token_file)
    except (OSError, ValueError) as exc:
        return UploadResult(False, None, f"cannot read the token file {token_file}: {exc}", attempts=0)
    return upload_bundle(url, body, token, policy=policy)


def read_token(path: str | Path) -> str:
    """The bearer token in ``path`` (a mounted Secret), surrounding whitespace removed."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError("the file is empty")
    if any(c.isspace() for c in token):
        raise ValueError("the token holds whitespace; expected a single bearer token")
    return token


def upload_bundle(
    url: str,
    body: bytes,
    token: str,
    *,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> UploadResult:
    """POST the gzipped bundle ``body`` to ``url``; retries 5xx and connection errors only."""
    policy = policy or RetryPolicy()
    request = _request(url, body, token)
    deadline = clock() + policy.total_s
    delay = policy.first_delay_s
    result = UploadResult(False, None, "no attempt was made", attempts=0)
    for attempt in range(1, policy.attempts + 1):
        remaining = deadline - clock()
        if remaining <= 0:
            break
        result, retry = _attempt(request, attempt, min(policy.timeout_s, remaining))
        if not retry or attempt == policy.attempts:
            return result
        wait = min(delay, policy.max_delay_s, max(0.0, deadline - clock()))
        log.warning(
            "advisor: trace upload attempt %d failed (%s); retrying in %.1f s",
            attempt,
            result.message,
            wait,
        )
        sleep(wait)
        delay *= 2
    message = f"gave up after {policy.total_s:.0f} s: {result.message}"
    return UploadResult(False, result.status, message, result.attempts)


def _request(url: str, body: bytes, token: str) -> urllib.request.Request:
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "Accept": "application/json",
    }
    return urllib.request.Request(url, data=body, headers=headers, method="POST")


def _attempt(request: urllib.request.Request, attempt: int, timeout: float) -> tuple[UploadResult, bool]:
    """One POST: its result, and whether another attempt could succeed."""
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status, doc = response.status, _json_body(response.read(_MESSAGE_LIMIT))
    except urllib.error.HTTPError as exc:
        with exc:
            message = _message(_json_body(exc.read(_MESSAGE_LIMIT)), exc.reason)
        return UploadResult(False, exc.code, message, attempt), exc.code >= 500
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return UploadResult(False, None, f"no answer: {reason}", attempt), True
    profile = doc.get("profile") if isinstance(doc, dict) else None
    message = _message(doc, "accepted")
    return UploadResult(True, status, message, attempt, profile_id=None if profile is None else str(profile)), False


def _json_body(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode("utf-8", errors="replace").strip()


def _message(doc: object, fallback: object) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        text = doc["message"]
    elif isinstance(doc, str) and doc:
        text = doc
    else:
        text = str(fallback)
    return text[:_LOGGED_MESSAGE]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turn every redirect into an error response instead of following it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)
