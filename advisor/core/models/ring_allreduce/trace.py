"""What an all-reduce job would do per step, read off a one-worker parameter-server trace.

The traces this project records come from parameter-server training, so they hold work that
an all-reduce job does not do and miss work it does. This module turns one into what the ring
model needs, per recorded step:

- **Compute before the all-reduce** (``compute_s``): every worker operation that does not wait
  for a gradient transfer, run back to back on the worker in the order the trace started them,
  with their recorded durations. Their dependencies on parameter pulls are dropped: in an
  all-reduce job every worker holds the whole model and updates it locally, so there are no
  pulls (DOWNLINK transfers) and no waits for them; the time the trace spent waiting for
  pulls is not compute and disappears. (One server per worker, as the project's PS simulator
  models the worker's compute.)
- **Gradients**: the UPLINK transfers with bytes, their size and when each becomes ready: the
  end, in the schedule above, of the worker operations that produce it (through non-worker
  operations, if any). Zero-byte transfers (control edges) are not gradients.
- **Work after the all-reduce** (``update_s``): the optimizer update, which the trace ran on
  the parameter server (PS operations downstream of a gradient transfer), plus worker
  operations downstream of a gradient transfer (e.g. the client's gap between steps). All-reduce
  frameworks apply the update locally once the last bucket is reduced (``optimizer.step()``
  after ``backward()`` in DDP), so this runs on the worker after the last bucket. PS operations
  that serve pulls (variable reads) are dropped.
- **Dropped as well**: the gRPC parsing overhead that the PS model can split out of each
  transfer (``op_type`` ``ParseOverhead``, added by ``core.preprocess``): it belongs to the
  PS's transfers, which an all-reduce job does not make. Such ops take no time here.

It then groups the gradients into buckets the way PyTorch DDP does (``bucket_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.preprocess import PARSE_OP_TYPE
from advisor.core.profile import Profile, Resource

MIB = 1024 * 1024  # DDP's bucket_cap_mb counts mebibytes: int(bucket_cap_mb * 1024 * 1024)
# op_type of the parsing-overhead ops core.preprocess.split_parsing_overhead adds
PS_TRANSFER_OVERHEAD_TYPES = frozenset({PARSE_OP_TYPE})


@dataclass(frozen=True)
class StepCosts:
    """Per recorded step (rows) what the ring model replays; times in seconds, relative to the step's start."""

    compute_s: np.ndarray  # (K,) compute before the all-reduce, back to back
    update_s: np.ndarray  # (K,) work after the last bucket (optimizer update, client gap)
    ready_s: np.ndarray  # (K, G) when each gradient is ready
    grad_bytes: np.ndarray  # (G,) int64, bytes of each gradient
    grad_names: tuple[str, ...]  # (G,) the UPLINK operations taken as gradients


def gradient_ops(profile: Profile) -> list[int]:
    """Positions of the UPLINK transfers that carry bytes: the gradients."""
    return [i for i, op in enumerate(profile.ops) if op.resource is Resource.UPLINK and op.bytes > 0]


