"""Cluster mode: share a capacity between the opted-in jobs instead of sizing each one alone.

With ``cluster_mode`` on, every predicted job joins a *pool*: the ``cluster_capacity`` setting's
(jobs without a Kueue queue label) or that of the Kueue ClusterQueue its LocalQueue feeds (the
nominal quota, ``kueue.py``). A change to a pool's jobs (a job predicted for the first time or
again, one that finished, was deleted, failed or opted out) asks for a reallocation, and so does
every resync (a quota may have changed); the requests within ``cluster_debounce_s`` of the first
make one. The reallocation reads the queues, runs the core allocator
(``core/allocation.allocate``, with the allocation in force for its stability) on each pool,
keeps each job's ``Share`` and enqueues the jobs whose share changed: their own reconcile writes
it (annotations ``allocated-workers`` and ``allocation``; a resize in ``auto`` mode), so every
write to a job goes through the one reconcile path, with its resourceVersion precondition.

Bad input never raises out of a reallocation: a LocalQueue or ClusterQueue that does not exist,
a quota that does not parse or a call RBAC refuses leaves the pool's jobs sized alone (per-job
mode, as without cluster mode), with a Warning event on each (once per problem) and the reason in
their ``allocation`` annotation; an API server that does not answer keeps the shares in force and
tries again. A job whose minimum alone exceeds the capacity is left as it is (``untouched``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.controller.jobs.requests import job_requests
from advisor.controller.jobs.tfjob import TFJobView
from advisor.controller.pipeline import annotations as ann
from advisor.controller.pipeline.deadline import positive_annotation
from advisor.controller.pipeline.kueue import QUEUE_LABEL, cluster_queue_of, nominal_quota, queue_name
from advisor.controller.pipeline.policy import PRIORITY, Limits, clamp
from advisor.controller.settings import ControllerSettings, Mode
from advisor.controller.web.metrics import Metrics, remove_series
from advisor.core.allocation import WORKERS, AllocationError, Capacity, CurvePoint, JobDemand, Status, allocate
from advisor.core.cost import Prices
from advisor.core.units import parse_quantity
from advisor.errors import (
    AdvisorError, KubeError, KubeForbidden, KubeNotFound, KubeUnavailable, QuotaError,
)

log = logging.getLogger(__name__)
Key = tuple[str, str]
ALLOCATION_KEY: Key = ("", "cluster-allocation")  # the work queue's key of a reallocation (no job's namespace is "")
SETTINGS_POOL = "settings"
PLACED, WAITING, UNTOUCHED = Status.PLACED.value, Status.WAITING.value, Status.UNTOUCHED.value
PER_JOB = "per-job"  # sized alone, as without cluster mode; the reason says why
OFF = "off"  # cluster mode is off: the job carries no allocation
PENDING = "pending"  # not allocated yet (or finished): what the job says stays as it is
RETRY_S = 10.0  # at least this long before a reallocation tries a queue again after no answer


@dataclass(frozen=True)
class Share:
    """What cluster mode says about one job: its pool, its status and workers, and why."""

    status: str  # placed | waiting | untouched | per-job | off | pending
    pool: str = ""
    workers: int | None = None  # placed: its W; waiting: 0
    own_optimum: int | None = None  # its cost-optimal W alone
    reason: str = ""

    @property
    def per_job(self) -> bool:
        """Sized alone: the per-job policy (``policy.resize_target``) applies, as without cluster mode."""
        return self.status in (OFF, PER_JOB)

    def annotations(self) -> dict[str, str | None]:
        """What to write on the job (None removes a key); nothing while pending."""
        if self.status == PENDING:
            return {}
        if self.status == OFF:
            return {ann.ALLOCATION: None, ann.ALLOCATED_WORKERS: None}
        counted = self.status in (PLACED, WAITING)
        doc = {"pool": self.pool, "status": self.status, "workers": self.workers if counted else None,
               "ownOptimum": self.own_optimum, "reason": self.reason}
        return {ann.ALLOCATION: ann.compact(doc), ann.ALLOCATED_WORKERS: str(self.workers) if counted else None}

    def resize_target(self, view: TFJobView, limits: Limits, *, last_resize: float | None, now: float,
                      cooldown_s: float) -> int | None:
        """In ``auto`` mode, the worker count to set: the allocation, on a running job that allows
        a resize. A shrink is applied at once (it frees room another job was given); growing
        waits for ``cooldown_s`` after the previous resize. None: leave the job as it is."""
        if self.status != PLACED or self.workers is None or limits.mode is not Mode.AUTO:
            return None
        if not view.dynamic_workers or view.finished or "Worker" not in view.spec_keys:
            return None
        target = clamp(self.workers, limits)
        if target == view.workers:
            return None
        if target > view.workers and last_resize is not None and now - last_resize < cooldown_s:
            return None
        return target


@dataclass(frozen=True)
class _Member:
    """A job in cluster mode: what the allocator needs of it. Two members are equal when the
    allocation of their pool would not change (``annotated`` left out)."""

    key: Key
    uid: str
    queue: str | None  # its Kueue LocalQueue; None: the settings' pool
    demand: JobDemand
    annotated: int | None = field(default=None, compare=False)  # its allocated-workers annotation


def priority(view: TFJobView) -> float:
    """The job's ``priority`` annotation (default 1); ``TFJobError`` when it is not a number > 0."""
    text = view.annotations.get(PRIORITY)
    return 1.0 if text is None else positive_annotation(view, PRIORITY, text, "a number > 0")


