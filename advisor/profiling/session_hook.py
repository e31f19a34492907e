"""``AdvisorProfilingHook``: records a profiling run from inside a tf.compat.v1 training loop.

A ``SessionRunHook`` is the one place TensorFlow 1-style training lets outside code add
``RunOptions`` to chosen ``session.run`` calls and read their ``RunMetadata`` without changing
the user's loop: ``MonitoredTrainingSession(hooks=[hook])`` or ``MonitoredSession``. This
module is the thin TensorFlow adapter; counting, timing, meta, encoding and shipping are
``recorder.TraceRecorder``'s. Importing it imports TensorFlow, so ``advisor.profiling`` loads
it only when the hook is asked for.

It does two independent things, each off unless asked for:

- records, when ``ADVISOR_PROFILE`` is on and this process is the recording task (worker 0 of
  ``TF_CONFIG``); otherwise no ``RunOptions`` are added;
- counts every ``session.run`` as a training step of this worker's batch, when
  ``ADVISOR_METRICS_PORT`` is set and this task trains (``throughput.step_counter_from_env``),
  traced steps included: they are real training steps too. With ``SyncReplicasOptimizer`` and
  backup workers only R of the W gradients of an update move the model, so a step counts R / W
  of the batch, R and W read from the graph when the session begins (``sync_share.py``).
  Beside the counts, the job's progress: every ``throughput.GLOBAL_STEP_EVERY_S`` an untraced step also
  fetches the global step, worth this worker's batch each (asynchronous: every worker's step adds
  one) or R batches (synchronous: an update adds one), exported once it has been seen to move. Not
  while this process records a profile: its untraced steps are timed.

With neither, every method returns at once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from google.protobuf import json_format

from advisor.profiling.config import ProfilingConfig, load_config
from advisor.profiling.recorder import RunFacts, TraceRecorder, VariableInfo, resolve_batch_size
from advisor.profiling.sync_share import (
    ENQUEUE_MANY_OPS, SYNC_TOKEN_QUEUE, TAKE_GRADIENT_OPS, TOKEN_QUEUE_OPS, SyncShareUnknown, sync_share,
)
from advisor.profiling.throughput import GlobalStepProgress, StepCounter, step_counter_from_env

log = logging.getLogger("advisor.profiling")


class AdvisorProfilingHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Trace ``ADVISOR_PROFILE_STEPS`` steps after ``ADVISOR_PROFILE_WARMUP``, time
    ``ADVISOR_PROFILE_UNTRACED_STEPS`` more untraced, and upload them; count every step for
    Prometheus when ``ADVISOR_METRICS_PORT`` is set.

    ``batch_size`` is the examples per step of this worker (``ADVISOR_BATCH_SIZE`` overrides
    it); ``model_name`` is for people (``ADVISOR_MODEL_NAME`` overrides it). ``environ``
    replaces ``os.environ`` (tests). Raises ``ProfilingConfigError`` at construction when
    recording or counting is asked for but a setting is unusable (counting without a batch
    size included).
    """

    def __init__(
        self,
        batch_size: int | None = None,
        model_name: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self._config: ProfilingConfig | None = _active_config(env)
        self._batch_size = resolve_batch_size(self._config, batch_size) if self._config else None
        self._batch_counter = step_counter_from_env(batch_size, env, who="AdvisorProfilingHook")
        self._counter: StepCounter | None = self._batch_counter
        self._model_name = model_name
        self._recorder: TraceRecorder[bytes] | None = None
        self._options: Any = None
        self._progress: _GlobalStepProgress | None = None

    @property
    def active(self) -> bool:
        """Whether this hook records (profiling on and this is the recording task)."""
        return self._config is not None

    @property
    def recorder(self) -> TraceRecorder[bytes] | None:
        return self._recorder

    @property
    def counter(self) -> StepCounter | None:
        """What counts this worker's steps for Prometheus, or None when nothing is counted."""
        return self._counter

    def begin(self) -> None:
        if self._batch_counter is not None:  # each session's graph: a new one may train otherwise
            self._counter, per_global_step = _counted_share(self._batch_counter)
            self._progress = _global_step_progress(self._counter, per_global_step, recording=self._config is not None)
        if self._config is None or self._recorder is not None:
            return
        facts = RunFacts(self._batch_size, self._model_name, tf.__version__, _graph_variables())
        self._recorder = TraceRecorder(self._config, facts, to_dict=_to_dict)
        self._options = tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
        )

    def before_run(self, run_context: Any) -> Any:
        if self._recorder is None or not self._recorder.before_run():
            return None if self._progress is None else self._progress.before_run()
        return tf.compat.v1.train.SessionRunArgs(fetches=None, options=self._options)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._counter is not None:  # first: an upload after the last traced step may take a while
            self._counter.step()
        if self._progress is not None:
            self._progress.after_run(run_values.results)
        if self._recorder is None or not self._recorder.timing:
            return
        metadata = run_values.run_metadata
        if self._recorder.after_run(lambda k: _snapshot(metadata, keep_graphs=k == 0)):
            log.info("advisor: profiling done; requesting the training session to stop")
            run_context.request_stop()

    def end(self, session: Any) -> None:
        if self._recorder is not None:
            self._recorder.finish()


