"""The recording logic of the PyTorch DDP hook (``advisor.profiling.torch``), without PyTorch.

The hook turns PyTorch callbacks (the DDP module's forward pre-hook, a hook on its output's
gradient, each parameter's post-accumulate-grad hook, the autograd engine's end-of-backward
callback, the optimizer's step pre- and post-hooks) into calls of ``DDPStepRecorder`` with a
monotonic timestamp. Everything else, counting warm-up and traced steps, checking that each
traced step has the shape the ring model replays (one forward, one backward in which every
gradient becomes ready exactly once, one ``optimizer.step()``), turning timestamps into the
bundle's per-step times, building, encoding and shipping the bundle, is plain Python here, so
the default test suite checks it without PyTorch.

A program shape the recorder cannot trace raises ``ProfilingUnsupportedError`` from inside the
hook, i.e. from the user's ``forward``, ``backward`` or ``optimizer.step()`` call: the
profiling run fails at once and says why, instead of uploading an empty or wrong profile.

Standard library only: it runs inside the user's training image.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.profiling.allreduce_bundle import build_allreduce_bundle, encode_allreduce_bundle
from advisor.profiling.config import ProfilingConfig
from advisor.profiling.errors import ProfilingConfigError, ProfilingUnsupportedError
from advisor.profiling.step_cpu import WarmupCpu
from advisor.profiling.upload import RetryPolicy, UploadResult, ship

log = logging.getLogger("advisor.profiling")

KIND = "pytorch-ddp"
ENV_WORLD_SIZE = "WORLD_SIZE"  # set by torchrun and by the Kubeflow PyTorchJob operator
ENV_RANK = "RANK"
_NAMED = 5  # parameters named in an error before "and N more"


def world_size_from_env(environ: Mapping[str, str]) -> int | None:
    """``WORLD_SIZE`` as torchrun and the PyTorchJob operator set it, or None when unset."""
    raw = environ.get(ENV_WORLD_SIZE)
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ProfilingConfigError(f"{ENV_WORLD_SIZE}={raw!r}: expected a whole number of processes") from None
    if value < 1:
        raise ProfilingConfigError(f"{ENV_WORLD_SIZE}={raw!r}: expected at least 1")
    return value


def check_single_worker(env_world_size: int | None, group_world_size: int | None) -> None:
    """Refuse a run with more than one process: a profile is of one worker alone.

    ``group_world_size`` is the DDP process group's size (None when no group is initialised).
    """
    sizes = [s for s in (env_world_size, group_world_size) if s is not None]
    if any(s > 1 for s in sizes):
        where = (f"the process group has {group_world_size} ranks" if group_world_size and group_world_size > 1
                 else f"{ENV_WORLD_SIZE}={env_world_size}")
        raise ProfilingUnsupportedError(
            f"advisor: ADVISOR_PROFILE is on but {where}; a profiling run needs exactly 1 worker "
            "(with more, every step holds the all-reduce waits the advisor is meant to predict): "
            "run the profiling job with one replica (torchrun --nproc-per-node 1, PyTorchJob with 1 worker "
            "and no master other than it)"
        )


def parse_bucket_indices(text: object, count: int) -> list[list[int]] | None:
    """DDP's rebuilt bucket layout from its logging data (``rebuilt_per_bucket_param_indices``,
    e.g. ``"5 4 3 2, 1 0"``: gradient positions per bucket in reduce order), or None when it is
    absent or does not place each of ``count`` gradients exactly once."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        buckets = [[int(tok) for tok in part.split()] for part in text.split(",")]
    except ValueError:
        return None
    flat = [g for bucket in buckets for g in bucket]
    if any(not bucket for bucket in buckets) or sorted(flat) != list(range(count)):
        return None
    return buckets


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


