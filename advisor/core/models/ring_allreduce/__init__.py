"""Ring all-reduce models (issue 13, section 2(b)): synchronous data-parallel training as Horovod,
NCCL, PyTorch DDP and TF MultiWorkerMirroredStrategy run it, predicted from a one-worker trace.

``trace`` turns a parameter-server trace into per-step compute, gradient ready times and
buckets; ``model`` replays the synchronous steps with the ring's communication. Registered by
one line in ``advisor.core.models.registry``. Equations and validation: docs/models-ring.md.
"""

from __future__ import annotations

from advisor.core.models.ring_allreduce.model import (
    HIERARCHICAL,
    RING,
    HierarchicalParams,
    RingAllReduce,
    RingParams,
    RingRun,
    allreduce_seconds,
)

MODELS = (RING, HIERARCHICAL)

__all__ = [
    "HIERARCHICAL",
    "MODELS",
    "RING",
    "HierarchicalParams",
    "RingAllReduce",
    "RingParams",
    "RingRun",
    "allreduce_seconds",
]
