"""Observed throughput without TensorFlow: the exporter over real HTTP, its settings, and the
decisions the hook and the Keras callback delegate (count or not, how many examples per step).

Expected counts are sums worked out by hand in each test; every scrape goes over a socket to
the exporter's own HTTP server and is parsed with prometheus-client's text parser, as
Prometheus would read it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import random
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import advisor.profiling as profiling
from advisor.profiling import ProfilingConfigError, ThroughputExporter, exporter_from_env
from advisor.profiling import throughput as throughput_module
from advisor.profiling.throughput import (
    BatchEndSteps, GlobalStepProgress, StepCounter, metrics_port, step_counter_from_env,
)


def families(port: int) -> list[Any]:
    """The metric families ``127.0.0.1:port/metrics`` serves, parsed as Prometheus would."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return list(text_string_to_metric_families(response.read().decode()))


def scrape(port: int) -> dict[str, tuple[float, dict[str, str]]]:
    """{sample name: (value, labels)} of the counters' ``_total`` samples at ``127.0.0.1:port``."""
    found = {}
    for family in families(port):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                assert family.type == "counter", sample.name
                found[sample.name] = (sample.value, dict(sample.labels))
    return found


def counts(port: int) -> tuple[float, float]:
    """(examples, steps) as Prometheus would read them."""
    found = scrape(port)
    return found["advisor_training_examples_total"][0], found["advisor_training_steps_total"][0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def exporter() -> Iterator[ThroughputExporter]:
    exp = ThroughputExporter(0, addr="127.0.0.1")
    yield exp
    exp.close()


def close_shared(port: int) -> None:
    shared = profiling.throughput._shared.get(port)
    if shared is not None:
        shared.close()


@pytest.fixture
def port() -> Iterator[int]:
    """A free port for the env-driven (shared) exporters; whatever was started on it is closed after."""
    number = free_port()
    yield number
    close_shared(number)


@pytest.fixture(scope="module")
def live_port() -> Iterator[int]:
    """One port for the tests that only add to its shared exporter (closing one takes 0.5 s)."""
    number = free_port()
    yield number
    close_shared(number)


@pytest.fixture(scope="module")
def sink() -> Iterator[ThroughputExporter]:
    exp = ThroughputExporter(0, addr="127.0.0.1")
    yield exp
    exp.close()


class Since:
    """Counts added to a shared exporter since this was made."""

    def __init__(self, exporter: ThroughputExporter) -> None:
        self.exporter = exporter
        self.start = exporter.counts()

    def counts(self) -> tuple[int, int]:
        steps, examples = self.exporter.counts()
        return steps - self.start[0], examples - self.start[1]


# --- the exporter -----------------------------------------------------------------------------------


def test_a_fresh_exporter_serves_both_counters_at_zero_without_labels(exporter: ThroughputExporter) -> None:
    assert scrape(exporter.port) == {
        "advisor_training_examples_total": (0.0, {}),
        "advisor_training_steps_total": (0.0, {}),
    }


def test_scraped_counts_are_the_sums_of_the_steps(exporter: ThroughputExporter) -> None:
    for _ in range(5):
        exporter.record_step(32)
    exporter.record_step(7)  # a last, partial batch
    assert counts(exporter.port) == (5 * 32 + 7, 6)  # 167 examples in 6 steps
    exporter.record_steps(4, 4 * 32)  # one Keras execution of 4 steps
    exporter.record_step(0)
    assert counts(exporter.port) == (167 + 128, 6 + 4 + 1)


def test_counts_stay_exact_beyond_a_million(exporter: ThroughputExporter) -> None:
    exporter.record_steps(1_000_003, 1_000_003 * 256)
    assert counts(exporter.port) == (256_000_768, 1_000_003)


def test_negative_counts_are_refused_and_change_nothing(exporter: ThroughputExporter) -> None:
    exporter.record_step(10)
    with pytest.raises(ValueError, match="examples"):
        exporter.record_step(-1)
    with pytest.raises(ValueError):
        exporter.record_steps(-1, 0)
    with pytest.raises(ValueError):
        exporter.record_steps(1, -5)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="examples"):
            exporter.record_step(bad)
        with pytest.raises(ValueError):
            exporter.record_steps(1, bad)
    assert counts(exporter.port) == (10, 1)


