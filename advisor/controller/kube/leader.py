"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Why: two controller replicas must never both act, and a standby must take over when the leader
stops or dies. The rules follow client-go ``tools/leaderelection/leaderelection.go``:

- A candidate takes the lease when it is absent (create), released (empty holderIdentity), or
  expired, or already its own. *Expired* is judged on the candidate's own clock, as client-go
  does: the lease record (holder, renewTime...) has not changed for leaseDurationSeconds since
  this candidate first saw it. Comparing renewTime with the local clock instead would let clock
  skew between nodes steal a live lease; the price is that a new standby waits one lease
  duration even for a lease that died long ago.
- Every write carries the resourceVersion read (optimistic concurrency): losing a race is a 409,
  which just means "not this time".
- The leader renews every retry period. If renewals keep failing for renew_deadline (which is
  shorter than the lease duration, so the leader stops before anyone may take over), or the
  lease turns out to be someone else's, it stops leading and calls ``on_stopped_leading``; it
  then goes back to being a candidate.
- On a clean stop the leader releases the lease (holderIdentity "", duration 1 s) so a standby
  takes over within one retry period instead of a whole lease duration.
- Taking the lease from another holder increments leaseTransitions; times are MicroTime
  (RFC 3339 with exactly six fractional digits).

Callbacks run on the ``run`` thread and must return quickly (start work elsewhere). One that raises
ends the term like a lost lease (``on_stopped_leading``, the lease released); the elector then
campaigns again.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from advisor.controller.settings import LEASE_RETRY_JITTER
from advisor.errors import KubeError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
JITTER = LEASE_RETRY_JITTER  # client-go's JitterFactor for the candidate's retries


class LeaseStore(Protocol):
    """What the elector needs of ``advisor.controller.kube.client.Kube``."""

    def get_lease(self, namespace: str, name: str) -> JSON | None: ...

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON: ...


def micro_time(epoch_s: float) -> str:
    """A metav1.MicroTime: ``2006-01-02T15:04:05.000000Z``."""
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _noop() -> None:
    return None


