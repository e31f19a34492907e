"""The recording logic without TensorFlow: warm-up, traced steps, meta, shipping, stopping.

The strongest check replays a real run: fed the ``tests/data/ps-async/tf-native/mlp_bw100`` steps'
``RunMetadata`` dicts as snapshots and a clock that returns that run's recorded client times,
the recorder must ship a bundle that imports to the very profile of that directory.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from advisor.cli import render_summary
from advisor.core.summary import summarize
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json, read_profile, write_profile
from advisor.importers.tf_profile import build_profile_from_trace
from advisor.importers.trace_upload import read_trace_upload_bytes
from advisor.profiling import ProfilingConfig, ProfilingConfigError, TaskInfo
from advisor.profiling.recorder import RunFacts, TraceRecorder, VariableInfo, build_meta, resolve_batch_size
from advisor.profiling.upload import RetryPolicy
from tests.conftest import ps_async_data
from tests.profiling import Receiver, Reply

FAST = RetryPolicy(attempts=3, first_delay_s=0.01, max_delay_s=0.02, total_s=5.0, timeout_s=2.0)
WORKER0 = TaskInfo("worker", 0, ("ps-0:2222",), ("w-0:2222",))


def _config(url: str, token: Path, **changes: Any) -> ProfilingConfig:
    values: dict[str, Any] = {"ingest_url": url, "token_file": str(token), "steps": 3, "warmup": 2, "untraced_steps": 0,
                              "task": WORKER0}
    return ProfilingConfig(**(values | changes))


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("tok")
    return path


def _counter() -> Iterator[int]:
    n = 1_000_000
    while True:
        n += 10
        yield n


def _recorder(config: ProfilingConfig, facts: RunFacts | None = None) -> TraceRecorder[dict[str, Any]]:
    clock = _counter()
    facts = facts or RunFacts(batch_size=8)
    return TraceRecorder(config, facts, to_dict=dict, clock_us=lambda: next(clock), retry=FAST)


def _step(recorder: TraceRecorder[dict[str, Any]], k: int) -> tuple[bool, bool]:
    """One session.run through the recorder: (was it traced, should training stop), the hook's way:
    ``after_run`` for every timed run, traced or not."""
    traced = recorder.before_run()
    stop = recorder.after_run(lambda i: {"stepStats": {"i": i, "run": k}}) if recorder.timing else False
    return traced, stop


def test_warm_up_then_traced_steps_then_one_upload_and_a_stop(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token))
        outcomes = [_step(recorder, k) for k in range(8)]
    # runs 1-2 warm up, 3-5 traced, the 5th ships and asks to stop; later runs are left alone
    assert outcomes == [(False, False)] * 2 + [(True, False), (True, False), (True, True)] + [(False, False)] * 3
    [req] = rx.requests
    bundle = req.bundle()
    assert [d["stepStats"]["run"] for d in bundle["runmetadata"]] == [2, 3, 4]
    assert bundle["meta"]["client_steps_us"] == [[1_000_010, 1_000_020], [1_000_030, 1_000_040], [1_000_050, 1_000_060]]
    assert (bundle["meta"]["warmup_steps"], bundle["meta"]["n_steps"], bundle["meta"]["batch"]) == (2, 3, 8)
    assert recorder.result is not None and recorder.result.ok and recorder.finished


def test_no_stop_when_asked_not_to(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=0, steps=1, stop_after_upload=False))
        assert _step(recorder, 0) == (True, False)
    assert recorder.result is not None and recorder.result.ok


@pytest.mark.parametrize("status", [401, 409, 413, 503])
def test_a_failed_upload_lets_training_continue_untraced(token: Path, status: int) -> None:
    with Receiver([Reply(status, {"message": "no"})]) as rx:
        recorder = _recorder(_config(rx.url, token, warmup=0, steps=1))
        assert _step(recorder, 0) == (True, False)
        assert _step(recorder, 1) == (False, False)  # no second trace, no second upload
    assert recorder.result is not None and not recorder.result.ok and recorder.result.status == status
    assert len(rx.requests) == (3 if status == 503 else 1)


def test_training_that_ends_early_uploads_what_was_traced(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=1, steps=10))
        for k in range(3):
            _step(recorder, k)
        assert recorder.finish() is True  # the hook's end(): ships 2 of 10
        assert recorder.finish() is False  # at most once
    [req] = rx.requests
    assert len(req.bundle()["runmetadata"]) == 2 and req.bundle()["meta"]["n_steps"] == 2


def test_training_that_ends_in_the_warm_up_uploads_nothing(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=5))
        _step(recorder, 0)
        assert recorder.finish() is False
    assert rx.requests == [] and recorder.result is not None and not recorder.result.ok


def test_a_trace_json_cannot_carry_is_reported_not_raised(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=0, steps=1))
        recorder.before_run()
        assert recorder.after_run(lambda i: {"x": math.nan}) is False
    assert rx.requests == []
    assert recorder.result is not None and "cannot encode" in recorder.result.message


def test_the_snapshot_is_taken_after_the_clock_stops(token: Path) -> None:
    events: list[str] = []
    recorder = TraceRecorder(
        _config("http://127.0.0.1:9/x", token, warmup=0, steps=2),
        RunFacts(batch_size=1),
        to_dict=dict,
        clock_us=lambda: events.append("clock") or 0,  # type: ignore[func-returns-value]
    )
    recorder.before_run()
    recorder.after_run(lambda i: events.append("snapshot") or {})  # type: ignore[func-returns-value]
    assert events == ["clock", "clock", "snapshot"]


def test_meta_takes_the_environment_over_the_code_and_lists_variables() -> None:
    facts = RunFacts(
        batch_size=32,
        model_name="from-code",
        tf_version="2.21.0",
        variables=(
            VariableInfo("fc0/W", (784, 384), "float32", 1_204_224, True, "/job:ps/task:0"),
            VariableInfo("global_step", (), "int64", 8, False, "/job:ps/task:0"),
            VariableInfo("odd", (), "float32", None, True, "/job:ps/task:0"),
        ),
    )
    config = ProfilingConfig(
        ingest_url="http://a/b", batch_size=64, model_name="from-env", bandwidth_mbit=100.0, task=WORKER0
    )
    meta = build_meta(config, facts, [(1, 2)])
    assert (meta["batch"], meta["model"], meta["bw_mbit"], meta["tf_version"]) == (64, "from-env", 100.0, "2.21.0")
    assert (meta["n_ps"], meta["n_workers"], meta["task"]) == (1, 1, 0)
    # parameters: 784 x 384 float32 = 301,056 elements, 1,204,224 bytes; the step counter is not trainable
    assert (meta["n_params"], meta["param_bytes"]) == (301_056, 1_204_224)
    odd = {"name": "odd", "shape": [], "dtype": "float32", "trainable": True, "device": "/job:ps/task:0"}
    assert meta["variables"][2] == odd  # no "bytes": its size is unknown
    no_env = build_meta(ProfilingConfig(ingest_url="http://a/b", task=WORKER0), facts, [])
    assert (no_env["batch"], no_env["model"], "bw_mbit" in no_env) == (32, "from-code", False)


@pytest.mark.parametrize(("env", "code", "expected"), [(None, 16, 16), (64, 16, 64), (64, None, 64)])
def test_batch_size_precedence(env: int | None, code: int | None, expected: int) -> None:
    assert resolve_batch_size(ProfilingConfig(ingest_url="http://a/b", batch_size=env), code) == expected


@pytest.mark.parametrize("code", [None, 0, -3, 2.5, True])
def test_no_usable_batch_size_fails_at_start_up(code: Any) -> None:
    with pytest.raises(ProfilingConfigError, match="batch"):
        resolve_batch_size(ProfilingConfig(ingest_url="http://a/b"), code)


def test_replaying_a_real_run_through_the_recorder_gives_its_profile(token: Path) -> None:
    folder = ps_async_data("tf-native", "mlp_bw100")
    lines = gzip.decompress((folder / "runmetadata.jsonl.gz").read_bytes()).decode().splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]
    meta = json.loads((folder / "meta.json").read_text())
    times = iter(t for start, end, _ in meta["client_steps_us"] for t in (start, end))
    config = ProfilingConfig(
        ingest_url="", token_file=str(token), steps=len(docs), warmup=meta["warmup_steps"], untraced_steps=0,
        bandwidth_mbit=meta["bw_mbit"], task=WORKER0,
    )
    facts = RunFacts(
        batch_size=meta["batch"],
        model_name=meta["model"],
        variables=tuple(
            VariableInfo(v["name"], tuple(v["shape"]), v["dtype"], v["bytes"], v["trainable"], v["device"])
            for v in meta["variables"]
        ),
    )
    with Receiver() as rx:
        config = replace(config, ingest_url=rx.url)
        recorder = TraceRecorder(config, facts, to_dict=lambda k: docs[k], clock_us=lambda: next(times), retry=FAST)
        for _ in range(meta["warmup_steps"] + len(docs)):
            if recorder.before_run():
                recorder.after_run(lambda k: k)  # the snapshot is the step's position
    [req] = rx.requests
    profile = build_profile_from_trace(read_trace_upload_bytes(req.body, origin="req", source="runmetadata.jsonl.gz"))
    assert profile == load_profile(folder)


def test_untraced_steps_are_timed_after_the_traced_ones_and_shipped_with_them(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, untraced_steps=2))
        outcomes = [_step(recorder, k) for k in range(8)]
    # runs 1-2 warm up, 3-5 traced, 6-7 timed untraced (the 7th ships and asks to stop), then nothing
    assert outcomes == [(False, False)] * 2 + [(True, False)] * 3 + [(False, False), (False, True), (False, False)]
    [req] = rx.requests
    meta = req.bundle()["meta"]
    assert [d["stepStats"]["run"] for d in req.bundle()["runmetadata"]] == [2, 3, 4]  # no snapshot of an untraced run
    assert meta["client_steps_us"] == [[1_000_010, 1_000_020], [1_000_030, 1_000_040], [1_000_050, 1_000_060]]
    assert meta["untraced_steps_us"] == [[1_000_070, 1_000_080], [1_000_090, 1_000_100]]


def test_training_that_ends_among_the_untraced_steps_ships_those_it_timed(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=0, steps=1, untraced_steps=5))
        for k in range(3):
            _step(recorder, k)
        assert recorder.finish() is True
    [req] = rx.requests
    assert len(req.bundle()["meta"]["untraced_steps_us"]) == 2 and req.bundle()["meta"]["n_steps"] == 1


def test_without_untraced_steps_meta_has_none(token: Path) -> None:
    with Receiver() as rx:
        recorder = _recorder(_config(rx.url, token, warmup=0, steps=1))
        assert _step(recorder, 0) == (True, True)
    assert "untraced_steps_us" not in rx.requests[0].bundle()["meta"]


def test_a_real_run_with_untraced_steps_says_what_tracing_cost(token: Path, tmp_path: Path) -> None:
    # The real run's traced steps, then 4 untraced ones each 5 % shorter than the traced steps'
    # mean client wall: the profile carries their walls, and the inspection says how much longer
    # the traced steps it keeps were on average (about 1 / 0.95 - 1 = +5.3 %).
    folder = ps_async_data("tf-native", "mlp_bw100")
    lines = gzip.decompress((folder / "runmetadata.jsonl.gz").read_bytes()).decode().splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]
    meta = json.loads((folder / "meta.json").read_text())
    traced = [(start, end) for start, end, _ in meta["client_steps_us"]]
    mean_wall = sum(end - start for start, end in traced) / len(traced)
    tail_start = traced[-1][1] + 1000
    untraced = [(tail_start + k * 10**6, tail_start + k * 10**6 + round(0.95 * mean_wall)) for k in range(4)]
    times = iter(t for start, end in traced + untraced for t in (start, end))
    config = ProfilingConfig(ingest_url="", token_file=str(token), steps=len(docs), warmup=0, untraced_steps=4,
                             bandwidth_mbit=meta["bw_mbit"], task=WORKER0)
    with Receiver() as rx:
        recorder = TraceRecorder(replace(config, ingest_url=rx.url), RunFacts(batch_size=meta["batch"]),
                                 to_dict=lambda k: docs[k], clock_us=lambda: next(times), retry=FAST)
        for _ in range(len(docs) + 4):
            recorder.before_run()
            recorder.after_run(lambda k: k)
    [req] = rx.requests
    profile = build_profile_from_trace(read_trace_upload_bytes(req.body, origin="req", source="upload"))
    assert profile.job.untraced_walls_us == tuple(float(end - start) for start, end in untraced)
    # the steps the profile keeps (complete ones) against the untraced ones, from the raw windows
    kept = [traced[s.index][1] - traced[s.index][0] for s in profile.steps]
    cost = (sum(kept) / len(kept)) / (sum(end - start for start, end in untraced) / 4) - 1
    assert 0.04 < cost < 0.07  # about 1 / 0.95 - 1 (the kept steps' mean is near all steps')
    text = render_summary(profile, summarize(profile))
    assert f"over 4 steps timed after the traced ones; the traced steps' mean is {cost:+.1%} longer" in text
    # a profile file keeps them; one recorded without them is written as before they existed
    write_profile(profile, tmp_path / "p.json.gz")
    assert read_profile(tmp_path / "p.json.gz") == profile
    assert "untraced_walls_us" not in profile_to_json(load_profile(folder))["job"]
