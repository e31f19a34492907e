"""Running predictions off the watch loop: what to predict, the cache key, and a process pool.

A prediction is a pure function of (profile, request parameters), so its result is stored under
``prediction_key`` = sha256 of both plus the model's version: a controller restart, a resync or
another job with the same profile never recomputes it, and a change of prices, bandwidth or
limits (or of the model) does. ``run_prediction`` is a top-level function so a
``ProcessPoolExecutor`` can ship it to a child process: the simulation is CPU-bound and must
not hold the controller's threads (or its GIL).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from advisor import __version__
from advisor.controller.pipeline.refit_worker import refit_request
from advisor.controller.pipeline.worker_speeds import speeds_and_links
from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.bandwidth import choose_bandwidth
from advisor.core.cost import Prices
from advisor.core.model_error import ModelErrors
from advisor.core.curve import CurveSettings
from advisor.core.profile import parse_profile
from advisor.core.sim_types import NetworkModel
from advisor.errors import AdvisorError

if TYPE_CHECKING:  # the prediction worker imports this module: prometheus_client stays out of it
    from advisor.controller.web.metrics import Metrics

log = logging.getLogger(__name__)


PREDICTION_SCHEMA = "advisor-prediction/1"
LEGACY_SHARE_SIGMA = 1.0  # the contention rules' defaults when parameters were stored without a model name
LEGACY_MULTI_FLOW_GOODPUT = 0.85
PREDICTION_ERROR_SCHEMA = "advisor-prediction-error/1"  # a prediction Job's "cannot predict this", with the reason


class PredictionInputError(AdvisorError, ValueError):
    """A prediction cannot be asked for (e.g. no bandwidth known); the job is marked Failed."""


class PredictionResultError(AdvisorError, ValueError):
    """A prediction answer from outside the controller (a prediction Job) is not one it can use."""


@dataclass(frozen=True, slots=True)
class PredictionParams:
    """Everything besides the profile that a prediction depends on (JSON-able, hashable)."""

    bandwidth_bps: float | None  # None: measured from the profile when predicting (core/bandwidth.py)
    max_workers: int
    target_rel_halfwidth: float
    seed: int
    worker_price: float
    ps_price: float
    saturation_threshold: float
    # The contention rules of parameters stored before models had names; defaults so that they still read.
    equal_shares: bool = False
    congestion_control: str = "unknown"
    queue_s: float | None = None
    share_sigma: float = LEGACY_SHARE_SIGMA
    multi_flow_goodput: float = LEGACY_MULTI_FLOW_GOODPUT
    bandwidth_source: str = "given"  # given (the controller's setting), recorded (with the profile), measured
    model: str = ""  # the model's registry name; "" in parameters stored before (the fields above say which)
    model_params: str = "{}"  # its parameters, as canonical JSON (sorted keys)
    # The observed points to calibrate the model to first (controller/pipeline/refit.py), with the
    # update rule, as canonical JSON; "" for a prediction from the profile alone (then not in the key).
    refit: str = ""
    # Where the job's workers run (setting node_speeds; controller/pipeline/worker_speeds.py): the
    # placement document as canonical JSON; "" when off (and then left out of the key).
    worker_speeds: str = ""
    # Why the model is not the settings' (a synchronous profile's default, policy.model_note): a note
    # of the prediction; "" when it is (and then left out of the key).
    model_note: str = ""

    def choice(self) -> ModelChoice:
        """The model and its parameters (older stored parameters: the PS simulation they meant)."""
        if self.model:
            return ModelChoice(self.model, json.loads(self.model_params))
        if self.equal_shares:
            return ModelChoice("li2020-des")
        return ModelChoice("li2020-des+contention", {
            "congestion_control": self.congestion_control, "queue_s": self.queue_s,
            "share_sigma": self.share_sigma, "multi_flow_goodput": self.multi_flow_goodput})

    def as_dict(self) -> dict[str, Any]:
        """The fields; ``refit``, ``worker_speeds`` and ``model_note`` only when set, so the keys of
        predictions from before them stay the same."""
        return {k: getattr(self, k) for k in self.__slots__
                if k not in ("refit", "worker_speeds", "model_note") or getattr(self, k)}


def prediction_params(
    recorded_bandwidth_bps: float | None, prices: Prices, *, bandwidth_bps: float | None, max_workers: int,
    target: float, seed: int, saturation_threshold: float, model: ModelChoice = ModelChoice(),
    measure: bool = False,
) -> PredictionParams:
    """The parameters of a job's prediction. The bandwidth is the controller's setting, else the
    one recorded with the profile, else (or with ``measure``) measured from the profile's own
    transfer times by the prediction (``advisor.core.bandwidth``)."""
    bandwidth, source = choose_bandwidth(bandwidth_bps, recorded_bandwidth_bps, measure=measure)
    common = (None if bandwidth is None else float(bandwidth), max_workers, target, seed, prices.worker_per_hour,
              prices.ps_per_hour, saturation_threshold)
    _, checked = model.resolve()  # ModelInputError (a job-level failure) for an unknown model or bad parameter
    return PredictionParams(*common, bandwidth_source=source, model=model.name,
                            model_params=json.dumps(checked.model_dump(mode="json"), sort_keys=True))


def prediction_key(profile_sha: str, params: PredictionParams) -> str:
    doc = {"profile": profile_sha, "params": params.as_dict(), "model": params.choice().name,
           "version": __version__}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def build_request(params: PredictionParams, bandwidth_bps: float | None = None) -> AdviceRequest:
    """The predictor's request; ``bandwidth_bps`` stands in for a bandwidth the params leave to measure."""
    bandwidth = params.bandwidth_bps or bandwidth_bps
    if bandwidth is None:
        raise PredictionInputError("no bandwidth: measure it from the profile first (core/bandwidth.py)")
    speeds, links = speeds_and_links(json.loads(params.worker_speeds)) if params.worker_speeds else ((), ())
    return AdviceRequest(
        worker_speeds=speeds,
        worker_bandwidths_bps=links,
        network=NetworkModel(bandwidth_bps=bandwidth),
        curve=CurveSettings(workers=tuple(range(1, params.max_workers + 1)), seed=params.seed,
                            target_rel_halfwidth=params.target_rel_halfwidth),
        prices=Prices(params.worker_price, params.ps_price),
        saturation_threshold=params.saturation_threshold,
        model=params.choice(),
        model_error=_model_error(),
    )


