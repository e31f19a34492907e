"""``AdvisorKerasCallback``: counts Keras training steps for Prometheus; cannot record a profile.

Counting. With ``ADVISOR_METRICS_PORT`` set (and this task training, see
``throughput.step_counter_from_env``), every completed training batch counts as one step of
this worker's batch size, served for Prometheus like ``AdvisorProfilingHook``'s counts. With
``steps_per_execution`` > 1 Keras reports once per execution with the index of its last batch,
so the callback counts the batches since the previous report, not 1 per call
(``throughput.BatchEndSteps``, which also copes with Keras running the reports on a thread
pool: the callback is ``async_safe``, so adding it does not make Keras wait for every batch's
logs). Beside the counts, every ``throughput.GLOBAL_STEP_EVERY_S`` it reads the optimizer's ``iterations``
(restored with a checkpoint, e.g. by ``BackupAndRestore``) as the job's progress: each iteration
is one step of every worker under MultiWorkerMirroredStrategy, so it is worth the batch times the
workers; under any other strategy the callback's batch (with ParameterServerStrategy the chief's
callback counts the global batch). ``KerasCounting`` does both, for this callback and for
``AdvisorMwmsCallback``.

Recording. A profile needs, for each traced step, TensorFlow's ``RunMetadata``: step stats
with the ``RecvTensor`` record of every parameter pull and gradient push, and the partition
graphs that pair them. Only a ``tf.compat.v1`` session produces it (``session.run(options=
RunOptions(trace_level=FULL_TRACE, output_partition_graphs=True))``). Keras in TensorFlow 2
(Keras 2's ``tf.keras`` up to 2.15, Keras 3 from 2.16) runs every step as a ``tf.function``,
and with ``tf.distribute.ParameterServerStrategy`` schedules them through a
``ClusterCoordinator``: no session, no per-step ``RunMetadata``; ``tf.profiler`` writes XPlane
traces without partition graphs or tensor names. Recording that would mean pretending.

So when a profiling run switches recording on (``ADVISOR_PROFILE``), the callback raises
``ProfilingUnsupportedError`` at construction, before any training, with what to do instead:
for MultiWorkerMirroredStrategy (no parameter servers, all-reduce) ``AdvisorMwmsCallback``
(``keras_mwms``), which records the all-reduce profile the ring model needs from
``tf.profiler``; for ParameterServerStrategy a tf.compat.v1 training loop with
``AdvisorProfilingHook``. Without it and without a metrics port
it does nothing (a program may keep it in its callbacks).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorflow import keras

from advisor.profiling.config import profiling_enabled
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.throughput import BatchEndSteps, GlobalStepProgress, StepCounter, step_counter_from_env

log = logging.getLogger("advisor.profiling")

UNSUPPORTED = (
    "AdvisorKerasCallback cannot record a profile. For Keras with MultiWorkerMirroredStrategy "
    "(synchronous all-reduce) use advisor.profiling.AdvisorMwmsCallback(batch_size=...) instead: it "
    "traces one worker with tf.profiler. Keras with ParameterServerStrategy cannot be recorded: Keras in "
    "TensorFlow 2 runs steps as tf.functions through a ClusterCoordinator, which yields no per-step "
    "RunMetadata (step stats with transfer records and partition graphs); profile a tf.compat.v1 "
    "training loop instead: MonitoredTrainingSession(hooks=[AdvisorProfilingHook(batch_size=...)]); "
    "see docs/profiling.md"
)


class AdvisorKerasCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Counts training steps when ``ADVISOR_METRICS_PORT`` is set; refuses ``ADVISOR_PROFILE``.

    ``batch_size`` is the examples per step of this worker (``ADVISOR_BATCH_SIZE`` overrides
    it); ``model_name`` is accepted for symmetry with the hook. Raises
    ``ProfilingConfigError`` at construction when counting is asked for without a usable batch
    size or port.
    """

    def __init__(
        self,
        batch_size: int | None = None,
        model_name: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        if profiling_enabled(env):
            raise ProfilingUnsupportedError(UNSUPPORTED)
        super().__init__()
        self._counting = KerasCounting.from_env(batch_size, env, who="AdvisorKerasCallback")
        # Keras 3 runs batch-end callbacks on a thread pool only when every callback says it is
        # safe; a callback that is not would make each step wait for the previous step's logs.
        self.async_safe = True

    @property
    def counter(self) -> StepCounter | None:
        """What counts this worker's steps for Prometheus, or None when nothing is counted."""
        return None if self._counting is None else self._counting.counter

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._counting is not None:
            self._counting.epoch_begin()

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._counting is not None:
            self._counting.epoch_begin()

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._counting is not None:
            self._counting.batch_end(batch, self.model)


class KerasCounting:
    """A Keras callback's counting: every batch Keras reports (``BatchEndSteps``), and the job's
    progress from the optimizer's ``iterations`` when a read is due (``GlobalStepProgress``);
    without ``progress``, the counts alone (a profiling run's traced steps are not to be slowed)."""

    def __init__(self, counter: StepCounter, *, progress: bool = True) -> None:
        self.counter = counter
        self._batches = BatchEndSteps(counter)
        self._progress = GlobalStepProgress(counter) if progress else None
        # Keras may run batch ends on a thread pool: a read and its export go together, so that an
        # older read never lands after a newer one
        self._reading = threading.Lock()

    @classmethod
    def from_env(cls, batch_size: int | None, environ: Mapping[str, str], *, who: str,
                 progress: bool = True) -> KerasCounting | None:
        """Counting when ``ADVISOR_METRICS_PORT`` is set and this task trains (``step_counter_from_env``)."""
        counter = step_counter_from_env(batch_size, environ, who=who)
        return None if counter is None else cls(counter, progress=progress)

    def epoch_begin(self) -> None:
        self._batches.epoch_begin()

    def batch_end(self, batch: int, model: Any) -> None:
        self._batches.batch_end(batch)
        if self._progress is None:
            return
        with self._reading:
            if self._progress.due():
                read_iterations(self._progress, self.counter, model.optimizer, model.distribute_strategy)


def read_iterations(progress: GlobalStepProgress, counter: StepCounter, optimizer: Any, strategy: Any) -> None:
    """A due read of the job's progress from a Keras optimizer's ``iterations`` (one per step of the
    whole job), each worth this worker's batch times the workers whose batches it takes; nothing
    when the optimizer has no ``iterations`` yet (not compiled, or not a Keras optimizer)."""
    try:
        step = int(optimizer.iterations.numpy())
    except (AttributeError, TypeError, ValueError) as exc:
        log.debug("advisor: no progress from the optimizer's iterations: %s", exc)
        return
    progress.seen(step, counter.examples_per_step * workers_per_step(strategy))


def workers_per_step(strategy: Any) -> int:
    """The workers whose batches one optimizer iteration takes: every worker's under
    MultiWorkerMirroredStrategy (its replicas over those of this worker), else 1. (Its class is
    ``CollectiveAllReduceStrategy``: what it is, not what it is called.)"""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    local = max(1, len(strategy.extended.worker_devices))
    return max(1, int(strategy.num_replicas_in_sync) // local)
