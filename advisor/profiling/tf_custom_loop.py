"""``AdvisorStepProfiler``: records a profile of a TF2 custom training loop (``strategy.run`` of
the user's step inside the user's ``tf.function``) under ``tf.distribute.MultiWorkerMirroredStrategy``
and uploads the same all-reduce bundle (kind ``tf-mwms``) as the Keras callback
``keras_mwms.AdvisorMwmsCallback``, which a custom loop never calls::

    profiler = AdvisorStepProfiler(strategy, model, optimizer, batch_size=64, model_name="mlp")
    with profiler:
        for batch in dist_dataset:
            with profiler.step():
                train_step(batch)  # a tf.function that calls strategy.run(step_fn, args=(batch,))
            if profiler.should_stop:
                break

Why a ``with`` block per step: it is the shape TensorFlow itself gives custom loops for marking
steps (``tf.profiler.experimental.Trace("train", step_num=...)``), it leaves the user's
``tf.function`` untouched (a wrapper around it would hide retracing and its signature), and it
says what one step is even when the loop fetches data or logs around the call: a step begins
when its block is entered and ends when the next one is, so everything the loop does between
steps counts, as it does for the Keras callback. The outer ``with profiler:`` (or ``close()``)
uploads the steps traced so far when the loop ends before the traced steps are all done; ending
a step's block with ``StopIteration`` or ``tf.errors.OutOfRangeError`` (the data ran out) does
the same, any other exception stops the profiler and uploads nothing.

With ``ADVISOR_PROFILE=1`` (``config.load_config``; otherwise it does nothing and ``step()`` is
a shared no-op block) it lets ``ADVISOR_PROFILE_WARMUP`` steps pass, traces the next
``ADVISOR_PROFILE_STEPS`` with ``tf.profiler.experimental``, then builds and uploads the bundle
when the step after them begins (``mwms_tracer.StepTracer``, shared with the callback: same
trace reading, gradients from the variables' shapes, TF's pack layout, the link rate from
``ADVISOR_BANDWIDTH_MBIT`` or the interface's speed, a failed upload logged and training going
on). ``should_stop`` turns true once the upload is accepted, unless
``ADVISOR_STOP_AFTER_UPLOAD=0``.

Independently, with ``ADVISOR_METRICS_PORT`` set, every step block that ends without an exception
counts one step of ``batch_size`` for Prometheus (``throughput``), and the job's progress is read
from the optimizer's ``iterations`` (a Keras optimizer; one per step of the whole job, worth the
batch of every worker under MultiWorkerMirroredStrategy) when a read is due, not while it records.
So the same ``with profiler.step():`` serves the profiling run and the job.

It refuses LOUDLY, with the callback's errors and words, at construction: ``ProfilingConfigError``
for bad ``ADVISOR_*`` values or no batch size; ``ProfilingUnsupportedError`` for another strategy
(``ParameterServerStrategy``: use the TF1 hook; ``MirroredStrategy`` or the default: not a
multi-worker job), more than one replica in sync or more than one worker in TF_CONFIG, no
optimizer given; when tracing starts, a model without trainable variables or with a variable of unknown
shape; at the end of the traced steps, a profiler that wrote no trace, a step without
``tf.GradientTape`` ops (``jit_compile=True``), or several optimizer updates in one step (a loop
of steps inside one ``tf.function`` call cannot be cut into steps).

The step must take the gradients of ``model``'s variables with ``tf.GradientTape`` and all-reduce
them in one call in that order, which is what ``optimizer.apply_gradients(zip(grads,
model.trainable_variables))`` does (Keras's optimizer makes one ``ReplicaContext.all_reduce`` of
the list it is given); the order matters only when ``CommunicationOptions.bytes_per_pack`` > 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import tensorflow as tf

from advisor.profiling.config import ENV_BATCH_SIZE, ProfilingConfig, choose_batch_size, load_config
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.keras_callback import read_iterations
from advisor.profiling.mwms_trace import check_single_worker, declared_collectives
from advisor.profiling.mwms_tracer import StepTracer, TracedProgram, TracerOwner, check_strategy, describe_program
from advisor.profiling.throughput import GlobalStepProgress, StepCounter, step_counter_from_env
from advisor.profiling.upload import RetryPolicy

log = logging.getLogger("advisor.profiling")

WHO = "AdvisorStepProfiler"
_NOOP = contextlib.nullcontext()
# How a custom loop learns that its data ran out: the end of training, not a failure.
_DATA_END = (StopIteration, tf.errors.OutOfRangeError)


class AdvisorStepProfiler(TracerOwner):
    """Traces a one-worker MWMS custom training loop and uploads the all-reduce bundle (module docstring).

    ``strategy`` is the ``MultiWorkerMirroredStrategy`` the loop runs its step with; ``model`` is
    what the step trains: a Keras model or ``tf.Module`` (its ``trainable_variables``, read when
    tracing starts, after the warm-up has built it), or the list of variables the step takes
    gradients for; ``optimizer`` is the Keras optimizer the step applies them with, or, for
    hand-written updates, the name scope they run under (``tf.name_scope("update")``: "update").
    ``batch_size`` is the examples per step of this worker (``ADVISOR_BATCH_SIZE`` overrides it);
    ``model_name`` goes into the bundle. ``collectives`` are the all-reduces each step runs
    besides the gradients', as (name, bytes): a ``strategy.reduce(SUM, loss)`` is ``("loss", 4)``
    (default none; one worker's trace cannot show them).
    """

    def __init__(
        self,
        strategy: Any,
        model: Any,
        optimizer: Any,
        batch_size: int | None = None,
        model_name: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        collectives: Iterable[tuple[str, int]] = (),
    ) -> None:
        env = os.environ if environ is None else environ
        extra = declared_collectives(collectives, WHO)
        self._config: ProfilingConfig | None = load_config(env)
        self._tracer: StepTracer | None = None
        self._stop = False
        self._last_end_ns: int | None = None
        self._step = _Step(self)
        self._counter: StepCounter | None = step_counter_from_env(batch_size, env, who=WHO)
        self._progress = (GlobalStepProgress(self._counter)
                          if self._counter is not None and self._config is None and not isinstance(optimizer, str)
                          else None)
        self._strategy, self._optimizer = strategy, optimizer  # the step's: what the progress and the trace read
        if self._config is None:
            return
        workers = len(self._config.task.worker_hosts)
        check_single_worker(1, workers, "the cluster")
        batch = choose_batch_size(
            self._config.batch_size, batch_size,
            missing=f"{WHO} needs the examples per step: pass batch_size= or set {ENV_BATCH_SIZE}",
        )
        if optimizer is None:
            raise ProfilingUnsupportedError(
                f"{WHO} needs the step's optimizer (or the name scope of its hand-written updates): their time "
                "is part of the step the ring model replays"
            )
        check_strategy(strategy, WHO, "Create tf.distribute.MultiWorkerMirroredStrategy() before any other "
                       "TensorFlow call, build the model and optimizer inside its scope(), run the step with its "
                       "run() and pass that strategy", workers)
        scope = optimizer if isinstance(optimizer, str) else str(optimizer.name)
        self._model, self._optimizer_scope = model, scope
        self._tracer = StepTracer(
            self._config, env, batch_size=batch, model_name=model_name or self._config.model_name,
            framework=f"tensorflow {tf.__version__}, custom training loop", describe=self._described, retry=retry,
            collectives=lambda: list(extra),
        )

    @property
    def should_stop(self) -> bool:
        """True once the profile is accepted and ``ADVISOR_STOP_AFTER_UPLOAD`` is on: end the loop."""
        return self._stop

    @property
    def counter(self) -> StepCounter | None:
        """What counts this worker's steps for Prometheus, or None when nothing is counted."""
        return self._counter

    def step(self) -> contextlib.AbstractContextManager[None]:
        """The block of one training step: it begins when entered (see the module docstring)."""
        return _NOOP if self._tracer is None and self._counter is None else self._step

    def close(self) -> None:
        """The loop is over: upload the steps traced so far, if the traced steps were not all done."""
        if self._tracer is not None:
            self._tracer.end(self._last_end_ns)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._tracer is None:
            return
        if kind is None or issubclass(kind, _DATA_END):
            self.close()
        else:
            self._tracer.abandon()

    def _described(self) -> TracedProgram:
        variables = getattr(self._model, "trainable_variables", self._model)
        return describe_program(
            list(variables), self._strategy, self._optimizer_scope,
            empty_hint=f" (when tracing starts, after the warm-up steps: build the model before, or pass {WHO} the "
                       "variables the step trains)",
        )

    def _begun(self) -> None:
        if self._tracer is None or self._config is None:
            return
        if self._tracer.begin() and self._config.stop_after_upload:
            log.info("advisor: profiling done; the loop should stop (profiler.should_stop)")
            self._stop = True

    def _ended(self, kind: type[BaseException] | None) -> None:
        if self._counter is not None and kind is None:
            self._counted()
        if self._tracer is None:
            return
        if kind is None:
            self._last_end_ns = time.time_ns()
        elif issubclass(kind, _DATA_END):
            self._tracer.end(None, last_step_ran=False)
        else:
            self._tracer.abandon()

    def _counted(self) -> None:
        """One step done: counted, and the job's progress read when a read is due."""
        assert self._counter is not None
        self._counter.step()
        if self._progress is not None and self._progress.due():
            read_iterations(self._progress, self._counter, self._optimizer, self._strategy)


class _Step:
    """The reusable ``with`` block of one step (``AdvisorStepProfiler.step``)."""

    __slots__ = ("_profiler",)

    def __init__(self, profiler: AdvisorStepProfiler) -> None:
        self._profiler = profiler

    def __enter__(self) -> None:
        self._profiler._begun()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._profiler._ended(kind)
