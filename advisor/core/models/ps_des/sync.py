"""Synchronous parameter-server training (TF ``SyncReplicasOptimizer``) in Li et al.'s simulator.

Why a model of its own: the same one-worker trace predicts a different curve when the job
aggregates gradients. Each worker's step is the traced one; the PS applies an update once
``replicas_to_aggregate`` = R fresh gradients of the current global step have arrived, drops
later (stale) ones, and a worker whose gradient was counted waits for that update before it
pulls again (``simulator/reference.py`` states the rules; both engines keep them).

What is counted: *examples of aggregated gradients*, R x batch per update, at the instant the
update is applied. That is the training progress a job owner buys: a dropped gradient (a
backup worker's late one) costs compute and link time but does not move the model. With
R = W it is every worker's examples, as the asynchronous model counts them; at W = 1 the two
are the same run. The protocol reports progress per worker (``Samples.step_ends_s``); here
update j's R gradients are dealt to rows ``(j R + i) mod W`` (i < R), so the rows together
hold every counted gradient at its update time and advance evenly (a row is not a worker).
"""

from __future__ import annotations

import math
import numpy as np
from advisor.core.models.protocol import Samples


def replicas(workers: int, replicas_to_aggregate: int | None, backup_workers: int | None) -> int:
    """R at ``workers`` workers: ``replicas_to_aggregate`` (at most W), or W minus the backup
    workers (at least 1), or W."""
    if replicas_to_aggregate is not None:
        return min(replicas_to_aggregate, workers)
    if backup_workers is not None:
        return max(workers - backup_workers, 1)
    return workers


def update_rows(updates_s: np.ndarray, workers: int, replicas: int) -> tuple[np.ndarray, ...]:
    """Each counted gradient at its update time, dealt round-robin to ``workers`` rows (module
    docstring): update j goes to rows (j R + i) mod W for i < R."""
    n = len(updates_s)
    rows = (np.arange(n)[:, None] * replicas + np.arange(replicas)[None, :]) % workers
    return tuple(np.asarray(updates_s, dtype=np.float64)[(rows == w).any(axis=1)] for w in range(workers))


def update_samples(updates_s: np.ndarray, workers: int, replicas: int, until_s: float, steps: int, events: int,
                   batch_size: int) -> Samples:  # fmt: skip
    """The protocol's ``Samples`` of a synchronous run (what ``curve.py`` measures)."""
    kept = np.asarray(updates_s, dtype=np.float64)
    kept = kept[kept <= until_s]
    return Samples(update_rows(kept, workers, replicas), until_s, steps, events, batch_size)


def engine_steps(steps: int, workers: int, replicas: int) -> int:
    """Engine steps (of the first worker) for rows of about ``steps`` counted gradients: with
    R < W a row gets R/W of the updates."""
    return math.ceil(steps * workers / replicas)
