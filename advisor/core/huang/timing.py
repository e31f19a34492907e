"""From a profile and an op database to a timed ``ReplayGraph``: the "op estimator" of
Huang et al.'s Figure 1, with the batch-size what-if.

Each computation is timed by the database (``opdb.OpDatabase.estimate_us``); transfers keep
their bytes (the replay times them on the link). The batch-size what-if rescales every input
dimension 0 that equals the recorded batch size to the new one (a heuristic: TensorFlow puts
the batch first; a weight whose first dimension happens to equal the batch would be rescaled
too), so that the database's exact entries miss and the per-type linear fits time the op.
Ops the database keeps per node (opaque to shapes) keep their time (``opaque="fixed"``) or
scale with the batch (``opaque="linear"``). The parsing overhead and client gap that
preprocessing adds (``HOST_OP_TYPES``) are the host's, not the device's: they always take the
replayed profile's own mean, so a database from another device need not hold them.

``order`` chooses the service order of a device that has a choice: ``recorded`` replays, per
recorded step, the order in which the trace's ops ended (replayed steps cycle through the
recorded steps); ``fifo`` serves in release order, simultaneous releases in graph order (the
PS simulator's FIFO).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from advisor.core.huang.opdb import OpDatabase, OpEstimateError, Shapes, is_keyed_by_node
from advisor.core.huang.replay import KIND_DOWNLINK, KIND_PS, KIND_UPLINK, KIND_WORKER, ReplayGraph
from advisor.core.profile import Operation, Profile, Resource

_KIND = {Resource.WORKER: KIND_WORKER, Resource.PS: KIND_PS, Resource.DOWNLINK: KIND_DOWNLINK, Resource.UPLINK: KIND_UPLINK}
Order = Literal["recorded", "fifo"]
HOST_OP_TYPES = frozenset({"ParseOverhead", "ClientGap"})  # added by preprocessing, not device compute
Opaque = Literal["fixed", "linear"]
Fallback = Literal["error", "trace"]


def rescale_batch(shapes: Shapes, old: int, new: int) -> Shapes:
    """``shapes`` with every leading dimension equal to ``old`` set to ``new``."""
    return tuple((new, *s[1:]) if s and s[0] == old else s for s in shapes)


def timed_graph(
    profile: Profile,
    db: OpDatabase,
    *,
    batch_size: int | None = None,
    order: Order = "recorded",
    opaque: Opaque = "fixed",
    fallback: Fallback = "error",
) -> ReplayGraph:
    """The profile's step graph with every computation timed by ``db`` (raises
    ``OpEstimateError`` naming the first op it cannot time, unless ``fallback="trace"``, which
    times such an op by its own mean recorded duration: the paper's online profiling)."""
    old = profile.job.batch_size
    new = old if batch_size is None else batch_size
    means = np.array([s.duration_us for s in profile.steps], dtype=np.float64).mean(axis=0)
    durations = []
    for i, op in enumerate(profile.ops):
        if op.resource.is_transfer:
            durations.append(0.0)
            continue
        if op.op_type in HOST_OP_TYPES:  # the replayed trace's own host time, whatever the database
            durations.append(1e-6 * float(means[i]))
            continue
        durations.append(1e-6 * _estimate(op, db, old, new, opaque, fallback, float(means[i])))
    return ReplayGraph(
        names=tuple(op.name for op in profile.ops),
        kind=tuple(_KIND[op.resource] for op in profile.ops),
        ps=tuple(op.ps or 0 for op in profile.ops),
        duration_s=tuple(durations),
        bits=tuple(8.0 * op.bytes for op in profile.ops),
        deps=profile.dep_indices,
        rank=_ranks(profile, order),
        parameter_servers=profile.job.parameter_servers,
    )


def _estimate(
    op: Operation, db: OpDatabase, old: int, new: int, opaque: Opaque, fallback: Fallback, recorded_us: float
) -> float:
    shapes = op.input_shapes
    scale = 1.0
    if shapes is not None and new != old:
        scaled = rescale_batch(shapes, old, new)
        if is_keyed_by_node(op.op_type, shapes):
            if opaque == "linear" and scaled != shapes:
                scale = new / old
        else:
            shapes = scaled
    try:
        return scale * db.estimate_us(op, shapes)
    except OpEstimateError:
        if fallback == "trace":
            return scale * recorded_us
        raise


def _ranks(profile: Profile, order: Order) -> tuple[tuple[int, ...], ...]:
    """Order of service when a device has a choice: per recorded step, the order the ops ended
    in it ('recorded': a link then delivers tensors in the order the trace saw them arrive), or
    graph order (one row; with 'fifo' it only breaks ties between simultaneous releases)."""
    n = len(profile.ops)
    if order == "fifo":
        return (tuple(range(n)),)
    rows = []
    for step in profile.steps:
        ends = np.add(step.start_us, step.duration_us)
        by_end = sorted(range(n), key=lambda i: (float(ends[i]), i))
        rank = [0] * n
        for r, i in enumerate(by_end):
            rank[i] = r
        rows.append(tuple(rank))
    return tuple(rows)