def test_a_share_of_a_batch_is_counted_as_it_is(exporter: ThroughputExporter) -> None:
    """A synchronous job's worker with a backup counts R / W of its batch (sync_share.py): 32 x 7/8."""
    counter = StepCounter(exporter, 32 * 7 / 8)
    for _ in range(3):
        counter.step()
    counter.steps(2)
    assert counts(exporter.port) == (5 * 28, 5)


def test_steps_from_several_threads_are_all_counted(exporter: ThroughputExporter) -> None:
    def train() -> None:
        for _ in range(20_000):
            exporter.record_step(3)

    threads = [threading.Thread(target=train) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts(exporter.port) == (4 * 20_000 * 3, 4 * 20_000)
    assert exporter.counts() == (80_000, 240_000)


def test_a_scrape_never_sees_a_step_without_its_examples(exporter: ThroughputExporter) -> None:
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            exporter.record_step(5)

    thread = threading.Thread(target=train)
    thread.start()
    try:
        for _ in range(30):
            examples, steps = counts(exporter.port)
            assert examples == 5 * steps
    finally:
        stop.set()
        thread.join()


def gauges(port: int) -> dict[str, float]:
    """{gauge name: value} as Prometheus would read them (the counters' ``_created`` samples apart)."""
    return {s.name: s.value for f in families(port) if f.type == "gauge" for s in f.samples
            if not s.name.endswith("_created")}


def test_progress_is_served_only_once_a_global_step_was_read(exporter: ThroughputExporter) -> None:
    """No series before the first read (a 0 would say the job trained nothing); then the global
    step times the examples each stands for, going back with a restored checkpoint, while the
    counters only grow."""
    counter = StepCounter(exporter, 32)
    counter.steps(10)
    assert gauges(exporter.port) == {} and exporter.progress() is None
    counter.global_step(37, 32.0)  # an asynchronous job: every worker's step adds one
    assert gauges(exporter.port) == {"advisor_training_progress_examples": 37 * 32}
    counter.global_step(500, 3 * 32.0)  # a synchronous update of R = 3 batches adds one
    assert gauges(exporter.port) == {"advisor_training_progress_examples": 48_000}
    counter.global_step(400, 3 * 32.0)  # restored from the checkpoint at 400
    assert exporter.progress() == 38_400 and counts(exporter.port) == (320, 10)


def test_bad_progress_is_refused_and_keeps_the_last(exporter: ThroughputExporter) -> None:
    counter = StepCounter(exporter, 8)
    counter.global_step(5, 8.0)
    for step, per_step in ((-1, 8.0), (5, 0.0), (5, float("nan")), (5, float("inf")), (5, -8.0)):
        with pytest.raises(ValueError, match="global step"):
            counter.global_step(step, per_step)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="progress"):
            exporter.record_progress(bad)
    assert exporter.progress() == 40


