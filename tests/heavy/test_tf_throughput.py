"""Observed throughput inside real TensorFlow: the hook and the Keras callback count every step.

Run as the rest of the heavy suite (``/tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy``).
Each test sets ``ADVISOR_METRICS_PORT`` to a free port, trains a known number of steps and
scrapes ``/metrics`` over HTTP; the expected counts are steps x batch, worked out by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import advisor.profiling as profiling
from advisor.profiling import throughput
from tests.heavy.test_tf_profiling import (
    BATCH, EXAMPLE, STEPS, UNTRACED, WARMUP, _cluster, _environ, _tf_config, _train,
)
from tests.profiling import Receiver, scraped

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu (see test_tf_profiling.py)")


def counts(port: int) -> tuple[float, float]:
    """(examples, steps) scraped from ``127.0.0.1:port/metrics``."""
    values = scraped(port)
    return values["advisor_training_examples_total"], values["advisor_training_steps_total"]


def test_the_hook_counts_every_step_of_a_monitored_training_session(tf: Any, port: int) -> None:
    cluster = _cluster()
    env = {"TF_CONFIG": _tf_config(cluster, "worker"), "ADVISOR_METRICS_PORT": str(port)}  # no ADVISOR_PROFILE
    hook = profiling.AdvisorProfilingHook(batch_size=BATCH, environ=env)
    assert not hook.active and hook.counter is not None
    runs = _train(tf, cluster, hook, max_runs=37)
    assert runs == 37
    assert counts(port) == (37 * 8, 37)  # BATCH is 8


def test_traced_steps_count_too(tf: Any, port: int, tmp_path: Path) -> None:
    cluster = _cluster()
    token = tmp_path / "token"
    token.write_text("t")
    with Receiver() as rx:
        env = _environ(cluster, rx.url, token, ADVISOR_METRICS_PORT=str(port))
        hook = profiling.AdvisorProfilingHook(batch_size=BATCH, environ=env)
        runs = _train(tf, cluster, hook)
    assert hook.active and len(rx.requests) == 1
    assert runs == WARMUP + STEPS + UNTRACED == 73  # 3 warm-up, 60 traced, 10 timed untraced, then the stop
    assert counts(port) == (73 * 8, 73)


def test_the_hook_without_a_batch_size_refuses_to_count(tf: Any, port: int) -> None:
    with pytest.raises(profiling.ProfilingConfigError, match="ADVISOR_BATCH_SIZE"):
        profiling.AdvisorProfilingHook(environ={"ADVISOR_METRICS_PORT": str(port)})


def _keras_fit(tf: Any, callback: Any, *, examples: int, batch: int, epochs: int, steps_per_execution: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 16)).astype("float32")
    y = rng.integers(0, 4, size=examples)
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", steps_per_execution=steps_per_execution)
    model.fit(x, y, batch_size=batch, epochs=epochs, callbacks=[callback], verbose=0)


def test_the_keras_callback_counts_every_batch(tf: Any, port: int) -> None:
    callback = profiling.AdvisorKerasCallback(batch_size=8, environ={"ADVISOR_METRICS_PORT": str(port)})
    _keras_fit(tf, callback, examples=64, batch=8, epochs=3, steps_per_execution=1)
    assert counts(port) == (3 * 64, 3 * 8)  # 64 / 8 = 8 steps per epoch, 3 epochs


def test_the_keras_callback_counts_every_step_of_each_execution(tf: Any, port: int) -> None:
    env = {"ADVISOR_METRICS_PORT": str(port), "ADVISOR_BATCH_SIZE": "8"}
    callback = profiling.AdvisorKerasCallback(batch_size=999, environ=env)  # the environment wins
    _keras_fit(tf, callback, examples=64, batch=8, epochs=2, steps_per_execution=4)
    assert counts(port) == (2 * 64, 2 * 8)  # 2 reports of 4 steps per epoch


def test_the_keras_callback_is_inert_without_a_port(tf: Any) -> None:
    callback = profiling.AdvisorKerasCallback(environ={})  # no batch size needed either
    assert callback.counter is None and callback.async_safe
    _keras_fit(tf, callback, examples=16, batch=8, epochs=1, steps_per_execution=1)


@pytest.fixture
def example_ps(tf: Any, tmp_path: Path) -> Iterator[dict[str, list[str]]]:
    """The example's parameter server as its own process (ended by its pid when the test ends)."""
    cluster = _cluster()
    env = {**os.environ, "TF_CONFIG": _tf_config(cluster, "ps")}
    with (tmp_path / "ps.log").open("w") as out:
        ps = subprocess.Popen([sys.executable, str(EXAMPLE)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield cluster
    finally:
        ps.kill()
        ps.wait(timeout=30)


def test_the_shipped_example_serves_its_counts_while_it_trains(
    example_ps: dict[str, list[str]], port: int, tmp_path: Path
) -> None:
    env = {**os.environ, "TF_CONFIG": _tf_config(example_ps, "worker"), "ADVISOR_METRICS_PORT": str(port)}
    env.pop("ADVISOR_PROFILE", None)
    with (tmp_path / "worker.log").open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--steps", "1000000", "--batch-size", "16", "--layers", "64,32,10"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        seen: list[tuple[float, float]] = []
        while time.monotonic() < deadline and (not seen or seen[-1][1] < 50):
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            try:
                seen.append(counts(port))
            except OSError:  # not serving yet (TensorFlow is still starting)
                pass
            time.sleep(0.2)
    finally:
        worker.kill()
        worker.wait(timeout=30)
    assert seen and seen[-1][1] >= 50, seen[-5:]
    assert all(examples == 16 * steps for examples, steps in seen)  # every scrape: 16 examples a step
    assert [s for _, s in seen] == sorted(s for _, s in seen)  # a counter never goes back


# --- the job's progress by its global step ------------------------------------------------------------


def progress(port: int) -> float | None:
    """``advisor_training_progress_examples`` scraped from ``127.0.0.1:port/metrics``; None without it."""
    return scraped(port).get("advisor_training_progress_examples")


class _Crash(Exception):
    """Ends a training session the way a killed pod does: no final checkpoint."""


def _train_local(tf: Any, hook: Any, checkpoints: Path, *, runs: int, save_steps: int | None) -> None:
    """A one-process MLP in a MonitoredTrainingSession that restores the latest checkpoint in
    ``checkpoints`` and saves every ``save_steps``; it ends after ``runs`` runs as a crash does."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.random.normal([BATCH, 16])
        w = tf.compat.v1.get_variable("w", [16, 4])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
        try:
            with tf.compat.v1.train.MonitoredTrainingSession(
                checkpoint_dir=str(checkpoints), save_checkpoint_steps=save_steps, save_checkpoint_secs=None,
                save_summaries_steps=None, save_summaries_secs=None, hooks=[hook], log_step_count_steps=0,
            ) as session:
                for _ in range(runs):
                    session.run(train)
                raise _Crash
        except _Crash:
            pass


def test_a_restarted_worker_reports_the_progress_its_checkpoint_kept(
        tf: Any, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """50 steps with a checkpoint every 20, then a crash; the restarted worker restores the last
    checkpoint (read from the file: 40) and trains 25 steps. The counters add every step run (75);
    the progress is the global step's, 40 + 25 = 65 steps of 8 examples, the 10 steps after the
    checkpoint counted once."""
    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)  # read it with every step
    env = {"ADVISOR_METRICS_PORT": str(port)}  # run by hand: no TF_CONFIG, no profiling
    checkpoints = tmp_path / "ckpt"
    _train_local(tf, profiling.AdvisorProfilingHook(batch_size=BATCH, environ=env), checkpoints, runs=50,
                 save_steps=20)
    assert progress(port) in (49 * 8, 50 * 8)  # the last read fetched the step before or after its update
    restored = int(tf.train.load_variable(tf.train.latest_checkpoint(str(checkpoints)), "global_step"))
    assert restored == 40
    _train_local(tf, profiling.AdvisorProfilingHook(batch_size=BATCH, environ=env), checkpoints, runs=25,
                 save_steps=None)
    assert counts(port) == (75 * 8, 75)
    assert progress(port) in ((restored + 24) * 8, (restored + 25) * 8)


def test_a_global_step_that_never_moves_is_no_progress(tf: Any, port: int, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A training op that does not advance the global step: a gauge stuck at 0 would say the job
    trained nothing, so none is exported, and the counters count as before."""
    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)
    hook = profiling.AdvisorProfilingHook(batch_size=BATCH, environ={"ADVISOR_METRICS_PORT": str(port)})
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [4])
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(w * w))  # no global_step
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook], log_step_count_steps=0,
                                                         save_summaries_steps=None, save_summaries_secs=None) as s:
            for _ in range(12):
                s.run(train)
    assert progress(port) is None and counts(port) == (12 * 8, 12)


