"""Tests of the in-program recorder, and a stand-in for the controller's ingest endpoint.

``Receiver`` is a real HTTP server on 127.0.0.1 (an ephemeral port) that answers each POST
with the next scripted response (the last one repeats) and keeps what it was sent, so the
uploader is tested over a socket, not against a mock of urllib. The heavy suite uses it too, and
``scraped``, a worker's metrics as Prometheus reads them.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def scraped(port: int) -> dict[str, float]:
    """{sample name: value} that ``127.0.0.1:port/metrics`` serves, parsed as Prometheus would."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, JSON body, and an optional delay before answering."""

    status: int = 202
    body: dict[str, Any] | bytes = field(default_factory=lambda: {"profile": "p-1"})
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def bundle(self) -> Any:
        return json.loads(gzip.decompress(self.body))


class Receiver:
    """``with Receiver([Reply(503), Reply(202)]) as rx: ... rx.url ... rx.requests``."""

    def __init__(self, replies: Sequence[Reply] = (Reply(),), path: str = "/v1/traces/ns/job/1") -> None:
        self.replies = list(replies)
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            index = min(len(self.requests), len(self.replies)) - 1
            return self.replies[index]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = receiver._next_reply(Received(self.path, headers, body, time.monotonic()))
                time.sleep(reply.delay_s)
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (timeout tests)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        return Handler
