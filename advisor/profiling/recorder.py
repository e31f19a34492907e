"""The recording logic shared by the session hook and the Keras callback, without TensorFlow.

Counting warm-up and traced steps, timing each ``session.run`` on the client (the traced ones and
then ``untraced_steps`` more without tracing, which say what tracing itself costs), writing the
run's meta, encoding and shipping the bundle, and deciding whether to stop: all of it is plain
Python here, so the default test suite checks it without TensorFlow. The TensorFlow adapters
(``session_hook``) only translate hook calls into ``before_run``/``after_run`` and hand over
each traced step's ``RunMetadata`` in a compact form with a function that turns it into its
protobuf-JSON dict.

Client times are wall-clock microseconds (``time.time_ns() // 1000``), the clock TensorFlow
stamps ``all_start_micros`` with, so the importer can compare the two.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from advisor.profiling.bundle import encode_steps
from advisor.profiling.config import ENV_BATCH_SIZE, ProfilingConfig, choose_batch_size
from advisor.profiling.upload import RetryPolicy, UploadResult, ship

log = logging.getLogger("advisor.profiling")

Snapshot = TypeVar("Snapshot")
RECORDER_NAME = "advisor.profiling"


def wall_clock_us() -> int:
    """Microseconds since the epoch: the clock of TensorFlow's step stats."""
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class VariableInfo:
    """A model variable as ``meta.json`` lists it (``bytes`` is what the importer reads)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int | None  # None when the shape is not fully known
    trainable: bool
    device: str

    def as_meta(self) -> dict[str, Any]:
        entry = {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "bytes": self.bytes,
            "trainable": self.trainable,
            "device": self.device,
        }
        return {key: value for key, value in entry.items() if value is not None}


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the adapter learns about the program once, before the first step."""

    batch_size: int | None = None
    model_name: str | None = None
    tf_version: str | None = None
    variables: Sequence[VariableInfo] = ()


def resolve_batch_size(config: ProfilingConfig, batch_size: int | None) -> int:
    """``ADVISOR_BATCH_SIZE`` if set, else the one given in code; without either, refuse now.

    A trace without a batch size cannot become a profile, so the run fails at start-up
    instead of after the traced steps.
    """
    return choose_batch_size(
        config.batch_size, batch_size,
        missing=f"the batch size is unknown: pass batch_size=... to the advisor hook or set {ENV_BATCH_SIZE}",
    )


def build_meta(
    config: ProfilingConfig, facts: RunFacts, client_steps_us: Sequence[tuple[int, int]],
    untraced_steps_us: Sequence[tuple[int, int]] = (),
) -> dict[str, Any]:
    """The bundle's ``meta``: the keys of ``tests/data/ps-async/tf-native/*/meta.json`` that apply.

    ``client_steps_us`` entries are ``[start_us, end_us]``; meta.json's optional third value
    (the global step) is left out, because reading it would add a fetch to the traced step.
    ``untraced_steps_us``, the same for the steps timed untraced after them, is written when
    there are any.
    """
    task = config.task
    trainable = [v for v in facts.variables if v.trainable]
    meta: dict[str, Any] = {
        "model": config.model_name or facts.model_name,
        "batch": config.batch_size if config.batch_size is not None else facts.batch_size,
        "bw_mbit": config.bandwidth_mbit,
        "n_ps": len(task.ps_hosts),
        "n_workers": len(task.worker_hosts),
        "ps_hosts": list(task.ps_hosts),
        "worker_hosts": list(task.worker_hosts),
        "task": task.task_index,
        "tf_version": facts.tf_version,
        "variables": [v.as_meta() for v in facts.variables],
        "n_params": sum(_elements(v.shape) for v in trainable if v.bytes is not None),
        "param_bytes": sum(v.bytes or 0 for v in trainable),
        "trainable_param_bytes": sum(v.bytes or 0 for v in trainable),
        "warmup_steps": config.warmup,
        "n_steps": len(client_steps_us),
        "run_options": {"trace_level": "FULL_TRACE", "output_partition_graphs": True},
        "client_steps_us": [[start, end] for start, end in client_steps_us],
        "untraced_steps_us": [[start, end] for start, end in untraced_steps_us] or None,
        "recorder": RECORDER_NAME,
    }
    return {key: value for key, value in meta.items() if value is not None}