class LeaderElector:
    def __init__(self, kube: LeaseStore, namespace: str, name: str, identity: str, *,
                 lease_duration_s: float = 15.0, renew_deadline_s: float = 10.0, retry_period_s: float = 2.0,
                 on_started_leading: Callable[[], None] = _noop, on_stopped_leading: Callable[[], None] = _noop,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None, release_on_stop: bool = True) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not (lease_duration_s >= 1 and lease_duration_s > renew_deadline_s > JITTER * retry_period_s > 0):
            raise ValueError("need lease_duration_s >= 1, lease_duration_s > renew_deadline_s > "
                             f"{JITTER} x retry_period_s > 0 (client-go's checks)")
        self._kube, self._namespace, self._name, self.identity = kube, namespace, name, identity
        self._duration_s = lease_duration_s
        self._renew_deadline_s, self._retry_s = renew_deadline_s, retry_period_s
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        self._clock, self._sleep = clock, sleep
        self._rng = rng or random.Random()
        self._release_on_stop = release_on_stop
        self._lease: JSON | None = None  # last lease read or written (its resourceVersion)
        self._observed: JSON = {}  # last lease spec seen
        self._observed_at = 0.0  # own clock when that spec was first seen
        self._leading = threading.Event()
        self._stop = threading.Event()

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def run(self, stop: threading.Event) -> None:
        """Campaign, lead, renew; until ``stop`` (then release the lease if held).

        No exception ends this loop: one while campaigning is retried after a retry period, and
        one while leading ends only the term (``_lead``). A thread that died while ``is_leader``
        still said yes would go on acting without renewing, next to the replica that takes the
        expired lease."""
        self._stop = stop
        while not stop.is_set():
            try:
                acquired = self._acquire()
            except Exception:  # not a KubeError (those are handled inside): a malformed lease, a bug
                log.exception("lease %s/%s: campaign failed; retrying", self._namespace, self._name)
                self._pause(self._retry_s)
                continue
            if not acquired:
                break
            if not self._lead():
                self._pause(self._retry_s)  # let another replica take the released lease first

    def _lead(self) -> bool:
        """One term: from acquiring the lease until it is lost, ``stop`` or an exception (from
        ``on_started_leading`` or a renewal), which is logged and ends the term like a lost lease,
        with the lease given up so another replica can lead. False when an exception ended it."""
        log.info("lease %s/%s: %s is the leader", self._namespace, self._name, self.identity)
        self._leading.set()
        failed = False
        try:
            self._on_started()
            self._renew_until_lost()
        except Exception:
            failed = True
            log.exception("lease %s/%s: %s stops leading after an error", self._namespace, self._name, self.identity)
        finally:  # whatever happened, stop acting as leader before anything else
            self._leading.clear()
            if failed or (self._stop.is_set() and self._release_on_stop):
                self._release_quietly()
            log.info("lease %s/%s: %s stopped leading", self._namespace, self._name, self.identity)
            try:
                self._on_stopped()
            except Exception:
                log.exception("lease %s/%s: the stopped-leading callback failed", self._namespace, self._name)
        return not failed

    def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); True when we hold the lease afterwards."""
        now = self._clock()
        if self._holds() and self._valid(now) and self._lease is not None:
            try:  # fast path: renew on the lease we last wrote, without reading it first
                self._write(self._lease, self._renewed(self._observed, now), now)
                return True
            except KubeError as exc:
                log.info("lease %s/%s: optimistic renew failed (%s); reading it", self._namespace, self._name, exc)
        try:
            lease = self._kube.get_lease(self._namespace, self._name)
        except KubeError as exc:
            log.warning("lease %s/%s: cannot read it: %s", self._namespace, self._name, exc)
            return False
        if lease is None:
            return self._create(now)
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observed, self._observed_at = copy.deepcopy(spec), now
        self._lease = lease
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and self._valid(now):
            return False
        new = self._renewed(spec, now) if holder == self.identity else self._taken(spec, now)
        try:
            self._write(lease, new, now)
        except KubeError as exc:  # a 409 here is a lost race, not a failure
            log.info("lease %s/%s: not acquired: %s", self._namespace, self._name, exc)
            return False
        return True

    def release(self) -> bool:
        """Give the lease up (holderIdentity cleared) if we hold it; True when released."""
        if not self._holds() or self._lease is None:
            return False
        now = self._clock()
        spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": micro_time(now),
                "renewTime": micro_time(now), "leaseTransitions": self._observed.get("leaseTransitions", 0)}
        try:
            self._write(self._lease, spec, now)
        except KubeError as exc:
            log.warning("lease %s/%s: release failed: %s", self._namespace, self._name, exc)
            return False
        return True

    # --- internals --------------------------------------------------------------------------
    def _release_quietly(self) -> None:
        try:
            self.release()
        except Exception:  # KubeErrors are handled in release; this is anything else
            log.exception("lease %s/%s: release failed", self._namespace, self._name)

    def _acquire(self) -> bool:
        while not self._stop.is_set():
            if self.try_acquire_or_renew():
                return True
            self._pause(self._retry_s * (1 + JITTER * self._rng.random()))
        return False

    def _renew_until_lost(self) -> None:
        last_ok = self._clock()
        while not self._stop.is_set():
            self._pause(self._retry_s)
            if self._stop.is_set():
                return
            if self.try_acquire_or_renew():
                last_ok = self._clock()
            elif not self._holds():
                log.warning("lease %s/%s: now held by %s", self._namespace, self._name,
                            self._observed.get("holderIdentity"))
                return
            elif self._clock() - last_ok >= self._renew_deadline_s:
                log.warning("lease %s/%s: no renewal for %.1f s (deadline %.1f s)", self._namespace, self._name,
                            self._clock() - last_ok, self._renew_deadline_s)
                return

    def _holds(self) -> bool:
        return self._observed.get("holderIdentity") == self.identity

    def _valid(self, now: float) -> bool:
        duration = self._observed.get("leaseDurationSeconds") or 0
        return self._observed_at + float(duration) > now

    def _renewed(self, spec: Mapping[str, Any], now: float) -> JSON:
        return {**self._record(now), "acquireTime": spec.get("acquireTime") or micro_time(now),
                "leaseTransitions": spec.get("leaseTransitions") or 0}

    def _taken(self, spec: Mapping[str, Any], now: float) -> JSON:
        return {**self._record(now), "leaseTransitions": (spec.get("leaseTransitions") or 0) + 1}

    def _record(self, now: float) -> JSON:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self._duration_s)),
                "acquireTime": micro_time(now), "renewTime": micro_time(now), "leaseTransitions": 0}

    def _create(self, now: float) -> bool:
        body = {"metadata": {"name": self._name, "namespace": self._namespace}, "spec": self._record(now)}
        try:
            self._lease = self._kube.create_lease(self._namespace, body)
        except KubeError as exc:  # AlreadyExists: another candidate was first
            log.info("lease %s/%s: not created: %s", self._namespace, self._name, exc)
            return False
        self._observed, self._observed_at = copy.deepcopy(self._lease.get("spec") or {}), now
        return True

    def _write(self, lease: Mapping[str, Any], spec: JSON, now: float) -> None:
        body = {"metadata": copy.deepcopy(lease["metadata"]), "spec": spec}
        self._lease = self._kube.replace_lease(self._namespace, self._name, body)
        self._observed, self._observed_at = copy.deepcopy(self._lease.get("spec") or spec), now

    def _pause(self, seconds: float) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            self._stop.wait(seconds)
