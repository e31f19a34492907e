"""Synthetic profiles for benchmarks and tests: an Inception-scale step and a tiny MLP step.

``inception_like``: ``layers`` variables (default 200) with log-uniform sizes between 1 KB
and 20 MB, rescaled so the model totals about ``total_mb`` MB (Inception-v3 is ~95 MB).
Per layer: a pull (downlink), a forward chain of ``fwd_ops`` computations (the first also
waits for the pull and the previous layer), a backward chain of ``bwd_ops`` computations
whose middle op produces the gradient that is pushed (uplink) and applied on the PS (ps).
With the defaults that is 200 * (3 + 5 + 5) = 2,600 operations per step.

``tiny_mlp``: the shape of the real 4-layer MLP trace in tests/data/ps-async (8 variables plus
the 8-byte global step, 1.74 MB each way, ~25 ms of compute), made up rather than loaded.

Deterministic for a seed; no file I/O.
"""

from __future__ import annotations

import numpy as np

from advisor.core.profile import Profile, build_profile


def inception_like(
    layers: int = 200,
    fwd_ops: int = 5,
    bwd_ops: int = 5,
    total_mb: float = 95.0,
    compute_ms: float = 500.0,
    recorded_steps: int = 20,
    parameter_servers: int = 1,
    seed: int = 0,
) -> Profile:
    """An Inception-scale step graph (see module docstring)."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(1e3), np.log(20e6), layers))
    sizes = np.maximum(1, (sizes * total_mb * 1e6 / sizes.sum()).astype(np.int64))
    ops: list[dict] = []
    prev = None
    for i in range(layers):
        ps = i % parameter_servers
        ops.append(dict(name=f"pull{i}", resource="downlink", ps=ps, bytes=int(sizes[i])))
        for j in range(fwd_ops):
            deps = [f"pull{i}"] + ([prev] if prev else []) if j == 0 else [f"f{i}_{j - 1}"]
            ops.append(dict(name=f"f{i}_{j}", resource="worker", deps=deps))
        prev = f"f{i}_{fwd_ops - 1}"
    grad_at = bwd_ops // 2
    for i in reversed(range(layers)):
        ps = i % parameter_servers
        for j in range(bwd_ops):
            deps = [prev] if j == 0 else [f"b{i}_{j - 1}"]
            ops.append(dict(name=f"b{i}_{j}", resource="worker", deps=deps))
        prev = f"b{i}_{bwd_ops - 1}"
        ops.append(dict(name=f"push{i}", resource="uplink", ps=ps, bytes=int(sizes[i]), deps=[f"b{i}_{grad_at}"]))
        ops.append(dict(name=f"apply{i}", resource="ps", ps=ps, deps=[f"push{i}"]))
    return _with_steps(ops, rng, compute_ms, recorded_steps, batch=32, parameter_servers=parameter_servers)


def tiny_mlp(recorded_steps: int = 10, seed: int = 0) -> Profile:
    """A profile shaped like the real 784-384-256-128-10 MLP trace (see module docstring)."""
    rng = np.random.default_rng(seed)
    dims = [784, 384, 256, 128, 10]
    ops: list[dict] = [dict(name="pull_step", resource="downlink", ps=0, bytes=8)]
    prev = None
    for i in range(4):
        for v, nbytes in (("W", 4 * dims[i] * dims[i + 1]), ("b", 4 * dims[i + 1])):
            ops.append(dict(name=f"pull_fc{i}/{v}", resource="downlink", ps=0, bytes=nbytes))
        deps = [f"pull_fc{i}/W", f"pull_fc{i}/b"] + ([prev] if prev else [])
        ops.append(dict(name=f"fc{i}/fwd", resource="worker", deps=deps))
        prev = f"fc{i}/fwd"
    for i in reversed(range(4)):
        ops.append(dict(name=f"fc{i}/bwd", resource="worker", deps=[prev]))
        prev = f"fc{i}/bwd"
        for v, nbytes in (("W", 4 * dims[i] * dims[i + 1]), ("b", 4 * dims[i + 1])):
            ops.append(dict(name=f"push_fc{i}/{v}", resource="uplink", ps=0, bytes=nbytes, deps=[prev]))
            ops.append(dict(name=f"apply_fc{i}/{v}", resource="ps", ps=0, deps=[f"push_fc{i}/{v}", "pull_step"]))
    return _with_steps(ops, rng, compute_ms=25.0, recorded_steps=recorded_steps, batch=32, parameter_servers=1)


def _with_steps(
    ops: list[dict], rng: np.random.Generator, compute_ms: float, recorded_steps: int, batch: int, parameter_servers: int
) -> Profile:
    """Attach recorded steps: compute ops share ``compute_ms`` (log-normal weights, +-10 %
    jitter per step), PS updates take 0.1-1 ms, transfers' recorded durations are unused."""
    kinds = [op["resource"] for op in ops]
    weights = np.array([rng.lognormal(0.0, 1.0) if k == "worker" else 0.0 for k in kinds])
    base = weights / max(weights.sum(), 1e-12) * compute_ms * 1e3
    base += np.array([rng.uniform(100, 1000) if k == "ps" else 0.0 for k in kinds])
    steps = []
    for s in range(recorded_steps):
        dur = base * rng.uniform(0.9, 1.1, len(ops))
        steps.append(dict(index=s, start_us=[0.0] * len(ops), duration_us=dur.tolist()))
    # GPU-scale compute (an accelerator's step): an all-reduce what-if of it is NCCL's
    job = dict(model="synthetic", batch_size=batch, parameter_servers=parameter_servers, worker_on_gpu=True)
    return build_profile(job=job, ops=ops, steps=steps)
