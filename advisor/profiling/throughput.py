"""Observed throughput: a training worker counts its examples and steps for Prometheus to scrape.

Why: a prediction is only as good as its agreement with the job it predicted. With
``ADVISOR_METRICS_PORT`` set in the training pods (docs/profiling.md, "Observed throughput"),
the profiling hook and the Keras callback count every step of the real (not only the
profiling) run and serve the counts on that port; Prometheus scrapes the worker pods (the
chart's optional PodMonitor adds the ``job_namespace`` and ``tfjob`` labels), and
``AdvisorPredictionFarFromObserved`` compares
``sum by (job_namespace, tfjob) (rate(advisor_training_examples_total[10m]))`` with the controller's
``advisor_predicted_current_throughput_examples_per_second``.

Counters, not a rate: Prometheus computes rates over whatever window a query asks, and a
counter survives scrapes that are missed. Beside them, where the worker can read the job's global
step, one gauge: the examples the whole job has trained by that step. A counter starts again at 0
in a restarted pod and counts the steps it trains again after its checkpoint a second time; the
global step comes back with the checkpoint, so the gauge is the progress a deadline counts. The
counts are plain numbers behind one lock and are read together at scrape time, so counting a step
costs well under a microsecond (``benchmarks/counting_cost.py``) and a scrape never sees a step
without its examples. Only the standard library and prometheus-client
(both already in the package) are needed; nothing here imports TensorFlow.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from advisor.profiling.config import (
    ENV_BATCH_SIZE,
    ENV_TF_CONFIG,
    batch_size_from_env,
    choose_batch_size,
    parse_tf_config,
)
from advisor.profiling.errors import ProfilingConfigError

log = logging.getLogger("advisor.profiling")

ENV_METRICS_PORT = "ADVISOR_METRICS_PORT"
EXAMPLES = "advisor_training_examples"  # exported as ..._total
STEPS = "advisor_training_steps"
EXAMPLES_HELP = ("Training examples this worker has processed that move the model (with SyncReplicasOptimizer's "
                 "backup workers, replicas_to_aggregate / total_num_replicas of its batch per step).")
STEPS_HELP = "Training steps this worker has run."
PROGRESS = "advisor_training_progress_examples"
GLOBAL_STEP_EVERY_S = 10.0  # how often a worker reads its global step: a scrape every 15-60 s needs no fresher one
PROGRESS_HELP = ("Training examples the whole job has trained by its global step (restored with a checkpoint, the "
                 "same on every worker): the job's progress, which a restarted pod does not count twice.")


class ThroughputExporter:
    """Counts examples and steps and serves them at ``http://addr:port/metrics`` (port 0: any free)."""

    def __init__(self, port: int, *, addr: str = "0.0.0.0") -> None:
        self._lock = threading.Lock()
        self._steps = 0
        self._examples = 0.0  # a synchronous job's worker counts a share of its batch (sync_share.py)
        self._progress: float | None = None  # none until a global step was read
        self._created = time.time()
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Counts(self.snapshot, self._created))
        self._server: Any
        self._thread: threading.Thread
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            raise ProfilingConfigError(f"{ENV_METRICS_PORT}={port}: cannot serve metrics there ({exc})") from None
        self.port = int(self._server.server_address[1])

    def record_step(self, examples: float) -> None:
        """One training step of ``examples`` examples (this worker's batch, or its counted share)."""
        if not (math.isfinite(examples) and examples >= 0):
            raise ValueError(f"examples must be >= 0, got {examples}")
        with self._lock:
            self._steps += 1
            self._examples += examples

    def record_steps(self, steps: int, examples: float) -> None:
        """``steps`` training steps of ``examples`` examples in all (Keras' ``steps_per_execution``)."""
        if steps < 0 or not (math.isfinite(examples) and examples >= 0):
            raise ValueError(f"steps and examples must be >= 0, got {steps} and {examples}")
        with self._lock:
            self._steps += steps
            self._examples += examples

    def record_progress(self, examples: float) -> None:
        """The examples the whole job has trained by its global step, as last read (it may go back:
        a job restarted from a checkpoint)."""
        if not (math.isfinite(examples) and examples >= 0):
            raise ValueError(f"progress must be a finite count >= 0, got {examples}")
        with self._lock:
            self._progress = examples

    def counts(self) -> tuple[int, float]:
        """(steps, examples) counted so far, read together."""
        with self._lock:
            return self._steps, self._examples

    def progress(self) -> float | None:
        """The job's progress as last recorded; None before the first."""
        with self._lock:
            return self._progress

    def snapshot(self) -> tuple[int, float, float | None]:
        """(steps, examples, progress), read together for one scrape."""
        with self._lock:
            return self._steps, self._examples, self._progress

    def close(self) -> None:
        """Stop serving; ``exporter_from_env`` then starts a new exporter (counting from 0) on that port."""
        with _shared_lock:
            for port, exporter in list(_shared.items()):
                if exporter is self:
                    del _shared[port]
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Counts(Collector):
    """The exporter's two counters and, once recorded, the progress gauge: one snapshot per scrape."""

    def __init__(self, snapshot: Callable[[], tuple[int, float, float | None]], created: float) -> None:
        self._snapshot = snapshot
        self._created = created

    def collect(self) -> Iterator[Metric]:
        steps, examples, progress = self._snapshot()
        yield CounterMetricFamily(EXAMPLES, EXAMPLES_HELP, value=examples, created=self._created)
        yield CounterMetricFamily(STEPS, STEPS_HELP, value=steps, created=self._created)
        if progress is not None:  # a series of 0 would read as a job that has trained nothing
            yield GaugeMetricFamily(PROGRESS, PROGRESS_HELP, value=progress)


