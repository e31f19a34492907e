"""The DDP hook's step logic without PyTorch (``advisor.profiling.ddp_recorder``): scripted
timestamps become the bundle's per-step times, the bundle reaches a real HTTP receiver and
imports, and every program shape the ring model cannot replay fails loudly, naming why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.core.profile import ProgramKind
from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.profiling.config import ProfilingConfig
from advisor.profiling.ddp_recorder import (
    DDPStepRecorder,
    check_single_worker,
    parse_bucket_indices,
    world_size_from_env,
)
from advisor.profiling.errors import ProfilingConfigError, ProfilingUnsupportedError
from advisor.profiling.link import link_rate
from advisor.profiling.step_cpu import WarmupCpu
from advisor.profiling.upload import RetryPolicy
from tests.profiling import Receiver, Reply

GRADS = [("fc0.weight", 4_000), ("fc0.bias", 40), ("fc1.weight", 400)]
META = {"batch_size": 8, "model": "toy", "world_size": 1, "framework": "torch test", "bucket_cap_bytes": 1024}
FAST = RetryPolicy(attempts=1, first_delay_s=0.0, total_s=5.0, timeout_s=5.0)


class Clock:
    """A scripted clock: each call returns the next value (ns)."""

    def __init__(self) -> None:
        self.times: Iterator[int] = iter(())

    def set(self, *us: float) -> None:
        self.times = iter(int(t * 1000) for t in us)

    def __call__(self) -> int:
        return next(self.times)


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("secret\n")
    return path


def _recorder(url: str, token: Path, clock: Clock, *, steps: int = 2, warmup: int = 1,
              stop: bool = True) -> DDPStepRecorder:
    config = ProfilingConfig(ingest_url=url, token_file=str(token), steps=steps, warmup=warmup,
                             stop_after_upload=stop)
    return DDPStepRecorder(config=config, gradients=GRADS, meta=META, buckets=lambda: [[2], [1, 0]],
                           clock_ns=clock, retry=FAST)


def _step(rec: DDPStepRecorder, clock: Clock, start: float, *, shift: float = 0.0) -> None:
    """One step: forward at ``start``; backward reaches the output at +10 ms; fc1's gradient ready
    at +14, fc0.bias at +17, fc0.weight at +19; backward ends at +20; optimizer from +21 to +23."""
    clock.set(start)
    assert not rec.forward()
    clock.set(start + 10_000, start + 14_000 + shift, start + 17_000, start + 19_000, start + 20_000,
              start + 21_000, start + 23_000)
    rec.backward_start()
    rec.grad_ready(2)
    rec.grad_ready(1)
    rec.grad_ready(0)
    rec.backward_end()
    rec.optimizer_start()
    rec.optimizer_end()


def test_steps_become_the_bundle_and_it_imports(token: Path) -> None:
    clock = Clock()
    with Receiver() as rx:
        rec = _recorder(rx.url, token, clock)
        _step(rec, clock, 0.0)  # warm-up: not traced
        _step(rec, clock, 30_000.0)  # traced step 1 (index 1)
        _step(rec, clock, 60_000.0, shift=500.0)  # traced step 2 (index 2)
        clock.set(95_000.0)  # the next forward closes step 2 and ships
        assert rec.forward() is True  # accepted, and stop_after_upload is on
        assert rec.finished and rec.result is not None and rec.result.ok
        doc = rx.requests[0].bundle()
    # step 1: 30 ms .. 60 ms; relative times: backward 10..20 ms, ready 19/17/14 ms, optimizer 21 ms for 2 ms
    assert doc["steps"][0] == {"index": 1, "wall_us": 30_000.0, "backward_start_us": 10_000.0,
                               "backward_end_us": 20_000.0, "grad_ready_us": [19_000.0, 17_000.0, 14_000.0],
                               "optimizer_us": [21_000.0, 2_000.0]}
    # step 2: 60 ms .. 95 ms; fc1's gradient 0.5 ms later
    assert doc["steps"][1]["wall_us"] == 35_000.0 and doc["steps"][1]["grad_ready_us"][2] == 14_500.0
    assert doc["kind"] == "pytorch-ddp" and doc["buckets"] == [[2], [1, 0]]
    assert [g["bytes"] for g in doc["gradients"]] == [4_000, 40, 400]
    profile = read_allreduce_upload(doc, origin="test")
    assert profile.job.kind is ProgramKind.PYTORCH_DDP and profile.job.batch_size == 8
    assert profile.job.buckets == (("gradient/fc1.weight",), ("gradient/fc0.bias", "gradient/fc0.weight"))


def test_after_shipping_nothing_more_is_recorded_or_sent(token: Path) -> None:
    clock = Clock()
    with Receiver() as rx:
        rec = _recorder(rx.url, token, clock, steps=1, warmup=0, stop=False)
        _step(rec, clock, 0.0)
        clock.set(30_000.0)
        assert rec.forward() is False  # shipped, but stop_after_upload is off
        clock.set(60_000.0)
        assert rec.forward() is False and not rec.tracing
        assert not rec.finish()
        assert len(rx.requests) == 1


def test_a_refused_upload_does_not_stop_training(token: Path) -> None:
    clock = Clock()
    with Receiver([Reply(400, {"message": "bad trace"})]) as rx:
        rec = _recorder(rx.url, token, clock, steps=1, warmup=0)
        _step(rec, clock, 0.0)
        clock.set(30_000.0)
        assert rec.forward() is False
        assert rec.result is not None and not rec.result.ok and rec.result.status == 400


def test_finish_ships_the_steps_completed_so_far(token: Path) -> None:
    clock = Clock()
    with Receiver() as rx:
        rec = _recorder(rx.url, token, clock, steps=5, warmup=0)
        _step(rec, clock, 0.0)
        _step(rec, clock, 30_000.0)  # still open when the loop ends: not complete, not sent
        rec.finish()
        assert len(rx.requests[0].bundle()["steps"]) == 1


def test_finish_without_a_traced_step_sends_nothing(token: Path) -> None:
    clock = Clock()
    with Receiver() as rx:
        rec = _recorder(rx.url, token, clock, warmup=3)
        _step(rec, clock, 0.0)
        rec.finish()
        assert rx.requests == [] and rec.result is not None and not rec.result.ok


def test_warm_up_steps_are_not_checked(token: Path) -> None:
    """Nothing is read in warm-up: an odd warm-up step (gradient twice) passes."""
    clock = Clock()
    rec = _recorder("http://127.0.0.1:9/", token, clock, warmup=2)
    clock.set(0.0)
    rec.forward()
    clock.set(1.0, 2.0)
    rec.grad_ready(0)
    rec.grad_ready(0)
    assert not rec.tracing


def _traced(token: Path) -> tuple[DDPStepRecorder, Clock]:
    clock = Clock()
    rec = _recorder("http://127.0.0.1:9/", token, clock, warmup=0)
    clock.set(0.0)
    rec.forward()
    return rec, clock


def test_no_sync_in_a_traced_step_is_refused(token: Path) -> None:
    clock = Clock()
    rec = _recorder("http://127.0.0.1:9/", token, clock, warmup=0)
    clock.set(0.0)
    with pytest.raises(ProfilingUnsupportedError, match="no_sync"):
        rec.forward(grad_sync=False)


def test_a_second_forward_before_the_optimizer_is_refused(token: Path) -> None:
    rec, clock = _traced(token)
    clock.set(5.0)
    with pytest.raises(ProfilingUnsupportedError, match="forward again before optimizer.step"):
        rec.forward()


def test_a_gradient_ready_twice_is_refused(token: Path) -> None:
    rec, clock = _traced(token)
    clock.set(1.0, 2.0)
    rec.grad_ready(1)
    with pytest.raises(ProfilingUnsupportedError, match="fc0.bias was accumulated twice"):
        rec.grad_ready(1)


def test_a_second_backward_is_refused(token: Path) -> None:
    rec, clock = _traced(token)
    clock.set(1.0, 2.0)
    assert rec.backward_start() is True
    with pytest.raises(ProfilingUnsupportedError, match="backward through the DDP model's output twice"):
        rec.backward_start()


def test_a_gradient_never_ready_is_refused_naming_it(token: Path) -> None:
    rec, clock = _traced(token)
    clock.set(1.0, 2.0, 3.0, 4.0)
    rec.backward_start()
    rec.grad_ready(0)
    rec.backward_end()
    with pytest.raises(ProfilingUnsupportedError, match=r"2 trainable parameter\(s\) never became ready "
                                                          r"\(fc0.bias, fc1.weight\)"):
        rec.optimizer_start()


def test_an_optimizer_step_without_backward_is_refused(token: Path) -> None:
    rec, clock = _traced(token)
    clock.set(1.0)
    with pytest.raises(ProfilingUnsupportedError, match="without a backward pass"):
        rec.optimizer_start()


def test_no_trainable_parameters_is_refused(token: Path) -> None:
    config = ProfilingConfig(ingest_url="http://127.0.0.1:9/", token_file=str(token))
    with pytest.raises(ProfilingUnsupportedError, match="no trainable parameters"):
        DDPStepRecorder(config=config, gradients=[], meta=META)


@pytest.mark.parametrize(("env", "group"), [(2, None), (None, 4), (1, 2)])
def test_more_than_one_worker_is_refused(env: int | None, group: int | None) -> None:
    with pytest.raises(ProfilingUnsupportedError, match="needs exactly 1 worker"):
        check_single_worker(env, group)


@pytest.mark.parametrize(("env", "group"), [(None, None), (1, None), (None, 1), (1, 1)])
def test_one_worker_passes(env: int | None, group: int | None) -> None:
    check_single_worker(env, group)


def test_world_size_from_the_environment() -> None:
    assert world_size_from_env({}) is None
    assert world_size_from_env({"WORLD_SIZE": " 3 "}) == 3
    for bad in ("two", "0", "-1"):
        with pytest.raises(ProfilingConfigError, match="WORLD_SIZE"):
            world_size_from_env({"WORLD_SIZE": bad})


def test_bucket_layout_from_ddp_logging_data() -> None:
    # torch's Logger joins indices with spaces and buckets with ", "
    assert parse_bucket_indices("5 4 3 2, 1 0", 6) == [[5, 4, 3, 2], [1, 0]]
    assert parse_bucket_indices("0", 1) == [[0]]
    for bad in (None, "", 7, "5 4, 3", "1 0, 0", "a b", "1 0,", "0 1 2"):
        assert parse_bucket_indices(bad, 2 if bad == "1 0," else 6) is None


def test_the_link_rate_travels_with_the_bundle_into_the_profile(token: Path) -> None:
    """The controller's setting (ADVISOR_BANDWIDTH_MBIT=250, as advisor.profiling.link reads it)
    reaches the profile as its recorded rate, with its source."""
    clock = Clock()
    config = ProfilingConfig(ingest_url="http://127.0.0.1:9/", token_file=str(token), steps=2, warmup=0,
                             bandwidth_mbit=250.0)
    rec = DDPStepRecorder(config=config, gradients=GRADS, meta=META, clock_ns=clock, retry=FAST,
                          link=link_rate(config.bandwidth_mbit, {}))
    _step(rec, clock, 0.0)
    clock.set(30_000.0)
    assert rec.forward() is False and not rec.finished  # closes traced step 1, opens step 2
    doc = rec.bundle()
    assert doc["link"] == {"rate_bps": 250e6, "source": "controller-setting"}
    job = read_allreduce_upload(doc, origin="test").job
    assert (job.recorded_bandwidth_bps, job.recorded_bandwidth_source) == (250e6, "controller-setting")


def test_the_cpu_per_step_is_timed_over_the_warm_ups_second_half(token: Path) -> None:
    """Warm-up 4: the CPU clock is read when step 2 begins (0.5 s) and when step 4, the first
    traced one, begins (0.9 s): (0.9 - 0.5) / 2 steps = 0.2 s a step, in the uploaded bundle's meta
    and the profile. With a warm-up of 1 there is no second half to time: null."""
    clock, cpu = Clock(), iter([0.5, 0.9])
    with Receiver() as rx:
        config = ProfilingConfig(ingest_url=rx.url, token_file=str(token), steps=1, warmup=4)
        rec = DDPStepRecorder(config=config, gradients=GRADS, meta=META, clock_ns=clock, retry=FAST,
                              cpu_s=lambda: next(cpu))
        for k in range(5):
            _step(rec, clock, k * 30_000.0)
        clock.set(150_000.0)
        assert rec.forward()  # closes the traced step and ships the bundle
        uploaded = rx.requests[0].bundle()
        short = _recorder(rx.url, token, clock, steps=1)
        _step(short, clock, 0.0)
        _step(short, clock, 30_000.0)
        clock.set(60_000.0)
        assert short.forward()
        plain = rx.requests[1].bundle()
    assert uploaded["meta"]["cpu_s_per_step"] == pytest.approx(0.2)
    assert read_allreduce_upload(uploaded, origin="t").job.cpu_s_per_step == pytest.approx(0.2)
    assert plain["meta"]["cpu_s_per_step"] is None


@pytest.mark.parametrize(("warmup", "reads", "per_step"), [(4, (2, 4), 0.2), (3, (1, 3), 0.2), (2, (1, 2), 0.4),
                                                           (1, (), None), (0, (), None)])
def test_warmup_cpu_reads_the_clock_midway_and_when_tracing_starts(warmup: int, reads: tuple[int, ...],
                                                                   per_step: float | None) -> None:
    """The CPU clock is read when step warmup // 2 and step warmup begin, no other time: warm-up 3
    reads at steps 1 and 3 (0.4 s apart: 0.2 s a step over 2 steps); warm-up 2 at 1 and 2."""
    read_at: list[int] = []
    current = [0]

    def clock() -> float:
        read_at.append(current[0])
        return 0.5 + 0.4 * (len(read_at) - 1)

    cpu = WarmupCpu(warmup, clock)
    for index in range(8):
        current[0] = index
        cpu.step_begins(index)
    assert tuple(read_at) == reads
    assert cpu.per_step == (None if per_step is None else pytest.approx(per_step))