def test_the_global_step_is_read_when_due_and_exported_once_it_moved(
        exporter: ThroughputExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read at once, then one every 10 s of the hook's clock; the first read only marks where
    the step stood (a step the training op never advances would say the job trained nothing), so
    the gauge appears with the first read that differs, and follows every read after it."""
    monkeypatch.setattr(throughput_module, "GLOBAL_STEP_EVERY_S", 10.0)
    now = [100.0]
    progress = GlobalStepProgress(StepCounter(exporter, 32), clock=lambda: now[0])
    assert progress.due() and not progress.due()  # the first at once; the next 10 s later
    now[0] = 109.9
    assert not progress.due()
    now[0] = 110.0
    assert progress.due()
    progress.seen(400, 32.0)  # restored at 400: where it stands, not yet progress
    progress.seen(400, 32.0)
    assert exporter.progress() is None and gauges(exporter.port) == {}
    progress.seen(401, 32.0)
    assert exporter.progress() == 401 * 32
    progress.seen(400, 32.0)  # set back again (a restore): followed
    assert exporter.progress() == 400 * 32


def test_close_stops_serving(exporter: ThroughputExporter) -> None:
    port = exporter.port
    exporter.close()
    with pytest.raises(OSError):
        scrape(port)


# --- ADVISOR_METRICS_PORT ---------------------------------------------------------------------------


@pytest.mark.parametrize("environ", [{}, {"ADVISOR_METRICS_PORT": ""}, {"ADVISOR_METRICS_PORT": "  "}])
def test_no_port_no_exporter(environ: dict[str, str]) -> None:
    assert metrics_port(environ) is None and exporter_from_env(environ) is None


@pytest.mark.parametrize("text", ["http", "80.5", "-1", "0", "70000", "65536", "8_080", "９０９０"])
def test_a_bad_port_fails_naming_the_variable(text: str) -> None:
    with pytest.raises(ProfilingConfigError, match="ADVISOR_METRICS_PORT"):
        exporter_from_env({"ADVISOR_METRICS_PORT": text})


@pytest.mark.parametrize(("text", "port"), [("1", 1), (" 9090 ", 9090), ("65535", 65535)])
def test_good_ports(text: str, port: int) -> None:
    assert metrics_port({"ADVISOR_METRICS_PORT": text}) == port


def test_a_port_in_use_fails_naming_the_variable_and_can_be_retried(port: int) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port)}
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", port))
        taken.listen()
        with pytest.raises(ProfilingConfigError, match=f"ADVISOR_METRICS_PORT={port}: cannot serve"):
            exporter_from_env(env)
    exporter = exporter_from_env(env)  # the failure was not remembered
    assert exporter is not None and exporter.port == port


def test_one_exporter_per_port_shared_by_every_caller(port: int) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port)}
    first = exporter_from_env(env)
    second = exporter_from_env(dict(env))  # a second hook, a second fit(): the same counters
    assert first is not None and first is second and first.port == port
    first.record_step(8)
    second.record_step(8)
    assert counts(port) == (16, 2)
    first.close()
    third = exporter_from_env(env)  # closed: a new one on the same port, counting from 0
    assert third is not None and third is not first and counts(port) == (0, 0)


def test_the_default_environment_is_os_environ(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_METRICS_PORT", str(port))
    exporter = exporter_from_env()
    assert exporter is not None and exporter.port == port


# --- what the hook and the callback count ----------------------------------------------------------


def tf_config(task: str, index: int = 0) -> str:
    cluster = {"ps": ["p:1"], "worker": ["w0:1", "w1:1"], "chief": ["c:1"], "evaluator": ["e:1"]}
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": index}})


@pytest.mark.parametrize(
    ("task", "index"), [("worker", 0), ("worker", 1), ("chief", 0), ("master", 0), (None, None)]
)
def test_training_tasks_count_with_the_code_batch_size(live_port: int, task: str | None, index: int | None) -> None:
    env = {"ADVISOR_METRICS_PORT": str(live_port)}
    if task is not None:
        env["TF_CONFIG"] = tf_config(task, index or 0)
    counter = step_counter_from_env(24, env)
    assert counter is not None and counter.examples_per_step == 24 and counter.exporter.port == live_port
    examples, steps = counts(live_port)
    counter.step()
    counter.step()
    assert counts(live_port) == (examples + 48, steps + 2)


@pytest.mark.parametrize("task", ["ps", "evaluator", "some-sidecar"])
def test_other_tasks_count_nothing_and_open_no_port(port: int, task: str) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port), "TF_CONFIG": tf_config(task)}
    assert step_counter_from_env(24, env) is None
    assert step_counter_from_env(None, env) is None  # and need no batch size
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", port))  # still free


def test_without_a_port_nothing_is_counted_even_when_profiling() -> None:
    env = {"TF_CONFIG": tf_config("worker"), "ADVISOR_PROFILE": "1", "ADVISOR_BATCH_SIZE": "8"}
    assert step_counter_from_env(24, env) is None


def test_counting_is_independent_of_profiling(live_port: int) -> None:
    base = {"ADVISOR_METRICS_PORT": str(live_port), "TF_CONFIG": tf_config("worker")}
    off = step_counter_from_env(16, base)
    on = step_counter_from_env(16, {**base, "ADVISOR_PROFILE": "1"})
    assert off is not None and on is not None and off.exporter is on.exporter


def test_the_environment_batch_size_overrides_the_code(live_port: int) -> None:
    env = {"ADVISOR_METRICS_PORT": str(live_port), "TF_CONFIG": tf_config("worker"), "ADVISOR_BATCH_SIZE": "64"}
    counter = step_counter_from_env(16, env)
    assert counter is not None and counter.examples_per_step == 64
    assert step_counter_from_env(None, env) == StepCounter(counter.exporter, 64)


def test_counting_without_a_batch_size_fails_naming_what_to_set_and_binds_nothing(port: int) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port), "TF_CONFIG": tf_config("worker")}
    with pytest.raises(ProfilingConfigError) as caught:
        step_counter_from_env(None, env, who="AdvisorKerasCallback")
    message = str(caught.value)
    for words in ("ADVISOR_METRICS_PORT", "batch_size=", "AdvisorKerasCallback", "ADVISOR_BATCH_SIZE"):
        assert words in message
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", port))  # nothing was started


@pytest.mark.parametrize(
    ("code", "env_value", "words"),
    [(0, None, "batch_size=0"), (True, None, "batch_size=True"), (8.0, None, "batch_size=8.0"),
     (8, "eight", "ADVISOR_BATCH_SIZE"), (8, "0", "ADVISOR_BATCH_SIZE")],
)
def test_unusable_batch_sizes_fail(port: int, code: object, env_value: str | None, words: str) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port), "TF_CONFIG": tf_config("worker")}
    if env_value is not None:
        env["ADVISOR_BATCH_SIZE"] = env_value
    with pytest.raises(ProfilingConfigError, match=words):
        step_counter_from_env(code, env)  # type: ignore[arg-type]


def test_a_bad_port_fails_on_every_task() -> None:
    # A typo in the pod template should show at once, not only on the pods that happen to train.
    with pytest.raises(ProfilingConfigError, match="ADVISOR_METRICS_PORT"):
        step_counter_from_env(8, {"ADVISOR_METRICS_PORT": "x", "TF_CONFIG": tf_config("ps")})


def test_a_bad_tf_config_fails_when_counting(port: int) -> None:
    with pytest.raises(ProfilingConfigError, match="TF_CONFIG"):
        step_counter_from_env(8, {"ADVISOR_METRICS_PORT": str(port), "TF_CONFIG": "{not json"})


# --- Keras batch-end reports ------------------------------------------------------------------------


def test_keras_reports_one_batch_at_a_time(sink: ThroughputExporter) -> None:
    added = Since(sink)
    batches = BatchEndSteps(StepCounter(sink, 10))
    for epoch_length in (3, 2):  # two epochs: batches 0, 1, 2 then 0, 1
        batches.epoch_begin()
        for index in range(epoch_length):
            batches.batch_end(index)
    assert added.counts() == (5, 50)


def test_keras_reports_every_steps_per_execution(sink: ThroughputExporter) -> None:
    # steps_per_execution=4: Keras reports the last batch of each execution, 3, 7 and 11.
    added = Since(sink)
    batches = BatchEndSteps(StepCounter(sink, 10))
    batches.epoch_begin()
    for index in (3, 7, 11):
        batches.batch_end(index)
    batches.epoch_begin()
    batches.batch_end(3)
    assert added.counts() == (16, 160)


@pytest.mark.parametrize("order", list(itertools.permutations((3, 7, 11))))
def test_keras_reports_run_out_of_order_count_the_same(sink: ThroughputExporter, order: tuple[int, ...]) -> None:
    # Keras may run batch-end reports on a thread pool: whatever the order, batches 0-11 ran.
    added = Since(sink)
    batches = BatchEndSteps(StepCounter(sink, 10))
    batches.epoch_begin()
    for index in order:
        batches.batch_end(index)
    assert added.counts() == (12, 120)


def test_keras_reports_from_a_thread_pool_are_all_counted(sink: ThroughputExporter) -> None:
    added = Since(sink)
    batches = BatchEndSteps(StepCounter(sink, 2))
    batches.epoch_begin()
    indices = list(range(20_000))
    random.Random(7).shuffle(indices)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(batches.batch_end, indices, chunksize=50))
    assert added.counts() == (20_000, 40_000)


def test_a_repeated_batch_index_is_not_counted_twice(sink: ThroughputExporter) -> None:
    added = Since(sink)
    batches = BatchEndSteps(StepCounter(sink, 2))
    batches.batch_end(0)
    batches.batch_end(0)
    assert added.counts() == (1, 2)