def settings_capacity(settings: ControllerSettings) -> Capacity | None:
    """The ``cluster_capacity`` setting as the allocator's capacity; None when it is empty."""
    given = settings.cluster_capacity
    if not given:
        return None
    workers = given.get(WORKERS)
    return Capacity(int(parse_quantity(workers)) if workers is not None else None,
                    {name: parse_quantity(amount) for name, amount in given.items() if name != WORKERS})


class ClusterAllocator:
    """Cluster mode's state: the jobs in it, their shares, and the debounced reallocation."""

    def __init__(self, *, settings: Callable[[], ControllerSettings], kube: Any,
                 cache: Callable[[str, str], Mapping[str, Any] | None], metrics: Metrics,
                 enqueue_after: Callable[[Key, float], None]) -> None:
        self._settings = settings
        self._kube = kube
        self._cache = cache
        self._metrics = metrics
        self._enqueue_after = enqueue_after
        self._members: dict[Key, _Member] = {}
        self._shares: dict[Key, Share] = {}
        self._warned: dict[Key, str] = {}  # the last problem each job was told of
        self._series: set[tuple[str, str]] = set()  # (pool, resource) series exported
        self._pending = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._settings().cluster_mode

    # --- called by the reconcile ---------------------------------------------------------------

    def check(self, view: TFJobView) -> None:
        """In cluster mode, ``TFJobError`` for a priority annotation that is not a number > 0."""
        if self.enabled:
            priority(view)

    def observe(self, view: TFJobView, prediction: Mapping[str, Any], prices: Prices, limits: Limits) -> Share:
        """A predicted job, as the reconcile sees it now: joins (or updates) its pool, asking for a
        reallocation when that changes what the allocator would see; returns its share in force."""
        if not self.enabled:
            self.forget(view.key, reallocate=False)
            self._drop_pools()
            return Share(OFF)
        if view.finished:
            self.forget(view.key)
            return Share(PENDING)
        try:
            member = self._member(view, prediction, prices, limits)
        except AdvisorError as exc:  # a template quantity, a curve the allocator refuses
            self.forget(view.key)
            share = Share(PER_JOB, reason=f"sized alone: {exc}")
            self._warn(view.key, "NotAllocated", share.reason)
            return share
        with self._lock:
            old = self._members.get(view.key)
            self._members[view.key] = member
            share = self._shares.get(view.key, Share(PENDING))
        if old != member:
            self.request()
        return share

    def forget(self, key: Key, *, reallocate: bool = True) -> None:
        """The job left cluster mode (finished, deleted, failed, opted out): its pool is reallocated."""
        with self._lock:
            had = self._members.pop(key, None)
            self._shares.pop(key, None)
            self._warned.pop(key, None)
        remove_series(self._metrics.allocated_workers, *key)
        if had is not None and reallocate:
            self.request()

    # --- the reallocation ----------------------------------------------------------------------

    def request(self, *, at_least_s: float = 0.0) -> None:
        """Ask for a reallocation: the first request starts a wait of ``cluster_debounce_s`` (or
        ``at_least_s``, when longer), and every request until it ends is served by the same one."""
        settings = self._settings()
        if not settings.cluster_mode:
            return
        with self._lock:
            if self._pending:
                return
            self._pending = True
        self._enqueue_after(ALLOCATION_KEY, max(settings.cluster_debounce_s, at_least_s))

    def run(self) -> None:
        """One reallocation of every pool (the leader's reconcile worker runs it)."""
        with self._lock:
            self._pending = False
            members = sorted(self._members.values(), key=lambda m: m.key)
        settings = self._settings()
        if not settings.cluster_mode or not members:
            self._drop_pools()  # the last job left, or cluster mode was turned off
            return
        started = time.monotonic()
        pools, shares, retry = self._pools(members, settings)
        for pool, (capacity, group) in sorted(pools.items()):
            shares.update(self._allocate(pool, capacity, group, settings.cluster_stability))
        self._metrics.reallocations.inc()
        self._publish(shares, pools)
        log.info("reallocated %d job(s) in %d pool(s) in %.3f s", len(members), len(pools), time.monotonic() - started)
        if retry:
            self.request(at_least_s=RETRY_S)

    def _pools(self, members: Sequence[_Member], settings: ControllerSettings
               ) -> tuple[dict[str, tuple[Capacity, list[_Member]]], dict[Key, Share], bool]:
        """The members grouped by pool with its capacity; the shares of those left out; whether a
        queue could not be read for now (try again)."""
        own = settings_capacity(settings)
        pools: dict[str, tuple[Capacity, list[_Member]]] = {}
        shares: dict[Key, Share] = {}
        queues: dict[tuple[str, str], tuple[str, Capacity] | AdvisorError] = {}
        retry = False
        for m in members:
            if m.queue is None:
                if own is None:
                    shares[m.key] = Share(PER_JOB, reason="sized alone: the job has no Kueue queue label "
                                                          f"({QUEUE_LABEL}) and the setting cluster_capacity is empty")
                else:
                    pools.setdefault(SETTINGS_POOL, (own, []))[1].append(m)
                continue
            where = (m.key[0], m.queue)
            if where not in queues:
                queues[where] = self._queue(*where)
            found = queues[where]
            if isinstance(found, KubeUnavailable):
                retry = True
                with self._lock:
                    shares[m.key] = self._shares.get(m.key, Share(PENDING))
            elif isinstance(found, AdvisorError):
                shares[m.key] = Share(PER_JOB, f"localqueue/{m.key[0]}/{m.queue}",
                                      reason=f"sized alone: the quota cannot be read: {found}")
                self._warn(m.key, "QuotaUnavailable", shares[m.key].reason)
            else:
                pool, capacity = found
                pools.setdefault(pool, (capacity, []))[1].append(m)
        return pools, shares, retry

    def _queue(self, namespace: str, name: str) -> tuple[str, Capacity] | AdvisorError:
        """(pool name, capacity) of a LocalQueue's ClusterQueue, or what stops reading it."""
        try:
            try:
                local = self._kube.get_localqueue(namespace, name)
            except KubeNotFound:
                raise QuotaError(f"LocalQueue {namespace}/{name} (the job's {QUEUE_LABEL}) does not exist") from None
            cluster = cluster_queue_of(local)
            try:
                queue = self._kube.get_clusterqueue(cluster)
            except KubeNotFound:
                raise QuotaError(f"ClusterQueue {cluster} (of LocalQueue {namespace}/{name}) does not exist") from None
            return f"clusterqueue/{cluster}", Capacity(resources=nominal_quota(queue))
        except KubeForbidden as exc:
            return QuotaError(f"{exc}; cluster mode needs get on localqueues and clusterqueues (kueue.x-k8s.io)")
        except (QuotaError, KubeError) as exc:
            log.warning("queue %s/%s: %s", namespace, name, exc)
            return exc

    def _allocate(self, pool: str, capacity: Capacity, group: Sequence[_Member], stability: float
                  ) -> dict[Key, Share]:
        with self._lock:
            previous = {m.demand.name: w for m in group if (w := self._previous(m))}
        try:
            result = allocate([m.demand for m in group], capacity, previous, stability)
        except AllocationError as exc:
            return {m.key: Share(PER_JOB, pool, reason=f"sized alone: {exc}") for m in group}
        by_name = {j.name: j for j in result.jobs}
        self._export_pool(pool, capacity, result.used)
        return {m.key: Share(j.status.value, pool, j.workers, j.own_optimum, j.reason)
                for m in group for j in (by_name[m.demand.name],)}

    def _previous(self, m: _Member) -> int | None:
        """The job's W in the allocation in force: this replica's, else its annotation (a new leader)."""
        share = self._shares.get(m.key)
        if share is not None and share.status in (PLACED, WAITING):
            return share.workers
        return m.annotated

    def _publish(self, shares: Mapping[Key, Share], pools: Mapping[str, tuple[Capacity, list[_Member]]]) -> None:
        """Keep the new shares, export them, and wake the jobs whose share changed."""
        with self._lock:
            shares = {k: s for k, s in shares.items() if k in self._members}  # forgotten meanwhile
            changed = [k for k, s in shares.items() if self._shares.get(k) != s]
            self._shares.update(shares)
        for (namespace, name), share in shares.items():
            if share.status in (PLACED, WAITING) and share.workers is not None:
                self._metrics.allocated_workers.labels(namespace, name).set(share.workers)
            else:
                remove_series(self._metrics.allocated_workers, namespace, name)
        live = {(pool, r) for pool, (capacity, _) in pools.items() for r in (*capacity.limits(), WORKERS)}
        with self._lock:
            gone, self._series = self._series - live, live
        for pool, resource in gone:
            remove_series(self._metrics.allocation_capacity, pool, resource)
            remove_series(self._metrics.allocation_used, pool, resource)
        for key in changed:
            self._enqueue_after(key, 0)

    def _drop_pools(self) -> None:
        with self._lock:
            gone, self._series = self._series, set()
        for pool, resource in gone:
            remove_series(self._metrics.allocation_capacity, pool, resource)
            remove_series(self._metrics.allocation_used, pool, resource)

    def _export_pool(self, pool: str, capacity: Capacity, used: Mapping[str, float]) -> None:
        limits = capacity.limits()
        for resource, amount in limits.items():
            self._metrics.allocation_capacity.labels(pool, resource).set(amount)
        for resource in {*limits, WORKERS}:
            self._metrics.allocation_used.labels(pool, resource).set(used.get(resource, 0.0))

    # --- helpers -------------------------------------------------------------------------------

    def _member(self, view: TFJobView, prediction: Mapping[str, Any], prices: Prices, limits: Limits) -> _Member:
        needs = job_requests(self._cache(*view.key) or {}, view)
        curve = tuple(CurvePoint(int(p["workers"]), float(p["throughput"]), float(p["low"]), float(p["high"]))
                      for p in prediction["curve"])
        demand = JobDemand(name=f"{view.namespace}/{view.name}", curve=curve, priority=priority(view),
                           min_workers=limits.min_workers, max_workers=limits.max_workers, request=needs.worker,
                           overhead=needs.other, prices=prices,
                           parameter_servers=int(prediction["job"]["parameter_servers"]))
        return _Member(view.key, view.uid, queue_name(view.labels, view.annotations), demand,
                       _annotated(view.annotations.get(ann.ALLOCATED_WORKERS)))

    def _warn(self, key: Key, reason: str, message: str) -> None:
        """A Warning event on the job, once per distinct problem; losing one is logged, never fatal."""
        with self._lock:
            if self._warned.get(key) == message:
                return
            self._warned[key] = message
        obj = self._cache(*key)
        if obj is None:
            return
        try:
            self._kube.emit_event(obj, "Warning", reason, message)
        except KubeError as exc:
            log.info("event %s on %s/%s not recorded: %s", reason, *key, exc)


def _annotated(text: str | None) -> int | None:
    try:
        value = int(text or "")
    except ValueError:
        return None
    return value if value > 0 else None
