"""The TensorFlow half that both MultiWorkerMirroredStrategy recorders share: the Keras callback
(``keras_mwms.AdvisorMwmsCallback``) and the custom-loop profiler
(``tf_custom_loop.AdvisorStepProfiler``) differ only in where a step begins (a Keras callback
hook, or the user's ``with profiler.step():``) and where the model, optimizer and strategy come
from. Everything else is here, once, so that both upload the same bundle and refuse the same
set-ups with the same words:

- ``check_strategy``: the program trains under MWMS with one replica, on one worker;
- ``describe_program``: the gradients' names and bytes (``model.trainable_variables``, shape x
  dtype size), TF's pack cap (the strategy's ``CommunicationOptions.bytes_per_pack``) and the
  optimizer's name scope;
- ``StepTracer``: lets ``ADVISOR_PROFILE_WARMUP`` step begins pass, runs
  ``tf.profiler.experimental`` over the next ``ADVISOR_PROFILE_STEPS`` steps, cuts the XPlane
  trace at the step begins (the wall clock, the profiler's clock), times the process's CPU per
  step over the warm-up's second half (untraced: the profiler costs CPU), builds the ``tf-mwms``
  all-reduce bundle (``mwms_trace``, ``allreduce_bundle``) with the link rate
  (``link.link_rate``) and ships it (``upload.ship``: a failed upload is logged, training goes
  on).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from advisor.profiling.allreduce_bundle import build_allreduce_bundle, encode_allreduce_bundle
from advisor.profiling.config import ProfilingConfig
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.link import link_rate
from advisor.profiling.step_cpu import WarmupCpu
from advisor.profiling.mwms_trace import (
    bytes_of,
    check_single_worker,
    events_from_xspace,
    pack_layout,
    step_facts,
    step_windows,
)
from advisor.profiling.upload import RetryPolicy, UploadResult, ship

log = logging.getLogger("advisor.profiling")


@dataclass(frozen=True, slots=True)
class TracedProgram:
    """What the trace cannot show and the bundle needs: the gradients (name, bytes, in the order
    the step all-reduces them), TF's pack cap and the optimizer's name scope."""

    variables: tuple[str, ...]
    sizes: tuple[int, ...]
    bytes_per_pack: int
    optimizer_scope: str


def check_strategy(strategy: Any, who: str, fix: str, task_workers: int) -> None:
    """Refuse what a one-worker MWMS trace cannot stand for: another strategy (``fix`` says what to
    do instead), more than one replica in sync, more than one worker in TF_CONFIG."""
    kind = type(strategy).__name__
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        raise ProfilingUnsupportedError(
            f"{who} profiles MultiWorkerMirroredStrategy programs; this one trains with "
            "ParameterServerStrategy, whose steps run through a ClusterCoordinator without per-step "
            "transfer records. Profile a tf.compat.v1 loop with AdvisorProfilingHook (docs/profiling.md)"
        )
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise ProfilingUnsupportedError(
            f"{who} profiles programs that train under tf.distribute.MultiWorkerMirroredStrategy; "
            f"this model trains under {kind}. {fix}"
        )
    check_single_worker(int(strategy.num_replicas_in_sync), task_workers, kind)


def describe_program(variables: Iterable[Any], strategy: Any, optimizer_scope: str, *,
                     empty_hint: str = "") -> TracedProgram:
    """The ``TracedProgram`` of ``variables`` (trainable, in the order their gradients are
    all-reduced) trained under ``strategy``; refuses an empty list or an unknown shape."""
    names: list[str] = []
    sizes: list[int] = []
    for v in variables:
        name = str(getattr(v, "path", None) or v.name)
        names.append(name)
        sizes.append(bytes_of(tuple(v.shape), tf.as_dtype(v.dtype).size, name))
    if not names:
        raise ProfilingUnsupportedError(f"the model has no trainable variables: there is nothing to all-reduce{empty_hint}")
    options = getattr(strategy.extended, "_communication_options", None)
    per_pack = int(getattr(options, "bytes_per_pack", 0) or 0)
    return TracedProgram(tuple(names), tuple(sizes), per_pack, optimizer_scope)


class TracerOwner:
    """What the Keras callback and the custom-loop profiler both say of their ``StepTracer``:
    whether this process records, and what became of the upload."""

    _config: ProfilingConfig | None
    _tracer: StepTracer | None

    @property
    def active(self) -> bool:
        """Whether this process records (``ADVISOR_PROFILE`` on)."""
        return self._config is not None

    @property
    def result(self) -> UploadResult | None:
        """What became of the upload, once the traced steps are done."""
        return None if self._tracer is None else self._tracer.result


class StepTracer:
    """Traces consecutive training steps of one worker and uploads their bundle (module docstring).

    The owner calls ``begin`` at every step's begin and ``end`` when training ends; ``describe``
    is asked for the program once, when tracing starts (after the warm-up, so the model is built).
    """

    def __init__(
        self,
        config: ProfilingConfig,
        environ: Mapping[str, str],
        *,
        batch_size: int,
        model_name: str | None,
        framework: str,
        describe: Callable[[], TracedProgram],
        retry: RetryPolicy | None = None,
        collectives: Callable[[], list[tuple[str, int]] | None] = lambda: [],
    ) -> None:
        self._config = config
        self._environ = environ
        self._batch = batch_size
        self._model_name = model_name
        self._framework = framework
        self._describe = describe
        # the step's all-reduces besides the gradients' (name, bytes), asked for when the bundle is
        # built: Keras's metric reductions for the callback; none for a custom loop by default
        # (None: not known, the ring model assumes the framework's own)
        self._collectives = collectives
        self._retry = retry
        self.result: UploadResult | None = None
        self._seen = 0  # training steps begun
        self._begins: list[int] = []  # wall-clock ns of each traced step's begin, then the next one's
        self._logdir: str | None = None
        self._first = 0  # index of the first traced step
        self._program: TracedProgram | None = None
        self._over = False  # uploaded, refused or abandoned: nothing more to do
        self._cpu = WarmupCpu(config.warmup)  # CPU per step over the warm-up's second half

    @property
    def tracing(self) -> bool:
        """Whether the profiler runs (warm-up over, the traced steps not all begun yet)."""
        return self._logdir is not None

    def begin(self) -> bool:
        """A training step begins now; true when this closed the trace and the upload was accepted."""
        config = self._config
        if self._over:
            return False
        self._cpu.step_begins(self._seen)
        if self._seen == config.warmup:
            self._program = self._describe()
            self._logdir = tempfile.mkdtemp(prefix="advisor-mwms-")
            self._first = self._seen
            tf.profiler.experimental.start(self._logdir)
        self._seen += 1
        if self._logdir is None:
            return False
        self._begins.append(time.time_ns())
        if len(self._begins) == config.steps + 1:
            return self._finish()
        return False

    def end(self, end_ns: int | None = None, *, last_step_ran: bool = True) -> None:
        """Training ended: upload the steps traced so far. The last step begun ran until ``end_ns``
        (default now), or, without ``last_step_ran`` (it failed at once: the data ran out), did
        not count and the previous step ended where it began."""
        if self._over or self._logdir is None:
            return
        if last_step_ran:
            self._begins.append(time.time_ns() if end_ns is None else end_ns)
        if len(self._begins) < 2:
            log.warning("advisor: training ended before a traced step completed; nothing to upload")
            self.abandon()
            return
        log.warning("advisor: training ended after %d of %d traced steps; uploading those",
                     len(self._begins) - 1, self._config.steps)
        self._finish()

    def abandon(self) -> None:
        """Training failed: stop the profiler and delete its files, upload nothing."""
        if self._over:
            return
        self._over = True
        logdir, self._logdir = self._logdir, None
        if logdir is not None:
            try:
                tf.profiler.experimental.stop()
            finally:
                shutil.rmtree(logdir, ignore_errors=True)

    def _finish(self) -> bool:
        """Stop the profiler, read the trace, upload; true when the upload was accepted."""
        config, logdir = self._config, self._logdir
        assert logdir is not None
        self._over = True
        self._logdir = None
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

        program = self._program
        assert program is not None
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
        packs = pack_layout(program.sizes, program.bytes_per_pack)
        steps = [
            step_facts(self._first + k, start, end, ops, program.variables, program.optimizer_scope, len(packs) == 1)
            for k, (start, end) in enumerate(step_windows(self._begins))
        ]
        if not steps:
            raise ProfilingUnsupportedError("no traced step completed")
        meta = {
            "batch_size": self._batch,
            "model": self._model_name,
            "world_size": 1,
            "framework": self._framework,
            "bucket_cap_bytes": program.bytes_per_pack or None,
            "cpu_s_per_step": self._cpu.as_meta(),
        }
        try:
            return build_allreduce_bundle(
                "tf-mwms", meta, list(zip(program.variables, program.sizes)), steps,
                buckets=packs, link=link_rate(self._config.bandwidth_mbit, self._environ),
                collectives=self._collectives(),
            )
        except ValueError as exc:
            raise ProfilingUnsupportedError(f"the traced steps do not make a bundle: {exc}") from None
