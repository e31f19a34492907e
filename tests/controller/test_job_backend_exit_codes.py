"""``advisor predict-job``'s exit status, which the prediction Job's podFailurePolicy acts on.

A refusal (a 4xx, input without a profile) must end the process with ``EXIT_FINAL`` so the Job
fails at once; a controller that stays unreachable must not (status 2: the Job may try a new
pod). Run through the CLI's ``main`` against a stub controller on a real socket.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from advisor.cli import main
from advisor.controller.pipeline.job_client import EXIT_FINAL
from advisor.controller.pipeline.prediction_job import TOKEN_ENV
from tests.controller.harness import free_port

KEY = "0123456789abcdef01234567"


class Stub:
    """A controller that answers every request with ``status`` and ``body``; records the paths."""

    def __init__(self, status: int, body: object) -> None:
        self.status, self.body = status, body
        self.paths: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                stub.paths.append(self.path)
                raw = json.dumps(stub.body).encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Stub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t0ken")


def predict_job(url: str, retry_for: float = 0.0) -> int:
    return main(["predict-job", "--controller", url, "--key", KEY, "--retry-for", str(retry_for)])


@pytest.mark.parametrize(("status", "body", "words"), [
    (403, {"message": "this token is not valid for this prediction"}, "answered 403: this token is not valid"),
    (404, {"message": f"no running prediction {KEY}"}, "answered 404: no running prediction"),
    (200, {"key": KEY, "params": {}}, "the controller's input lacks profile or params"),
])
def test_a_refusal_exits_with_the_final_status_at_once(status: int, body: object, words: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with Stub(status, body) as stub:
        assert predict_job(stub.url, retry_for=60) == EXIT_FINAL  # not retried for a minute: final at once
    assert stub.paths == [f"/v1/predictions/{KEY}/input"]
    assert words in capsys.readouterr().err


def test_a_busy_controller_is_retried_then_given_up_without_the_final_status(
        capsys: pytest.CaptureFixture[str]) -> None:
    with Stub(503, {"message": "store unavailable"}) as stub:
        code = predict_job(stub.url, retry_for=0.6)
    assert code == 2 != EXIT_FINAL  # the Job's backoffLimit may try again
    assert len(stub.paths) >= 2  # retried before giving up
    assert "gave up after 0.6 s" in capsys.readouterr().err


def test_an_unreachable_controller_is_not_final(capsys: pytest.CaptureFixture[str]) -> None:
    assert predict_job(f"http://127.0.0.1:{free_port()}") == 2  # nothing listens there
    assert "gave up" in capsys.readouterr().err
