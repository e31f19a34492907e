"""Profiling runs nobody needs, deleted the moment that is known rather than at the next sweep.

Why: a profiling run holds a PS and a worker (GPUs included). Once a newer generation of the
job's templates is profiled, or the job stops opting in, its run is of no use, and the garbage
collection sweep (``gc_period_s``, ten minutes by default) would leave it running that long.
The reconcile that learns it calls here; the sweep stays as the safety net (a failed delete, a
replica that stopped in between).

Runs are found by their deterministic names (``profiling_job_name``: generation and try) in the
watch cache, and deleted only when the cache shows them made for this very job (its uid), with
a uid precondition: never a run of another job of the same name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from advisor.controller.jobs.cluster import verbs_for
from advisor.controller.jobs.tfjob import TFJobView, profiling_job_name, profiling_run_owner
from advisor.errors import KubeConflict, KubeNotFound

log = logging.getLogger(__name__)
ALL_TRIES = 10  # the most tries a generation can have (profiling_max_attempts' upper bound)

Cache = Callable[[str, str], Mapping[str, Any] | None]


def profiling_runs_of(cache: Cache, view: TFJobView, generations: Iterable[int]) -> list[Mapping[str, Any]]:
    """Every profiling run of ``view``'s job (its uid) for ``generations`` that the cache shows."""
    found = []
    for generation in sorted(set(generations)):
        for attempt in range(1, ALL_TRIES + 1):
            obj = cache(view.namespace, profiling_job_name(view.name, generation, attempt))
            if obj is not None and profiling_run_owner(obj) == view.uid:
                found.append(obj)
    return found


def delete_profiling_runs(kube: Any, cache: Cache, view: TFJobView, generations: Iterable[int],
                          why: str) -> list[str]:
    """Delete the job's profiling runs of ``generations``; the names deleted. API errors other
    than 404 propagate (the reconcile retries; the sweep is the safety net)."""
    deleted = []
    for obj in profiling_runs_of(cache, view, generations):
        meta = obj["metadata"]
        try:
            verbs_for(kube, view.kind).delete(view.namespace, meta["name"], uid=meta.get("uid"))
        except (KubeNotFound, KubeConflict):  # gone already (the cache lags behind), or the name is another's
            continue
        deleted.append(str(meta["name"]))
        log.info("%s/%s: deleted profiling run %s (%s)", view.namespace, view.name, meta["name"], why)
    return deleted