@dataclass
class _Step:
    """One traced step's timestamps (ns, the recorder's clock) while it runs."""

    index: int
    start_ns: int
    backward_start_ns: int | None = None
    backward_end_ns: int | None = None
    ready_ns: list[int | None] = field(default_factory=list)
    optimizer_start_ns: int | None = None
    optimizer_end_ns: int | None = None

    def as_bundle_step(self, next_start_ns: int) -> dict[str, Any] | None:
        """The bundle's step (microseconds relative to the step's start), or None while a part is missing."""
        bwd_start, bwd_end = self.backward_start_ns, self.backward_end_ns
        opt_start, opt_end = self.optimizer_start_ns, self.optimizer_end_ns
        ready = [t for t in self.ready_ns if t is not None]
        if bwd_start is None or bwd_end is None or opt_start is None or opt_end is None or len(ready) < len(self.ready_ns):
            return None

        def rel(t: int) -> float:
            return round((t - self.start_ns) / 1000.0, 3)

        return {
            "index": self.index,
            "wall_us": rel(next_start_ns),
            "backward_start_us": rel(min(bwd_start, *ready)),
            "backward_end_us": rel(max(bwd_end, *ready)),
            "grad_ready_us": [rel(t) for t in ready],
            "optimizer_us": [rel(opt_start), round((opt_end - opt_start) / 1000.0, 3)],
        }


