"""``AdvisorMwmsCallback``: records a profile of a TF2 Keras program trained with
``tf.distribute.MultiWorkerMirroredStrategy`` (synchronous all-reduce) and uploads it.

Add it to ``model.fit(callbacks=[...])``. With ``ADVISOR_PROFILE=1`` (``config.load_config``),
on ONE worker running alone, it lets ``ADVISOR_PROFILE_WARMUP`` steps pass, traces the next
``ADVISOR_PROFILE_STEPS`` with ``tf.profiler.experimental`` (XPlane), reads per step where
backward starts and ends, when each gradient is ready and how long the optimizer takes
(``mwms_trace``), takes the gradients' sizes from ``model.trainable_variables`` (shape x dtype
size), TF's pack layout from the strategy's ``CommunicationOptions.bytes_per_pack`` and the link
rate from ``ADVISOR_BANDWIDTH_MBIT`` or the interface's speed (``advisor.profiling.link``), and
uploads an ``advisor-allreduce-upload`` bundle of kind ``tf-mwms``
(``allreduce_bundle``) like the TF1 hook does (``upload.ship``; a failed upload is logged and
training goes on). Step boundaries are the callback's ``on_train_batch_begin`` times on the
wall clock (the profiler's clock), so ``wall_us`` counts everything the loop does between steps.

It refuses LOUDLY (``ProfilingUnsupportedError``, before or at the first traced step) what it
cannot trace: another strategy (ParameterServerStrategy: use the TF1 hook; Mirrored or none:
not a multi-worker job), more than one replica in sync or more than one worker in TF_CONFIG,
``steps_per_execution`` > 1 (several steps per traced function call cannot be told apart), a
profiler that wrote no trace or no gradient ops (e.g. ``jit_compile=True``). Everything but the
Keras hooks is ``mwms_tracer``, shared with ``tf_custom_loop.AdvisorStepProfiler``, which
profiles a custom training loop (one that never calls a Keras callback) the same way.

Independently, with ``ADVISOR_METRICS_PORT`` set, it counts every training batch of the real run
for Prometheus and reads the job's progress from the optimizer's ``iterations``, as
``AdvisorKerasCallback`` does (``keras_callback.KerasCounting``; not the progress while it records:
the traced steps are not to be slowed), so one callback serves the profiling run and the job.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorflow import keras

from advisor.profiling.config import ENV_BATCH_SIZE, ProfilingConfig, choose_batch_size, load_config
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.keras_callback import KerasCounting
from advisor.profiling.mwms_trace import check_single_worker, metric_collectives
from advisor.profiling.mwms_tracer import StepTracer, TracedProgram, TracerOwner, check_strategy, describe_program
from advisor.profiling.throughput import StepCounter
from advisor.profiling.upload import RetryPolicy

log = logging.getLogger("advisor.profiling")


class AdvisorMwmsCallback(TracerOwner, keras.callbacks.Callback):  # type: ignore[misc]
    """Traces a one-worker MWMS ``model.fit`` and uploads the all-reduce bundle (module docstring).

    ``batch_size`` is the examples per step of this worker (``ADVISOR_BATCH_SIZE`` overrides it);
    ``model_name`` goes into the bundle. Without ``ADVISOR_PROFILE`` it records nothing, and
    without ``ADVISOR_METRICS_PORT`` it counts nothing.
    """

    def __init__(
        self,
        batch_size: int | None = None,
        model_name: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        env = os.environ if environ is None else environ
        self._config: ProfilingConfig | None = load_config(env)
        self._tracer: StepTracer | None = None
        self._program: TracedProgram | None = None
        self._counting = KerasCounting.from_env(batch_size, env, who="AdvisorMwmsCallback",
                                                progress=self._config is None)
        if self._config is None:
            return
        check_single_worker(1, len(self._config.task.worker_hosts), "the cluster")
        batch = choose_batch_size(
            self._config.batch_size, batch_size,
            missing=f"AdvisorMwmsCallback needs the examples per step: pass batch_size= or set {ENV_BATCH_SIZE}",
        )
        self._tracer = StepTracer(
            self._config, env, batch_size=batch, model_name=model_name or self._config.model_name,
            framework=f"tensorflow {tf.__version__}, keras {keras.__version__}", describe=self._described,
            retry=retry, collectives=self._collectives,
        )
        self._logged: list[tuple[str, tuple[int, ...], int]] | None = None  # what a step logs: name, shape, dtype size

    def _described(self) -> TracedProgram:
        assert self._program is not None, "on_train_begin describes the program before the first step"
        return self._program

    @property
    def counter(self) -> StepCounter | None:
        """What counts this worker's steps for Prometheus, or None when nothing is counted."""
        return None if self._counting is None else self._counting.counter

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._counting is not None:
            self._counting.epoch_begin()

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._counting is not None:
            self._counting.epoch_begin()
        if self._config is None:
            return
        model = self.model
        strategy = model.distribute_strategy
        check_strategy(strategy, "AdvisorMwmsCallback", "Build and compile the model inside "
                       "MultiWorkerMirroredStrategy().scope()", len(self._config.task.worker_hosts))
        per_execution = int(getattr(model, "steps_per_execution", 1) or 1)
        if per_execution > 1:
            raise ProfilingUnsupportedError(
                f"steps_per_execution={per_execution}: several steps run in one traced call and cannot be told "
                "apart; compile with steps_per_execution=1 for the profiling run"
            )
        optimizer = model.optimizer
        if optimizer is None:
            raise ProfilingUnsupportedError("the model is not compiled with an optimizer: call model.compile first")
        self._program = describe_program(model.trainable_variables, strategy, str(optimizer.name))

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._tracer is None or self._config is None:
            return
        if self._tracer.begin() and self._config.stop_after_upload:
            log.info("advisor: profiling done; stopping training")
            self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Counts the step; and what the step logged (once): Keras reduces each logged value with
        two all-reduces of its own (``mwms_trace.metric_collectives``), which one worker's trace
        cannot show."""
        if self._counting is not None:
            self._counting.batch_end(batch, self.model)
        if self._config is None or self._logged is not None:
            return
        logged = []
        for name, value in (logs or {}).items():
            tensor = tf.convert_to_tensor(value)
            logged.append((str(name), tuple(int(d or 1) for d in tensor.shape), int(tensor.dtype.size)))
        self._logged = logged

    def _collectives(self) -> list[tuple[str, int]] | None:
        return None if self._logged is None else metric_collectives(self._logged)

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._tracer is not None:
            self._tracer.end()
