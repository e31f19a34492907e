"""``AdvisorMwmsCallback``: records a profile of a TF2 Keras program trained with
``tf.distribute.MultiWorkerMirroredStrategy`` (synchronous all-reduce) and uploads it.

Add it to ``model.fit(callbacks=[...])``. With ``ADVISOR_PROFILE=1`` (``config.load_config``),
on ONE worker running alone, it lets ``ADVISOR_PROFILE_WARMUP`` steps pass, traces the next
``ADVISOR_PROFILE_STEPS`` with ``tf.profiler.experimental`` (XPlane), reads per step where
backward starts and ends, when each gradient is ready and how long the optimizer takes
(``mwms_trace``), takes the gradients' sizes from ``model.trainable_variables`` (shape x dtype
size), TF's pack layout from the strategy's ``CommunicationOptions.bytes_per_pack``, the
per-step metric all-reduces from what the step logs (``mwms_trace.metric_collectives``: with one
worker they do not run, so the trace cannot show them) and the link
rate from ``ADVISOR_BANDWIDTH_MBIT`` or the interface's speed (``advisor.profiling.link``), and
uploads an ``advisor-allreduce-upload`` bundle of kind ``tf-mwms``
(``allreduce_bundle``) like the TF1 hook does (``upload.ship``; a failed upload is logged and
training goes on). Step boundaries are the callback's ``on_train_batch_begin`` times on the
wall clock (the profiler's clock), so ``wall_us`` counts everything the loop does between steps.

It refuses LOUDLY (``ProfilingUnsupportedError``, before or at the first traced step) what it
cannot trace: another strategy (ParameterServerStrategy: use the TF1 hook; Mirrored or none:
not a multi-worker job), more than one replica in sync or more than one worker in TF_CONFIG,
``steps_per_execution`` > 1 (several steps per traced function call cannot be told apart), a
profiler that wrote no trace or no gradient ops (e.g. ``jit_compile=True``). A custom training
loop never calls a Keras callback: profile the same step under ``model.fit`` (docs/profiling.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf
from tensorflow import keras

from advisor.profiling.allreduce_bundle import build_allreduce_bundle, encode_allreduce_bundle
from advisor.profiling.config import ENV_BATCH_SIZE, ProfilingConfig, choose_batch_size, load_config
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.link import link_rate
from advisor.profiling.mwms_trace import (
    bytes_of, check_single_worker, events_from_xspace, metric_collectives, pack_layout, step_facts, step_windows,
)
from advisor.profiling.upload import RetryPolicy, UploadResult, ship

log = logging.getLogger("advisor.profiling")


class AdvisorMwmsCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Traces a one-worker MWMS ``model.fit`` and uploads the all-reduce bundle (module docstring).

    ``batch_size`` is the examples per step of this worker (``ADVISOR_BATCH_SIZE`` overrides it);
    ``model_name`` goes into the bundle. Without ``ADVISOR_PROFILE`` it does nothing.
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
        self._environ = env
        self._config: ProfilingConfig | None = load_config(env)
        self._retry = retry
        self.result: UploadResult | None = None
        if self._config is None:
            return
        workers = len(self._config.task.worker_hosts)
        check_single_worker(1, workers, "the cluster")
        self._batch = choose_batch_size(
            self._config.batch_size, batch_size,
            missing=f"AdvisorMwmsCallback needs the examples per step: pass batch_size= or set {ENV_BATCH_SIZE}",
        )
        self._model_name = model_name or self._config.model_name
        self._seen = 0  # training steps begun
        self._begins: list[int] = []  # wall-clock ns of each traced step's begin, then the next one's
        self._logdir: str | None = None
        self._first = 0  # index of the first traced step
        self._variables: list[str] = []
        self._sizes: list[int] = []
        self._bytes_per_pack = 0
        self._optimizer_scope = ""
        self._logged: list[tuple[str, tuple[int, ...], int]] | None = None  # what a step logs: name, shape, dtype size

    @property
    def active(self) -> bool:
        """Whether this process records (``ADVISOR_PROFILE`` on)."""
        return self._config is not None

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._config is None:
            return
        model = self.model
        strategy = model.distribute_strategy
        kind = type(strategy).__name__
        if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise ProfilingUnsupportedError(
                "AdvisorMwmsCallback profiles MultiWorkerMirroredStrategy programs; this one trains with "
                "ParameterServerStrategy, whose steps run through a ClusterCoordinator without per-step "
                "transfer records. Profile a tf.compat.v1 loop with AdvisorProfilingHook (docs/profiling.md)"
            )
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            raise ProfilingUnsupportedError(
                f"AdvisorMwmsCallback profiles programs that train under tf.distribute.MultiWorkerMirroredStrategy; "
                f"this model trains under {kind}. Build and compile the model inside "
                "MultiWorkerMirroredStrategy().scope()"
            )
        check_single_worker(int(strategy.num_replicas_in_sync), len(self._config.task.worker_hosts), kind)
        per_execution = int(getattr(model, "steps_per_execution", 1) or 1)
        if per_execution > 1:
            raise ProfilingUnsupportedError(
                f"steps_per_execution={per_execution}: several steps run in one traced call and cannot be told "
                "apart; compile with steps_per_execution=1 for the profiling run"
            )
        self._variables, self._sizes = [], []
        for v in model.trainable_variables:
            name = str(getattr(v, "path", None) or v.name)
            self._variables.append(name)
            self._sizes.append(bytes_of(tuple(v.shape), tf.as_dtype(v.dtype).size, name))
        if not self._variables:
            raise ProfilingUnsupportedError("the model has no trainable variables: there is nothing to all-reduce")
        options = getattr(strategy.extended, "_communication_options", None)
        self._bytes_per_pack = int(getattr(options, "bytes_per_pack", 0) or 0)
        optimizer = model.optimizer
        if optimizer is None:
            raise ProfilingUnsupportedError("the model is not compiled with an optimizer: call model.compile first")
        self._optimizer_scope = str(optimizer.name)

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        config = self._config
        if config is None or self.result is not None:
            return
        if self._seen == config.warmup:
            self._logdir = tempfile.mkdtemp(prefix="advisor-mwms-")
            self._first = self._seen
            tf.profiler.experimental.start(self._logdir)
        self._seen += 1
        if self._logdir is None:
            return
        self._begins.append(time.time_ns())
        if len(self._begins) == config.steps + 1:
            if self._finish(config, self._logdir) and config.stop_after_upload:
                log.info("advisor: profiling done; stopping training")
                self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._config is None or self._logged is not None or self._logdir is None:
            return
        logged = []
        for name, value in (logs or {}).items():
            tensor = tf.convert_to_tensor(value)
            logged.append((str(name), tuple(int(d or 1) for d in tensor.shape), int(tensor.dtype.size)))
        self._logged = logged

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._config is None or self.result is not None or self._logdir is None:
            return
        self._begins.append(time.time_ns())  # the end of the last step that ran
        log.warning("advisor: training ended after %d of %d traced steps; uploading those",
                    len(self._begins) - 1, self._config.steps)
        self._finish(self._config, self._logdir)

    def _finish(self, config: ProfilingConfig, logdir: str) -> bool:
        """Stop the profiler, read the trace, upload; true when the upload was accepted."""
        try:
            tf.profiler.experimental.stop()
            bundle = self._bundle(Path(logdir))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        body = encode_allreduce_bundle(bundle)
        log.info("advisor: uploading %d traced steps (%d bytes gzipped) to %s",
                 len(bundle["steps"]), len(body), config.ingest_url)
        self.result = ship(config.ingest_url, body, config.token_file, policy=self._retry)
        if self.result.ok:
            log.info("advisor: trace accepted (HTTP %s, profile %s)", self.result.status, self.result.profile_id)
        else:
            log.error("advisor: trace upload failed after %d attempt(s): %s; training continues",
                      self.result.attempts, self.result.message)
        return self.result.ok

    def _bundle(self, logdir: Path) -> dict[str, Any]:
        """The bundle of the traced steps, from the XPlane file the profiler wrote under ``logdir``."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
        if not files:
            raise ProfilingUnsupportedError(
                f"tf.profiler wrote no XPlane trace under {logdir}/plugins/profile: is another profiler "
                "session running in this process?"
            )
        ops = []
        for path in files:
            space = xplane_pb2.XSpace()
            space.ParseFromString(path.read_bytes())
            ops.extend(events_from_xspace(space))
        if not ops:
            raise ProfilingUnsupportedError("tf.profiler recorded no TensorFlow op events in the traced steps")
        single = len(pack_layout(self._sizes, self._bytes_per_pack)) == 1
        steps = [
            step_facts(self._first + k, start, end, ops, self._variables, self._optimizer_scope, single)
            for k, (start, end) in enumerate(step_windows(self._begins))
        ]
        if not steps:
            raise ProfilingUnsupportedError("no traced step completed")
        meta = {
            "batch_size": self._batch,
            "model": self._model_name,
            "world_size": 1,
            "framework": f"tensorflow {tf.__version__}, keras {keras.__version__}",
            "bucket_cap_bytes": self._bytes_per_pack or None,
        }
        bandwidth = self._config.bandwidth_mbit if self._config is not None else None
        try:
            return build_allreduce_bundle(
                "tf-mwms", meta, list(zip(self._variables, self._sizes)), steps,
                buckets=pack_layout(self._sizes, self._bytes_per_pack), link=link_rate(bandwidth, self._environ),
                collectives=None if self._logged is None else metric_collectives(self._logged),
            )
        except ValueError as exc:
            raise ProfilingUnsupportedError(f"the traced steps do not make a bundle: {exc}") from None