@dataclass
class DDPStepRecorder:
    """Counts DDP training steps, records the traced ones, ships the bundle once.

    A step starts at the DDP module's forward (with gradients enabled) and ends at the next
    one, so its wall time holds everything the loop does between steps. The adapter calls
    ``forward`` (true: training should stop now, the bundle is shipped), ``backward_start``,
    ``grad_ready``, ``backward_end``, ``optimizer_start``/``optimizer_end``; ``tracing`` says
    whether the other calls are wanted (the adapter may skip them otherwise).
    ``buckets`` is asked for DDP's bucket layout when the bundle is built; ``link`` is the link
    rate the bundle records (``advisor.profiling.link.link_rate``), None when unknown.
    """

    config: ProfilingConfig
    gradients: Sequence[tuple[str, int]]  # (name, bytes) in DDP's parameter order
    meta: Mapping[str, Any]
    buckets: Callable[[], list[list[int]] | None] = lambda: None
    link: Mapping[str, Any] | None = None
    clock_ns: Callable[[], int] = time.perf_counter_ns
    retry: RetryPolicy | None = None
    cpu_s: Callable[[], float] = time.process_time  # the process's CPU seconds, every thread
    forwards_seen: int = field(default=0, init=False)
    result: UploadResult | None = field(default=None, init=False)
    _open: _Step | None = field(default=None, init=False)
    _steps: list[dict[str, Any]] = field(default_factory=list, init=False)
    _cpu: WarmupCpu = field(init=False)  # CPU per step over the warm-up's second half

    def __post_init__(self) -> None:
        self._cpu = WarmupCpu(self.config.warmup, self.cpu_s)
        if not self.gradients:
            raise ProfilingUnsupportedError(
                "advisor: the DDP model has no trainable parameters (none with requires_grad): "
                "there are no gradients to all-reduce, so there is nothing to profile"
            )

    @property
    def finished(self) -> bool:
        """True once the bundle was shipped (or shipping was tried)."""
        return self.result is not None

    @property
    def tracing(self) -> bool:
        """True while a traced step is open."""
        return self._open is not None

    @property
    def traced_steps(self) -> int:
        return len(self._steps)

    def forward(self, *, grad_sync: bool = True) -> bool:
        """The DDP module's forward with gradients enabled: a new step. True: stop training now.

        ``grad_sync`` is DDP's ``require_backward_grad_sync`` (false inside ``no_sync()``).
        """
        now = self.clock_ns()
        if self.finished:
            return False
        if self._open is not None:
            self._close(self._open, now)
            self._open = None
        self.forwards_seen += 1
        self._cpu.step_begins(self.forwards_seen - 1)
        if len(self._steps) >= self.config.steps:
            return self.finish()
        if self.forwards_seen > self.config.warmup:
            if not grad_sync:
                raise ProfilingUnsupportedError(
                    "advisor: a traced step runs forward inside DDP's no_sync(): gradient accumulation over "
                    "several forward/backward passes per optimizer step cannot be profiled (the ring model "
                    "replays one backward per step); profile with one pass per optimizer.step()"
                )
            self._open = _Step(index=self.forwards_seen - 1, start_ns=now, ready_ns=[None] * len(self.gradients))
        return False

    def backward_start(self) -> bool:
        """Backward reached the DDP output's gradient; true when this is the traced step's first
        backward (the adapter then asks the engine for the end-of-backward callback)."""
        step, now = self._open, self.clock_ns()
        if step is None:
            return False
        if step.backward_start_ns is not None:
            raise ProfilingUnsupportedError(
                f"advisor: step {step.index} ran backward through the DDP model's output twice: several backward "
                "passes per forward (retain_graph) cannot be profiled; profile one backward per step"
            )
        step.backward_start_ns = now
        return True

    def grad_ready(self, position: int) -> None:
        step, now = self._open, self.clock_ns()
        if step is None:
            return
        if step.ready_ns[position] is not None:
            raise ProfilingUnsupportedError(
                f"advisor: in step {step.index} the gradient of {self.gradients[position][0]} was accumulated "
                "twice: several backward passes per optimizer.step() (gradient accumulation) cannot be "
                "profiled; profile with one forward and one backward per optimizer.step()"
            )
        step.ready_ns[position] = now

    def backward_end(self) -> None:
        step, now = self._open, self.clock_ns()
        if step is not None and step.backward_end_ns is None:
            step.backward_end_ns = now

    def optimizer_start(self) -> None:
        step, now = self._open, self.clock_ns()
        if step is None:
            return
        if step.optimizer_start_ns is not None:
            raise ProfilingUnsupportedError(
                f"advisor: step {step.index} called optimizer.step() twice after one forward: a step of the "
                "profiled program must be one forward, one backward and one optimizer.step()"
            )
        if step.backward_start_ns is None or step.backward_end_ns is None:
            raise ProfilingUnsupportedError(
                f"advisor: step {step.index} called optimizer.step() without a backward pass through the DDP "
                "model's output: the profiled loop must call loss.backward() on a loss computed from the "
                "DDP model's output in each step"
            )
        missing = [self.gradients[g][0] for g, t in enumerate(step.ready_ns) if t is None]
        if missing:
            raise ProfilingUnsupportedError(
                f"advisor: in step {step.index} the gradient of {len(missing)} trainable parameter(s) never became "
                f"ready ({_names(missing)}): parameters unused in a step (find_unused_parameters) cannot be "
                "profiled; freeze them (requires_grad=False) or profile a step that uses every parameter"
            )
        step.optimizer_start_ns = now

    def optimizer_end(self) -> None:
        step, now = self._open, self.clock_ns()
        if step is not None and step.optimizer_start_ns is not None and step.optimizer_end_ns is None:
            step.optimizer_end_ns = now

    def _close(self, step: _Step, next_start_ns: int) -> None:
        done = step.as_bundle_step(next_start_ns)
        if done is None:
            raise ProfilingUnsupportedError(
                f"advisor: step {step.index} ran the DDP model's forward again before optimizer.step(): "
                "gradient accumulation over several forward passes per optimizer step cannot be profiled "
                "(and an evaluation forward must run under torch.no_grad())"
            )
        self._steps.append(done)

    def bundle(self) -> dict[str, Any]:
        """The bundle of the steps traced so far."""
        try:
            meta = {**self.meta, "cpu_s_per_step": self._cpu.as_meta()}
            return build_allreduce_bundle(KIND, meta, self.gradients, self._steps, buckets=self.buckets(),
                                          link=self.link)
        except ValueError as exc:
            raise ProfilingUnsupportedError(f"advisor: cannot build the profile: {exc}") from None

    def finish(self) -> bool:
        """Encode and ship what was traced (at most once); true when training should stop."""
        if self.finished:
            return False
        self._open = None
        if not self._steps:
            self.result = UploadResult(False, None, "no step was traced", attempts=0)
            log.warning("advisor: training ended after %d steps, before a traced step completed (warm-up is %d): "
                        "nothing uploaded", self.forwards_seen, self.config.warmup)
            return False
        if len(self._steps) < self.config.steps:
            log.warning("advisor: training ended after %d of %d traced steps; uploading those",
                        len(self._steps), self.config.steps)
        body = encode_allreduce_bundle(self.bundle())
        log.info("advisor: uploading %d traced DDP steps (%d bytes gzipped) to %s",
                 len(self._steps), len(body), self.config.ingest_url)
        self.result = ship(self.config.ingest_url, body, self.config.token_file, policy=self.retry)
        if self.result.ok:
            log.info("advisor: trace accepted (HTTP %s, profile %s)", self.result.status, self.result.profile_id)
        else:
            status = "no answer" if self.result.status is None else f"HTTP {self.result.status}"
            log.error("advisor: trace upload failed after %d attempt(s) (%s): %s; training continues",
                      self.result.attempts, status, self.result.message)
        return self.result.ok and self.config.stop_after_upload
