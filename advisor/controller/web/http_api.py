"""The controller's HTTP endpoint: trace uploads from profiling pods, the input and answer of
prediction Jobs (job backend), /metrics, and the probes.

Why the standard library: the traffic is a handful of uploads per hour plus scrapes and probes,
so ``ThreadingHTTPServer`` (one daemon thread per connection) is enough, and every guard an
endpoint reachable from any pod in the cluster needs is written out here rather than left to a
framework's defaults: a bearer token checked before the body is read, a size limit checked
against ``Content-Length`` before reading (and ``Expect: 100-continue`` answered only once the
headers pass), a capped streaming inflate against gzip bombs, a deadline on reading the body
against slow clients, and a 500 rather than a dead server when a handler fails.

Two kinds of routes, which a replica serves on two ports (``serves``): ``INGEST`` (trace uploads
and the prediction Jobs' routes, reached by profiling and prediction pods) and ``OPS``
(``/metrics`` and the probes, reached by Prometheus and the kubelet). Apart, a NetworkPolicy can
admit each port from its own clients only; one server may still serve both (tests, one port).

This module knows nothing of the store or of traces: token checks, decoding and storing are
injected callables (``verify_token``, ``accept_trace``, and ``predictions`` for the prediction
Jobs' routes, absent with the process backend), so it is tested over real HTTP with plain
functions. Every response closes the connection; uploads are one request per pod.

Prediction Jobs: ``GET /v1/predictions/<key>/input`` answers ``{"key", "params", "profile"}``
(gzip when the client accepts it: profiles are megabytes of JSON) and
``PUT /v1/predictions/<key>/result`` takes the ``advisor-prediction/1`` answer or
``{"schema": "advisor-prediction-error/1", "error": "..."}``; both need the Job's bearer token.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from advisor.controller.web.memory import release_free_heap
from advisor.controller.web.metrics import Metrics
from advisor.errors import HttpApiError
from advisor.importers.gzip_capped import GzipInvalid, GzipTooLarge, inflate_gzip
from advisor.importers.json_scan import JSONScanError, scan_object
from advisor.tls import ServerTls

logger = logging.getLogger(__name__)

INGEST, OPS = "ingest", "ops"  # the two kinds of routes (see the module's docstring)
BOTH = frozenset({INGEST, OPS})
Probe = Callable[[], tuple[bool, str]]  # (ok, short reason shown when not ok)
VerifyToken = Callable[[str, str, int, str], bool]  # (namespace, name, generation, token)
# (namespace, name, generation, parsed bundle, the bundle as received, gzip-compressed)
AcceptTrace = Callable[[str, str, int, dict[str, Any], bytes], "IngestResult"]



class PredictionEndpoints(Protocol):
    """What the prediction Jobs' routes need (``advisor.controller.pipeline.job_predictor.JobPredictor``)."""

    def verify_prediction_token(self, key: str, token: str) -> bool | None: ...  # None: not known here (yet)
    def prediction_input(self, key: str) -> IngestResult: ...
    def accept_prediction_result(self, key: str, document: dict[str, Any]) -> IngestResult: ...


REJECTION_REASONS = ("unauthorized", "too_large", "malformed", "unsupported", "unknown_job", "conflict",
                     "timeout", "error")
_REASON_BY_STATUS = {400: "malformed", 401: "unauthorized", 403: "unauthorized", 404: "unknown_job",
                     409: "conflict", 413: "too_large", 415: "unsupported", 422: "malformed"}
# namespace: a DNS-1123 label; name: a DNS-1123 subdomain; generation: the TFJob's metadata.generation.
_TRACE_PATH = re.compile(
    r"/v1/traces/(?P<namespace>[a-z0-9][-a-z0-9]{0,62})/(?P<name>[a-z0-9][-a-z0-9.]{0,252})"
    r"/(?P<generation>[0-9]{1,18})")
