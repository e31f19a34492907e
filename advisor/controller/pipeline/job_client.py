"""``advisor predict-job``: what a prediction Job's pod runs (job backend, see job_predictor.py).

Fetch the profile and parameters from the controller, predict with the same ``run_prediction``
the process backend runs, send the answer back. A profile that cannot be predicted (an
``AdvisorError``) is an answer too: the reason is sent, so the job is marked Failed with it, and
the pod ends successfully (running it again would give the same). Anything else is a crash: the
pod fails, Kubernetes retries once (``backoffLimit``), and the controller reads the reason from
the pod's termination message (the tail of this output).

Exit status: 0 once an answer is delivered; ``EXIT_FINAL`` (3) when the controller refuses the
pod (a 4xx: a dead or wrong token, an attempt already over, an answer it cannot use) or sends
input without a profile: a new pod would be refused the same way, so the Job's
``podFailurePolicy`` fails the Job at once on this code instead of retrying. A controller that
stays unreachable is status 2 (the CLI's for any ``AdvisorError``) and a crash 1: those may pass,
so the Job's ``backoffLimit`` allows one more pod.

The controller may be restarting or changing leader while the pod runs, so connection errors,
5xx and 429 are retried with capped exponential backoff for ``retry_for_s``; any other 4xx is
final (a refused token does not improve). Standard library only, no redirects followed (they
would carry the token elsewhere).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from advisor.controller.pipeline.prediction_job import EXIT_FINAL, TOKEN_ENV
from advisor.controller.pipeline.predictions import PREDICTION_ERROR_SCHEMA, run_prediction
from advisor.errors import AdvisorError

log = logging.getLogger(__name__)
Runner = Callable[[Mapping[str, Any], Mapping[str, Any]], str]
_RETRIED = frozenset({429, 500, 502, 503, 504})
_MESSAGE_LIMIT = 2000


class PredictionJobError(AdvisorError):
    """The prediction Job cannot get its input or deliver its answer (the message says why)."""


class PredictionRefused(PredictionJobError):
    """The controller refused the request or its input is unusable: retrying in a new pod is futile."""


def token_from_env(name: str = TOKEN_ENV) -> str:
    token = os.environ.get(name, "").strip()
    if not token:
        raise PredictionJobError(f"no bearer token: ${name} is empty (it comes from the Job's token Secret)")
    return token


def run_prediction_job(controller_url: str, key: str, token: str, *, retry_for_s: float = 600.0,
                       runner: Runner = run_prediction, sleep: Callable[[float], None] = time.sleep) -> int:
    """Fetch, predict, answer; returns the exit status: 0, or ``EXIT_FINAL`` (the reason printed)
    when the controller refuses. Raises PredictionJobError when it stays unreachable."""
    try:
        return _fetch_predict_answer(controller_url, key, token, retry_for_s, runner, sleep)
    except PredictionRefused as exc:
        print(f"advisor: error: {exc}", file=sys.stderr)
        return EXIT_FINAL


def _fetch_predict_answer(controller_url: str, key: str, token: str, retry_for_s: float, runner: Runner,
                          sleep: Callable[[float], None]) -> int:
    base = f"{controller_url.rstrip('/')}/v1/predictions/{key}"
    http = _Http(token, retry_for_s, sleep)
    doc = http.call("GET", f"{base}/input")
    try:
        profile, params = doc["profile"], doc["params"]
    except (KeyError, TypeError):
        raise PredictionRefused("the controller's input lacks profile or params") from None
    started = time.monotonic()
    try:
        answer = runner(profile, params)
        outcome = "predicted"
    except AdvisorError as exc:
        answer = json.dumps({"schema": PREDICTION_ERROR_SCHEMA, "error": str(exc)[:_MESSAGE_LIMIT]})
        outcome = f"cannot predict: {exc}"
    http.call("PUT", f"{base}/result", answer.encode())
    log.info("prediction %s: %s in %.1f s; answer delivered", key, outcome, time.monotonic() - started)
    return 0


class _Http:
    def __init__(self, token: str, retry_for_s: float, sleep: Callable[[float], None]) -> None:
        self.token, self.retry_for_s, self.sleep = token, retry_for_s, sleep
        self.opener = urllib.request.build_opener(_NoRedirect)

    def call(self, method: str, url: str, body: bytes | None = None) -> Any:
        """One request, retried while it may succeed later; the answer's JSON."""
        deadline, delay = time.monotonic() + self.retry_for_s, 0.5
        while True:
            try:
                return self._once(method, url, body)
            except _Retry as exc:
                if time.monotonic() + delay > deadline:
                    raise PredictionJobError(f"{method} {url}: gave up after {self.retry_for_s:g} s: {exc}") from None
                log.warning("%s %s: %s; retrying in %.1f s", method, url, exc, delay)
                self.sleep(delay)
                delay = min(delay * 2, 15.0)

    def _once(self, method: str, url: str, body: bytes | None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", "Accept-Encoding": "gzip"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=60) as resp:
                raw = resp.read()
                if resp.headers.get("Content-Encoding", "").lower() == "gzip":
                    raw = gzip.decompress(raw)
        except urllib.error.HTTPError as exc:
            message = _message(exc.read(65536))
            if exc.code in _RETRIED:
                raise _Retry(f"{exc.code} {message}") from None
            raise PredictionRefused(f"{method} {url}: the controller answered {exc.code}: {message}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out, DNS
            raise _Retry(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise PredictionRefused(f"{method} {url}: the answer is not JSON: {exc}") from None


class _Retry(Exception):
    """A failure that may pass: the controller is unreachable or busy."""


def _message(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:500]
    return str(doc.get("message", doc))[:500] if isinstance(doc, dict) else str(doc)[:500]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None
