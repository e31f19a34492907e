"""The DDP hook inside real PyTorch: a DDP (gloo, world_size 1) training loop uploads to a local
receiver, the bundle imports, and the ring model's W = 1 point is the loop's own rate; program
shapes the hook cannot trace fail loudly.

Run (PyTorch goes in its own venv, never the main environment):

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/pip install -e '.[test]'
    /tmp/torchvenv/bin/python -m pytest -m heavy tests/heavy/test_torch_ddp.py

Independent truths: gradient sizes from the layer shapes by hand (float32, 4 bytes each); the
rate the test's own loop measures with its own clock; DDP's documented bucket rule (a bucket
closes once it holds bucket_cap bytes, so every bucket but the last reaches the cap and none
exceeds it by more than its last gradient).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import ProgramKind
from advisor.core.sim_types import NetworkModel
from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.upload import RetryPolicy
from tests.profiling import Receiver, scraped

pytestmark = pytest.mark.heavy

BATCH = 8
WARMUP, STEPS = 3, 25
FORWARD_S, BACKWARD_S = 0.002, 0.004  # emulated compute per sleeping layer
# Linear(16, 32): weight 32 x 16 = 512, bias 32; Linear(32, 4): weight 4 x 32 = 128, bias 4 (float32)
SIZES = {"0.weight": 2_048, "0.bias": 128, "3.weight": 512, "3.bias": 16}
FAST = RetryPolicy(attempts=1, first_delay_s=0.0, total_s=10.0, timeout_s=10.0)


@pytest.fixture(scope="module")
def torch() -> Iterator[Any]:
    """PyTorch with a one-process gloo group, imported here so the default run never mentions it."""
    torch = pytest.importorskip("torch", reason="the heavy DDP tests need torch (see the module docstring)")
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield torch
    dist.destroy_process_group()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("secret\n")
    return path


def _env(url: str, token: Path, **extra: str) -> dict[str, str]:
    return {"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": url, "ADVISOR_TOKEN_FILE": str(token),
            "ADVISOR_PROFILE_STEPS": str(STEPS), "ADVISOR_PROFILE_WARMUP": str(WARMUP), **extra}


def _net(torch: Any, unused: bool = False) -> Any:
    """Linear 16-32, ReLU, Linear 32-4, with a sleep after each Linear in forward and backward."""

    class Sleep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            time.sleep(FORWARD_S)
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            time.sleep(BACKWARD_S)
            return grad

    class SleepLayer(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return Sleep.apply(x)

    net = torch.nn.Sequential(torch.nn.Linear(16, 32), SleepLayer(), torch.nn.ReLU(), torch.nn.Linear(32, 4),
                              SleepLayer())
    if unused:
        net.add_module("spare", torch.nn.Linear(4, 4))  # never called in forward

        class Skip(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, x: Any) -> Any:
                return self.inner[:5](x)

        return Skip(net)
    return net


def _ddp(torch: Any, **kwargs: Any) -> tuple[Any, Any]:
    unused = kwargs.pop("unused", False)
    model = torch.nn.parallel.DistributedDataParallel(_net(torch, unused), **kwargs)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train_step(torch: Any, model: Any, optimizer: Any) -> None:
    loss = model(torch.randn(BATCH, 16)).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_ddp_loop_uploads_a_bundle_whose_w1_prediction_is_its_measured_rate(torch: Any, token: Path) -> None:
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch, bucket_cap_mb=600 / (1024 * 1024))
    with Receiver() as rx:
        profiler = profile_ddp(model, optimizer, batch_size=BATCH, model_name="tiny", environ=_env(rx.url, token),
                               retry=FAST)
        assert profiler.active
        starts = []
        with pytest.raises(SystemExit) as stopped:  # ADVISOR_STOP_AFTER_UPLOAD is on by default
            for _ in range(WARMUP + STEPS + 10):
                starts.append(time.perf_counter())
                _train_step(torch, model, optimizer)
        assert stopped.value.code == 0
        assert len(starts) == WARMUP + STEPS + 1  # stopped at the forward after the last traced step
        assert len(rx.requests) == 1
        doc = rx.requests[0].bundle()
    assert not profiler.active and not model._forward_pre_hooks  # hooks removed after shipping
    measured = STEPS * BATCH / (starts[WARMUP + STEPS] - starts[WARMUP])

    assert {g["name"]: g["bytes"] for g in doc["gradients"]} == SIZES
    assert doc["meta"]["world_size"] == 1 and doc["meta"]["batch_size"] == BATCH and doc["meta"]["model"] == "tiny"
    # the process's CPU per untraced warm-up step: measured, and no more than the machine's cores
    # could give in the traced steps' longest wall time
    longest_s = max(step["wall_us"] for step in doc["steps"]) / 1e6
    assert 0 < doc["meta"]["cpu_s_per_step"] <= (os.cpu_count() or 1) * longest_s
    assert [s["index"] for s in doc["steps"]] == list(range(WARMUP, WARMUP + STEPS))
    # DDP's buckets: reduce order puts layer 3 (ready first) in the first bucket; every bucket
    # but the last reaches the 600-byte cap, none passes it by more than its last gradient
    names = [g["name"] for g in doc["gradients"]]
    buckets = [[names[i] for i in b] for b in doc["buckets"]]
    assert sorted(n for b in buckets for n in b) == sorted(SIZES)
    assert {"3.weight", "3.bias"} <= set(buckets[0]) and len(buckets) > 1
    for bucket in buckets[:-1]:
        assert sum(SIZES[n] for n in bucket) >= 600 > sum(SIZES[n] for n in bucket[:-1])
    for step in doc["steps"]:  # backward holds 2 sleeping layers; the optimizer comes after it
        assert step["backward_end_us"] - step["backward_start_us"] >= 2 * BACKWARD_S * 1e6
        assert step["optimizer_us"][0] >= step["backward_end_us"]

    profile = read_allreduce_upload(doc, origin="heavy")
    assert profile.job.kind is ProgramKind.PYTORCH_DDP
    ring = registry.get("ring-allreduce")
    inputs = ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=1e9))
    (point,) = predict_curve(ring, inputs, registry.params_for(ring), CurveSettings(workers=(1,), seed=1))
    assert point.throughput == pytest.approx(measured, rel=0.03)


def test_without_advisor_profile_nothing_is_installed(torch: Any) -> None:
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch)
    profiler = profile_ddp(model, optimizer, batch_size=BATCH, environ={})
    assert not profiler.active and profiler.recorder is None
    assert not model._forward_pre_hooks and not model._forward_hooks
    _train_step(torch, model, optimizer)


def test_a_model_without_ddp_is_refused(torch: Any, token: Path) -> None:
    from advisor.profiling.torch import profile_ddp

    net = _net(torch)
    with pytest.raises(ProfilingUnsupportedError, match="DistributedDataParallel, got Sequential"):
        profile_ddp(net, torch.optim.SGD(net.parameters(), lr=0.1), batch_size=BATCH,
                    environ=_env("http://127.0.0.1:9/", token))


def test_more_than_one_worker_is_refused(torch: Any, token: Path) -> None:
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch)
    with pytest.raises(ProfilingUnsupportedError, match="WORLD_SIZE=2; a profiling run needs exactly 1 worker"):
        profile_ddp(model, optimizer, batch_size=BATCH, environ=_env("http://127.0.0.1:9/", token, WORLD_SIZE="2"))


def test_no_trainable_parameters_is_refused(torch: Any, token: Path) -> None:
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch)
    for p in model.parameters():  # frozen after wrapping (DDP itself refuses a frozen model)
        p.requires_grad_(False)
    with pytest.raises(ProfilingUnsupportedError, match="no trainable parameters"):
        profile_ddp(model, optimizer, batch_size=BATCH, environ=_env("http://127.0.0.1:9/", token))


def _profiled(torch: Any, token: Path, **ddp_kwargs: Any) -> tuple[Any, Any]:
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch, **ddp_kwargs)
    profile_ddp(model, optimizer, batch_size=BATCH, environ=_env("http://127.0.0.1:9/", token,
                                                                 ADVISOR_PROFILE_WARMUP="1"), retry=FAST)
    _train_step(torch, model, optimizer)  # warm-up
    return model, optimizer


def test_gradient_accumulation_with_no_sync_is_refused(torch: Any, token: Path) -> None:
    model, optimizer = _profiled(torch, token)
    with pytest.raises(ProfilingUnsupportedError, match="no_sync"), model.no_sync():
        model(torch.randn(BATCH, 16)).sum().backward()


def test_gradient_accumulation_without_no_sync_is_refused(torch: Any, token: Path) -> None:
    model, optimizer = _profiled(torch, token)
    model(torch.randn(BATCH, 16)).sum().backward()
    with pytest.raises(ProfilingUnsupportedError, match="forward again before optimizer.step"):
        model(torch.randn(BATCH, 16)).sum().backward()


def test_a_parameter_whose_gradient_is_never_ready_is_refused(torch: Any, token: Path) -> None:
    model, optimizer = _profiled(torch, token, unused=True, find_unused_parameters=True)
    model(torch.randn(BATCH, 16)).sum().backward()
    with pytest.raises(ProfilingUnsupportedError, match=r"never became ready \(inner.spare.weight, inner.spare.bias\)"):
        optimizer.step()


def test_an_evaluation_forward_is_not_a_step(torch: Any, token: Path) -> None:
    model, optimizer = _profiled(torch, token)
    with torch.no_grad():
        model(torch.randn(BATCH, 16))
    _train_step(torch, model, optimizer)  # no "forward again before optimizer.step"


def test_the_module_is_importable_under_its_package_name(torch: Any) -> None:
    """``advisor/profiling/torch.py`` imports PyTorch, not itself (absolute imports)."""
    import advisor.profiling.torch as hook

    assert hook.torch is torch and os.path.basename(hook.__file__) == "torch.py"


def test_every_optimizer_step_is_counted_for_prometheus(torch: Any, port: int) -> None:
    """Without ADVISOR_PROFILE, with ADVISOR_METRICS_PORT: 7 training steps of 8 examples, and
    an evaluation forward and a step of another optimizer between them that are not counted;
    no recording hook on the model. A PyTorch program reads no global step: no progress gauge."""
    from advisor.profiling.torch import profile_ddp

    model, optimizer = _ddp(torch)
    profiler = profile_ddp(model, optimizer, batch_size=BATCH, environ={"ADVISOR_METRICS_PORT": str(port)})
    assert not profiler.active and profiler.counter is not None
    assert not model._forward_pre_hooks and not model._forward_hooks
    for i in range(7):
        _train_step(torch, model, optimizer)
        if i == 3:
            with torch.no_grad():
                model(torch.randn(BATCH, 16))
            other = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
            other.step()
    found = scraped(port)
    assert (found["advisor_training_examples_total"], found["advisor_training_steps_total"]) == (7 * BATCH, 7)
    assert "advisor_training_progress_examples" not in found


def test_counting_a_step_of_something_else_than_an_optimizer_is_refused(torch: Any, port: int) -> None:
    from advisor.profiling.torch import profile_ddp

    model, _ = _ddp(torch)
    with pytest.raises(ProfilingUnsupportedError, match="needs the torch.optim.Optimizer .* got dict"):
        profile_ddp(model, {"lr": 0.1}, batch_size=BATCH, environ={"ADVISOR_METRICS_PORT": str(port)})


def test_a_refused_profiling_run_leaves_no_counting_hook(torch: Any, token: Path, port: int) -> None:
    """Profiling and counting asked together on a model without DDP: refused, and the optimizer
    keeps no hook of ours (the program does not go on counting behind the error)."""
    from advisor.profiling.torch import profile_ddp

    net = _net(torch)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ProfilingUnsupportedError, match="DistributedDataParallel"):
        profile_ddp(net, optimizer, batch_size=BATCH,
                    environ=_env("http://127.0.0.1:9/", token, ADVISOR_METRICS_PORT=str(port)))
    assert not optimizer._optimizer_step_post_hooks


def test_adams_step_count_is_the_jobs_progress_across_a_restore(torch: Any, port: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Adam counts its steps in its state, which a checkpoint keeps. 5 steps with a checkpoint
    of the optimizer after the 2nd; the job restarts from it (a new model and optimizer, the
    state loaded) and trains 2 more: progress 2 + 2 = 4 steps of every rank's batch (the group's
    size, 4 here), below the 5 read before the restart, while the counters hold all 7 steps of
    this rank. SGD keeps no count."""
    import copy

    import torch.distributed as dist

    from advisor.profiling import throughput
    from advisor.profiling.torch import optimizer_steps, profile_ddp

    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)  # read with every step
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    env = {"ADVISOR_METRICS_PORT": str(port)}
    model = torch.nn.parallel.DistributedDataParallel(_net(torch))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    profile_ddp(model, optimizer, batch_size=BATCH, environ=env)
    for k in range(5):
        _train_step(torch, model, optimizer)
        if k == 1:
            checkpoint = copy.deepcopy(optimizer.state_dict())
    assert optimizer_steps(optimizer) == 5 and scraped(port)["advisor_training_progress_examples"] == 5 * BATCH * 4
    model = torch.nn.parallel.DistributedDataParallel(_net(torch))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    optimizer.load_state_dict(checkpoint)
    profile_ddp(model, optimizer, batch_size=BATCH, environ=env)
    for _ in range(2):
        _train_step(torch, model, optimizer)
    found = scraped(port)
    assert found["advisor_training_progress_examples"] == (2 + 2) * BATCH * 4
    assert (found["advisor_training_examples_total"], found["advisor_training_steps_total"]) == (7 * BATCH, 7)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train_step(torch, model, sgd)
    assert optimizer_steps(sgd) is None


def test_a_program_that_counts_its_own_steps_tells_them(torch: Any, port: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SGD keeps no step count; the program restored its step 100 from a checkpoint and tells
    each new one: progress (100 + 3) steps of every rank's batch (2 ranks here). Once told, the
    program's count wins over an optimizer's own: Adam's 3 is not read."""
    import torch.distributed as dist

    from advisor.profiling import throughput
    from advisor.profiling.torch import profile_ddp

    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    for make in (lambda ps: torch.optim.SGD(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01)):
        model = torch.nn.parallel.DistributedDataParallel(_net(torch))
        optimizer = make(model.parameters())
        profiler = profile_ddp(model, optimizer, batch_size=BATCH, environ={"ADVISOR_METRICS_PORT": str(port)})
        for step in range(101, 104):
            _train_step(torch, model, optimizer)
            profiler.global_step(step)
        assert scraped(port)["advisor_training_progress_examples"] == 103 * BATCH * 2
    inert = profile_ddp(model, optimizer, batch_size=BATCH, environ={})
    inert.global_step(5)  # no port: nothing counted, nothing raised
    assert inert.counter is None
