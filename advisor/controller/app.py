"""Wiring: settings, cluster adapter, store, informer, leader election, workers, scheduler, HTTP.

Only this module knows how the pieces are threaded together; each piece takes what it needs as
arguments (clock, cache reader, status writer), so tests can build a controller against the
API emulator and stop it, or build two and see that only the leader acts.

Threads: one informer (list-then-watch of TFJobs), one leader elector, ``RECONCILE_THREADS``
reconcile workers (they act only while this replica leads; in cluster mode they also run each
reallocation, queued as ``ALLOCATION_KEY``), the HTTP servers (ingest; metrics and probes), and
apscheduler's
background scheduler (resync, garbage collection, settings reload). Predictions run in a
process pool or, with ``prediction_backend: job``, as Kubernetes Jobs watched by one more thread
(``job_predictor``), whose pods fetch their input and send their answer through the HTTP API.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from advisor.controller.pipeline.allocation import ALLOCATION_KEY, ClusterAllocator
from advisor.controller.pipeline.gc import collect_garbage, collect_prediction_jobs
from advisor.controller.web.http_api import BOTH, INGEST, OPS, HttpApi
from advisor.controller.kube.informer import Informer
from advisor.controller.pipeline.ingest import Ingest
from advisor.controller.jobs.cluster import InformerSource, JobCache, watched_resources
from advisor.controller.pipeline.job_predictor import SELECTOR as PREDICTION_JOBS, JobPredictor
from advisor.controller.kube.client import Kube
from advisor.controller.kube.leader import LeaderElector
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.prediction_job import PredictionJobSpec
from advisor.controller.pipeline.predictions import Done, ProcessPredictor
from advisor.controller.state.records import ProfileRecords
from advisor.controller.pipeline.reconcile import Key, Reconciler
from advisor.controller.pipeline.refit import Refitter
from advisor.controller.settings import ControllerSettings, PredictionBackend, SettingsError, load_settings
from advisor.controller.state.store import Store
from advisor.controller.state.tokens import load_key
from advisor.controller.jobs.tfjob import opted_in
from advisor.controller.kube.workqueue import WorkQueue
from advisor.errors import KubeError, StoreError
from advisor.importers.trace_upload import STEPS_FIELD

log = logging.getLogger(__name__)
RECONCILE_THREADS = 4
# Settings a running controller cannot take over: its threads, server, store, key, prediction
# pool or Jobs were made from them at start. A reload that changes one says a restart is needed.
RESTART_ONLY = frozenset({
    "namespaces", "http_port", "metrics_port", "ingest_max_bytes", "ingest_url", "ingest_key", "ingest_key_file", "store_path",
    "leader_election", "lease_name", "lease_namespace", "lease_duration_s", "lease_renew_deadline_s",
    "lease_retry_period_s", "identity", "kubeconfig", "kube_context",
    "prediction_backend", "prediction_processes", "prediction_job_image", "prediction_job_image_pull_secrets",
    "prediction_job_timeout_s", "prediction_job_start_timeout_s", "prediction_job_resources",
    "prediction_job_node_selector", "prediction_job_tolerations", "prediction_job_priority_class_name",
    "prediction_job_run_as_user", "prediction_job_run_as_group", "watch_pytorchjobs",
})


class Controller:
    """One controller replica. ``start`` returns at once; ``stop`` ends every thread it started."""

    def __init__(self, settings: ControllerSettings, kube: Kube, *, store: Store | None = None,
                 clock: Callable[[], float] = time.time, predictor: Any = None, metrics: Metrics | None = None,
                 settings_file: Path | None = None, lease_timing: tuple[float, float, float] | None = None,
                 job_poll_s: float = 5.0) -> None:
        self.settings = settings
        self.kube = kube
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.store = store or Store(settings.store_path)
        self.queue = WorkQueue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._settings_file = settings_file
        self._pending_restart: dict[str, str] = {}  # restart-only settings changed in the file, as last said
        # one informer per watched job resource (TFJobs; PyTorchJobs when served and enabled),
        # read through one cache; ``informer`` is the TFJobs'
        informers = [Informer(InformerSource(kube, res), settings.namespaces or None, self._on_event,
                              on_restart=lambda reason: self.metrics.watch_restarts.labels(reason).inc(),
                              what=res.kind)
                     for res in watched_resources(kube, watch_pytorchjobs=settings.watch_pytorchjobs)]
        self.informer = informers[0]
        self.jobs = JobCache(informers)
        key = load_key(settings)
        # the predictor calls back into the reconciler, made just after it
        self.predictor = predictor or self._make_predictor(
            lambda pkey, result, error: self.reconciler.prediction_done(pkey, result, error), job_poll_s, key)
        records = ProfileRecords(kube)
        self.reconciler = Reconciler(settings=settings, kube=kube, cache=self.jobs.get, store=self.store,
                                     predictor=self.predictor, metrics=self.metrics,
                                     enqueue_after=self.queue.add_after, clock=clock, ingest_key=key,
                                     records=records, requeue=self.queue.add_rate_limited, forget=self.queue.forget,
                                     shadowed=self.jobs.shadowed)
        self.reconciler.refits = Refitter(settings=lambda: self.reconciler.settings, store=self.store,
                                          running=lambda key: self.reconciler.predictor.running(key),
                                          metrics=self.metrics, enqueue_after=self.queue.add_after, clock=clock)
        # cluster mode (docs/allocation.md): its reallocation runs on a reconcile worker, as ALLOCATION_KEY
        self.allocation = ClusterAllocator(settings=lambda: self.reconciler.settings, kube=kube, cache=self.jobs.get,
                                           metrics=self.metrics, enqueue_after=self.queue.add_after)
        self.reconciler.allocation = self.allocation
        self.ingest = Ingest(cache=self.jobs.get, store=self.store, metrics=self.metrics,
                             enqueue=self.queue.add, clock=clock, ingest_key=key, records=records,
                             warn=self._warn)
        duration, renew, retry = lease_timing or (settings.lease_duration_s, settings.lease_renew_deadline_s,
                                                  settings.lease_retry_period_s)
        self.elector = LeaderElector(kube, settings.lease_namespace, settings.lease_name, settings.identity,
                                     lease_duration_s=duration, renew_deadline_s=renew, retry_period_s=retry,
                                     on_started_leading=self._started_leading,
                                     on_stopped_leading=self._stopped_leading) if settings.leader_election else None
        # ingest (profiling and prediction pods) and ops (/metrics, probes) on two ports, or one
        # when both settings name the same port
        one_port = settings.metrics_port == settings.http_port and settings.http_port != 0
        self.http = self._http_api(settings.http_port, BOTH if one_port else frozenset({INGEST}))
        self.ops_http = None if one_port else self._http_api(settings.metrics_port, frozenset({OPS}))
        self.scheduler = BackgroundScheduler(daemon=True)

    def _http_api(self, port: int, serves: frozenset[str]) -> HttpApi:
        s = self.settings
        return HttpApi("0.0.0.0", port, metrics=self.metrics, verify_token=self.ingest.verify_token,
                       accept_trace=self.ingest.accept_trace, healthy=self.healthy, ready=self.ready,
                       max_bytes=s.ingest_max_bytes, max_inflated_bytes=32 * s.ingest_max_bytes,
                       predictions=self.predictor if isinstance(self.predictor, JobPredictor) else None,
                       lazy_upload_field=STEPS_FIELD, serves=serves)

    def _make_predictor(self, on_done: Done, job_poll_s: float, key: bytes) -> ProcessPredictor | JobPredictor:
        s = self.settings
        if s.prediction_backend is PredictionBackend.PROCESS:
            return ProcessPredictor(s.prediction_processes, self.metrics, on_done)
        if not s.prediction_job_image:  # the settings' validator refuses this; a clear message if it ever does not
            raise SettingsError("prediction_backend 'job' needs prediction_job_image")
        spec = PredictionJobSpec(namespace=s.lease_namespace, image=s.prediction_job_image,
                                 controller_url=s.ingest_url, timeout_s=s.prediction_job_timeout_s,
                                 requests=s.prediction_job_resources.requests,
                                 limits=s.prediction_job_resources.limits,
                                 image_pull_secrets=tuple(s.prediction_job_image_pull_secrets),
                                 node_selector=s.prediction_job_node_selector,
                                 tolerations=tuple(t.as_kubernetes() for t in s.prediction_job_tolerations),
                                 priority_class_name=s.prediction_job_priority_class_name,
                                 run_as_user=s.prediction_job_run_as_user, run_as_group=s.prediction_job_run_as_group,
                                 owner=f"{s.lease_namespace}/{s.lease_name}")
        return JobPredictor(kube=self.kube, store=self.store, metrics=self.metrics, on_done=on_done, spec=spec,
                            start_timeout_s=s.prediction_job_start_timeout_s, clock=self.clock, poll_s=job_poll_s,
                            token_key=key)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.http.start()
        if self.ops_http is not None:
            self.ops_http.start()
        for informer in self.jobs.informers:
            self._spawn("informer" if informer is self.informer else "informer-pytorchjobs", informer.run, self._stop)
        if self.elector is not None:
            self._spawn("leader", self.elector.run, self._stop)
        else:
            self._started_leading()
        for i in range(RECONCILE_THREADS):
            self._spawn(f"reconcile-{i}", self._work)
        s = self.settings
        self.scheduler.add_job(self.resync, "interval", seconds=s.resync_period_s, id="resync", max_instances=1)
        self.scheduler.add_job(self.collect_garbage, "interval", seconds=s.gc_period_s, id="gc", max_instances=1)
        if self._settings_file is not None:
            self.scheduler.add_job(self.reload_settings, "interval", seconds=30, id="settings", max_instances=1)
        self.scheduler.start()
        log.info("controller %s started (mode %s, namespaces %s)", s.identity, s.mode.value, s.namespaces or "all")

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        for t in self._threads:
            t.join(timeout=10)
        self.http.stop()
        if self.ops_http is not None:
            self.ops_http.stop()
        shutdown = getattr(self.predictor, "shutdown", None)
        if shutdown is not None:
            shutdown()
        self.store.close()

    def run_forever(self) -> None:
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.stop()

    # --- state ---------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def healthy(self) -> tuple[bool, str]:
        """Unhealthy (the kubelet restarts the pod) when a thread died or the predictor cannot
        work any more (no prediction worker process can start): only a restart helps then."""
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead:
            return False, f"threads stopped: {', '.join(dead)}"
        health = getattr(self.predictor, "health", None)
        if health is not None:
            ok, why = health()
            if not ok:
                return False, why
        return (False, "stopping") if self._stop.is_set() else (True, "ok")

    def ready(self) -> tuple[bool, str]:
        """Ready = able to serve (a synced cache, a working store), leading or not: a standby
        serves trace uploads too (ingest records them in the cluster, where the leader finds
        them), so ``helm install --wait`` with two replicas completes and a failover loses no upload."""
        if not self.jobs.has_synced():
            return False, "job cache not synced yet"
        try:
            self.store.ping()
        except StoreError as exc:
            return False, f"store unavailable: {exc}"
        return True, "ok" if self.leading else "ok (standing by: another replica holds the leader lease)"

    # --- work ----------------------------------------------------------------------------------

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        if isinstance(ns, str) and isinstance(name, str):
            self.queue.add((ns, name))

    def _warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """A Warning event on a job (ingest's refusals); losing one is logged, never fatal."""
        try:
            self.kube.emit_event(obj, "Warning", reason, message)
        except KubeError as exc:
            log.info("event %s not recorded: %s", reason, exc)

    def _work(self) -> None:
        """A reconcile worker. It starts once the TFJob cache has synced: a reconcile reads the
        cache (a profiling run or a job not listed yet looks missing); the queue keeps the keys."""
        while not self.jobs.has_synced():
            if self._stop.wait(0.1):
                return
        while not self._stop.is_set():
            key = self.queue.get(timeout_s=0.5)
            if key is None:
                continue
            try:
                if self.leading and key == ALLOCATION_KEY:
                    self._reallocate()
                elif self.leading:
                    self.reconciler.reconcile(key)  # type: ignore[arg-type]
                else:
                    self.queue.add_after(key, 2.0)  # keep it for when this replica leads
            finally:
                self.queue.done(key)

    def _reallocate(self) -> None:
        """Cluster mode's reallocation: a bug in it is logged with its trace and retried with
        backoff, as a reconcile's is; it never takes the worker thread down."""
        try:
            self.allocation.run()
            self.queue.forget(ALLOCATION_KEY)
        except Exception:
            self.metrics.reconcile_errors.labels("internal").inc()
            log.exception("reallocation failed")
            self.queue.add_rate_limited(ALLOCATION_KEY)

    def resync(self) -> None:
        for key in self.jobs.keys():
            self.queue.add(key)
        self.metrics.watched_jobs.set(len(self._opted_in_keys()))
        self.allocation.request()  # cluster mode: a quota may have changed

    def collect_garbage(self) -> None:
        """One sweep, by the leader only, and only once the TFJob cache has synced: before that,
        a missing job is not a gone one, and no reconcile has yet claimed the prediction Jobs."""
        if not self.leading or not self.jobs.has_synced():
            return
        s, now = self.settings, self.clock()
        collect_garbage(self.kube, self.jobs, self.store, self.metrics, now=now, max_age_s=s.gc_period_s,
                        namespaces=s.namespaces, opt_in=s.opt_in)
        if isinstance(self.predictor, JobPredictor):
            collect_prediction_jobs(self.kube, self.store, namespace=self.predictor.spec.namespace, now=now,
                                    max_age_s=s.gc_period_s, abandon_after_s=s.prediction_job_timeout_s + s.gc_period_s,
                                    tracked=self.predictor.tracked_jobs(), selector=PREDICTION_JOBS)

    def reload_settings(self) -> None:
        """Re-read the settings file and apply what can change while running: every setting the
        reconciles read (prices, bandwidth, limits, mode, prediction and profiling settings,
        opt-in), the resync and garbage collection periods and the log level; every job is
        reconciled again (a changed prediction setting re-predicts). The others (``RESTART_ONLY``:
        what threads, sockets, the store, the pool or the Jobs' spec were built from) keep their
        old value, and a warning names them: they need a restart."""
        try:
            fresh = load_settings(self._settings_file)
        except SettingsError as exc:  # a broken ConfigMap edit must not stop the controller: keep the old settings
            log.error("settings not reloaded: %s", exc)
            return
        old = self.settings
        changed = {name for name in type(old).model_fields if getattr(fresh, name) != getattr(old, name)}
        if not changed:
            return
        later = sorted(changed & RESTART_ONLY)
        pending = {name: repr(getattr(fresh, name)) for name in later}
        if later and pending != self._pending_restart:  # said once per change, not every 30 s
            self._pending_restart = pending
            log.warning("settings %s changed in %s but take effect only after a restart of the controller"
                        " (kubectl rollout restart); the running controller keeps the old values",
                        ", ".join(later), self._settings_file)
        applied = sorted(changed - RESTART_ONLY)
        if not applied:
            return
        self.settings = fresh.model_copy(update={name: getattr(old, name) for name in RESTART_ONLY})
        self.reconciler.settings = self.settings
        log.info("settings changed (%s): applied; reconciling every job", ", ".join(applied))
        if "log_level" in changed:
            logging.getLogger().setLevel(self.settings.log_level)
        for job_id, seconds in (("resync", self.settings.resync_period_s), ("gc", self.settings.gc_period_s)):
            if {"resync_period_s", "gc_period_s"} & changed and self.scheduler.running:
                self.scheduler.reschedule_job(job_id, trigger="interval", seconds=seconds)
        self.resync()

    def _opted_in_keys(self) -> list[Key]:
        keys = []
        for key in self.jobs.keys():
            meta = (self.jobs.get(*key) or {}).get("metadata") or {}
            if opted_in(meta.get("labels") or {}, meta.get("annotations") or {}, self.settings.opt_in):
                keys.append(key)
        return keys

    def _started_leading(self) -> None:
        self.metrics.leader.set(1)
        log.info("%s is the leader", self.settings.identity)
        self.resync()

    def _stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        log.warning("%s lost the leader lease; standing by", self.settings.identity)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)
