"""``profile_ddp``: records a profiling run from inside a PyTorch DistributedDataParallel program.

One line after the model and optimizer exist::

    from advisor.profiling.torch import profile_ddp
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    profile_ddp(model, optimizer, batch_size=64)

With ``ADVISOR_PROFILE`` off it installs nothing and returns an inactive handle. With it on, it
checks the run is one worker alone (``WORLD_SIZE`` as torchrun and the Kubeflow PyTorchJob
operator set it, and the process group's size), then hooks into the program without changing
it, and per traced step records (``time.perf_counter_ns``):

- step start: the DDP module's forward pre-hook (forwards with gradients disabled, e.g.
  evaluation under ``torch.no_grad()``, are not steps);
- backward start: a hook on the gradient of the DDP module's output (the first to fire);
- each gradient's ready time: ``Tensor.register_post_accumulate_grad_hook`` on every trainable
  parameter (after autograd wrote ``.grad``, the moment DDP's reducer marks it ready);
- backward end: an autograd-engine callback queued at backward start (it runs when the
  backward graph is done, before DDP's own end-of-backward callback);
- the optimizer step: ``Optimizer.register_step_pre_hook``/``register_step_post_hook``;
- the step's wall time: up to the next step's forward, so data loading counts.

and, once, the link rate the bundle records (``advisor.profiling.link``: ``ADVISOR_BANDWIDTH_MBIT``
from the controller, else the speed of the interface gloo or NCCL is told to use).

Once, when building the bundle: the gradient sizes (``numel * element_size`` in DDP's parameter
order, which is registration order) and DDP's bucket layout, read from
``DistributedDataParallel._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"]``: the
buckets DDP rebuilt after its first backward in gradient-ready order, in the order its reducer
all-reduces them (read with torch 2.13). Without a rebuild (``find_unused_parameters=True``
and no static graph) the bundle's buckets are null and the ring model groups gradients by
``bucket_cap_bytes`` itself. ``torch.profiler`` is not used: its per-operator trace has no
place in the bundle (the ring model replays ready times, not kernels) and costs far more than
these hooks, which are one Python call per parameter per step and are removed once the bundle
is shipped.

After ``ADVISOR_PROFILE_WARMUP`` steps it traces ``ADVISOR_PROFILE_STEPS`` and uploads at the
next step's forward; then, with ``ADVISOR_STOP_AFTER_UPLOAD`` on (the default) and the upload
accepted, it ends the program with ``SystemExit(0)``: a profiling run has done its job. A
program shape it cannot trace raises ``ProfilingUnsupportedError`` (``ddp_recorder``).

Independently of ``ADVISOR_PROFILE``, with ``ADVISOR_METRICS_PORT`` set every step of the
optimizer counts ``batch_size`` examples for Prometheus (``throughput``; a post-step hook that
stays for the whole run): a DDP job's observed throughput. With gradient accumulation,
``batch_size`` is the examples of one optimizer step. Its progress: PyTorch has no global step,
but optimizers that count their steps in their state (Adam, AdamW, RMSprop, Adagrad...: each
parameter's ``state["step"]``, saved and restored with ``optimizer.state_dict()``) say how many
the job has taken, each worth every rank's batch (the process group's size); the hook reads it
when a read is due (``throughput.GlobalStepProgress``). SGD keeps no such count: a program that
counts its own steps and restores them from its checkpoints tells them with
``profiler.global_step(step)``; else its job's progress stays the counters'.

``import torch`` below is absolute (``from __future__ import annotations`` plus Python 3's
absolute imports), so it imports PyTorch, not this module.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from advisor.profiling.config import ProfilingConfig, load_config
from advisor.profiling.ddp_recorder import DDPStepRecorder, check_single_worker, parse_bucket_indices, world_size_from_env
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.link import link_rate
from advisor.profiling.recorder import resolve_batch_size
from advisor.profiling.throughput import GlobalStepProgress, StepCounter, step_counter_from_env
from advisor.profiling.upload import RetryPolicy

log = logging.getLogger("advisor.profiling")


class DDPProfiler:
    """The handle ``profile_ddp`` returns: ``active`` while it records, ``recorder`` for tests,
    ``counter`` while it counts steps for Prometheus, ``global_step`` for a program that counts
    its own steps."""

    def __init__(self, recorder: DDPStepRecorder | None = None, counting: _Counting | None = None) -> None:
        self.recorder = recorder
        self._counting = counting
        self._handles: list[Any] = []  # the recording hooks, removed once the profile is shipped

    @property
    def counter(self) -> StepCounter | None:
        """What counts this worker's steps for Prometheus, or None when nothing is counted."""
        return None if self._counting is None else self._counting.counter

    def global_step(self, step: int) -> None:
        """The job's step as the program counts it and restores it from its checkpoints (one per
        optimizer step of every rank): its progress for Prometheus from now on, in place of the
        optimizer's own count, which SGD does not keep. Does nothing without ``ADVISOR_METRICS_PORT``."""
        if self._counting is not None:
            self._counting.program_step(step)

    @property
    def active(self) -> bool:
        return self.recorder is not None and not self.recorder.finished

    def remove(self) -> None:
        """Take every hook out of the program (done after shipping)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def finish(self) -> None:
        """Ship what was traced if the loop ended before the last traced step (also run at exit)."""
        if self.recorder is not None and not self.recorder.finished:
            self.recorder.finish()
        self.remove()


def profile_ddp(
    model: Any,
    optimizer: Any,
    batch_size: int | None = None,
    model_name: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
) -> DDPProfiler:
    """Trace this DDP program's steps when ``ADVISOR_PROFILE`` is on, count them when
    ``ADVISOR_METRICS_PORT`` is set (module docstring).

    ``batch_size`` is this worker's examples per step (``ADVISOR_BATCH_SIZE`` overrides it);
    ``model_name`` is for people. Raises ``ProfilingConfigError`` on an unusable setting and
    ``ProfilingUnsupportedError`` on a program it cannot trace, both before the first step.
    """
    env = os.environ if environ is None else environ
    config = load_config(env)
    counter = step_counter_from_env(batch_size, env, who="profile_ddp")
    if config is not None or counter is not None:
        _check_optimizer(optimizer)
    if config is None:
        return DDPProfiler(counting=_counting(optimizer, counter, env))
    batch = resolve_batch_size(config, batch_size)
    ddp = _checked_ddp(model)
    group = ddp.process_group if dist.is_available() and dist.is_initialized() else None
    check_single_worker(world_size_from_env(env), None if group is None else dist.get_world_size(group))
    params = _reducer_parameters(ddp)
    recorder = DDPStepRecorder(
        config=config,
        gradients=[(name, p.numel() * p.element_size()) for name, p in params],
        meta=_meta(config, batch, model_name, ddp),
        buckets=lambda: _buckets(ddp, len(params)),
        link=link_rate(config.bandwidth_mbit, env),
        retry=retry,
    )
    profiler = DDPProfiler(recorder, _counting(optimizer, counter, env, progress=False))  # after every check
    _install(profiler, recorder, ddp, optimizer, [p for _, p in params])
    atexit.register(profiler.finish)
    log.info("advisor: profiling this DDP run: %d warm-up steps, then %d traced steps of %d examples",
             config.warmup, config.steps, batch)
    return profiler


def _counting(optimizer: Any, counter: StepCounter | None, environ: Mapping[str, str], *,
              progress: bool = True) -> _Counting | None:
    """``counter`` counting every step of ``optimizer`` from now on (a hook kept for the whole run),
    and with ``progress`` the job's steps from the optimizer's state when a read is due (module
    docstring; not while this process records: its traced steps are timed)."""
    if counter is None:
        return None
    counting = _Counting(counter, optimizer, environ, progress)
    optimizer.register_step_post_hook(lambda opt, args, kwargs: counting.stepped())
    return counting


class _Counting:
    """A DDP worker's counting: its optimizer's steps, and the job's progress from the steps the
    optimizer's state counts or, once the program tells them (``DDPProfiler.global_step``), its own."""

    def __init__(self, counter: StepCounter, optimizer: Any, environ: Mapping[str, str], progress: bool) -> None:
        self.counter, self._optimizer, self._environ = counter, optimizer, environ
        self._reads = GlobalStepProgress(counter) if progress else None
        self._examples_per_step: float | None = None  # the ranks' batches, once asked (the group is fixed by then)

    def stepped(self) -> None:
        self.counter.step()
        if self._reads is not None and self._reads.due():
            step = optimizer_steps(self._optimizer)
            if step is not None:
                self._reads.seen(step, self._per_step())

    def program_step(self, step: int) -> None:
        self._reads = None  # the program's count from now on
        self.counter.global_step(int(step), self._per_step())

    def _per_step(self) -> float:
        if self._examples_per_step is None:  # not on every step of a program that tells its own
            self._examples_per_step = self.counter.examples_per_step * _ranks(self._environ)
        return self._examples_per_step