def _elements(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


@dataclass
class TraceRecorder(Generic[Snapshot]):
    """Counts steps, keeps the traced ones, times some untraced ones, ships the bundle once.

    The adapter calls ``before_run()`` before every ``session.run`` (true: trace this one) and,
    for a timed run (``timing``: a traced one, or one of the ``untraced_steps`` after the last
    traced one), ``after_run(take_snapshot)`` right after it, and ``finish()`` when the session
    ends. ``to_dict`` turns a snapshot into its protobuf-JSON dict when the bundle is encoded.
    """

    config: ProfilingConfig
    facts: RunFacts
    to_dict: Callable[[Snapshot], Mapping[str, Any]]
    clock_us: Callable[[], int] = wall_clock_us
    retry: RetryPolicy | None = None
    runs_seen: int = field(default=0, init=False)
    result: UploadResult | None = field(default=None, init=False)  # set once shipping was tried
    _snapshots: list[Snapshot] = field(default_factory=list, init=False)
    _client_us: list[tuple[int, int]] = field(default_factory=list, init=False)
    _untraced_us: list[tuple[int, int]] = field(default_factory=list, init=False)
    _started_us: int | None = field(default=None, init=False)
    _traced: bool = field(default=False, init=False)  # the timed run in progress is traced

    @property
    def finished(self) -> bool:
        """True once the bundle was shipped (or shipping failed): nothing more is recorded."""
        return self.result is not None

    @property
    def traced_steps(self) -> int:
        return len(self._snapshots)

    def before_run(self) -> bool:
        """Count a ``session.run`` about to start; true if it should be traced. After the traced
        steps, the next ``untraced_steps`` runs are timed without tracing."""
        if self.finished:
            return False
        self.runs_seen += 1
        if self.runs_seen <= self.config.warmup:
            return False
        self._traced = len(self._snapshots) < self.config.steps
        self._started_us = self.clock_us()
        return self._traced

    @property
    def tracing(self) -> bool:
        """True between ``before_run`` of a traced run and its ``after_run``."""
        return self._started_us is not None and self._traced

    @property
    def timing(self) -> bool:
        """True between ``before_run`` of a timed run (traced or not) and its ``after_run``."""
        return self._started_us is not None

    def after_run(self, take_snapshot: Callable[[int], Snapshot]) -> bool:
        """Keep a timed run's client time, and a traced run's snapshot; ships after the last
        timed run. True: stop training now.

        The client time ends before ``take_snapshot(k)`` (k: 0-based traced step) is called, so
        copying the ``RunMetadata`` does not count as part of the step; an untraced run takes
        no snapshot.
        """
        end_us = self.clock_us()
        if self._started_us is None:
            return False
        window = (self._started_us, end_us)
        self._started_us = None
        if not self._traced:
            self._untraced_us.append(window)
            return self.finish() if len(self._untraced_us) >= self.config.untraced_steps else False
        self._client_us.append(window)
        self._snapshots.append(take_snapshot(len(self._snapshots)))
        if len(self._snapshots) < self.config.steps or self.config.untraced_steps > 0:
            return False
        return self.finish()

    def finish(self) -> bool:
        """Encode and ship what was traced (at most once); true when training should stop."""
        if self.finished:
            return False
        if not self._snapshots:
            self.result = UploadResult(False, None, "no step was traced", attempts=0)
            log.warning(
                "advisor: training ended after %d steps, before any traced step (warm-up is %d): nothing uploaded",
                self.runs_seen,
                self.config.warmup,
            )
            return False
        if len(self._snapshots) < self.config.steps:  # (then no untraced step was timed either)
            log.warning(
                "advisor: training ended after %d of %d traced steps; uploading those",
                len(self._snapshots),
                self.config.steps,
            )
        self.result = self._ship()
        self._snapshots.clear()
        return self.result.ok and self.config.stop_after_upload

    def _ship(self) -> UploadResult:
        meta = build_meta(self.config, self.facts, self._client_us, self._untraced_us)
        try:
            body = encode_steps((self.to_dict(s) for s in self._snapshots), meta)
        except (TypeError, ValueError) as exc:  # a value JSON cannot carry (NaN, a non-string key)
            result = UploadResult(False, None, f"cannot encode the trace: {exc}", attempts=0)
        else:
            log.info(
                "advisor: uploading %d traced steps (%d bytes gzipped) to %s",
                len(self._snapshots),
                len(body),
                self.config.ingest_url,
            )
            result = ship(self.config.ingest_url, body, self.config.token_file, policy=self.retry)
        _log_result(result)
        return result


def _log_result(result: UploadResult) -> None:
    if result.ok:
        log.info("advisor: trace accepted (HTTP %s, profile %s)", result.status, result.profile_id)
    else:
        status = "no answer" if result.status is None else f"HTTP {result.status}"
        log.error(
            "advisor: trace upload failed after %d attempt(s) (%s): %s; training continues",
            result.attempts,
            status,
            result.message,
        )
