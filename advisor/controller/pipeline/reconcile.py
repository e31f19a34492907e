"""The level-triggered reconcile of one opted-in job: read the state, do the next step, write what changed.

Every kind (TFJob with or without PS, PyTorchJob) goes through the same steps; what differs
(its JSON, its profiling run, its resize patch, its API calls) is behind ``jobs.kinds`` and
``jobs.cluster``.

States of a job (annotation ``phase``): Pending -> Profiling (a profiling TFJob runs) ->
Predicting (the trace is stored; a prediction runs off this thread) -> Predicted (annotations
written; in ``initial``/``auto`` mode the job is resized) or Failed (with a reason). Every step
is idempotent and keyed so that a restart or a second look never duplicates work: one profiling
run per (job uid, generation of its pod templates) in the store and by a deterministic name,
one prediction per (profile, parameters) key. A bad object is marked Failed with a Warning
event; it never raises out of ``reconcile``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from advisor.controller.pipeline import annotations as ann
from advisor.controller.pipeline.deadline import (DeadlineOver, job_deadline, remaining, resize_correction,
                                                  shortfall_message)
from advisor.controller.pipeline.cleanup import delete_profiling_runs
from advisor.controller.web.metrics import Metrics, remove_series
from advisor.controller.pipeline.policy import (
    Limits, Recommendation, clamp, job_limits, job_model, job_prices, model_note, recommend, resize_target,
    throughput_at,
)
from advisor.controller.pipeline.predictions import PredictionParams, prediction_key, prediction_params
from advisor.controller.pipeline.worker_speeds import JOB_NAME_LABEL, placement, worker_pods
from advisor.controller.settings import ControllerSettings, Mode
from advisor.controller.state.formats import STATE_FORMAT, STATE_FORMAT_ANNOTATION, check_format
from advisor.controller.state.records import ProfileRecords
from advisor.controller.jobs.cluster import verbs_for
from advisor.controller.jobs.kinds import kind_of_view, parse_job
from advisor.controller.jobs.tfjob import (
    KIND as TFJOB, PROFILING_FOR_LABEL, ProfilingSpec, TFJobView, finished_reason, finished_state, opted_in,
    parse_rfc3339, profiling_job_name, profiling_run_owner, release_patch, suspend_patch,
)
from advisor.controller.state.tokens import run_token
from advisor.core.correction import Correction
from advisor.core.cost import Prices
from advisor.core.profile import parse_profile
from advisor.errors import (
    AdvisorError, JobKindError, KubeAlreadyExists, KubeConflict, KubeError, KubeNotFound, StateFormatError,
    StoreError, TFJobError,
)

log = logging.getLogger(__name__)
Key = tuple[str, str]
GRACE_S = 120.0  # beyond the profiling run's activeDeadlineSeconds before the controller gives up itself
RECHECK_S = 30.0  # how often a profiling run is looked at (its record may come from another replica's ingest)
PREDICTION_RETRY_S = (10.0, 1000.0)  # a failed prediction is retried after 10 s, doubling, at most 1000 s
RETRIED_FAILURES = ("ProfilingFailed", "ProfilingTimedOut")  # not NoTrace: the program does not upload
PROFILING_FAILURES = ("ProfilingFailed", "ProfilingTimedOut", "NoTrace")
NODE_TTL_S = 300.0  # a node's labels are read again after this long (node_speeds)


class Predictor(Protocol):
    backend: str

    def submit(self, key: str, profile_doc: Mapping[str, Any], params: PredictionParams) -> bool: ...
    def running(self, key: str) -> bool: ...


@dataclass
class Reconciler:
    """Everything a reconcile touches is injected: cluster, cache, store, predictor, clock."""

    settings: ControllerSettings
    kube: Any  # advisor.controller.kube.client.Kube
    cache: Callable[[str, str], Mapping[str, Any] | None]
    store: Any  # advisor.controller.state.store.Store
    predictor: Predictor
    metrics: Metrics
    enqueue_after: Callable[[Key, float], None]
    clock: Callable[[], float] = time.time
    ingest_key: bytes = b""  # derives each run's upload token (controller/state/tokens.py)
    records: ProfileRecords | None = None  # the durable record of profiles in the cluster
    # rate-limited requeue after an error (per-key exponential backoff) and its reset on success
    requeue: Callable[[Key], None] | None = None
    forget: Callable[[Key], None] | None = None
    prediction_retry_s: tuple[float, float] = PREDICTION_RETRY_S  # first and longest wait before a retry
    _waiting: dict[str, tuple[str, set[Key]]] = field(default_factory=dict)  # prediction key -> (sha, jobs)
    # prediction key -> (error, failures so far, when to try again): retried with backoff
    _failed: dict[str, tuple[str, int, float]] = field(default_factory=dict)
    # job -> the resourceVersion of this replica's last write to it during the current reconcile
    _rv: dict[Key, str] = field(default_factory=dict)
    # job -> (uid, generation, the prediction key its record holds), as far as this replica knows
    _recorded: dict[Key, tuple[str, int, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _curve_workers: dict[Key, tuple[int, ...]] = field(default_factory=dict)
    _facts_of: dict[str, tuple[float | None, bool]] = field(default_factory=dict)  # profile sha -> _profile_facts
    refits: Any = None  # advisor.controller.pipeline.refit.Refitter: the online refit, when the app wires it
    allocation: Any = None  # advisor.controller.pipeline.allocation.ClusterAllocator: cluster mode, when wired
    # job -> (uid, the reason annotation this replica last wrote): the informer's cache can still
    # show the one before, and must not make the same transition emit its event twice
    _reason_written: dict[Key, tuple[str, str]] = field(default_factory=dict)
    # the objects of a key that the cache does not return (a PyTorchJob behind a TFJob of the same
    # name, cluster.JobCache.shadowed), and the uids already told so (one event each)
    shadowed: Callable[[str, str], Sequence[Mapping[str, Any]]] | None = None
    _told_shadowed: set[str] = field(default_factory=set)
    _warned: dict[Key, tuple[str, str, str]] = field(default_factory=dict)  # job -> (uid, reason, what) told
    # (uid, profile sha) of the jobs told their profile contradicted the prediction (ProfileContradicts)
    _contradiction_told: set[tuple[str, str]] = field(default_factory=set)
    _told_newer: set[tuple[str, str]] = field(default_factory=set)  # (job uid, message) said once
    _nodes: dict[str, tuple[float, Mapping[str, Any] | None]] = field(default_factory=dict)  # name -> (read at, node)

    # --- entry point -------------------------------------------------------------------------

    def reconcile(self, key: Key) -> None:
        """Bring one job a step forward; API errors requeue it, nothing escapes."""
        started = time.monotonic()
        try:
            self._reconcile(*key)
            if self.forget is not None:
                self.forget(key)  # success: the next error starts its backoff from the shortest delay
        except StateFormatError as exc:  # a newer controller's state: not ours to read or overwrite
            self._tell_newer_format(key, str(exc))
        except KubeConflict:
            # someone wrote in between (a resourceVersion precondition failed): re-read the job
            # from the cache, which the watch brings up to date, and retry with backoff
            self.metrics.reconcile_errors.labels("conflict").inc()
            self._retry(key)
        except KubeError as exc:
            self.metrics.reconcile_errors.labels("api").inc()
            log.warning("reconcile %s/%s: %s; retrying", *key, exc)
            self._retry(key)
        except Exception:  # a bug must not take the worker thread down; it is logged with its trace
            self.metrics.reconcile_errors.labels("internal").inc()
            log.exception("reconcile %s/%s failed", *key)
            self._retry(key)
        finally:
            self._rv.pop(key, None)
            self.metrics.reconcile_duration.observe(time.monotonic() - started)

    def _retry(self, key: Key) -> None:
        if self.requeue is not None:
            self.requeue(key)  # the work queue's per-key exponential backoff and overall rate limit
        else:
            self.enqueue_after(key, 1.0)

    def prediction_done(self, pkey: str, result: str | None, error: str | None) -> None:
        """Called by the predictor: store the result (or remember the failure) and wake the jobs."""
        with self._lock:
            sha, jobs = self._waiting.pop(pkey, ("", set()))
            if error is not None:
                failures = self._failed.get(pkey, ("", 0, 0.0))[1] + 1
                lo, hi = self.prediction_retry_s
                self._failed[pkey] = (error, failures, self.clock() + min(hi, lo * 2 ** (failures - 1)))
            else:
                self._failed.pop(pkey, None)
        if result is not None and sha:
            doc = json.loads(result)
            doc["predicted_at"] = self.clock()
            try:
                self.store.put_prediction(sha, pkey, json.dumps(doc, separators=(",", ":")), self.clock())
            except StoreError as exc:  # e.g. finished while the controller shuts down: predicted again later
                log.warning("prediction %s not stored: %s", pkey, exc)
                return
        for job in jobs:
            self.enqueue_after(job, 0)

    # --- the steps ---------------------------------------------------------------------------

    def _reconcile(self, namespace: str, name: str) -> None:
        obj = self.cache(namespace, name)
        if obj is None:
            self._forget(namespace, name)
            return
        self._tell_shadowed(namespace, name, obj)
        try:
            view = parse_job(obj, node_type_label=self.settings.prices.node_type_label)
        except TFJobError as exc:  # JobKindError among them: a kind or shape the advisor does not handle
            self._invalid(obj, str(exc), "UnsupportedJob" if isinstance(exc, JobKindError) else "InvalidSpec")
            return
        if view.is_profiling_run:
            owner = view.labels.get(PROFILING_FOR_LABEL)
            if owner:
                self.enqueue_after((namespace, owner), 0)
            return
        check_format(f"the state of {view.kind} {namespace}/{name}", view.annotations.get(STATE_FORMAT_ANNOTATION),
                     STATE_FORMAT)  # before any write: a newer controller's state is left as it is
        self._rv[view.key] = view.resource_version
        if not view.opted_in(self.settings.opt_in):
            self._release_if_held(view)  # opted out while held: the advisor no longer acts on it
            self._stop_profiling(view)  # and its profiling run is of no use any more
            self._forget(namespace, name)
            return
        self.metrics.current_workers.labels(namespace, name).set(view.workers)
        try:
            prices = job_prices(self.settings, view)
            limits = job_limits(self.settings, view, prices)
            job_model(self.settings, view)  # a bad model annotation fails now, not after a profiling run
            if self.allocation is not None:
                self.allocation.check(view)  # so does a bad priority annotation in cluster mode
        except TFJobError as exc:
            self._fail(view, "InvalidPolicy", str(exc))
            return
        generation = self._profile_generation(view)
        latest = self.store.latest_run(view.uid)
        if latest is not None and latest.generation > generation:
            # This cache is behind the one that started a newer generation's run (another
            # leader's, or this one's before its own writes came back): that run is in charge;
            # an older one must be neither started again nor judged (it is superseded).
            return
        run = latest if latest is not None and latest.generation == generation else None
        if run is None:
            run = self._adopt_run(view, generation)  # started by another replica: carry on with it
        if run is not None and run.state == "profiling":
            run = self._pull_record(view, run)  # its trace may have reached another replica
        if run is None or (run.state == "profiling" and not self._has_profiling_run(view, run.profiling_job)):
            self._start_profiling(obj, view, limits, generation)  # (re)create what is missing, idempotently
        elif run.state == "profiling":
            self._watch_profiling(view, run)
        elif run.state in ("received", "predicted"):
            self._predict_or_apply(view, run, prices, limits)
        else:  # failed / timed_out: wait for a new generation of the job's templates
            # a write that failed (e.g. 409) is retried here, the tries that ended with it
            tries = {ann.PROFILING_ATTEMPTS: run.attempts_json} if _attempts(run.attempts_json) else None
            self._fail(view, *_reason_and_message(run), extra=tries)

    def _stop_profiling(self, view: TFJobView) -> None:
        """The job no longer opts in: delete its profiling run if one is still profiling, forget
        that run, and clear the run's annotations (phase ``Pending``, reason ``OptedOut``), so a
        job that opts in again starts a fresh run instead of adopting the deleted one."""
        latest = self.store.latest_run(view.uid)
        generations = {latest.generation} if latest is not None and latest.state == "profiling" else set()
        profiling = view.annotations.get(ann.PHASE) == "Profiling"
        noted = _int_or_none(view.annotations.get(ann.PROFILED_GENERATION))
        if profiling and noted is not None:
            generations.add(noted)  # started by another replica: the annotations say which
        if not generations:
            return
        deleted = delete_profiling_runs(self.kube, self.cache, view, generations, "the job no longer opts in")
        for generation in generations:
            if self.store.forget_live_run(view.uid, generation):
                self.metrics.profiling_runs.labels("opted_out").inc()
        if profiling:
            gone = f"; deleted {', '.join(deleted)}" if deleted else ""
            self._set_phase(view, "Pending", "OptedOut", f"the job no longer opts in: profiling stopped{gone}",
                            extra=dict.fromkeys(_RUN_ANNOTATIONS))

    def _tell_newer_format(self, key: Key, message: str) -> None:
        """Say once per job and message (a Warning event and a log line) that its state is newer
        than this controller reads; nothing else is written. It is looked at again at resyncs."""
        obj = self.cache(*key)
        uid = str(((obj or {}).get("metadata") or {}).get("uid", ""))
        if not self._first_time(self._told_newer, (uid, message)):
            return
        log.warning("%s/%s: %s", *key, message)
        if obj is not None and opted_in((obj.get("metadata") or {}).get("labels") or {},
                                        (obj.get("metadata") or {}).get("annotations") or {}, self.settings.opt_in):
            self._emit(obj, "Warning", "StateFormatUnsupported", message)

    def _tell_shadowed(self, namespace: str, name: str, seen: Mapping[str, Any]) -> None:
        """A Warning event, once, on each opted-in object that shares this key with ``seen`` and is
        not acted on: without it, a PyTorchJob named like a TFJob is silently ignored. A job that
        did not opt in hears nothing from the advisor, as anywhere else."""
        if self.shadowed is None:
            return
        for other in self.shadowed(namespace, name):
            meta = other.get("metadata", {})
            uid = meta.get("uid", "")
            if not uid or uid in self._told_shadowed or not opted_in(meta.get("labels") or {},
                                                                     meta.get("annotations") or {},
                                                                     self.settings.opt_in):
                continue
            self._told_shadowed.add(uid)
            self._emit(other, "Warning", "NameShadowed",
                       f"the training advisor does not act on this {other.get('kind', 'job')}: the "
                       f"{seen.get('kind', 'job')} {namespace}/{name} has the same name and is the one it acts on "
                       "(it keys jobs by namespace and name); give one of them another name")

    def _profile_generation(self, view: TFJobView) -> int:
        """The generation whose profiling run applies: kept across resizes (same templates)."""
        if view.annotations.get(ann.TEMPLATE_HASH) == view.template_hash:
            try:
                return int(view.annotations[ann.PROFILED_GENERATION])
            except (KeyError, ValueError):
                pass
        return view.generation

    def _start_profiling(self, obj: Mapping[str, Any], view: TFJobView, limits: Limits, generation: int) -> None:
        now = self.clock()
        token = run_token(self.ingest_key, view.uid, generation)
        run, created = self.store.ensure_run(view.uid, view.namespace, view.name, generation,
                                             profiling_job_name(view.name, generation), now, token)
        # Every time, not only when created: the two are separate transactions, and a restart in
        # between must not leave an older run (and its token) live for good.
        superseded = self.store.supersede_runs(view.uid, generation, now)
        for old in superseded:
            self.metrics.profiling_runs.labels("superseded").inc()
            log.info("%s/%s: profiling run %s superseded by generation %d; its token is revoked",
                     view.namespace, view.name, old.profiling_job, generation)
        if created or superseded:  # the older generations' runs go now, not at the next sweep
            older = {old.generation for old in superseded}
            noted = _int_or_none(view.annotations.get(ann.PROFILED_GENERATION))  # another replica's, maybe
            if noted is not None and noted < generation:
                older.add(noted)
            delete_profiling_runs(self.kube, self.cache, view, older, f"superseded by generation {generation}")
        name = run.profiling_job
        profiled = {ann.TEMPLATE_HASH: view.template_hash, ann.PROFILED_GENERATION: str(generation)}
        if limits.mode is Mode.INITIAL and not view.started and not view.suspended:
            # Suspending bumps metadata.generation. The same patch says which generation was
            # profiled, so no cached copy has the new generation without it (else a lagging cache
            # would look like a new, unprofiled generation and start a second run).
            hold = suspend_patch()
            hold["metadata"]["annotations"].update(profiled)
            self._patch(view, hold)
        tries = {ann.PROFILING_RUN: name, ann.PROFILING_STARTED: ann.rfc3339(run.created),
                 ann.PROFILING_ATTEMPTS: run.attempts_json}
        if now < run.created:  # a retry waiting for its backoff
            self._set_phase(view, "Profiling", "ProfilingRetryWaiting",
                            f"try {run.attempt} of {self.settings.profiling_max_attempts} starts in"
                            f" {run.created - now:.0f} s: {_last_try(run)}", extra={**profiled, **tries})
            self.enqueue_after(view.key, run.created - now)
            return
        s = self.settings
        spec = ProfilingSpec(s.ingest_url, s.profiling_steps, s.profiling_warmup_steps, s.profiling_timeout_s,
                             (s.bandwidth_bps() or 0) / 1e6 or None, token=token, attempt=run.attempt,
                             labels=tuple(s.profiling_propagate_labels),
                             annotations=tuple(s.profiling_propagate_annotations))
        body = kind_of_view(view).build_profiling_run(obj, view, spec, generation)
        try:
            verbs_for(self.kube, view.kind).create(view.namespace, body)
        except KubeAlreadyExists:
            self._replace_foreign_profiling_run(view, body)
        if created:
            self.metrics.profiling_runs.labels("started").inc()
        message = f"profiling run {name}" + (f" (try {run.attempt})" if run.attempt > 1 else "")
        self._set_phase(view, "Profiling", "ProfilingStarted", message, extra={**profiled, **tries})
        self.enqueue_after(view.key, 5.0)  # look again soon: the run must appear in the cache

    def _adopt_run(self, view: TFJobView, generation: int) -> Any:
        """The run of ``generation`` that the job's annotations say was started (by another
        replica, or by this one before its store was lost), recorded in the store as the cluster
        has it: with its profile (the record ingest wrote) it is ``received``; failed for good
        when the annotations say so; else still profiling, under its name and start time. None
        when the cluster shows no run for this generation (a new one starts)."""
        notes = view.annotations
        name = notes.get(ann.PROFILING_RUN)
        if notes.get(ann.PROFILED_GENERATION) != str(generation) or not name:
            return None
        record = self.records.get(view.namespace, view.name, view.uid, generation) if self.records else None
        phase, (reason, _, message) = notes.get(ann.PHASE), notes.get(ann.REASON, "").partition(": ")
        state = "profiling"
        if record is None and phase == "Failed" and reason in PROFILING_FAILURES:
            state = "timed_out" if reason == "ProfilingTimedOut" else "failed"
        attempts = _attempts(notes.get(ann.PROFILING_ATTEMPTS))
        started = parse_rfc3339(notes.get(ann.PROFILING_STARTED)) or self.clock()
        now = self.clock()
        run, created = self.store.ensure_run(
            view.uid, view.namespace, view.name, generation, name, now, run_token(self.ingest_key, view.uid, generation),
            state=state, reason=f"{reason}: {message}" if state != "profiling" else "",  # type: ignore[arg-type]
            attempt=len(attempts) + 1, attempts_json=ann.compact(attempts), created=started)
        if created:
            log.info("%s/%s: adopted profiling run %s (generation %d, %s) from the cluster", view.namespace,
                     view.name, name, generation, "profile recorded" if record else state)
        if record is not None:
            self.store.put_trace(view.uid, generation, b"", record.profile_json, record.sha, now)
            if record.prediction_key and record.prediction_json:  # applied again, not simulated again
                self.store.put_prediction(record.sha, record.prediction_key, record.prediction_json, now)
                with self._lock:
                    self._recorded[view.key] = (view.uid, generation, record.prediction_key)
            run = self.store.run(view.uid, generation)
        return run

    def _pull_record(self, view: TFJobView, run: Any) -> Any:
        """A run still profiling here may have its profile recorded by another replica's ingest."""
        if self.records is None:
            return run
        try:
            record = self.records.get(view.namespace, view.name, view.uid, run.generation)
        except KubeError as exc:  # not fatal: this replica's own ingest and the run's outcome still count
            log.warning("%s/%s: cannot read the profile record: %s", view.namespace, view.name, exc)
            return run
        if record is None:
            return run
        if self.store.put_trace(view.uid, run.generation, b"", record.profile_json, record.sha, self.clock()) == "stored":
            self.metrics.profiling_runs.labels("succeeded").inc()
        return self.store.run(view.uid, run.generation)

    def _has_profiling_run(self, view: TFJobView, name: str) -> bool:
        """Whether the cache shows the profiling TFJob ``name`` made for this job (this uid)."""
        pjob = self.cache(view.namespace, name)
        return pjob is not None and profiling_run_owner(pjob) == view.uid

    def _replace_foreign_profiling_run(self, view: TFJobView, body: Mapping[str, Any]) -> None:
        """The profiling run's name is taken. By our own run (created before a restart, or not yet
        in the cache): keep it, exactly one run per generation. By the run of another job of the
        same name (one deleted and recreated, whose dependents the cluster's garbage collector has
        not removed yet): not ours to reuse, since its pods run the old job's templates and its
        outcome would be taken for this job's. Delete that object (a uid precondition, in case
        the cache lags and the name is ours by now) and create ours. When the cache does not show
        the object yet, the next reconcile finds it (``_has_profiling_run``) and comes back here."""
        name = body["metadata"]["name"]
        existing = self.cache(view.namespace, name)
        if existing is None or profiling_run_owner(existing) == view.uid:
            return
        log.info("profiling run %s/%s belongs to an earlier job of that name; replacing it", view.namespace, name)
        try:
            verbs_for(self.kube, view.kind).delete(view.namespace, name, uid=existing["metadata"]["uid"])
        except KubeNotFound:
            pass
        verbs_for(self.kube, view.kind).create(view.namespace, body)

    def _watch_profiling(self, view: TFJobView, run: Any) -> None:
        now = self.clock()
        pjob = self.cache(view.namespace, run.profiling_job)
        status = (pjob or {}).get("status")
        status = status if isinstance(status, Mapping) else {}
        finished, message = finished_state(status)
        deadline = run.created + self.settings.profiling_timeout_s + GRACE_S
        if finished == "Failed":
            # A timeout is told by the condition's reason (DeadlineExceeded), or by the run having
            # been active as long as its activeDeadlineSeconds: never by a word in the message.
            timed_out = (finished_reason(status) == "DeadlineExceeded"
                         or now - run.created >= self.settings.profiling_timeout_s)
            self._end_try(view, run, "timed_out" if timed_out else "failed",
                          "ProfilingTimedOut" if timed_out else "ProfilingFailed",
                          message or "the profiling run failed")
        elif finished == "Succeeded":
            self._end_run(view, run, "failed", "NoTrace",
                          "the profiling run ended without uploading a trace; does the program use advisor.profiling?")
        elif now > deadline:
            self._end_try(view, run, "timed_out", "ProfilingTimedOut",
                          f"no trace within {self.settings.profiling_timeout_s} s")
        else:
            message = f"profiling run {run.profiling_job}" + (f" (try {run.attempt})" if run.attempt > 1 else "")
            self._set_phase(view, "Profiling", "ProfilingStarted", message)
            self.enqueue_after(view.key, min(max(deadline - now, 1.0), RECHECK_S))

    def _end_try(self, view: TFJobView, run: Any, state: str, reason: str, message: str) -> None:
        """A try failed (evicted, preempted, timed out): the next one after a backoff that
        doubles (profiling_retry_backoff_s), up to profiling_max_attempts; then the run ends."""
        s = self.settings
        ended = [*_attempts(run.attempts_json), {"attempt": run.attempt, "run": run.profiling_job,
                                                  "reason": f"{reason}: {message}"[:300]}]
        if reason not in RETRIED_FAILURES or run.attempt >= s.profiling_max_attempts:
            if run.attempt > 1:
                message = f"{message} (try {run.attempt} of {s.profiling_max_attempts})"
            self._end_run(view, run, state, reason, message, attempts=ended)
            return
        now = self.clock()
        start_at = now + s.profiling_retry_backoff_s * 2 ** (run.attempt - 1)
        nxt = self.store.next_attempt(view.uid, run.generation, run.attempt + 1,
                                      profiling_job_name(view.name, run.generation, run.attempt + 1),
                                      ann.compact(ended), start_at, now)
        if nxt is None:
            return  # another look retried it already
        self._event(view, "Warning", "ProfilingRetry", f"profiling try {run.attempt} ended ({reason}: {message});"
                    f" try {nxt.attempt} in {start_at - now:.0f} s")
        self.enqueue_after(view.key, 0)

    def _end_run(self, view: TFJobView, run: Any, state: str, reason: str, message: str,
                 attempts: list[dict[str, Any]] | None = None) -> None:
        tries = ann.compact(attempts) if attempts is not None else None
        self.store.set_state(view.uid, run.generation, state, f"{reason}: {message}", self.clock(), tries)
        self.store.revoke_token(view.uid, run.generation)
        self.metrics.profiling_runs.labels(state).inc()
        self._fail(view, reason, message, extra={ann.PROFILING_ATTEMPTS: tries} if tries is not None else None)

    def _profile_facts(self, uid: str, generation: int, sha: str) -> tuple[float | None, bool]:
        """The bandwidth a profile was recorded at and whether its program is synchronous
        (``JobInfo.synchronous``, which decides the default model): parsed (and so validated)
        once per profile.

        Why: a resync reconciles every predicted job; reading and parsing its profile each time
        would cost a large allocation per job for two facts."""
        with self._lock:
            if sha in self._facts_of:
                return self._facts_of[sha]
        text = self.store.profile_json(uid, generation)
        if text is None:
            raise StoreError(f"the trace of {uid} generation {generation} is missing from the store")
        job = parse_profile(json.loads(text)).job
        facts = (job.recorded_bandwidth_bps, job.synchronous)
        with self._lock:
            self._facts_of[sha] = facts
        return facts

    def _predict_or_apply(self, view: TFJobView, run: Any, prices: Prices, limits: Limits) -> None:
        sha = self.store.profile_sha(view.uid, run.generation)
        try:
            if sha is None:
                raise StoreError(f"the profiling run is {run.state} but the store holds no trace for it")
            recorded, synchronous = self._profile_facts(view.uid, run.generation, sha)
            model = job_model(self.settings, view, synchronous=synchronous)
            params = prediction_params(
                recorded, prices, bandwidth_bps=self.settings.bandwidth_bps(), measure=self.settings.measure_bandwidth(),
                max_workers=self.settings.max_workers, target=self.settings.prediction_target,
                seed=self.settings.prediction_seed, saturation_threshold=self.settings.saturation_threshold,
                model=model)
            params = replace(params, model_note=model_note(self.settings, view, model))
        except AdvisorError as exc:  # PredictionInputError among others
            self._fail(view, "PredictionImpossible", str(exc))
            return
        if self.refits is not None:  # online refit (refit.py): the job's observed points join the params
            params = self.refits.params(view, sha, params, self._event)
        if self.settings.node_speeds:  # where the workers run (worker_speeds.py) joins the params
            params = replace(params, worker_speeds=ann.compact(self._placement(view, run)))
        pkey = prediction_key(sha, params)
        stored = self.store.prediction(sha, pkey)
        if stored is None:
            with self._lock:
                failed = self._failed.get(pkey)
                if failed is not None and self.clock() >= failed[2]:
                    failed = None  # its backoff is over: try again (the failure count is kept)
                if failed is None:
                    self._waiting.setdefault(pkey, (sha, set()))[1].add(view.key)
            if failed is not None:
                error, failures, retry_at = failed
                self._fail(view, "PredictionFailed", error)
                log.info("%s/%s: prediction %s failed %d time(s); retried at %s", view.namespace, view.name, pkey,
                         failures, ann.rfc3339(retry_at))
                self.enqueue_after(view.key, max(retry_at - self.clock(), 0.0))
                return
            if not self.predictor.running(pkey):
                profile_doc = json.loads(self.store.profile_json(view.uid, run.generation) or "null")
                self.predictor.submit(pkey, profile_doc, params)
            self._set_phase(view, "Predicting", "PredictionRunning", f"profile sha256:{sha[:12]}")
            return
        prediction = json.loads(stored)
        self._apply(view, run, sha, prediction, prices, limits)
        self._record_prediction(view, run.generation, pkey, stored)
        if run.state != "predicted":
            self.store.set_state(view.uid, run.generation, "predicted", "", self.clock())
            self.store.revoke_token(view.uid, run.generation)

    def _placement(self, view: TFJobView, run: Any) -> dict[str, Any]:
        """The speeds the job's workers run at (worker_speeds.placement): its worker pods and the
        profiling run's traced pod, listed; nodes read at most every NODE_TTL_S. The traced pod
        goes with its run, so once gone its node's speed is taken from the job's annotation
        written with this run's prediction."""
        workers = worker_pods(self.kube.list_pods(view.namespace, f"{JOB_NAME_LABEL}={view.name}"))
        traced = worker_pods(self.kube.list_pods(view.namespace, f"{JOB_NAME_LABEL}={run.profiling_job}"))
        before = None
        if not traced:
            try:
                noted = json.loads(view.annotations.get(ann.WORKER_SPEEDS) or "null")
            except ValueError:
                noted = None
            before = noted.get("traced") if isinstance(noted, dict) else None
            before = before if isinstance(before, dict) and before.get("run") == run.profiling_job else None
        doc = placement(workers, traced[0] if traced else None, self._node, self.settings.node_speeds,
                        traced_as=before)
        doc["traced"]["run"] = run.profiling_job
        return doc

    def _node(self, name: str) -> Mapping[str, Any] | None:
        now = self.clock()
        with self._lock:
            cached = self._nodes.get(name)
        if cached is not None and now - cached[0] < NODE_TTL_S:
            return cached[1]
        node = self.kube.get_node(name)
        with self._lock:
            self._nodes[name] = (now, node)
        return node

    def _record_prediction(self, view: TFJobView, generation: int, pkey: str, stored: str) -> None:
        """Put the applied prediction beside the profile in the job's record (once per key)."""
        if self.records is None:
            return
        with self._lock:
            if self._recorded.get(view.key) == (view.uid, generation, pkey):
                return
        try:
            self.records.put_prediction(view.namespace, view.name, generation, pkey, stored)
        except KubeNotFound:  # no record (a run from before the records): a new leader simulates
            pass
        with self._lock:
            self._recorded[view.key] = (view.uid, generation, pkey)

    def _apply(self, view: TFJobView, run: Any, sha: str, prediction: Mapping[str, Any], prices: Prices,
               limits: Limits) -> None:
        try:
            deadline = job_deadline(self.settings, view, self.clock())
            if deadline is not None and self.refits is not None:  # for what is left, once its progress is read
                deadline = remaining(deadline, self.refits.progress(view))
        except DeadlineOver as exc:  # passed (a Warning event) or its examples trained: the last decision stays
            self._warn_once(view, ("DeadlinePassed", str(exc)) if exc.passed else None)
            if self._keep_last_decision(view):
                return
            deadline = None
        except TFJobError as exc:  # a Warning event, never a failed job; the last good decision stays
            self._warn_once(view, ("InvalidDeadline", str(exc)))
            if self._keep_last_decision(view):
                return
            deadline = None
        try:
            correction = self._correction(view, prediction, limits) if deadline is not None else None
            # a job whose progress is known is running: a move to another W loses what a resize loses
            moving = deadline is not None and deadline.progress is not None
            rec = recommend(prediction, prices, limits, deadline, correction, running=view.workers if moving else None,
                            switch_hours=self.settings.deadline_resize_loss_s / 3600)
        except AdvisorError as exc:  # TFJobError, CostError
            self._fail(view, "NoRecommendation", str(exc))
            return
        if deadline is not None:  # no W meets it with the confidence asked: the likeliest, and a Warning
            at_risk = rec.deadline is not None and not rec.deadline.choice.confident
            self._warn_once(view, ("DeadlineAtRisk", shortfall_message(
                rec.deadline.choice, deadline, (limits.min_workers, limits.max_workers), rec.deadline.plan))
                if at_risk and rec.deadline else None, same=f"W = {rec.target}")
        extra = ann.prediction_annotations(view, prediction, rec, profile_sha=sha,
                                           predicted_at=float(prediction.get("predicted_at", 0)),
                                           profiled_generation=run.generation)
        message = f"recommended {rec.target} workers (saturation at {prediction['saturation_workers']})"
        # cluster mode: the job's share of its pool (allocation.py), written beside the recommendation
        share = self.allocation.observe(view, prediction, prices, limits) if self.allocation is not None else None
        if share is not None:
            extra.update(share.annotations())
        # Resize before annotating: those patches carry the cached resourceVersion (a concurrent
        # edit of the replicas wins), which the annotation patch would make stale.
        if not self._release_if_held(view, clamp(rec.target, limits)):
            self._auto_resize(view, prediction, rec, prices, limits, share)
        # the metrics before the Predicted phase and event: whoever sees those sees the metrics too
        self._export(view, prediction, rec)
        self._set_phase(view, "Predicted", "Predicted", message, extra=extra)
        self._tell_contradiction(view, sha, prediction)

    def _keep_last_decision(self, view: TFJobView) -> bool:
        """Whether the job has a decision to keep (its recommendation, written by an earlier
        prediction); it is then Predicted again (a refit's prediction had made it Predicting)."""
        if view.annotations.get(ann.PHASE) not in ("Predicted", "Predicting") or ann.RECOMMENDATION not in view.annotations:
            return False
        self._set_phase(view, "Predicted", "Predicted", "the last decision stays")
        return True

    def _correction(self, view: TFJobView, prediction: Mapping[str, Any], limits: Limits) -> Correction | None:
        """The one resize a deadline's decision counts on (deadline.py): in ``auto`` mode, for a job
        that can be resized and that the closed loop observes. It comes after the observation or
        the cooldown, whichever is longer; a W the job was observed at is planned alone (the
        refit's points). None: decide alone."""
        s = self.settings
        if not s.deadline_plan_resize or limits.mode is not Mode.AUTO or not view.dynamic_workers \
                or self.refits is None:
            return None
        window = self.refits.window_s(view, str(prediction.get("model", "")), self._event)
        if window is None:
            return None
        return resize_correction(prediction, window, s.auto_cooldown_s, s.deadline_resize_loss_s)

    def _first_time(self, told: set[tuple[str, str]], key: tuple[str, str]) -> bool:
        """Whether ``key`` is new to ``told``, which then holds it: a thing said once per job."""
        with self._lock:
            if key in told:
                return False
            told.add(key)
            return True

    def _tell_contradiction(self, view: TFJobView, sha: str, prediction: Mapping[str, Any]) -> None:
        """A Warning event, once per job and profile, when the prediction's W = 1 contradicted the
        profiling run's own rate (``core/profile_check.py``): a stated input is likely wrong, and
        the prediction was anchored on the profile (``predictions.run_prediction``)."""
        check = prediction.get("profile_check")
        if not isinstance(check, Mapping) or not check.get("contradicts"):
            return
        if not self._first_time(self._contradiction_told, (view.uid, sha)):
            return
        notes = prediction.get("notes")
        self._event(view, "Warning", "ProfileContradicts", next(
            (n for n in (notes if isinstance(notes, list) else ()) if isinstance(n, str) and n.startswith("anchored on")),
            "the predicted W = 1 contradicts the profiling run's own rate: a stated input is likely wrong"))

    def _fail(self, view: TFJobView, reason: str, message: str, extra: Mapping[str, str] | None = None) -> None:
        """Mark the job Failed, and resume it first if the advisor holds it (``initial`` mode).

        Every path that gives up on a job goes through here: a Failed job waits for a new
        generation of its templates, which may never come, and the docs promise the advisor
        never leaves a job held. The release goes first because its patch carries the cached
        resourceVersion, which the phase patch would make stale."""
        self._release_if_held(view)
        if self.allocation is not None:
            self.allocation.forget(view.key)  # a Failed job is not sized by the advisor: it leaves its pool
        self._set_phase(view, "Failed", reason, message, extra=extra)

    def _release_if_held(self, view: TFJobView, workers: int | None = None) -> bool:
        """Resume a job the advisor holds: with ``workers`` (the recommendation) once predicted,
        else with its own replicas unchanged. False when the advisor does not hold it."""
        if view.annotations.get(ann.SUSPENDED_BY_ADVISOR) != "true":
            return False
        if "Worker" not in view.spec_keys:
            workers = None  # a Chief-only job: nothing to resize
        patch = release_patch()
        if workers is not None:
            patch["spec"].update(kind_of_view(view).resize_patch(view, workers)["spec"])
        self._patch(view, patch)
        if workers is not None:
            self.metrics.resizes.labels("initial").inc()
        self._event(view, "Normal", "Resumed", f"set {workers} workers and resumed the job" if workers is not None
                    else f"resumed the job with its own {view.workers} workers")
        return True

    def _auto_resize(self, view: TFJobView, prediction: Mapping[str, Any], rec: Recommendation, prices: Prices,
                     limits: Limits, share: Any = None) -> None:
        """``auto`` mode: to the recommendation when it is cheaper enough per example, or, in cluster
        mode, to the job's share of its pool (``share``, unless it is sized alone)."""
        now = self.clock()
        last, cooldown = self.store.last_resize(view.uid), self.settings.auto_cooldown_s
        if share is not None and not share.per_job:
            target = share.resize_target(view, limits, last_resize=last, now=now, cooldown_s=cooldown)
            why = f"its share of {share.pool}: {share.reason}"
        else:
            target = resize_target(limits, view, rec, prediction, prices, last_resize=last, now=now,
                                   min_gain=self.settings.auto_min_gain, cooldown_s=cooldown)
            why = "predicted cheaper per example"
        if target is None:
            return
        patch = kind_of_view(view).resize_patch(view, clamp(target, limits))
        patch["metadata"] = {"annotations": {ann.LAST_RESIZE: ann.rfc3339(now)}}
        self._patch(view, patch)
        self.store.record_resize(view.uid, target, now)
        self.metrics.resizes.labels("auto").inc()
        self._event(view, "Normal", "Resized", f"workers {view.workers} -> {target} ({why})")

    # --- writing state --------------------------------------------------------------------------

    def _set_phase(self, view: TFJobView, phase: str, reason: str, message: str = "",
                   extra: Mapping[str, str | None] | None = None) -> None:
        """Patch the annotations that changed; an event when the phase or reason changes."""
        desired: dict[str, str | None] = {**ann.status_annotations(view, phase, reason, now=self.clock(),
                                                                   message=message), **(extra or {})}
        patch = ann.annotation_patch(view.annotations, desired)
        if patch is not None:
            self._patch(view, patch)
            new_reason = str(desired[ann.REASON])
            with self._lock:
                written = self._reason_written.get(view.key)
                self._reason_written[view.key] = (view.uid, new_reason)
            if view.annotations.get(ann.REASON) != new_reason and written != (view.uid, new_reason):
                self._event(view, "Warning" if phase == "Failed" else "Normal", reason, message or reason)
        self.metrics.set_phase(view.namespace, view.name, phase)

    def _patch(self, view: TFJobView, patch: Mapping[str, Any]) -> None:
        """Every write to a user's job: a merge patch with a resourceVersion precondition (the
        cached one, or that of this reconcile's previous write), so a change made meanwhile by
        anyone else fails with 409 instead of being overwritten; ``reconcile`` then retries on
        the re-read object with backoff."""
        rv = self._rv.get(view.key) or view.resource_version or None
        answer = verbs_for(self.kube, view.kind).patch(view.namespace, view.name, patch, resource_version=rv)
        new_rv = ((answer or {}).get("metadata") or {}).get("resourceVersion") if isinstance(answer, Mapping) else None
        if new_rv:
            self._rv[view.key] = str(new_rv)

    def _invalid(self, obj: Mapping[str, Any], message: str, reason_code: str = "InvalidSpec") -> None:
        """A job we cannot read or handle: if it opted in, say so on it (once), never crash.

        Only a job that opted in is ours to report, and it is reported once per distinct
        problem (annotation, event and ``reconcile_errors{invalid_object}`` together). Why: any
        other job in a watched namespace, e.g. one of a shape the advisor cannot handle,
        is simply not for us; counting it, or counting a reported one again on every resync,
        kept ``AdvisorReconcileErrors`` firing for good while the controller was fine.
        """
        meta = _mapping_or_empty(obj.get("metadata"))
        notes = _mapping_or_empty(meta.get("annotations"))
        labels = _mapping_or_empty(meta.get("labels"))
        ns, name = meta.get("namespace"), meta.get("name")
        patch_job = verbs_for(self.kube, "PyTorchJob" if obj.get("kind") == "PyTorchJob" else TFJOB).patch
        if notes.get(ann.SUSPENDED_BY_ADVISOR) == "true" and isinstance(ns, str) and isinstance(name, str):
            # held, then edited into a job we cannot read: the advisor will not act on it, so it
            # must not keep holding it (as in _fail)
            rv = meta.get("resourceVersion")
            answer = patch_job(ns, name, release_patch(), resource_version=str(rv) if rv else None)
            meta = {**meta, "resourceVersion": ((answer or {}).get("metadata") or {}).get("resourceVersion", rv)}
            self._emit(obj, "Normal", "Resumed", "resumed the job unchanged: the advisor cannot read it")
        if not opted_in(labels, notes, self.settings.opt_in):
            return
        if not (isinstance(ns, str) and isinstance(name, str)):
            self.metrics.reconcile_errors.labels("invalid_object").inc()
            log.warning("skipping a job without namespace/name: %s", message)
            return
        reason = f"{reason_code}: {message}"[:1024]
        if notes.get(ann.REASON) == reason:
            return
        rv = meta.get("resourceVersion")
        patch_job(ns, name, {"metadata": {"annotations": {ann.PHASE: "Failed", ann.REASON: reason}}},
                  resource_version=str(rv) if rv else None)
        self.metrics.reconcile_errors.labels("invalid_object").inc()
        self.kube.emit_event(obj, "Warning", reason_code, message)
        self.metrics.set_phase(ns, name, "Failed")

    def _warn_once(self, view: TFJobView, warning: tuple[str, str] | None, same: str | None = None) -> None:
        """A Warning event (reason, message) for a condition of the job's own asking (a deadline it
        cannot meet, a deadline annotation that cannot work), once while it lasts; None: it is over.
        It lasts while the reason and ``same`` (else the message) stay: a deadline at risk says so
        again when its likeliest W changes, not each time the hours left do."""
        with self._lock:
            told = self._warned.pop(view.key, None)
            if warning is None:
                return
            self._warned[view.key] = (view.uid, warning[0], warning[1] if same is None else same)
        if told != self._warned[view.key]:
            self._event(view, "Warning", *warning)

    def _event(self, view: TFJobView, type_: str, reason: str, message: str) -> None:
        self._emit({"apiVersion": "kubeflow.org/v1", "kind": view.kind,
                    "metadata": {"name": view.name, "namespace": view.namespace, "uid": view.uid,
                                 "resourceVersion": view.resource_version}}, type_, reason, message)

    def _emit(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self.kube.emit_event(obj, type_, reason, message)
        except KubeError as exc:  # an event is a courtesy: losing one must not fail the reconcile
            meta = obj["metadata"]
            log.info("event %s on %s/%s not recorded: %s", reason, meta.get("namespace"), meta.get("name"), exc)

    def _export(self, view: TFJobView, prediction: Mapping[str, Any], rec: Recommendation) -> None:
        ns, name, m = view.namespace, view.name, self.metrics
        m.recommended_workers.labels(ns, name).set(rec.target)
        m.saturation_workers.labels(ns, name).set(float(prediction["saturation_workers"]))
        current = throughput_at(prediction, view.workers)
        if current is not None:
            m.predicted_current_throughput.labels(ns, name).set(current["value"])
        else:  # the job runs a worker count the curve does not reach: nothing to compare with
            remove_series(m.predicted_current_throughput, ns, name)
        workers = []
        for p in prediction["curve"]:
            w = str(p["workers"])
            workers.append(int(p["workers"]))
            m.predicted_throughput.labels(ns, name, w).set(float(p["throughput"]))
            m.predicted_throughput_bound.labels(ns, name, w, "lower").set(float(p["low"]))
            m.predicted_throughput_bound.labels(ns, name, w, "upper").set(float(p["high"]))
            m.predicted_cost.labels(ns, name, w).set(float(p["cost_per_example"]) * 1e6)
        self._curve_workers[view.key] = tuple(workers)

    def _forget(self, namespace: str, name: str) -> None:
        self.metrics.forget_job(namespace, name, self._curve_workers.pop((namespace, name), ()))
        if self.allocation is not None:
            self.allocation.forget((namespace, name))
        with self._lock:
            self._reason_written.pop((namespace, name), None)
            self._recorded.pop((namespace, name), None)
            self._warned.pop((namespace, name), None)


# What says a run was started for a generation: removed when that run is stopped for good (opt-out).
_RUN_ANNOTATIONS = (ann.PROFILING_RUN, ann.PROFILING_STARTED, ann.PROFILING_ATTEMPTS, ann.PROFILED_GENERATION,
                    ann.TEMPLATE_HASH)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _reason_and_message(run: Any) -> tuple[str, str]:
    """Split a stored ``"Reason: message"`` (as ``_end_run`` writes it) back into its parts."""
    reason, _, message = (run.reason or "").partition(": ")
    return reason or "ProfilingFailed", message.strip()


def _attempts(text: str | None) -> list[dict[str, Any]]:
    """The ended tries as recorded (store or annotation); [] when absent or unreadable."""
    try:
        doc = json.loads(text or "[]")
    except ValueError:
        return []
    return [a for a in doc if isinstance(a, dict)] if isinstance(doc, list) else []


def _last_try(run: Any) -> str:
    ended = _attempts(run.attempts_json)
    return f"try {ended[-1].get('attempt')} ended: {ended[-1].get('reason')}" if ended else ""


def _mapping_or_empty(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