def optimizer_steps(optimizer: Any) -> int | None:
    """The steps the optimizer's state counts (the most of any parameter's ``state["step"]``);
    None when it keeps no count (SGD) or has taken no step yet."""
    found = [state["step"] for state in optimizer.state.values() if isinstance(state, dict) and "step" in state]
    if not found:
        return None
    try:
        return max(int(step.item() if hasattr(step, "item") else step) for step in found)
    except (TypeError, ValueError):
        return None


def _ranks(environ: Mapping[str, str]) -> int:
    """The processes whose batches one optimizer step of the job takes: the process group's size,
    else ``WORLD_SIZE``, else 1."""
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return world_size_from_env(environ) or 1


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ProfilingUnsupportedError(
            f"advisor: profile_ddp needs the torch.optim.Optimizer that updates the DDP model, got "
            f"{type(optimizer).__name__}"
        )


def _checked_ddp(model: Any) -> DistributedDataParallel:
    if not isinstance(model, DistributedDataParallel):
        raise ProfilingUnsupportedError(
            f"advisor: profile_ddp needs the model wrapped in torch.nn.parallel.DistributedDataParallel, got "
            f"{type(model).__name__}: the profile records DDP's gradient buckets and the moment each is ready "
            "(a program without DDP has no all-reduce to predict)"
        )
    return model