def test_the_keras_callback_reports_the_optimizers_iterations(
        tf: Any, port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 epochs of 8 steps: 24 iterations of 8 examples. Then the iterations set back to 10, as a
    restore from a checkpoint does, and one more epoch: the progress is 18 iterations' examples
    while the counters hold all 32 steps."""
    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)
    import numpy as np

    callback = profiling.AdvisorKerasCallback(batch_size=8, environ={"ADVISOR_METRICS_PORT": str(port)})
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 16)).astype("float32"), rng.integers(0, 4, size=64)
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=8, epochs=3, callbacks=[callback], verbose=0)
    assert progress(port) == 24 * 8
    model.optimizer.iterations.assign(10)
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[callback], verbose=0)
    assert progress(port) == 18 * 8 and counts(port) == (32 * 8, 32)


def test_an_iteration_under_multi_worker_mirrored_is_every_workers_batch(tf: Any) -> None:
    """Strategies as the callback sees them (replicas in sync, this worker's devices):
    MultiWorkerMirroredStrategy (a stand-in subclass: a real one cannot be made once TensorFlow has
    run, test_keras_mwms runs two real workers) with 4 one-CPU workers, and with 2 workers of 4 GPUs
    each, takes 4 and 2 workers' batches an iteration; any other strategy the callback's own batch,
    whatever its name says."""
    from types import SimpleNamespace

    from advisor.profiling.keras_callback import workers_per_step

    class Mwms(tf.distribute.MultiWorkerMirroredStrategy):  # type: ignore[misc]
        def __init__(self, replicas: int, local: int) -> None:  # no TensorFlow set-up
            self._replicas, self._local = replicas, local

        @property
        def num_replicas_in_sync(self) -> int:
            return self._replicas

        @property
        def extended(self) -> Any:
            return SimpleNamespace(worker_devices=tuple(f"/device:GPU:{i}" for i in range(self._local)))

    class MultiWorkerMirroredStrategy:  # the name alone
        num_replicas_in_sync = 4
        extended = SimpleNamespace(worker_devices=("/device:CPU:0",))

    assert workers_per_step(Mwms(4, 1)) == 4
    assert workers_per_step(Mwms(8, 4)) == 2
    assert workers_per_step(MultiWorkerMirroredStrategy()) == 1
    assert workers_per_step(tf.distribute.get_strategy()) == 1  # the default strategy
    assert workers_per_step(tf.distribute.MirroredStrategy(["/cpu:0"])) == 1


def test_the_mwms_callback_counts_the_real_run_too(tf: Any, port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback a MultiWorkerMirroredStrategy program keeps for its profiling run counts, when
    ADVISOR_METRICS_PORT is set and it does not record, as AdvisorKerasCallback does: 2 epochs of
    8 batches, 16 iterations (here under the default strategy: one worker's batch each)."""
    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)
    callback = profiling.AdvisorMwmsCallback(batch_size=8, environ={"ADVISOR_METRICS_PORT": str(port)})
    assert callback.counter is not None
    _keras_fit(tf, callback, examples=64, batch=8, epochs=2, steps_per_execution=1)
    assert counts(port) == (2 * 64, 2 * 8) and progress(port) == 16 * 8


def test_the_custom_loop_profiler_counts_each_step_block(tf: Any, port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five step blocks that apply gradients, one that fails (not counted), then the optimizer's
    iterations set back to 2 as a restore does and one more step: 6 steps of 8 examples counted,
    progress 3 iterations' worth."""
    import keras

    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)
    optimizer = keras.optimizers.SGD(0.1)
    w = tf.Variable([1.0, 2.0])
    profiler = profiling.AdvisorStepProfiler(tf.distribute.get_strategy(), [w], optimizer, batch_size=8,
                                             environ={"ADVISOR_METRICS_PORT": str(port)})
    assert not profiler.active and profiler.counter is not None

    def step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])

    with profiler:
        for _ in range(5):
            with profiler.step():
                step()
        with pytest.raises(RuntimeError), profiler.step():
            raise RuntimeError("a failed step")
        assert counts(port) == (5 * 8, 5) and progress(port) == 5 * 8
        optimizer.iterations.assign(2)
        with profiler.step():
            step()
    assert counts(port) == (6 * 8, 6) and progress(port) == 3 * 8