def _active_config(environ: Mapping[str, str]) -> ProfilingConfig | None:
    """The settings if this process records, else None (and why, in the log)."""
    config = load_config(environ)
    if config is None:
        return None
    task = config.task
    if not task.records:
        if task.task_type is None:
            log.warning("advisor: ADVISOR_PROFILE is on but TF_CONFIG is not set; this process does not record")
        else:
            log.info("advisor: %s:%s does not record (only worker 0 does)", task.task_type, task.task_index)
        return None
    if len(task.worker_hosts) > 1:
        log.warning(
            "advisor: the cluster has %d workers; a profile needs exactly 1 (the others' traffic would "
            "distort it) and the controller will refuse this trace",
            len(task.worker_hosts),
        )
    return config


def _counted_share(counter: StepCounter) -> tuple[StepCounter, float | None]:
    """``counter`` counting the share of its batch that the default graph's updates aggregate, and
    the examples a global step stands for (None when the share cannot be read)."""
    try:
        found = sync_share({"node": _sync_nodes(tf.compat.v1.get_default_graph().as_graph_def())})
    except SyncShareUnknown as exc:
        log.warning("advisor: SyncReplicasOptimizer's share of each step cannot be read (%s); every example of "
                    "a step is counted, which overstates the job's progress if it has backup workers", exc)
        return counter, None
    batch = counter.examples_per_step
    if found is None:
        return counter, batch
    per_global_step = batch * found.replicas_to_aggregate
    if found.share == 1:
        return counter, per_global_step
    log.info("advisor: SyncReplicasOptimizer aggregates %d gradients of the %d an update hands tokens to: a step "
             "counts %.4g of its %g examples", found.replicas_to_aggregate, found.tokens_per_step,
             found.share, batch)
    return StepCounter(counter.exporter, batch * found.share), per_global_step


class _GlobalStepProgress:
    """Fetches the global step with a step when one is due (``throughput.GlobalStepProgress``)."""

    def __init__(self, counter: StepCounter, tensor: Any, per_global_step: float) -> None:
        self._progress, self._tensor, self._per_step = GlobalStepProgress(counter), tensor, per_global_step
        self._fetching = False

    def before_run(self) -> Any:
        self._fetching = self._progress.due()
        return tf.compat.v1.train.SessionRunArgs(fetches=self._tensor) if self._fetching else None

    def after_run(self, result: Any) -> None:
        if not self._fetching:
            return
        self._fetching = False
        try:
            step = int(result)
        except (TypeError, ValueError):
            return
        if step >= 0:
            self._progress.seen(step, self._per_step)


def _global_step_progress(counter: StepCounter, per_global_step: float | None, *,
                          recording: bool) -> _GlobalStepProgress | None:
    """What reads the job's progress from the default graph's global step; None without one, when
    the examples per global step are unknown, or while this process records a profile."""
    if per_global_step is None or recording:
        return None
    tensor = tf.compat.v1.train.get_global_step()
    if tensor is None:
        log.info("advisor: the graph has no global step; the job's progress is the pods' counted examples")
        return None
    return _GlobalStepProgress(counter, tensor, per_global_step)


def _sync_nodes(graph_def: Any) -> list[dict[str, Any]]:
    """The nodes ``sync_share`` reads, as dicts: the accumulators' take-gradients, the token queues,
    their enqueues and fills, and the nodes those read (their constants, the global step's read):
    not the whole graph, whose constants may be large."""
    wanted = [n for n in graph_def.node if n.op in TAKE_GRADIENT_OPS or n.op in ENQUEUE_MANY_OPS or n.op == "Fill"
              or (n.op in TOKEN_QUEUE_OPS and SYNC_TOKEN_QUEUE.match(n.name))]
    names = {n.name for n in wanted}
    inputs = {i.split(":")[0] for n in wanted for i in n.input if not i.startswith("^")} - names
    wanted += [n for n in graph_def.node if n.name in inputs]
    return [dict(json_format.MessageToDict(n)) for n in wanted]


def _graph_variables() -> tuple[VariableInfo, ...]:
    """Every global variable of the default graph, with its size where its shape is known."""
    trainable = {id(v) for v in tf.compat.v1.trainable_variables()}
    found = []
    for var in tf.compat.v1.global_variables():
        shape = var.shape
        dtype = var.dtype.base_dtype
        known = shape.is_fully_defined()
        found.append(
            VariableInfo(
                name=var.op.name,
                shape=tuple(shape.as_list()) if known else (),
                dtype=dtype.name,
                bytes=shape.num_elements() * dtype.size if known else None,
                trainable=id(var) in trainable,
                device=var.device,
            )
        )
    return tuple(found)


def _snapshot(metadata: Any, *, keep_graphs: bool) -> bytes:
    """A step's ``RunMetadata`` as compact protobuf bytes, partition graphs only on the first."""
    if keep_graphs:
        return bytes(metadata.SerializeToString())
    copy = tf.compat.v1.RunMetadata()
    copy.CopyFrom(metadata)
    copy.ClearField("partition_graphs")
    return bytes(copy.SerializeToString())


def _to_dict(snapshot: bytes) -> dict[str, Any]:
    return dict(json_format.MessageToDict(tf.compat.v1.RunMetadata.FromString(snapshot)))