def _model_error() -> ModelErrors:
    """The shipped model-error data, one per measured model (core/model_error.py): the
    controller's intervals and deadline decisions include the predicting model's measured error,
    as the CLI's do."""
    from advisor.importers.model_error_file import load_model_errors  # in the prediction worker only

    return load_model_errors(None)


def run_prediction(profile_doc: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """Predict and return the ``advisor-prediction/1`` JSON text (runs in a worker process)."""
    from advisor.controller.web.memory import release_free_heap, release_library_pages
    from advisor.core.bandwidth import bandwidth_note, estimate_bandwidth
    from advisor.core.online_calibration import calibratable, profile_anchored
    from advisor.core.profile_check import anchored_note
    from advisor.report import advice_to_json

    profile = parse_profile(profile_doc)
    p = PredictionParams(**params)
    measured = None if p.bandwidth_bps is not None else estimate_bandwidth(profile)  # BandwidthNotMeasurable: failed
    request = build_request(p, measured.bps if measured else None)
    assert measured is None or measured.goodput == request.goodput, "measured and replayed at the same goodput"
    refit = None
    if p.refit:  # calibrate the job's model to its observed points first (the closed loop)
        digest = hashlib.sha256(json.dumps(profile_doc, sort_keys=True).encode()).hexdigest()
        request, refit = refit_request(profile, request, p.refit, cache_key=digest)
    advice = advise(profile, request)  # the model loads its engine (numba) here, in the child
    check, anchored = advice.profile_check, None
    if refit is None and check is not None and check.contradicts and calibratable(request.model.name):
        # the profile contradicts a stated input (core/profile_check.py): its own rate is the first observation
        request = profile_anchored(profile, request, check)
        advice, anchored = replace(advise(profile, request), profile_check=check), anchored_note(check)
    doc = advice_to_json(profile, request, advice, bandwidth_source=p.bandwidth_source)
    if anchored is not None:
        doc["notes"].append(anchored)
    if refit is not None:
        doc["refit"] = refit
    if p.worker_speeds:  # what the curve was predicted with: the job's annotation says it
        doc["worker_speeds"] = json.loads(p.worker_speeds)
    if measured is not None:
        doc["notes"].append(bandwidth_note(measured))
    if p.model_note:  # the profile's regime chose the model (policy.model_note)
        doc["notes"].append(p.model_note)
    text = json.dumps(doc, separators=(",", ":"))
    del advice, doc, profile
    release_free_heap()  # the worker lives on between predictions: give back what this one freed,
    release_library_pages()  # and the LLVM code only numba's start-up ran (controller/web/memory.py)
    return text


def validate_prediction(doc: Mapping[str, Any], max_workers: int) -> None:
    """Check an ``advisor-prediction/1`` document has every field the controller reads, for
    W = 1..``max_workers``; ``PredictionResultError`` names the first that is not right. A
    prediction Job's answer passes here before it is stored, so a broken or forged one is
    refused at the door rather than failing a reconcile later."""
    if doc.get("schema") != PREDICTION_SCHEMA:
        raise PredictionResultError(f"schema must be {PREDICTION_SCHEMA!r}, not {doc.get('schema')!r}")
    if not isinstance(doc.get("model"), str):
        raise PredictionResultError("model must be a string")
    job = doc.get("job")
    ps = job.get("parameter_servers") if isinstance(job, Mapping) else None
    if not (_count(ps) or (ps == 0 and type(ps) is int)):  # 0: an all-reduce job (no PS)
        raise PredictionResultError("job.parameter_servers must be an integer >= 0")
    if not _count(doc.get("saturation_workers")):
        raise PredictionResultError("saturation_workers must be a positive integer")
    curve = doc.get("curve")
    if not isinstance(curve, list) or [p.get("workers") if isinstance(p, Mapping) else None for p in curve] != list(
            range(1, max_workers + 1)):
        raise PredictionResultError(f"curve must hold one point for each W = 1..{max_workers}, in order")
    for point in curve:
        for name in ("throughput", "low", "high", "cost_per_example"):
            value = point.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise PredictionResultError(f"curve point W={point['workers']}: {name} must be a non-negative number")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


Done = Callable[[str, str | None, str | None], None]  # (key, result JSON or None, error message or None)


@dataclass(slots=True)
class _Run:
    """One prediction from ``submit`` until it is reported (across the attempts a dying worker costs)."""

    key: str
    profile: dict[str, Any]
    params: dict[str, Any]
    started: float  # monotonic, of the first attempt
    crashed: bool = False  # a worker died while it was in the pool: this is its second (and last) attempt


class ProcessPredictor:
    """At most one run per key at a time, in a pool of ``processes`` worker processes.

    A worker that dies (OOM-killed, a crash in native code) breaks the whole
    ``ProcessPoolExecutor``: every prediction in it fails with ``BrokenProcessPool`` and so would
    every later submit. So a broken pool is replaced by a fresh one, and each prediction that was
    in it runs once more instead of being reported failed (the reconciler keeps a failed
    prediction Failed until the controller restarts). Those second attempts run one at a time,
    new predictions waiting behind them: a worker that dies then was killed by the one
    prediction in it, which is reported failed with how the worker died, while the others
    complete. No prediction is retried forever. A pool that cannot even be started shows on
    ``health`` (``/healthz``), so the kubelet restarts the controller.
    """

    backend = "process"

    def __init__(self, processes: int, metrics: Metrics, on_done: Done,
                 runner: Callable[[Mapping[str, Any], Mapping[str, Any]], str] = run_prediction) -> None:
        self._processes = processes
        self._metrics = metrics
        self._on_done = on_done
        self._runner = runner
        self._lock = threading.Lock()
        self._pool = self._new_pool()
        self._runs: dict[str, _Run] = {}  # every prediction not yet reported
        self._queue: deque[_Run] = deque()  # not in the pool yet (only while second attempts are pending)
        self._in_pool: set[str] = set()  # keys with an attempt in the pool
        self._pool_error: str | None = None  # why the last start failed, for /healthz
        self._closed = False

    def submit(self, key: str, profile_doc: Mapping[str, Any], params: PredictionParams) -> bool:
        """Start predicting ``key`` unless it is already running; True when started."""
        with self._lock:
            if key in self._runs:
                return False
            self._runs[key] = run = _Run(key, dict(profile_doc), params.as_dict(), time.monotonic())
            self._queue.append(run)
            self._dispatch()
        return True

    def running(self, key: str) -> bool:
        with self._lock:
            return key in self._runs

    def health(self) -> tuple[bool, str]:
        """Unhealthy while no worker process can be started: only a restart can help then."""
        error = self._pool_error
        return (False, f"prediction workers cannot start: {error}") if error else (True, "ok")

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- internals (``_dispatch``, ``_start``, ``_replace_pool``: under the lock) ------------------
    def _new_pool(self) -> ProcessPoolExecutor:
        # "spawn", not the default "fork": forking a process that runs threads (watch, HTTP, leader)
        # can copy a held lock into the child, and would hand it the listening sockets too.
        return ProcessPoolExecutor(max_workers=self._processes, mp_context=multiprocessing.get_context("spawn"))

    def _dispatch(self) -> None:
        """Start queued runs: all of them, or one at a time while any second attempt is unfinished."""
        while self._queue and not self._closed:
            careful = any(r.crashed for r in self._runs.values())
            if careful and self._in_pool:
                return
            self._start(self._queue.popleft())

    def _start(self, run: _Run) -> None:
        pool = self._pool
        try:
            try:
                future = pool.submit(self._runner, run.profile, run.params)
            except BrokenProcessPool:  # a worker died while the pool was idle
                log.warning("the prediction worker process died (%s) while idle; starting a new one",
                            _worker_death(_workers(pool), wait_s=0))  # under the lock: no waiting
                pool = self._replace_pool(pool)
                future = pool.submit(self._runner, run.profile, run.params)
        except Exception as exc:  # e.g. OSError: no process can be started (too many open files, no memory)
            log.exception("prediction %s: cannot start a worker process", run.key)
            self._pool_error = f"{type(exc).__name__}: {exc}"
            self._report_later(run, f"prediction not started: {self._pool_error}")
            return
        self._pool_error = None
        self._in_pool.add(run.key)
        future.add_done_callback(lambda f: self._on_future_done(run, f, pool))

    def _replace_pool(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        if self._pool is broken and not self._closed:
            self._pool = self._new_pool()
            broken.shutdown(wait=False)  # it has stopped its workers already; this drops its threads' references
        return self._pool

    def _on_future_done(self, run: _Run, future: Future[str], pool: ProcessPoolExecutor) -> None:
        """Runs on the executor's thread (on Python 3.12+ under its lock, which ``_start`` may wait
        for while holding ours), so it only notes the pool's workers (a broken pool forgets them
        once shut down) and hands over to a thread of our own."""
        broken = not future.cancelled() and isinstance(future.exception(), BrokenProcessPool)
        workers = _workers(pool) if broken else []
        threading.Thread(target=self._finished, args=(run, future, pool, broken, workers), daemon=True,
                         name=f"prediction-{run.key[:8]}").start()

    def _finished(self, run: _Run, future: Future[str], pool: ProcessPoolExecutor, broken: bool,
                  workers: list[Any]) -> None:
        death = _worker_death(workers) if broken else ""
        with self._lock:
            self._in_pool.discard(run.key)
            if broken:
                self._replace_pool(pool)
            retry = broken and not run.crashed and not self._closed
            if retry:
                log.warning("prediction %s: the prediction worker process died (%s); retrying", run.key, death)
                self._metrics.predictions.labels("retried").inc()
                run.crashed = True
                self._queue.appendleft(run)
            self._dispatch()
        if retry:
            return
        self._metrics.prediction_duration.labels(self.backend).observe(time.monotonic() - run.started)
        try:
            result, error = future.result(), None
            self._metrics.predictions.labels("succeeded").inc()
        except BrokenProcessPool:  # the second death (or one while stopping): this profile kills the worker
            result, error = None, (f"the prediction worker process died ({death}) twice, the second time running "
                                   "this prediction alone (out of memory?); the next start of the controller tries "
                                   "once more")
            log.error("prediction %s: %s", run.key, error)
            self._metrics.predictions.labels("failed").inc()
        except AdvisorError as exc:  # the profile or parameters cannot be predicted: a job-level failure
            result, error = None, str(exc)
            self._metrics.predictions.labels("failed").inc()
        except Exception as exc:  # a bug in the prediction: report it on the job
            log.exception("prediction %s crashed", run.key)
            result, error = None, f"prediction crashed: {type(exc).__name__}: {exc}"
            self._metrics.predictions.labels("failed").inc()
        self._report(run, result, error)

    def _report(self, run: _Run, result: str | None, error: str | None) -> None:
        """Hand the outcome over, then forget the run. In that order: until the outcome is
        stored (``_on_done``) the key stays running, so a reconcile of a job waiting for it finds
        it either running or stored, and never starts the same prediction again."""
        try:
            self._on_done(run.key, result, error)
        finally:
            with self._lock:
                if self._runs.get(run.key) is run:
                    del self._runs[run.key]
                self._dispatch()

    def _report_later(self, run: _Run, error: str) -> None:
        """Report a run that could not start, off the caller's thread (which holds the lock)."""
        self._metrics.predictions.labels("failed").inc()
        threading.Thread(target=self._report, args=(run, None, error), daemon=True,
                         name=f"prediction-{run.key[:8]}").start()


def _workers(pool: ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes, to tell how one died (the executor does not say): CPython
    keeps them in the private ``_processes``; nothing, should that change."""
    processes = getattr(pool, "_processes", None)
    return list(processes.values()) if isinstance(processes, dict) else []


def _worker_death(workers: list[Any], wait_s: float = 5.0) -> str:
    """How the dead one of a broken pool's ``workers`` ended: "killed by SIGKILL", "exit code 1",
    or "exit status unknown". Waits up to ``wait_s`` for the exit codes: the pool sees a worker's
    end (its pipe closing) a moment before the system has its status. The pool terminates the
    other workers itself (SIGTERM), so a code other than that names the one that died first."""
    deadline = time.monotonic() + wait_s
    while True:
        codes = [w.exitcode for w in workers]  # None: still running (or not yet reaped); 0: a clean exit
        code = next((c for c in codes if c and c != -signal.SIGTERM), None)
        if code is not None or None not in codes or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    code = code or next((c for c in codes if c), None)
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