_shared: dict[int, ThroughputExporter] = {}
_shared_lock = threading.Lock()


def metrics_port(environ: Mapping[str, str] | None = None) -> int | None:
    """``ADVISOR_METRICS_PORT`` as a port number; None when unset or empty."""
    env = os.environ if environ is None else environ
    text = (env.get(ENV_METRICS_PORT) or "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ProfilingConfigError(f"{ENV_METRICS_PORT} must be a port number, got {text!r}")
    port = int(text)
    if not 0 < port < 65536:
        raise ProfilingConfigError(f"{ENV_METRICS_PORT} must be between 1 and 65535, got {port}")
    return port


def exporter_from_env(environ: Mapping[str, str] | None = None) -> ThroughputExporter | None:
    """The process's exporter on ``ADVISOR_METRICS_PORT``, started once; None when unset or empty.

    Shared per port: a program that builds its hook twice (a new session, a second ``fit``)
    counts on into the same counters instead of failing to bind the port again.
    """
    port = metrics_port(environ)
    return None if port is None else _shared_exporter(port)


def _shared_exporter(port: int) -> ThroughputExporter:
    with _shared_lock:
        if port not in _shared:
            _shared[port] = ThroughputExporter(port)
        return _shared[port]


@dataclass(frozen=True, slots=True)
class StepCounter:
    """What the hook and the callback count with: the exporter and this worker's examples per step
    (its batch, or the share of it that an update aggregates: ``sync_share.py``)."""

    exporter: ThroughputExporter
    examples_per_step: float

    def global_step(self, step: int, examples_per_global_step: float) -> None:
        """The job's global step as read, worth ``examples_per_global_step`` examples each (an
        asynchronous worker's batch; a synchronous update's R batches; a synchronous all-reduce's
        global batch): the job's progress."""
        if not (math.isfinite(examples_per_global_step) and examples_per_global_step > 0):
            raise ValueError(f"examples per global step must be > 0, got {examples_per_global_step}")
        if step < 0:
            raise ValueError(f"a global step cannot be negative, got {step}")
        self.exporter.record_progress(step * examples_per_global_step)

    def step(self) -> None:
        """One completed training step."""
        self.exporter.record_step(self.examples_per_step)

    def steps(self, count: int) -> None:
        """``count`` completed training steps."""
        self.exporter.record_steps(count, count * self.examples_per_step)


class GlobalStepProgress:
    """The job's progress from a global step that a hook reads now and then (``due``), exported once
    the step has been seen to move: a global step that the training op does not advance would read
    as a job that trained nothing. What is read and how is the hook's: a fetch with a session run,
    the optimizer's ``iterations``."""

    __slots__ = ("_clock", "_counter", "_first", "_moved", "_next")

    def __init__(self, counter: StepCounter, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._counter, self._clock = counter, clock
        self._next = -math.inf  # the first step is read at once
        self._first: int | None = None
        self._moved = False

    def due(self) -> bool:
        """Whether to read the global step now (every ``GLOBAL_STEP_EVERY_S``); a True starts the wait."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + GLOBAL_STEP_EVERY_S
        return True

    def seen(self, step: int, examples_per_step: float) -> None:
        """The global step as read, worth ``examples_per_step`` examples each."""
        if self._first is None:
            self._first = step
        self._moved = self._moved or step != self._first
        if self._moved:
            self._counter.global_step(step, examples_per_step)


class BatchEndSteps:
    """Keras' batch-end reports turned into counted steps, in whatever order they arrive.

    Keras reports the index of the last batch it ran, from 0 in each epoch, once per
    ``steps_per_execution`` batches, and may run the reports on a thread pool (the callback is
    ``async_safe`` so as not to take that away from the user's training). So the steps done
    are the distance from the highest index seen this epoch; a report overtaken by a later one
    was counted with it. Keras finishes every report of an epoch before the next begins.
    """

    __slots__ = ("_counter", "_last", "_lock")

    def __init__(self, counter: StepCounter) -> None:
        self._counter = counter
        self._last = -1
        self._lock = threading.Lock()

    def epoch_begin(self) -> None:
        with self._lock:
            self._last = -1

    def batch_end(self, batch: int) -> None:
        with self._lock:
            done = batch - self._last
            if done <= 0:
                return
            self._last = batch
        if done == 1:
            self._counter.step()
        else:
            self._counter.steps(done)


def step_counter_from_env(
    batch_size: int | None, environ: Mapping[str, str] | None = None, *, who: str = "the advisor hook"
) -> StepCounter | None:
    """A counter when ``ADVISOR_METRICS_PORT`` is set and this task trains; else None.

    Independent of ``ADVISOR_PROFILE``. Counted: a worker, the chief/master (in between-graph
    replication it trains like a worker), or a process without ``TF_CONFIG`` (run by hand: the
    port was asked for explicitly). Not counted, and no port opened: parameter servers,
    evaluators and any other task type, whose ``session.run`` calls are not training steps.
    ``ADVISOR_BATCH_SIZE`` overrides ``batch_size``; with neither, counting would export 0
    examples, so this raises ``ProfilingConfigError`` naming both instead.
    """
    env = os.environ if environ is None else environ
    port = metrics_port(env)
    if port is None:
        return None
    task = parse_tf_config(env.get(ENV_TF_CONFIG))
    if not task.trains:
        log.info("advisor: %s:%s counts no training steps (only workers and the chief do)",
                 task.task_type, task.task_index)
        return None
    examples = choose_batch_size(
        batch_size_from_env(env), batch_size,
        missing=f"{ENV_METRICS_PORT} is set but the batch size is unknown, so examples cannot be counted: "
                f"pass batch_size=... to {who} or set {ENV_BATCH_SIZE}",
    )
    exporter = _shared_exporter(port)
    log.info("advisor: counting training steps of %d examples on :%d/metrics", examples, exporter.port)
    return StepCounter(exporter, examples)