def step_costs(profile: Profile) -> StepCosts:
    """Read the per-step compute, gradient ready times and update work (module docstring)."""
    ops = profile.ops
    n = len(ops)
    grads = gradient_ops(profile)
    order = profile.topological_order
    deps = profile.dep_indices
    # after[i]: operation i waits (transitively) for a gradient transfer.
    after = np.zeros(n, dtype=bool)
    grad_set = set(grads)
    for i in order:
        after[i] = any(after[d] or d in grad_set for d in deps[i])
    kept = np.array([op.op_type not in PS_TRANSFER_OVERHEAD_TYPES for op in ops])
    on_worker = np.array([op.resource is Resource.WORKER for op in ops]) & kept
    on_ps = np.array([op.resource is Resource.PS for op in ops]) & kept
    pre = np.flatnonzero(on_worker & ~after)
    post = np.flatnonzero((on_worker | on_ps) & after)
    rank = np.empty(n, dtype=np.int64)
    rank[np.array(order, dtype=np.int64)] = np.arange(n)

    steps = profile.steps
    starts = np.array([s.start_us for s in steps], dtype=np.float64) * 1e-6
    durations = np.array([s.duration_us for s in steps], dtype=np.float64) * 1e-6
    k = len(steps)
    ends = np.zeros((k, n))  # end of each pre op in the compute-only schedule (0 for others)
    for row in range(k):
        # The recorded start order is a topological order of the worker ops (an op starts after
        # its dependencies end); ties are broken by the graph's topological position.
        seq = pre[np.lexsort((rank[pre], starts[row, pre]))]
        ends[row, seq] = np.cumsum(durations[row, seq])
    # Ready time of every op: a pre worker op at its end; anything else when its dependencies are.
    ready = np.zeros((k, n))
    pre_set = set(pre.tolist())
    for i in order:
        if i in pre_set:
            ready[:, i] = ends[:, i]
        elif deps[i]:
            ready[:, i] = ready[:, list(deps[i])].max(axis=1)
    compute = durations[:, pre].sum(axis=1)
    update = durations[:, post].sum(axis=1)
    return StepCosts(
        compute_s=compute,
        update_s=update,
        ready_s=ready[:, grads] if grads else np.zeros((k, 0)),
        grad_bytes=np.array([ops[i].bytes for i in grads], dtype=np.int64),
        grad_names=tuple(ops[i].name for i in grads),
    )


@dataclass(frozen=True)
class BucketPlan:
    """Gradients grouped into buckets, in the order the buckets are reduced."""

    members: tuple[np.ndarray, ...]  # per bucket, gradient positions (into StepCosts.grad_*)
    bytes: np.ndarray  # (B,) float64, bytes per bucket
    ready_s: np.ndarray  # (K, B): per recorded step, when the bucket's last gradient is ready


def bucket_plan(costs: StepCosts, bucket_bytes: float) -> BucketPlan:
    """Group gradients as PyTorch DDP does (``_compute_bucket_assignment_by_size``).

    DDP walks the parameters in reverse registration order, which is about the order their
    gradients become ready in backward, appending each to the open bucket and closing the
    bucket once it holds ``bucket_cap_mb`` or more (so a bucket may overshoot the cap by its
    last gradient, and a gradient larger than the cap closes the bucket it joins). From a trace the
    ready order is known directly, so gradients are taken by their mean ready time over the
    recorded steps (ties: the later operation in the graph first, as the reverse order would).
    Buckets keep this membership in every step, as DDP does after its first iteration.
    """
    g = len(costs.grad_bytes)
    mean_ready = costs.ready_s.mean(axis=0) if g else np.zeros(0)
    order = np.lexsort((-np.arange(g), mean_ready))
    members: list[np.ndarray] = []
    current: list[int] = []
    filled = 0.0
    for i in order.tolist():
        current.append(i)
        filled += float(costs.grad_bytes[i])
        if filled >= bucket_bytes:
            members.append(np.array(current, dtype=np.int64))
            current, filled = [], 0.0
    if current:
        members.append(np.array(current, dtype=np.int64))
    sizes = np.array([costs.grad_bytes[m].sum() for m in members], dtype=np.float64)
    ready = np.stack([costs.ready_s[:, m].max(axis=1) for m in members], axis=1) if members else np.zeros(
        (len(costs.compute_s), 0))
    return BucketPlan(members=tuple(members), bytes=sizes, ready_s=ready)


def recorded_bucket_plan(costs: StepCosts, buckets: tuple[tuple[str, ...], ...]) -> BucketPlan:
    """The buckets as the framework laid them out (``JobInfo.buckets``: gradient names per bucket,
    in reduce order), e.g. read off DDP's reducer by the profiling hook. The profile's validation
    has checked that every gradient is placed exactly once."""
    position = {name: i for i, name in enumerate(costs.grad_names)}
    members = tuple(np.array([position[name] for name in bucket], dtype=np.int64) for bucket in buckets)
    sizes = np.array([costs.grad_bytes[m].sum() for m in members], dtype=np.float64)
    ready = np.stack([costs.ready_s[:, m].max(axis=1) for m in members], axis=1)
    return BucketPlan(members=members, bytes=sizes, ready_s=ready)
