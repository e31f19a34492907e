"""A small real HTTP server standing in for Prometheus' instant-query API (``/api/v1/query``).

Why not the real binary (tests/deploy/prometheus_harness.py): the refit needs a job to have
trained at one worker count for minutes of scrapes, which a test cannot wait for. This server
answers the queries ``controller/pipeline/observed.py`` sends, from a table the test sets, over real
HTTP, and records every query so a test can check what was asked. It answers only for the job
and window a query names (a query for another job is answered with an empty vector, as
Prometheus would), so a wrong selector shows as "no data".
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROGRESS = re.compile(r'^max\(advisor_training_progress_examples\{job_namespace="([^"]*)",tfjob="([^"]*)"\}\)$')
SELECTOR = re.compile(r'^(rate|count_over_time|resets|increase)\(advisor_training_examples_total\{job_namespace="([^"]*)",'
                      r'tfjob="([^"]*)"\}\[(\d+)s\]\)$')


@dataclass
class Pod:
    """One counting pod's series: its examples/s over the window and the samples it rests on."""

    name: str
    rate: float
    samples: int
    resets: int = 0
    trained: float | None = None  # what ``increase`` over any range answers; None: the rate times the range
    progress: float | None = None  # its advisor_training_progress_examples; None: it exports none


@dataclass
class FakePrometheus:
    """``jobs[(namespace, name)]`` lists the pods Prometheus has series of; ``status`` (e.g. 503)
    makes every query fail as Prometheus does, with an error document."""

    jobs: dict[tuple[str, str], list[Pod]] = field(default_factory=dict)
    status: int = 200
    queries: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                url = urllib.parse.urlsplit(self.path)
                args = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                fake.queries.append(args)
                code, doc = fake.answer(url.path, args)
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, args: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if path != "/api/v1/query":
            return 404, {"status": "error", "errorType": "not_found", "error": f"no {path}"}
        if self.status != 200:
            return self.status, {"status": "error", "errorType": "unavailable", "error": "the fake is down"}
        at = float(args["time"])
        m = PROGRESS.match(args.get("query", ""))
        if m is not None:  # max() over the pods that export the gauge: one series without labels, or none
            found = [p.progress for p in self.jobs.get((m.group(1), m.group(2)), []) if p.progress is not None]
            result = [{"metric": {}, "value": [at, str(max(found))]}] if found else []
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
        m = SELECTOR.match(args.get("query", ""))
        if m is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"unexpected query {args.get('query')!r}"}
        function, namespace, name, window = m.groups()

        def value(p: Pod) -> float:
            if function == "increase":
                return p.trained if p.trained is not None else p.rate * float(window)
            return {"rate": p.rate, "resets": p.resets}.get(function, p.samples)

        result = [{"metric": {"job_namespace": namespace, "tfjob": name, "pod": p.name}, "value": [at, str(value(p))]}
                  for p in self.jobs.get((namespace, name), [])]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
