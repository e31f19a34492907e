"""The controller's HTTP API over real HTTP on 127.0.0.1: every status the upload route can
answer, the gzip-bomb, size and slow-client guards, metrics, probes and crash isolation."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from advisor.controller.web.http_api import INGEST, OPS, HttpApi, IngestResult
from advisor.controller.web.metrics import Metrics
from advisor.errors import HttpApiError

TOKEN = "s3cr3t-token_of-the-run"
MAX_BYTES = 64 * 1024
MAX_INFLATED = 1024 * 1024
PATH = "/v1/traces/team-a/mnist/3"
DOC = {"format": "advisor-trace-bundle/1", "steps": [1, 2, 3]}


@dataclass
class Controller:
    """Stands in for the reconcile side: valid tokens, a canned answer, probe states."""

    tokens: dict[tuple[str, str, int], str] = field(default_factory=lambda: {("team-a", "mnist", 3): TOKEN})
    answer: IngestResult = IngestResult.message(202, "accepted")
    received: list[tuple[str, str, int, dict[str, Any]]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # the bundle as kept, per accepted call
    is_ready: tuple[bool, str] = (True, "")
    lock: threading.Lock = field(default_factory=threading.Lock)

    def verify_token(self, namespace: str, name: str, generation: int, token: str) -> bool:
        return self.tokens.get((namespace, name, generation)) == token

    def accept_trace(self, namespace: str, name: str, generation: int, document: dict[str, Any],
                     raw: bytes) -> IngestResult:
        if document.get("explode"):
            raise RuntimeError("decoder bug")
        with self.lock:
            self.received.append((namespace, name, generation, document))
            self.raw.append(raw)
        return self.answer


@pytest.fixture
def controller() -> Controller:
    return Controller()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def make_api(controller: Controller, metrics: Metrics, **overrides: Any) -> HttpApi:
    options: dict[str, Any] = dict(max_bytes=MAX_BYTES, max_inflated_bytes=MAX_INFLATED, io_timeout_s=5.0)
    options.update(overrides)
    return HttpApi("127.0.0.1", 0, metrics=metrics, verify_token=controller.verify_token,
                   accept_trace=controller.accept_trace, healthy=lambda: (True, ""),
                   ready=lambda: controller.is_ready, **options)


@pytest.fixture
def api(controller: Controller, metrics: Metrics) -> Iterator[HttpApi]:
    server = make_api(controller, metrics)
    server.start()
    yield server
    server.stop()


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(api: HttpApi, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        conn.close()


def upload(api: HttpApi, body: bytes | None = None, *, path: str = PATH, token: str | None = TOKEN,
           headers: dict[str, str] | None = None) -> Reply:
    sent = {"Content-Type": "application/json"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    return request(api, "POST", path, json.dumps(DOC).encode() if body is None else body, sent)


def raw_exchange(api: HttpApi, data: bytes, *, then: bytes = b"", pause: float = 0.0, half_close: bool = False) -> bytes:
    """Send bytes on a bare socket (for framings http.client will not produce); returns the answer."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
        if then:
            sock.sendall(then)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def head(path: str, length: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n").encode()


def rejections(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value("advisor_ingest_rejections_total", {"reason": reason}) or 0.0


def accepted(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("advisor_ingest_accepted_total") or 0.0


# -- success -----------------------------------------------------------------------------------


def test_upload_is_accepted(api: HttpApi, controller: Controller, metrics: Metrics) -> None:
    reply = upload(api, headers={"Content-Type": "application/json; charset=utf-8"})
    assert (reply.status, reply.json()) == (202, {"message": "accepted"})
    assert reply.headers["Content-Type"] == "application/json"
    assert controller.received == [("team-a", "mnist", 3, DOC)]
    assert gzip.decompress(controller.raw[0]) == json.dumps(DOC).encode()  # the bytes sent, not a re-encoding
    assert accepted(metrics) == 1.0


def test_gzip_upload_is_accepted(api: HttpApi, controller: Controller) -> None:
    sent = gzip.compress(json.dumps(DOC, indent=1).encode())
    reply = upload(api, sent, headers={"Content-Encoding": "gzip"})
    assert reply.status == 202
    assert controller.received[0][3] == DOC
    assert controller.raw == [sent]  # kept exactly as it came


def test_expect_100_continue_invites_the_body_only_after_the_checks(api: HttpApi, controller: Controller) -> None:
    body = json.dumps(DOC).encode()
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        sock.sendall(head(PATH, len(body), "Expect: 100-continue\r\n"))
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(body)
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 202 ")
    assert controller.received[0][3] == DOC


def test_concurrent_uploads(controller: Controller, metrics: Metrics, api: HttpApi) -> None:
    for generation in range(10, 18):
        controller.tokens[("team-a", "mnist", generation)] = f"token-{generation}"
    statuses: dict[int, int] = {}

    def send(generation: int) -> None:
        body = json.dumps({"generation": generation, "pad": "x" * 20_000}).encode()
        statuses[generation] = upload(api, body, path=f"/v1/traces/team-a/mnist/{generation}",
                                      token=f"token-{generation}").status

    threads = [threading.Thread(target=send, args=(g,)) for g in range(10, 18)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert statuses == {g: 202 for g in range(10, 18)}
    assert sorted(doc["generation"] for *_, doc in controller.received) == list(range(10, 18))
    assert accepted(metrics) == 8.0


# -- authorization -----------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "Basic dXNlcjpwdw==", "Bearer", "Bearer two words"])
def test_missing_or_malformed_authorization_is_401(api: HttpApi, metrics: Metrics, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    reply = upload(api, token=None, headers=headers)
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization" in reply.json()["message"]
    assert rejections(metrics, "unauthorized") == 1.0


@pytest.mark.parametrize("path", [PATH, "/v1/traces/team-a/mnist/4", "/v1/traces/team-b/mnist/3"])
def test_token_not_valid_for_this_job_and_generation_is_403(api: HttpApi, controller: Controller, path: str) -> None:
    token = "wrong" if path == PATH else TOKEN  # right token, other generation or namespace
    reply = upload(api, path=path, token=token)
    assert reply.status == 403
    assert controller.received == []


# -- framing and size --------------------------------------------------------------------------


def test_missing_content_length_is_411(api: HttpApi, metrics: Metrics) -> None:
    answer = raw_exchange(api, head(PATH, 0).replace(b"Content-Length: 0\r\n", b""))
    assert answer.startswith(b"HTTP/1.1 411 ")


def test_chunked_upload_is_411(api: HttpApi) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("POST", PATH, body=iter([json.dumps(DOC).encode()]), encode_chunked=True,
                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert conn.getresponse().status == 411
    conn.close()


def test_too_large_is_413_before_the_body_is_sent(api: HttpApi, metrics: Metrics) -> None:
    # Only the headers go out; the answer must come without the server waiting for a body.
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        sock.sendall(head(PATH, MAX_BYTES + 1))
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert str(MAX_BYTES).encode() in answer
    assert rejections(metrics, "too_large") == 1.0


def test_too_large_body_sent_in_full_still_gets_its_413(api: HttpApi, controller: Controller) -> None:
    # http.client sends the whole body before reading. The server answers 413 without reading
    # it, then drains up to 1 MiB (its lingering close) so the client can finish sending and
    # read the answer instead of a broken pipe; 960 kB stays within that, whatever the kernel's
    # socket buffers (beyond them, without the drain, this failed 6 times in 10 at 2.5 MB).
    reply = upload(api, b" " * (MAX_BYTES * 15))
    assert reply.status == 413
    assert controller.received == []


def test_too_large_with_expect_100_is_refused_without_continue(api: HttpApi) -> None:
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        sock.sendall(head(PATH, MAX_BYTES + 1, "Expect: 100-continue\r\n"))
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in answer


def test_gzip_bomb_is_413(api: HttpApi, controller: Controller, metrics: Metrics) -> None:
    bomb = gzip.compress(b'{"pad": "' + b"0" * (8 * MAX_INFLATED) + b'"}')
    assert len(bomb) < MAX_BYTES  # small on the wire (about 8 kB for 8 MiB), so only the inflate cap stops it
    reply = upload(api, bomb, headers={"Content-Encoding": "gzip"})
    assert reply.status == 413 and "inflates" in reply.json()["message"]
    assert controller.received == []
    assert rejections(metrics, "too_large") == 1.0


def test_lying_short_content_length_reads_only_that_much_and_fails_as_json(api: HttpApi,
                                                                          controller: Controller) -> None:
    body = json.dumps(DOC).encode()
    answer = raw_exchange(api, head(PATH, 10) + body)  # claims 10 bytes, sends the whole document
    assert answer.startswith(b"HTTP/1.1 400 ") and b"not valid JSON" in answer
    assert controller.received == []


def test_body_shorter_than_content_length_is_400(api: HttpApi) -> None:
    answer = raw_exchange(api, head(PATH, 500) + b'{"a": 1}', half_close=True)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"ended after 8 of 500 bytes" in answer


def test_stalled_body_is_408(controller: Controller, metrics: Metrics) -> None:
    slow = make_api(controller, metrics, io_timeout_s=0.2, body_timeout_s=5.0)
    slow.start()
    try:
        started = time.monotonic()
        answer = raw_exchange(slow, head(PATH, 100) + b'{"a"')  # then nothing: no data for 0.2 s
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started < 3.0
    finally:
        slow.stop()
    assert rejections(metrics, "timeout") == 1.0


def test_dribbled_body_hits_the_body_deadline(controller: Controller, metrics: Metrics) -> None:
    slow = make_api(controller, metrics, io_timeout_s=1.0, body_timeout_s=0.3)
    slow.start()
    try:
        with socket.create_connection(("127.0.0.1", slow.port), timeout=10) as sock:
            sock.sendall(head(PATH, 100))
            answer = b""
            for _ in range(40):  # one byte every 50 ms: each read is quick, the whole is not
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
                time.sleep(0.05)
                sock.setblocking(False)
                try:
                    answer += sock.recv(4096)
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
                if answer:
                    break
        assert answer.startswith(b"HTTP/1.1 408 ")
    finally:
        slow.stop()


# -- types and content -------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{"Content-Type": "text/plain"}, {"Content-Type": ""},
                                     {"Content-Encoding": "br"}])
def test_unsupported_media_is_415(api: HttpApi, metrics: Metrics, headers: dict[str, str]) -> None:
    reply = upload(api, headers=headers)
    assert reply.status == 415
    assert rejections(metrics, "unsupported") == 1.0


@pytest.mark.parametrize(("body", "encoding", "words"), [
    pytest.param(b"[1, 2]", "identity", "must be a JSON object, not an array", id="array"),
    pytest.param(b'"text"', "identity", "not a string", id="string"),
    pytest.param(b'{"a": ', "identity", "not valid JSON", id="truncated-json"),
    pytest.param(b'{"a": NaN}', "identity", "NaN is not standard JSON", id="nan"),
    pytest.param(b"\xff\xfe{}", "identity", "not valid JSON", id="not-utf8"),
    pytest.param(b"[" * 30_000 + b"]" * 30_000, "identity", "nested too deeply", id="deep-nesting"),
    pytest.param(b"not gzip at all", "gzip", "not valid gzip", id="not-gzip"),
    pytest.param(gzip.compress(b"{}")[:-6], "gzip", "truncated", id="truncated-gzip"),
    pytest.param(gzip.compress(b"{}") + b"junk", "gzip", "stray bytes after", id="gzip-trailing-data"),
])
def test_malformed_body_is_400_naming_the_problem(api: HttpApi, metrics: Metrics, body: bytes, encoding: str,
                                                  words: str) -> None:
    reply = upload(api, body, headers={"Content-Encoding": encoding})
    assert reply.status == 400
    assert words in reply.json()["message"]
    assert rejections(metrics, "malformed") == 1.0


@pytest.mark.parametrize(("status", "reason"), [(400, "malformed"), (404, "unknown_job"), (409, "conflict"),
                                                (503, "error")])
def test_the_controllers_answer_is_passed_on_and_counted(api: HttpApi, controller: Controller, metrics: Metrics,
                                                         status: int, reason: str) -> None:
    controller.answer = IngestResult.message(status, "from the controller", run="x")
    reply = upload(api)
    assert (reply.status, reply.json()) == (status, {"message": "from the controller", "run": "x"})
    assert rejections(metrics, reason) == 1.0
    assert accepted(metrics) == 0.0


def test_handler_crash_is_500_and_the_server_keeps_serving(api: HttpApi, metrics: Metrics,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="advisor.controller.web.http_api"):
        reply = upload(api, json.dumps({"explode": True}).encode())
    assert reply.status == 500 and "internal error" in reply.json()["message"]
    assert any("decoder bug" in (r.exc_text or "") for r in caplog.records)
    assert rejections(metrics, "error") == 1.0
    assert upload(api).status == 202


def test_failing_token_check_is_500(controller: Controller, metrics: Metrics) -> None:
    def broken(*_: object) -> bool:
        raise OSError("store unavailable")  # an OSError from a callback is a failure, not a lost client

    server = HttpApi("127.0.0.1", 0, metrics=metrics, verify_token=broken, accept_trace=controller.accept_trace,
                     healthy=lambda: (True, ""), ready=lambda: (True, ""), max_bytes=MAX_BYTES,
                     max_inflated_bytes=MAX_INFLATED)
    server.start()
    try:
        assert upload(server).status == 500
        assert request(server, "GET", "/healthz").status == 200
    finally:
        server.stop()


# -- routing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/v1/traces/team-a/mnist", "/v1/traces/team-a/mnist/x",
                                  "/v1/traces/Team-A/mnist/3", "/v1/traces/team-a/mnist/3/extra"])
def test_unknown_path_is_404(api: HttpApi, path: str) -> None:
    reply = upload(api, path=path)
    assert reply.status == 404 and "no such path" in reply.json()["message"]


@pytest.mark.parametrize(("method", "path", "allow"), [("GET", PATH, "POST"), ("PUT", PATH, "POST"),
                                                        ("POST", "/metrics", "GET, HEAD"),
                                                        ("DELETE", "/readyz", "GET, HEAD")])
def test_wrong_method_is_405_with_allow(api: HttpApi, metrics: Metrics, method: str, path: str, allow: str) -> None:
    reply = request(api, method, path)
    assert reply.status == 405 and reply.headers["Allow"] == allow
    assert sum(rejections(metrics, r) for r in ("unauthorized", "malformed", "error")) == 0.0


# -- metrics and probes ------------------------------------------------------------------------


def test_metrics_show_the_counters_after_rejections(api: HttpApi) -> None:
    upload(api, token="wrong")
    upload(api, token=None)
    upload(api, b"[]")
    upload(api)
    reply = request(api, "GET", "/metrics")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
    text = reply.body.decode()
    assert 'advisor_ingest_rejections_total{reason="unauthorized"} 2.0' in text
    assert 'advisor_ingest_rejections_total{reason="malformed"} 1.0' in text
    assert 'advisor_ingest_rejections_total{reason="conflict"} 0.0' in text  # every reason exported from the start
    assert "advisor_ingest_accepted_total 1.0" in text


def test_readyz_follows_the_injected_check(api: HttpApi, controller: Controller) -> None:
    assert (request(api, "GET", "/readyz").status, request(api, "GET", "/readyz").body) == (200, b"ok\n")
    controller.is_ready = (False, "informer not synced")
    reply = request(api, "GET", "/readyz")
    assert (reply.status, reply.body) == (503, b"informer not synced\n")
    controller.is_ready = (True, "")
    assert request(api, "GET", "/readyz").status == 200


def test_healthz(controller: Controller, metrics: Metrics) -> None:
    alive = {"ok": True}
    server = HttpApi("127.0.0.1", 0, metrics=metrics, verify_token=controller.verify_token,
                     accept_trace=controller.accept_trace, healthy=lambda: (alive["ok"], "reconcile thread died"),
                     ready=lambda: (True, ""), max_bytes=MAX_BYTES, max_inflated_bytes=MAX_INFLATED)
    server.start()
    try:
        assert request(server, "GET", "/healthz").status == 200
        head_reply = request(server, "HEAD", "/healthz")
        assert (head_reply.status, head_reply.body) == (200, b"")
        alive["ok"] = False
        assert request(server, "GET", "/healthz").body == b"reconcile thread died\n"
    finally:
        server.stop()


# -- lifecycle and logging ---------------------------------------------------------------------


def test_port_in_use_is_an_http_api_error(api: HttpApi, controller: Controller, metrics: Metrics) -> None:
    other = HttpApi("127.0.0.1", api.port, metrics=metrics, verify_token=controller.verify_token,
                    accept_trace=controller.accept_trace, healthy=lambda: (True, ""), ready=lambda: (True, ""),
                    max_bytes=MAX_BYTES, max_inflated_bytes=MAX_INFLATED)
    with pytest.raises(HttpApiError, match=f"127.0.0.1:{api.port}"):
        other.start()


def test_stop_frees_the_port(controller: Controller, metrics: Metrics) -> None:
    server = make_api(controller, metrics)
    server.start()
    port = server.port
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_access_log_goes_through_logging_not_stderr(api: HttpApi, caplog: pytest.LogCaptureFixture,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.DEBUG, logger="advisor.controller.web.http_api"):
        upload(api)
        request(api, "GET", "/healthz")
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"POST {PATH} HTTP/1.1" in m and "202" in m for m in messages)
    assert any("GET /healthz" in m for m in messages)
    assert TOKEN not in " ".join(messages)
    assert capsys.readouterr().err == ""


# --- prediction Jobs' routes (job backend) ------------------------------------------------------

KEY = "0123456789abcdef01234567"


ELSEWHERE = "token-of-an-attempt-another-replica-runs"


@dataclass
class Predictions:
    """Stands in for the JobPredictor: one running prediction, its input, the answers it got."""

    answers: list[dict[str, Any]] = field(default_factory=list)

    def verify_prediction_token(self, key: str, token: str) -> bool | None:
        if token == ELSEWHERE:
            return None  # a live Job's token for an attempt another replica runs
        return (key, token) == (KEY, TOKEN)

    def prediction_input(self, key: str) -> IngestResult:
        return IngestResult(200, {"key": key, "params": {"max_workers": 4}, "profile": {"steps": ["x" * 100] * 50}})

    def accept_prediction_result(self, key: str, document: dict[str, Any]) -> IngestResult:
        self.answers.append(document)
        return IngestResult(202, {"outcome": "stored"})


@pytest.fixture
def job_api(controller: Controller, metrics: Metrics) -> Iterator[tuple[HttpApi, Predictions]]:
    predictions = Predictions()
    server = make_api(controller, metrics, predictions=predictions)
    server.start()
    yield server, predictions
    server.stop()


def test_a_prediction_job_gets_its_input_gzipped_when_it_asks(job_api: tuple[HttpApi, Predictions]) -> None:
    api, _ = job_api
    auth = {"Authorization": f"Bearer {TOKEN}"}
    plain = request(api, "GET", f"/v1/predictions/{KEY}/input", headers=auth)
    assert plain.status == 200 and plain.json()["params"] == {"max_workers": 4}
    zipped = request(api, "GET", f"/v1/predictions/{KEY}/input", headers={**auth, "Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip" and json.loads(gzip.decompress(zipped.body)) == plain.json()
    assert len(zipped.body) < len(plain.body) / 10


@pytest.mark.parametrize(
    ("method", "part", "token", "headers", "body", "status"),
    [
        ("GET", "input", None, {}, None, 401),
        ("GET", "input", "forged", {}, None, 403),
        ("PUT", "input", TOKEN, {}, b"{}", 405),
        ("POST", "result", TOKEN, {"Content-Type": "application/json"}, b"{}", 405),
        ("PUT", "result", "forged", {"Content-Type": "application/json"}, b"{}", 403),
        ("PUT", "result", TOKEN, {"Content-Type": "text/plain"}, b"{}", 415),
        ("PUT", "result", TOKEN, {"Content-Type": "application/json", "Content-Encoding": "gzip"},
         gzip.compress(b"{}"), 415),  # answers are small: sent as they are
        ("PUT", "result", TOKEN, {"Content-Type": "application/json"}, b"[1, 2]", 400),
    ],
    ids=["no-token", "forged-input", "put-input", "post-result", "forged-result", "not-json", "gzip", "array"],
)
def test_prediction_routes_refuse_what_they_must(job_api: tuple[HttpApi, Predictions], method: str, part: str,
                                                 token: str | None, headers: dict[str, str], body: bytes | None,
                                                 status: int) -> None:
    api, predictions = job_api
    sent = dict(headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    assert request(api, method, f"/v1/predictions/{KEY}/{part}", body, sent).status == status
    assert predictions.answers == []


def test_a_too_large_prediction_answer_is_413_before_its_body_is_sent(job_api: tuple[HttpApi, Predictions]) -> None:
    api, predictions = job_api
    answer = raw_exchange(api, (f"PUT /v1/predictions/{KEY}/result HTTP/1.1\r\nHost: x\r\n"
                                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                                f"Content-Length: {4 * 1024 * 1024 + 1}\r\n\r\n").encode(), half_close=True)
    assert answer.startswith(b"HTTP/1.1 413 ") and predictions.answers == []


def test_a_prediction_answer_is_handed_over(job_api: tuple[HttpApi, Predictions], metrics: Metrics) -> None:
    api, predictions = job_api
    reply = request(api, "PUT", f"/v1/predictions/{KEY}/result", b'{"schema": "advisor-prediction/1"}',
                    {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert reply.status == 202 and predictions.answers == [{"schema": "advisor-prediction/1"}]
    assert metrics.ingest_rejections.labels("unauthorized")._value.get() == 0  # trace upload metrics untouched


def test_without_the_job_backend_there_are_no_prediction_routes(api: HttpApi) -> None:
    reply = request(api, "GET", f"/v1/predictions/{KEY}/input", headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status == 404


# -- two ports: ingest and ops -------------------------------------------------------------------


def test_ingest_and_ops_ports_serve_only_their_own_routes(controller: Controller, metrics: Metrics) -> None:
    """A NetworkPolicy opens each port to its own clients, so neither may answer the other's
    routes: the ingest port takes uploads but no scrape or probe; the ops port the reverse."""
    ingest = make_api(controller, metrics, serves=frozenset({INGEST}))
    ops = make_api(controller, metrics, serves=frozenset({OPS}))
    ingest.start()
    ops.start()
    try:
        assert upload(ingest).status == 202 and len(controller.received) == 1
        reply = upload(ops)
        assert reply.status == 404 and "it serves /metrics, /healthz and /readyz" in reply.json()["message"]
        assert len(controller.received) == 1  # nothing reached accept_trace through the ops port
        for path in ("/metrics", "/healthz", "/readyz"):
            assert request(ops, "GET", path).status == 200
            refused = request(ingest, "GET", path)
            assert refused.status == 404 and "served on the metrics port" in refused.json()["message"]
        assert b"advisor_ingest_accepted_total 1.0" in request(ops, "GET", "/metrics").body
    finally:
        ingest.stop()
        ops.stop()


def test_serves_names_known_routes_only(controller: Controller, metrics: Metrics) -> None:
    for bad in (frozenset(), frozenset({"admin"})):
        with pytest.raises(ValueError, match="serves must name some of"):
            make_api(controller, metrics, serves=bad)


def test_a_token_this_replica_does_not_know_yet_is_retried_not_refused(job_api: tuple[HttpApi, Predictions]) -> None:
    """503 with Retry-After: the pod retries, and the Service takes it to the replica running the
    attempt (or this one, once it adopted it); a 403 would end the pod for good."""
    api, predictions = job_api
    auth = {"Authorization": f"Bearer {ELSEWHERE}", "Content-Type": "application/json"}
    for method, part, body in (("GET", "input", None), ("PUT", "result", b"{}")):
        reply = request(api, method, f"/v1/predictions/{KEY}/{part}", body, auth)
        assert (reply.status, reply.headers["Retry-After"]) == (503, "2")
        assert "not known to this replica (yet)" in reply.json()["message"]
    assert predictions.answers == []
