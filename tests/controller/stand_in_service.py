"""The controller's Kubernetes Service, stood in for on loopback: requests go to a ready replica
(the Service's endpoints; 503 when none is, which the pods' clients retry as they retry a Service
without endpoints). ``hold_results`` keeps a prediction pod's answer (``PUT .../result``) waiting
at the Service, so that a test can stop or kill the leader at a known point. ``served`` records
(method, path, status, identity of the replica that answered). The replicas may be controllers in
this process or OS processes: the caller says how to tell one ready, its port and its identity."""

from __future__ import annotations

import itertools
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

R = TypeVar("R")
FORWARDED = ("Authorization", "Content-Type", "Content-Encoding", "Accept", "Accept-Encoding")
RETURNED = ("Content-Type", "Content-Encoding", "Retry-After")


class StandInService(Generic[R]):
    def __init__(self, ready: Callable[[R], bool], port: Callable[[R], int], identity: Callable[[R], str],
                 round_robin: bool = False) -> None:
        """``round_robin``: each request to the next ready replica in turn; else to the first."""
        self.replicas: list[R] = []
        self.served: list[tuple[str, str, int, str]] = []
        self.held = threading.Event()  # a result is waiting at the Service
        self._pass = threading.Event()
        self._pass.set()
        self._ready, self._port, self._identity = ready, port, identity
        self._turn = itertools.count() if round_robin else itertools.repeat(0)
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                service.forward(self)

            do_PUT = do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandInService[R]:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pass.set()
        self.server.shutdown()
        self.server.server_close()

    def hold_results(self) -> None:
        self._pass.clear()

    def release_results(self) -> None:
        self._pass.set()

    def forward(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if request.path.endswith("/result") and not self._pass.is_set():
            self.held.set()
            self._pass.wait(timeout=50)  # under the pod's 60 s socket timeout
        ready = [r for r in list(self.replicas) if self._ready(r)]
        if not ready:
            return _answer(request, 503, {"Content-Type": "text/plain"}, b"no ready endpoint")
        replica = ready[next(self._turn) % len(ready)]
        headers = {h: request.headers[h] for h in FORWARDED if request.headers.get(h)}
        upstream = urllib.request.Request(f"http://127.0.0.1:{self._port(replica)}{request.path}",
                                          data=body or None, method=request.command, headers=headers)
        try:
            with urllib.request.urlopen(upstream, timeout=30) as resp:
                status, got, raw = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            status, got, raw = exc.code, exc.headers, exc.read()
        self.served.append((request.command, request.path, status, self._identity(replica)))
        _answer(request, status, {h: got[h] for h in RETURNED if got.get(h)}, raw)


def _answer(request: BaseHTTPRequestHandler, status: int, headers: dict[str, Any], raw: bytes) -> None:
    request.send_response(status)
    for name, value in headers.items():
        request.send_header(name, value)
    request.send_header("Content-Length", str(len(raw)))
    request.end_headers()
    request.wfile.write(raw)
