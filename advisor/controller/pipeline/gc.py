"""Garbage collection: profiling runs, prediction Jobs and store rows that nothing needs any more.

In a real cluster the owner references already delete a job's profiling runs and profile
records with the job; this sweep covers what they cannot: runs superseded by a newer
generation or of a job that no longer opts in (the reconcile deletes those at once; this is the
safety net), runs finished longer than ``max_age_s`` ago, and store rows of jobs that are gone.
Upload tokens need no sweep: they are derived, not stored, and ingest refuses them once the run
is over. With the job backend it also deletes
prediction Jobs no running prediction needs (their TTL would, but not those of a lost store or
a Job that never finishes) with their token Secrets, and forgets finished attempts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.prediction_job import parse_time
from advisor.controller.jobs.cluster import verbs_for
from advisor.controller.jobs.tfjob import GENERATION_LABEL, PREFIX, PROFILING_FOR_LABEL, ROLE_LABEL, opted_in
from advisor.errors import KubeError, KubeNotFound

log = logging.getLogger(__name__)
LIVE_STATES = ("profiling", "received")


def collect_garbage(kube: Any, informer: Any, store: Any, metrics: Metrics, *, now: float, max_age_s: float,
                    namespaces: Sequence[str] = (), opt_in: str = "annotation") -> int:
    """One sweep over ``namespaces`` (empty: all); returns how many objects were deleted.

    API errors are logged and the sweep goes on.

    Nothing is deleted until the informer has listed every namespace: a job missing from a cache
    still being filled (or whose list keeps failing) is not a gone job, and deleting its runs
    would start a second profiling run for its generation.
    """
    if not informer.has_synced():
        log.info("garbage collection skipped: the TFJob cache has not synced yet")
        return 0
    deleted = 0
    for ns, name in list(informer.keys()):
        obj = informer.get(ns, name)
        if obj is None or (obj.get("metadata", {}).get("labels") or {}).get(ROLE_LABEL) != "profiling":
            continue
        if _stale_profiling_run(obj, informer, store, now, max_age_s, opt_in):
            deleted += _delete(verbs_for(kube, "PyTorchJob" if obj.get("kind") == "PyTorchJob" else "TFJob").delete,
                               ns, name)
    live_uids = {(informer.get(*k) or {}).get("metadata", {}).get("uid") for k in informer.keys()}
    for run in store.runs_updated_before(now - max_age_s):
        if run.uid not in live_uids:
            store.delete_runs(run.uid)
    return deleted


def _stale_profiling_run(obj: dict[str, Any], informer: Any, store: Any, now: float, max_age_s: float,
                         opt_in: str = "annotation") -> bool:
    meta = obj.get("metadata", {})
    owner_name = (meta.get("labels") or {}).get(PROFILING_FOR_LABEL)
    owner_uid = (meta.get("annotations") or {}).get(PREFIX + "profiling-for-uid")
    owner = informer.get(meta.get("namespace"), owner_name) if owner_name else None
    if owner is None or owner.get("metadata", {}).get("uid") != owner_uid:
        return True  # its job is gone or was replaced by another of the same name
    owner_meta = owner.get("metadata", {})
    if not opted_in(owner_meta.get("labels") or {}, owner_meta.get("annotations") or {}, opt_in):
        return True  # the job no longer opts in: nobody waits for this run
    generation = _int((meta.get("labels") or {}).get(GENERATION_LABEL))
    run = store.run(owner_uid, generation)
    latest = store.latest_run(owner_uid)
    if run is None:
        # Not in this replica's store (a new leader that has not adopted it yet): the job's
        # annotations say whether it is the run in progress.
        notes = owner.get("metadata", {}).get("annotations") or {}
        return not (notes.get(PREFIX + "profiling-run") == meta.get("name") and notes.get(PREFIX + "phase") in
                    ("Profiling", "Predicting"))
    if latest is not None and latest.generation > generation:
        return True
    if run.profiling_job != meta.get("name"):
        return now - run.updated > max_age_s  # an earlier, failed try: kept a while to look at
    return run.state not in ("profiling",) and now - run.updated > max_age_s


def _delete(delete: Any, namespace: str, name: str) -> int:
    try:
        delete(namespace, name)
        log.info("garbage collection: deleted %s/%s", namespace, name)
        return 1
    except KubeNotFound:
        return 0
    except KubeError as exc:
        log.warning("garbage collection: cannot delete %s/%s: %s", namespace, name, exc)
        return 0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def collect_prediction_jobs(kube: Any, store: Any, *, namespace: str, now: float, max_age_s: float,
                            abandon_after_s: float, tracked: set[str], selector: str) -> int:
    """Delete prediction Jobs (and, by ownership, their token Secrets) older than ``max_age_s``
    that no running attempt needs; end running attempts nobody has tracked for
    ``abandon_after_s`` (their TFJob is gone, so no reconcile adopts them); forget attempts
    finished ``max_age_s`` ago. ``tracked``: Job names this replica waits for. Returns deletions."""
    rows = store.prediction_jobs()
    for row in rows:
        if row.state == "running" and row.job_name not in tracked and now - row.started > abandon_after_s:
            store.finish_prediction_job(row.key, row.attempt, "failed", None, "abandoned: nothing waited for it", now)
    needed = {r.job_name for r in store.prediction_jobs() if r.state == "running"} | tracked
    deleted = 0
    try:
        jobs = kube.list_jobs(namespace, label_selector=selector)
    except KubeError as exc:
        log.warning("garbage collection: cannot list prediction Jobs in %s: %s", namespace, exc)
        jobs = []
    for job in jobs:
        meta = job.get("metadata", {})
        created = parse_time(meta.get("creationTimestamp"))
        if meta.get("name") not in needed and created is not None and now - created > max_age_s:
            deleted += _delete(kube.delete_job, namespace, meta["name"])
    store.delete_prediction_jobs([r.key for r in rows if r.state != "running" and now - r.updated > max_age_s])
    return deleted
