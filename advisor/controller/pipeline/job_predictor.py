"""Predictions as Kubernetes Jobs (``prediction_backend: job``): the cluster carries the load.

Same interface as ``ProcessPredictor``: ``submit`` starts a prediction unless it already runs,
and ``on_done(key, result, error)`` is called once it ends. Each attempt is a batch/v1 Job in
the controller's namespace (``prediction_job.build_prediction_job``) running
``advisor predict-job``, which fetches the profile and parameters from the controller's HTTP
endpoint and sends the ``advisor-prediction/1`` answer back, both with a bearer token of its own.

Why over HTTP and not, say, the pod's log: the answer is validated and stored the moment it
arrives, needs no rights to read pods' logs, and the same endpoint serves the input, so the
input never sits in an object (ConfigMap size limits, who can read it).

Durability: the store records every attempt (name, token, input, answer). After a restart the
reconciler submits again; an attempt still running is adopted (the Job's create answers 409),
an answer that arrived while nobody waited is delivered from the store, and only a finished
attempt without an answer starts a new one. A replica whose store knows no running attempt (a
new leader with a store of its own) looks in the cluster first: a Job of this controller for
the key that still runs within its deadline is adopted (``prediction_job.adoptable``), its token
derived again from the controller's key, so the prediction is neither run twice nor answered by
two writers; only a failed, finished or overdue one is replaced, by the next free attempt
number. A request for an attempt this replica does not know (a standby, or a new leader before
it adopted) is answered 503, which the pod retries until the Service reaches the replica that does. Two paths can end an attempt, the answer and the
Job's status; the store lets exactly one of them do it. A replica that has just recorded a new
attempt and finds its Job's name taken joins that Job when it was made for the same record (a new
leader adopted the attempt while this one's create was on its way); only a Job made for another
record (a lost store's) makes it skip to the next attempt.

Job status is polled, one label-selected list of Jobs and of pods per ``poll_s``, only while
this replica tracks a running attempt: failures then show within seconds, while the answer
itself arrives at once over HTTP.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor.controller.web.http_api import IngestResult
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.prediction_job import (
    ATTEMPT_ANNOTATION, JOB_LABEL, KEY_LABEL, ROLE, TOKEN_KEY, PredictionJobSpec, adoptable, assess,
    build_prediction_job, build_token_secret, prediction_job_name,
)
from advisor.controller.pipeline.predictions import (
    PREDICTION_ERROR_SCHEMA, Done, PredictionParams, PredictionResultError, validate_prediction,
)
from advisor.controller.state.store import PredictionJobRecord
from advisor.controller.state.tokens import prediction_token
from advisor.controller.jobs.tfjob import ROLE_LABEL
from advisor.errors import KubeAlreadyExists, KubeError, KubeNotFound, StoreError

log = logging.getLogger(__name__)
SELECTOR = f"{ROLE_LABEL}={ROLE}"
_ERROR_LIMIT = 2000  # characters of a reported prediction error kept


@dataclass
class _Tracked:
    attempt: int
    job_name: str
    since: float  # clock time this replica knew the Job exists: a list made later must show it
    note: str = ""  # the latest pod trouble seen, quoted if the Job fails after its pods are gone


class JobPredictor:
    """One Kubernetes Job per prediction; answers come back through the HTTP API."""

    backend = "job"

    def __init__(self, *, kube: Any, store: Any, metrics: Metrics, on_done: Done, spec: PredictionJobSpec,
                 start_timeout_s: float, clock: Callable[[], float] = time.time, poll_s: float = 5.0,
                 token_key: bytes | None = None) -> None:
        """``token_key``: the controller's key, the same on every replica (the ingest key), that
        Jobs' tokens are derived from; None: a random one (one replica, tests)."""
        self._kube, self._store, self._metrics, self._on_done = kube, store, metrics, on_done
        self._token_key = token_key or secrets.token_bytes(32)
        self.spec = spec
        self._start_timeout_s, self._clock, self._poll_s = start_timeout_s, clock, poll_s
        self._lock = threading.Lock()
        self._tracked: dict[str, _Tracked] = {}
        self._launching: set[str] = set()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # --- the Predictor interface --------------------------------------------------------------

    def submit(self, key: str, profile_doc: Mapping[str, Any], params: PredictionParams) -> bool:
        """Start (or adopt) the Job for ``key`` unless this replica already tracks it; True when
        it does now. API errors propagate (the reconcile retries; every step is idempotent)."""
        with self._lock:
            if key in self._tracked or key in self._launching or self._stop.is_set():
                return False
            self._launching.add(key)
        tracked = None
        try:
            row = self._store.prediction_job(key)
            if row is not None and row.state == "succeeded" and row.result_json is not None:
                self._on_done(key, row.result_json, None)  # answered while nobody waited (a restart)
                return False
            tracked = self._launch(key, row, profile_doc, params)
        finally:
            with self._lock:
                self._launching.discard(key)
                if tracked is not None:
                    self._tracked[key] = tracked
        self._ensure_polling()
        return True

    def running(self, key: str) -> bool:
        with self._lock:
            return key in self._tracked or key in self._launching

    def tracked_jobs(self) -> set[str]:
        """Names of the Jobs this replica waits for (garbage collection leaves them alone)."""
        with self._lock:
            return {t.job_name for t in self._tracked.values()}

    def shutdown(self) -> None:
        """Stop watching; the Jobs go on in the cluster and a restarted controller adopts them."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=10)

    # --- the HTTP endpoints (advisor.controller.web.http_api.PredictionEndpoints) ------------------

    def verify_prediction_token(self, key: str, token: str) -> bool | None:
        """True: the token of the attempt at ``key`` running here. False: refused for good (a
        forged token, or the token of an attempt that ended here). None: the token of a live Job
        of this controller that this replica does not track (yet): a standby, or a leader that has
        not adopted it; the pod retries (503) until it reaches the replica that does."""
        if self._store.verify_prediction_token(key, token):
            return True
        row = self._store.prediction_job(key)
        if row is not None and (row.state == "running"
                                or token == prediction_token(self._token_key, key, _attempt_id(row))):
            return False
        return None if self._token_of_a_live_job(key, token) else False

    def _token_of_a_live_job(self, key: str, token: str) -> bool:
        """Whether ``token`` is that of a Job of this controller for ``key`` still running: one
        list, only for a key this store does not run (an API error counts as yes: retried)."""
        try:
            jobs = self._kube.list_jobs(self.spec.namespace, f"{SELECTOR},{KEY_LABEL}={key}")
        except KubeError as exc:
            log.warning("prediction %s: cannot list its Jobs to check a token: %s", key, exc)
            return True
        live = adoptable(jobs, key, owner=self.spec.owner, now=self._clock()).job
        attempt_id = ((live or {}).get("metadata") or {}).get("annotations", {}).get(ATTEMPT_ANNOTATION)
        return bool(attempt_id) and secrets.compare_digest(
            prediction_token(self._token_key, key, str(attempt_id)).encode(), token.encode())

    def prediction_input(self, key: str) -> IngestResult:
        found = self._store.prediction_job_input(key)
        if found is None:
            return IngestResult.message(404, f"no running prediction {key}")
        profile_json, params_json = found
        return IngestResult(200, {"key": key, "params": json.loads(params_json), "profile": json.loads(profile_json)})

    def accept_prediction_result(self, key: str, document: dict[str, Any]) -> IngestResult:
        """Store a Job's answer (a prediction, or the reason it cannot predict) and deliver it."""
        row = self._store.prediction_job(key)
        if row is None or row.state != "running":
            return IngestResult.message(409, f"prediction {key} is not running; its answer is no longer taken")
        if document.get("schema") == PREDICTION_ERROR_SCHEMA:
            error = str(document.get("error") or "no reason given")[:_ERROR_LIMIT]
            self._finish(row, None, f"prediction Job {row.job_name}: {error}")
            return IngestResult(202, {"outcome": "failed"})
        try:
            validate_prediction(document, int(json.loads(row.params_json)["max_workers"]))
        except PredictionResultError as exc:
            log.warning("prediction Job %s sent an unusable answer: %s", row.job_name, exc)
            return IngestResult.message(400, f"not a usable prediction: {exc}")
        self._finish(row, json.dumps(document, separators=(",", ":")), None)
        return IngestResult(202, {"outcome": "stored"})

    # --- launching ----------------------------------------------------------------------------

    def _launch(self, key: str, row: PredictionJobRecord | None, profile_doc: Mapping[str, Any],
                params: PredictionParams) -> _Tracked:
        if row is not None and row.state == "running":  # started before a restart: adopt its Job
            self._ensure_job(row, adopt=True)
            log.info("prediction %s: adopted Job %s", key, row.job_name)
            return _Tracked(row.attempt, row.job_name, self._clock())
        profile_json, params_json = json.dumps(profile_doc, separators=(",", ":")), json.dumps(params.as_dict())
        found = adoptable(self._kube.list_jobs(self.spec.namespace, f"{SELECTOR},{KEY_LABEL}={key}"), key,
                          owner=self.spec.owner, now=self._clock())
        if found.job is not None:  # started by another replica (a leader that is gone): adopt it
            adopted = self._adopt(key, found.job, profile_json, params_json)
            if adopted is not None:
                return adopted
        attempt = max(row.attempt if row is not None else 0, found.highest_attempt) + 1
        for _ in range(3):
            now = self._clock()
            fresh = self._store.start_prediction_job(key, attempt, prediction_job_name(key, attempt), profile_json,
                                                     params_json, now, token=self._token(key, now))
            if fresh is None:  # only the leader submits, one launch per key at a time: not expected
                raise StoreError(f"prediction {key}: attempt {attempt} was started by someone else")
            if self._ensure_job(fresh, adopt=False):
                log.info("prediction %s: started Job %s", key, fresh.job_name)
                return _Tracked(fresh.attempt, fresh.job_name, self._clock())
            # The name is taken by a Job the store does not know (the store was lost): its pod
            # holds another token. Skip to the next name; garbage collection deletes that Job.
            self._store.finish_prediction_job(key, attempt, "failed", None,
                                              f"Job {fresh.job_name} existed already, unknown to the store",
                                              self._clock())
            attempt += 1
        raise StoreError(f"prediction {key}: Jobs up to attempt {attempt - 1} exist but the store knows none")

    def _adopt(self, key: str, job: Mapping[str, Any], profile_json: str, params_json: str) -> _Tracked | None:
        """Record the running attempt ``job`` (another replica's) as this store's and track it;
        None when the store refuses (it knows a later attempt)."""
        meta = job["metadata"]
        try:
            started = float(meta["annotations"][ATTEMPT_ANNOTATION])
        except ValueError:  # not an attempt this code wrote: replaced, not adopted
            return None
        attempt = int(str(meta["name"]).rsplit("-", 1)[1])
        row = self._store.start_prediction_job(key, attempt, str(meta["name"]), profile_json, params_json,
                                               self._clock(), token=self._token(key, started), started=started)
        if row is None:
            return None
        self._ensure_job(row, adopt=True)  # its token Secret, should the old leader have died before making it
        log.info("prediction %s: adopted Job %s from the cluster (started by another replica)", key, row.job_name)
        return _Tracked(row.attempt, row.job_name, self._clock())

    def _token(self, key: str, started: float) -> str:
        return prediction_token(self._token_key, key, _attempt_id_of(started))

    def _ensure_job(self, row: PredictionJobRecord, *, adopt: bool) -> bool:
        """Create the Job and its token Secret. An existing Job is adopted when ``adopt`` or when
        it was made for this very record (by another replica); else False is returned (it is not
        this attempt's: its pod holds another token)."""
        attempt_id = _attempt_id(row)
        body = build_prediction_job(row.key, row.attempt, self.spec, attempt_id=attempt_id)
        try:
            job = self._kube.create_job(self.spec.namespace, body)
        except KubeAlreadyExists:
            job = self._kube.get_job(self.spec.namespace, row.job_name)
            made_for = ((job.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION)
            if not adopt and made_for != attempt_id:
                return False
        try:
            self._kube.create_secret(self.spec.namespace, build_token_secret(job),
                                     {TOKEN_KEY: (row.token or "").encode()})
        except KubeAlreadyExists:
            pass
        return True

    # --- ending ---------------------------------------------------------------------------------

    def _finish(self, row: PredictionJobRecord, result: str | None, error: str | None) -> None:
        """End ``row``'s attempt (once, whoever gets there first) and deliver what the store holds."""
        now = self._clock()
        ended = self._store.finish_prediction_job(row.key, row.attempt, "succeeded" if result is not None else "failed",
                                                  result, error or "", now)
        if ended:
            self._metrics.prediction_duration.labels(self.backend).observe(max(0.0, now - row.started))
            self._metrics.predictions.labels("succeeded" if result is not None else "failed").inc()
            if error:
                log.warning("prediction %s failed: %s", row.key, error)
        with self._lock:
            tracked = self._tracked.get(row.key)
            if tracked is None or tracked.attempt != row.attempt:
                return  # nobody here waits for it: a later submit delivers it from the store
            del self._tracked[row.key]
        final = self._store.prediction_job(row.key)
        if final is None or final.state == "running":
            self._on_done(row.key, None, f"prediction Job {row.job_name} ended without a recorded outcome")
        elif final.state == "succeeded":
            self._on_done(row.key, final.result_json, None)
        else:
            self._on_done(row.key, None, final.reason or f"prediction Job {row.job_name} failed")

    # --- watching -------------------------------------------------------------------------------

    def _ensure_polling(self) -> None:
        with self._lock:  # (re)started on demand: a poller that died of a bug comes back with the next submit
            if (self._poller is None or not self._poller.is_alive()) and not self._stop.is_set():
                self._poller = threading.Thread(target=self._poll_loop, name="prediction-jobs", daemon=True)
                self._poller.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.poll()
            except (KubeError, StoreError) as exc:  # looked at again next time
                log.warning("prediction Jobs not checked: %s", exc)

    def poll(self) -> None:
        """One look at the tracked Jobs: end the attempts whose Job failed or vanished."""
        with self._lock:
            tracked = dict(self._tracked)
        if not tracked:
            return
        now = self._clock()
        jobs = {j["metadata"]["name"]: j for j in self._kube.list_jobs(self.spec.namespace, SELECTOR)}
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in self._kube.list_pods(self.spec.namespace, SELECTOR):
            pods.setdefault(((pod.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL, ""), []).append(pod)
        for key, t in tracked.items():
            verdict = assess(jobs.get(t.job_name), pods.get(t.job_name, []), name=t.job_name, now=now,
                             known_since=t.since, start_timeout_s=self._start_timeout_s)
            if verdict.note:
                t.note = verdict.note
            if verdict.failure is None:
                continue
            if verdict.delete:
                self._delete(t.job_name)
            failure = verdict.failure if verdict.note or not t.note else f"{verdict.failure}; last seen: {t.note}"
            row = self._store.prediction_job(key)
            if row is not None and row.attempt == t.attempt:
                self._finish(row, None, failure)

    def _delete(self, job_name: str) -> None:
        try:
            self._kube.delete_job(self.spec.namespace, job_name)
        except KubeNotFound:
            pass
        except KubeError as exc:  # garbage collection deletes it later
            log.warning("prediction Job %s not deleted: %s", job_name, exc)


def _attempt_id(row: PredictionJobRecord) -> str:
    """Names the store's record of an attempt: its start time, the same for every replica that
    reads the record, and another for a record made again after the store was lost."""
    return _attempt_id_of(row.started)


def _attempt_id_of(started: float) -> str:
    return f"{started:.6f}"