def _reducer_parameters(ddp: DistributedDataParallel) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable parameters in the reducer's order (DDP's ``_build_params_for_reducer``:
    modules in ``named_modules`` order, each module's own parameters, shared ones once, ignored
    ones left out), with their qualified names; this is the index space of the bucket layout."""
    ignored: set[str] = set(getattr(ddp, "parameters_to_ignore", ()))
    seen: set[int] = set()
    found = []
    for module_name, module in ddp.module.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if not param.requires_grad or name in ignored or id(param) in seen:
                continue
            seen.add(id(param))
            found.append((name, param))
    return found


def _meta(config: ProfilingConfig, batch: int, model_name: str | None, ddp: DistributedDataParallel) -> dict[str, Any]:
    cap = getattr(ddp, "bucket_bytes_cap", None)
    return {
        "batch_size": batch,
        "model": config.model_name or model_name or type(ddp.module).__name__,
        "world_size": 1,
        "framework": f"torch {torch.__version__}",
        "bucket_cap_bytes": int(cap) if isinstance(cap, int) and cap > 0 else None,
    }


def _buckets(ddp: DistributedDataParallel, count: int) -> list[list[int]] | None:
    """DDP's rebuilt bucket layout (module docstring), or None when DDP has not rebuilt its buckets."""
    data = ddp._get_ddp_logging_data()
    layout = parse_bucket_indices(data.get("rebuilt_per_bucket_param_indices"), count)
    if layout is None:
        log.info("advisor: DDP did not rebuild its buckets (find_unused_parameters?); the profile leaves the "
                 "bucket layout to the model (bucket_cap_bytes %s)", data.get("bucket_cap_bytes"))
    return layout


def _install(profiler: DDPProfiler, recorder: DDPStepRecorder, ddp: DistributedDataParallel, optimizer: Any,
             params: list[torch.nn.Parameter]) -> None:
    engine = torch.autograd.Variable._execution_engine

    def on_backward(grad: Any) -> None:
        if recorder.tracing and recorder.backward_start():
            engine.queue_callback(recorder.backward_end)

    def forward_pre(module: Any, args: Any) -> None:
        if not torch.is_grad_enabled():
            return
        if recorder.forward(grad_sync=bool(ddp.require_backward_grad_sync)):
            profiler.remove()
            log.info("advisor: profiling done; ending the program (ADVISOR_STOP_AFTER_UPLOAD=0 keeps training)")
            raise SystemExit(0)
        if recorder.finished:
            profiler.remove()

    def forward_post(module: Any, args: Any, output: Any) -> None:
        if not recorder.tracing or not torch.is_grad_enabled():
            return
        tensors = [t for t in torch.utils._pytree.tree_leaves(output)
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if not tensors:
            raise ProfilingUnsupportedError(
                "advisor: the DDP model's output holds no tensor that requires a gradient: a traced step "
                "needs a backward pass through the model's output"
            )
        # once per backward, when the first output gradient is computed
        torch.autograd.graph.register_multi_grad_hook(tensors, on_backward, mode="any")

    def ready_hook(position: int) -> Any:
        def hook(param: Any) -> None:
            if recorder.tracing:
                recorder.grad_ready(position)
        return hook

    def step_pre(opt: Any, args: Any, kwargs: Any) -> None:
        recorder.optimizer_start()

    def step_post(opt: Any, args: Any, kwargs: Any) -> None:
        recorder.optimizer_end()

    handles = profiler._handles
    handles.append(ddp.register_forward_pre_hook(forward_pre))
    handles.append(ddp.register_forward_hook(forward_post))
    handles.extend(p.register_post_accumulate_grad_hook(ready_hook(i)) for i, p in enumerate(params))
    handles.append(optimizer.register_step_pre_hook(step_pre))
    handles.append(optimizer.register_step_post_hook(step_post))
