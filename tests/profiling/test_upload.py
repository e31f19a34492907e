"""The uploader against a real HTTP server on 127.0.0.1: headers, body, which answers it retries.

Contract (docs/profiling.md): POST with a bearer token, JSON gzipped; 2xx is done; 5xx and
connection failures are retried with capped exponential backoff inside a bounded total time;
4xx is final. Delays are shrunk by the policy so the suite stays fast; the shapes are the same.
"""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path

import pytest

from advisor.profiling import build_bundle, encode_bundle
from advisor.profiling.upload import RetryPolicy, read_token, ship, upload_bundle
from tests.profiling import Receiver, Reply

FAST = RetryPolicy(attempts=4, first_delay_s=0.05, max_delay_s=0.2, total_s=5.0, timeout_s=2.0)
BODY = encode_bundle(build_bundle([{"stepStats": {}}], {"batch": 4}))


def test_posts_the_gzipped_bundle_with_the_contract_headers() -> None:
    with Receiver([Reply(202, {"profile": "prof-7"})]) as rx:
        result = upload_bundle(rx.url, BODY, "s3cret", policy=FAST)
    assert (result.ok, result.status, result.profile_id, result.attempts) == (True, 202, "prof-7", 1)
    [req] = rx.requests
    assert req.path == "/v1/traces/ns/job/1"
    assert req.headers["authorization"] == "Bearer s3cret"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["content-encoding"] == "gzip"
    assert req.body == BODY
    assert json.loads(gzip.decompress(req.body))["format"] == "advisor-trace-upload"


def test_retries_503_then_succeeds_with_the_same_bytes_and_growing_waits() -> None:
    replies = [Reply(503, {"message": "busy"}), Reply(503, {"message": "busy"}), Reply(202)]
    with Receiver(replies) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=FAST)
    assert (result.ok, result.attempts) == (True, 3)
    assert [r.body for r in rx.requests] == [BODY] * 3  # byte-identical: not "a different trace"
    gaps = [b.at - a.at for a, b in zip(rx.requests, rx.requests[1:])]
    # waits are 0.05 s then 0.1 s (doubling); allow scheduling slack above, none below
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413])
def test_4xx_is_final_and_its_message_is_kept(status: int) -> None:
    with Receiver([Reply(status, {"message": f"refused {status}"}), Reply(202)]) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=FAST)
    assert (result.ok, result.status, result.attempts, result.message) == (False, status, 1, f"refused {status}")
    assert len(rx.requests) == 1


def test_gives_up_on_persistent_5xx_within_the_total_time() -> None:
    policy = RetryPolicy(attempts=50, first_delay_s=0.05, max_delay_s=0.1, total_s=0.6, timeout_s=1.0)
    started = time.monotonic()
    with Receiver([Reply(500, {"message": "down"})]) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=policy)
    elapsed = time.monotonic() - started
    assert not result.ok and result.status == 500 and "down" in result.message
    assert elapsed < 0.6 + 0.5  # total_s plus one request's slack
    assert 3 <= len(rx.requests) < 50  # retried, but the clock, not the count, stopped it


def test_stops_after_the_attempt_limit() -> None:
    policy = RetryPolicy(attempts=3, first_delay_s=0.01, max_delay_s=0.01, total_s=10.0, timeout_s=1.0)
    with Receiver([Reply(502, {})]) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=policy)
    assert (result.ok, result.status, result.attempts, len(rx.requests)) == (False, 502, 3, 3)


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = RetryPolicy(attempts=3, first_delay_s=0.01, max_delay_s=0.02, total_s=5.0, timeout_s=1.0)
    result = upload_bundle(f"http://127.0.0.1:{port}/v1/traces/a/b/1", BODY, "t", policy=policy)
    assert (result.ok, result.status, result.attempts) == (False, None, 3)
    assert result.message.startswith("no answer")


def test_a_slow_server_counts_as_no_answer_and_is_retried() -> None:
    policy = RetryPolicy(attempts=2, first_delay_s=0.01, max_delay_s=0.01, total_s=5.0, timeout_s=0.2)
    with Receiver([Reply(202, delay_s=1.0), Reply(202)]) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=policy)
    assert (result.ok, result.attempts) == (True, 2)


def test_redirects_are_not_followed() -> None:
    with Receiver([Reply(307, {}, headers=(("Location", "http://127.0.0.1:9/elsewhere"),))]) as rx:
        result = upload_bundle(rx.url, BODY, "t", policy=FAST)
    assert (result.ok, result.status, len(rx.requests)) == (False, 307, 1)


def test_an_error_without_a_message_reports_the_body_or_the_reason() -> None:
    with Receiver([Reply(400, b"quota exceeded\n")]) as rx:
        assert upload_bundle(rx.url, BODY, "t", policy=FAST).message == "quota exceeded"
    with Receiver([Reply(400, {"detail": "x"})]) as rx:
        assert upload_bundle(rx.url, BODY, "t", policy=FAST).message == "Bad Request"


def test_ship_reads_the_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc.def\n")
    with Receiver() as rx:
        assert ship(rx.url, BODY, token, policy=FAST).ok
    assert rx.requests[0].headers["authorization"] == "Bearer abc.def"


@pytest.mark.parametrize("content", [None, "", "two words"])
def test_ship_without_a_usable_token_sends_nothing(tmp_path: Path, content: str | None) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    with Receiver() as rx:
        result = ship(rx.url, BODY, token, policy=FAST)
    assert (result.ok, result.attempts, rx.requests) == (False, 0, [])
    assert "token" in result.message


def test_read_token_strips_whitespace(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("  tok\n\n")
    assert read_token(tmp_path / "t") == "tok"