_PREDICTION_PATH = re.compile(r"/v1/predictions/(?P<key>[0-9a-f]{8,64})/(?P<part>input|result)")
MAX_RESULT_BYTES = 4 * 1024 * 1024  # a prediction is about 250 bytes per worker count; 512 workers fit many times
_GZIP_FROM = 1024  # bytes: smaller answers are sent as they are
_BEARER = re.compile(r"Bearer +(?P<token>[A-Za-z0-9\-._~+/]+=*) *", re.IGNORECASE)  # RFC 6750 b64token
_PROBE_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})
_LINGER_BYTES = 1 << 20  # after a rejection, read at most this much of an unread body...
_LINGER_S = 2.0  # ...for at most this long, so the client sees our answer rather than a reset
_POLL_S = 0.1  # how often the accept loop checks for stop(): bounds how long stop() takes


@dataclass(frozen=True)
class IngestResult:
    """What ``accept_trace`` answers: the HTTP status and JSON body. ``reason`` labels a
    rejection in ``advisor_ingest_rejections_total``; None derives it from the status."""

    status: int
    body: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def message(cls, status: int, message: str, *, reason: str | None = None, **extra: Any) -> IngestResult:
        return cls(status, {"message": message, **extra}, reason)


class HttpApi:
    """The HTTP server; ``start()`` binds and serves in a daemon thread, ``stop()`` ends it.

    ``max_bytes`` caps the request body as sent, ``max_inflated_bytes`` a gzip body once inflated.
    ``io_timeout_s`` bounds each socket read or write, ``body_timeout_s`` reading a whole body.
    ``lazy_upload_field`` names the array of a trace upload that holds nearly all of its bytes
    (the traced steps): it reaches ``accept_trace`` as a ``json_scan.LazyArray``.
    """

    def __init__(self, host: str, port: int, *, metrics: Metrics, verify_token: VerifyToken,
                 accept_trace: AcceptTrace, healthy: Probe, ready: Probe, max_bytes: int,
                 max_inflated_bytes: int, io_timeout_s: float = 10.0, body_timeout_s: float = 60.0,
                 predictions: PredictionEndpoints | None = None, lazy_upload_field: str | None = None,
                 serves: frozenset[str] = BOTH) -> None:
        if max_bytes < 1 or max_inflated_bytes < 1:
            raise ValueError("max_bytes and max_inflated_bytes must be positive")
        if not serves or not serves <= BOTH:
            raise ValueError(f"serves must name some of {sorted(BOTH)}, got {sorted(serves)}")
        self.serves = frozenset(serves)
        self.host, self.port = host, port
        self.metrics = metrics
        self.verify_token, self.accept_trace = verify_token, accept_trace
        self.healthy, self.ready = healthy, ready
        self.max_bytes, self.max_inflated_bytes = max_bytes, max_inflated_bytes
        self.io_timeout_s, self.body_timeout_s = io_timeout_s, body_timeout_s
        self.predictions = predictions
        self.lazy_upload_field = lazy_upload_field
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.tls = ServerTls.from_env()  # HTTPS when the chart's tls option sets the files (advisor/tls.py)
        for reason in REJECTION_REASONS:  # export every series from the start, at 0
            metrics.ingest_rejections.labels(reason)

    def start(self) -> None:
        """Bind (port 0 picks a free port, then ``.port`` tells which) and serve in the background."""
        if self._server is not None:
            raise RuntimeError("HttpApi already started")
        try:
            self._server = _Server((self.host, self.port), self)
        except OSError as exc:
            raise HttpApiError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(_POLL_S,), name="advisor-http",
                                        daemon=True)
        self._thread.start()
        logger.info("HTTP API (%s) listening on %s:%d", " and ".join(sorted(self.serves)), self.host, self.port)

    def stop(self) -> None:
        """Stop accepting and close the socket; requests in flight finish on their daemon threads."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck connection never keeps the process alive

    def __init__(self, address: tuple[str, int], api: HttpApi) -> None:
        self.api = api
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a reverse-DNS lookup that can stall
        # start-up in a cluster; the name is only used in CGI environments.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        return (self.api.tls.wrap(conn) if self.api.tls is not None else conn), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.exception("HTTP connection from %s failed", client_address)


class _Reject(Exception):
    """An answer other than success, raised by the checks; ``reason`` counts an upload rejection."""

    def __init__(self, status: int, message: str, reason: str | None = None,
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.reason, self.headers = status, message, reason, tuple(headers)


class _ClientGone(Exception):
    """The socket failed or timed out while reading the request or writing the answer."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # for Expect: 100-continue; every answer still closes the connection
    server_version = "advisor"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.api.io_timeout_s)  # every read and write of this connection
        self._prepared: Callable[[], None] | None = None
        self._responded = False
        self._is_upload = False
        self._counted = False
        self._body_read = 0

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self._guarded(self._serve)
        if self._body_unread():
            self._linger()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch

    def handle_expect_100(self) -> bool:
        """Check route, token and headers before inviting the client to send the body."""
        self._guarded(self._prepare)
        if self._responded:
            self._linger()
            return False
        return super().handle_expect_100()

    def _guarded(self, step: Callable[[], object]) -> None:
        """Run one step; a rejection becomes its answer, a failure a 500, and neither ends the server."""
        try:
            try:
                step()
            except _Reject as rejection:
                self._answer_rejection(rejection)
            except _ClientGone:
                raise
            except Exception:  # a bug or a failing callback: answer 500 and keep serving
                logger.exception("HTTP %s %s failed", self.command, self.path)
                if self._is_upload and not self._counted:
                    self._count("error")
                if not self._responded:
                    self._send_json(500, {"message": "internal error; see the controller's log"})
        except _ClientGone as gone:
            logger.info("HTTP %s %s from %s: %s", self.command, self.path, self.client_address[0], gone.__cause__)
            self.close_connection = True

    def _serve(self) -> None:
        (self._prepared or self._prepare())()

    def _prepare(self) -> Callable[[], None]:
        """Route the request and run every check that needs no body; returns the step that answers."""
        path = urlsplit(self.path).path
        step: Callable[[], None]
        serves = self.server.api.serves
        if path in _PROBE_PATHS and OPS not in serves:
            raise _Reject(404, f"no such path on this port: {path} is served on the metrics port")
        if path not in _PROBE_PATHS and INGEST not in serves:
            raise _Reject(404, f"no such path on this port: {path} (it serves /metrics, /healthz and /readyz)")
        if path in _PROBE_PATHS:
            self._allow("GET", "HEAD")
            step = {"/metrics": self._get_metrics, "/healthz": self._get_healthz, "/readyz": self._get_readyz}[path]
        elif (match := _TRACE_PATH.fullmatch(path)) is not None:
            self._allow("POST")
            self._is_upload = True
            namespace, name, generation = match["namespace"], match["name"], int(match["generation"])
            length, gzipped = self._check_upload(namespace, name, generation)
            step = partial(self._post_trace, namespace, name, generation, length, gzipped)
        elif (match := _PREDICTION_PATH.fullmatch(path)) is not None and self.server.api.predictions is not None:
            key, predictions = match["key"], self.server.api.predictions
            self._allow("GET" if match["part"] == "input" else "PUT")
            self._check_bearer(lambda token: predictions.verify_prediction_token(key, token), f"prediction {key}")
            if match["part"] == "input":
                step = partial(self._get_prediction_input, predictions, key)
            else:
                length, _ = self._check_json_body(MAX_RESULT_BYTES, gzip_allowed=False)
                step = partial(self._put_prediction_result, predictions, key, length)
        else:
            raise _Reject(404, f"no such path: {path}")
        self._prepared = step
        return step

    def _allow(self, *methods: str) -> None:
        if self.command not in methods:
            raise _Reject(405, f"method {self.command} not allowed here; use {' or '.join(methods)}",
                          headers=[("Allow", ", ".join(methods))])

    # -- routes ------------------------------------------------------------------------------

    def _get_metrics(self) -> None:
        body, content_type = self.server.api.metrics.exposition()
        self._send(200, body, content_type)

    def _get_healthz(self) -> None:
        self._send_probe(self.server.api.healthy())

    def _get_readyz(self) -> None:
        self._send_probe(self.server.api.ready())

    def _send_probe(self, outcome: tuple[bool, str]) -> None:
        ok, reason = outcome
        text = "ok" if ok else reason or "not ready"
        self._send(200 if ok else 503, f"{text}\n".encode(), "text/plain; charset=utf-8")

    def _check_upload(self, namespace: str, name: str, generation: int) -> tuple[int, bool]:
        """Token, framing and type of an upload, before a byte of the body is read."""
        api = self.server.api
        self._check_bearer(lambda token: api.verify_token(namespace, name, generation, token),
                           f"{namespace}/{name} generation {generation}")
        return self._check_json_body(api.max_bytes, gzip_allowed=True)

    def _check_bearer(self, verify: Callable[[str], bool | None], what: str) -> None:
        """401 without a token, 403 with one refused; 503 (retry) when ``verify`` answers None: the
        token may be valid on another replica, or on this one soon (a leader adopting an attempt)."""
        auth = _BEARER.fullmatch(self.headers.get("Authorization", ""))
        if auth is None:
            raise _Reject(401, "an 'Authorization: Bearer <token>' header is required", "unauthorized",
                          [("WWW-Authenticate", 'Bearer realm="advisor"')])
        verdict = verify(auth["token"])
        if verdict is None:
            raise _Reject(503, f"{what} is not known to this replica (yet); retry", headers=[("Retry-After", "2")])
        if not verdict:
            raise _Reject(403, f"the token is not valid for {what}", "unauthorized")

    def _check_json_body(self, max_bytes: int, *, gzip_allowed: bool) -> tuple[int, bool]:
        """Content-Type JSON, an accepted encoding and a length within ``max_bytes``: (length, gzipped)."""
        media_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            raise _Reject(415, f"Content-Type must be application/json, not {media_type or 'missing'}", "unsupported")
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        accepted = ("gzip", "identity") if gzip_allowed else ("identity",)
        if encoding not in accepted:
            raise _Reject(415, f"Content-Encoding must be {' or '.join(accepted)}, not {encoding}", "unsupported",
                          [("Accept-Encoding", ", ".join(accepted))])
        length = self._content_length()
        if length > max_bytes:
            raise _Reject(413, f"the body is {length} bytes; at most {max_bytes} are accepted", "too_large")
        return length, encoding == "gzip"

    def _content_length(self) -> int:
        values = self.headers.get_all("Content-Length") or []
        if "Transfer-Encoding" in self.headers or not values:
            raise _Reject(411, "a Content-Length header is required (no chunked uploads)", "malformed")
        if len(set(values)) != 1 or not values[0].strip().isdigit():
            raise _Reject(400, f"invalid Content-Length: {', '.join(values)}", "malformed")
        return int(values[0])

    def _post_trace(self, namespace: str, name: str, generation: int, length: int, gzipped: bool) -> None:
        api = self.server.api
        received = self._read_body(length)
        try:
            # One copy of the bundle at a time: the inflated bytes go once decoded to text, and
            # the big array is decoded a step at a time as the importer reads it. The bundle is
            # kept as it came (gzip).
            inflated = _gunzip(received, api.max_inflated_bytes) if gzipped else received
            text = _utf8(inflated)
            del inflated
            document = _json_object(text, lazy=api.lazy_upload_field)
            del text
            raw = received if gzipped else gzip.compress(received, mtime=0)
            del received
            result = api.accept_trace(namespace, name, generation, document, raw)
            del document, raw
        finally:
            release_free_heap()  # the parsed upload was tens of MB for a moment: give it back
        if 200 <= result.status < 300:
            self._counted = True
            api.metrics.ingest_accepted.inc()
        else:
            self._count(result.reason or _REASON_BY_STATUS.get(result.status, "error"))
        self._send_json(result.status, result.body)

    def _get_prediction_input(self, predictions: PredictionEndpoints, key: str) -> None:
        result = predictions.prediction_input(key)
        body = json.dumps(result.body).encode() + b"\n"
        accepts = {e.split(";")[0].strip().lower() for e in self.headers.get("Accept-Encoding", "").split(",")}
        if result.status == 200 and "gzip" in accepts and len(body) >= _GZIP_FROM:
            self._send(200, gzip.compress(body, compresslevel=6, mtime=0), "application/json",
                       [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")])
        else:
            self._send(result.status, body, "application/json")

    def _put_prediction_result(self, predictions: PredictionEndpoints, key: str, length: int) -> None:
        result = predictions.accept_prediction_result(key, _json_object(self._read_body(length)))
        self._send_json(result.status, result.body)

    # -- I/O ---------------------------------------------------------------------------------

    def _read_body(self, length: int) -> bytes:
        """Exactly ``length`` bytes, within ``body_timeout_s`` in all (each read within ``io_timeout_s``)."""
        limit = self.server.api.body_timeout_s
        deadline = time.monotonic() + limit
        body = bytearray()
        while len(body) < length:
            if time.monotonic() > deadline:
                raise _Reject(408, f"the body did not arrive within {limit:g} s", "timeout")
            try:
                chunk = self.rfile.read1(min(length - len(body), 1 << 16))
            except TimeoutError:
                raise _Reject(408, f"no data for {self.server.api.io_timeout_s:g} s while reading the body",
                              "timeout") from None
            except OSError as exc:
                raise _ClientGone() from exc
            if not chunk:
                raise _Reject(400, f"the body ended after {len(body)} of {length} bytes", "malformed")
            body += chunk
            self._body_read += len(chunk)
        return bytes(body)

    def _body_unread(self) -> bool:
        if "Transfer-Encoding" in self.headers:
            return True
        announced = (self.headers.get("Content-Length") or "0").strip()
        return not announced.isdigit() or int(announced) > self._body_read

    def _linger(self) -> None:
        """Close gracefully over an unread body: stop sending, then read and drop what the
        client is still sending (bounded), so its stack does not reset the connection and
        discard our answer before the client has read it."""
        with suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(_LINGER_S)
            deadline, drained = time.monotonic() + _LINGER_S, 0
            while drained < _LINGER_BYTES and time.monotonic() < deadline:
                chunk = self.rfile.read1(1 << 16)
                if not chunk:
                    break
                drained += len(chunk)
        self.close_connection = True

    def _answer_rejection(self, rejection: _Reject) -> None:
        if rejection.reason is not None and self._is_upload:
            self._count(rejection.reason)
        self._send_json(rejection.status, {"message": rejection.message}, rejection.headers)

    def _count(self, reason: str) -> None:
        self._counted = True
        self.server.api.metrics.ingest_rejections.labels(reason).inc()

    def _send_json(self, status: int, body: Mapping[str, Any], headers: Iterable[tuple[str, str]] = ()) -> None:
        self._send(status, json.dumps(body).encode() + b"\n", "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        self._responded = True
        try:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError as exc:
            raise _ClientGone() from exc

    # -- logging through `logging`, not stderr -----------------------------------------------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        quiet = urlsplit(self.path).path in _PROBE_PATHS
        logger.log(logging.DEBUG if quiet else logging.INFO, '%s "%s" %s', self.client_address[0],
                   self.requestline, code)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        logger.warning("HTTP %s: " + format, self.client_address[0], *args)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        logger.info("HTTP %s: " + format, self.client_address[0], *args)


def _gunzip(data: bytes, cap: int) -> bytes:
    try:
        return inflate_gzip(data, cap)
    except GzipTooLarge:
        raise _Reject(413, f"the gzip body inflates to more than {cap} bytes", "too_large") from None
    except GzipInvalid as exc:
        raise _Reject(400, f"the gzip body is unreadable: {exc}", "malformed") from None


def _utf8(body: bytes | bytearray) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Reject(400, f"the body is not valid JSON: not UTF-8 ({exc.reason} at byte {exc.start})",
                      "malformed") from None


def _json_object(body: bytes | str, *, lazy: str | None = None) -> dict[str, Any]:
    """The body as a JSON object; the array field ``lazy`` decoded an element at a time (json_scan)."""
    try:
        return scan_object(_utf8(body) if isinstance(body, bytes) else body, lazy=lazy)
    except JSONScanError as exc:
        raise _Reject(400, f"the body {exc}", "malformed") from None
