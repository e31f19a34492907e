"""The closed loop: a running job's observed throughput updates its model's calibration and its
curve, and the job is decided again.

Why: a prediction from a one-worker profile rests on values a profile cannot reveal (each model
declares them: ``ThroughputModel.calibration``). Once a job has trained at some worker count W
for ``refit_min_observation_s``, its examples/s (the training pods' counters, read from
Prometheus by ``observed.py``) say what they are. Each observation at a W not yet observed, and
any later one that differs from the curve by more than ``refit_tolerance``, joins the job's
observed points; the job is then predicted again from the points (``refit_worker.py`` calls
``core/online_calibration.py``: the calibration values updated, the curve conditioned on the
points by ``refit_rule``), and the reconcile applies the new curve as it applies a first
prediction (annotations with ``curve-source: refit`` and the points used, the recommendation,
and in ``auto`` mode a resize within policy, with its hysteresis: ``policy.resize_target``).

How it rides on the prediction path, not beside it: ``Refitter.params`` is called by the
reconcile with the job's prediction parameters and returns them with the observed points added
(``PredictionParams.refit``). So a refit is an ordinary prediction with its own key: it runs off
the watch loop in the same worker process (or prediction Job: ``refit_worker.refit_request``
runs there, first), is stored, survives restarts, and is applied by the same code. The points
are kept in the job's ``refit`` annotation too, so a restarted or new leader predicts with them
again.

Never worse than no refit: a setting that cannot work gives a Warning event on the jobs and the
previous behaviour (no refit); Prometheus unreachable or without data is evented and asked again
after ``refit_interval_s``; a window in which a pod's counter went back (a restarted pod) or a
pod's series is missing is not used (a Warning event says which, and the last decision stays);
a refit whose prediction fails falls back to the curve before it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from advisor.controller.pipeline import annotations as ann
from advisor.controller.jobs.tfjob import parse_rfc3339
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.deadline import DEADLINE, DECISION, Progress
from advisor.controller.pipeline.observed import ObservedPoint, ObservedQueryError, PrometheusClient, observe, trained
from advisor.controller.pipeline.policy import throughput_at
from advisor.controller.pipeline.predictions import PredictionParams, prediction_key
from advisor.controller.pipeline.refit_worker import read_points
from advisor.controller.settings import ControllerSettings, SettingsError
from advisor.core.online_calibration import MISSTATED, Rule, calibratable
from advisor.core.units import UnitError, parse_duration

log = logging.getLogger(__name__)
MAX_POINTS = 8  # worker counts a job's refit remembers (the latest observation of each)
FORGET_AFTER_S = 7 * 24 * 3600.0  # a job not reconciled for this long (gone) is forgotten


class RefitSettingsError(SettingsError):
    """A refit setting cannot work; refit stays off (the controller runs on)."""


@dataclass(frozen=True, slots=True)
class RefitConfig:
    prometheus_url: str
    min_observation_s: float
    interval_s: float
    tolerance: float
    query_timeout_s: float
    noise: float = 0.03  # relative noise of one observation
    rule: Rule = Rule.POSTERIOR
    misstated: float = MISSTATED  # the posterior's prior probability of wrong stated values


def refit_config(settings: ControllerSettings) -> RefitConfig | None:
    """The refit settings checked; None when refit is off. ``RefitSettingsError`` names the first
    one that cannot work."""
    if not settings.refit_enabled:
        return None
    url = settings.refit_prometheus_url.strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RefitSettingsError(f"refit_prometheus_url {url!r} is not an http(s) URL of Prometheus, e.g. "
                                 "http://prometheus-operated.monitoring.svc:9090")
    if settings.refit_rule not in {r.value for r in Rule}:
        raise RefitSettingsError(f"refit_rule must be one of {', '.join(r.value for r in Rule)}, "
                                 f"got {settings.refit_rule!r}")
    return RefitConfig(url, _seconds(settings.refit_min_observation_s, "refit_min_observation_s", least=1.0),
                       _seconds(settings.refit_interval_s, "refit_interval_s", least=1.0),
                       _fraction(settings.refit_tolerance, "refit_tolerance"),
                       _seconds(settings.refit_query_timeout_s, "refit_query_timeout_s", least=0.001),
                       _fraction(settings.refit_observation_noise, "refit_observation_noise"), Rule(settings.refit_rule),
                       _probability(settings.refit_misstated, "refit_misstated"))


def _seconds(value: float | str, name: str, *, least: float) -> float:
    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except UnitError as exc:
        raise RefitSettingsError(f"{name}: {exc}") from None
    if not (math.isfinite(seconds) and seconds >= least):
        raise RefitSettingsError(f"{name} must be a duration of at least {least:g} s, got {value!r}")
    return seconds


def _fraction(value: float | str, name: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise RefitSettingsError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(x) and 0 <= x < 1):
        raise RefitSettingsError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return x


def _probability(value: float | str, name: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise RefitSettingsError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(x) and 0 < x <= 1):
        raise RefitSettingsError(f"{name} must be a probability in (0, 1], got {value!r}")
    return x


# --- the points, as the prediction parameters and the annotation carry them --------------------------


def point_doc(point: ObservedPoint, predicted: float, noise: float) -> dict[str, Any]:
    """One observation as the refit records it (rounded, so that its JSON is canonical)."""
    return {"workers": point.workers, "observed": round(point.examples_per_s, 3),
            "predicted": round(predicted, 3), "window_s": round(point.window_s, 1), "samples": point.samples,
            "noise": round(noise, 4), "at": ann.rfc3339(point.at)}


def points_json(points: Sequence[Mapping[str, Any]], rule: Rule = Rule.POSTERIOR,
                misstated: float = MISSTATED) -> str:
    """The canonical text of a refit's points and rule (``PredictionParams.refit``): by worker count;
    the posterior's prior probability of wrong values only where it is not the default."""
    doc = {"points": sorted((dict(p) for p in points), key=lambda p: int(p["workers"])), "rule": rule.value}
    return ann.compact(doc if misstated == MISSTATED else {**doc, "misstated": misstated})


def with_points(params: PredictionParams, points: Sequence[Mapping[str, Any]],
                rule: Rule = Rule.POSTERIOR, misstated: float = MISSTATED) -> PredictionParams:
    return replace(params, refit=points_json(points, rule, misstated)) if points else params


# --- in the controller ----------------------------------------------------------------------------------


class JobView(Protocol):
    """What the refit reads of a job (``tfjob.TFJobView`` has it)."""

    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str]
    suspended: bool
    started: bool
    finished: str | None
    started_at: float | None

    @property
    def workers(self) -> int: ...

    @property
    def key(self) -> tuple[str, str]: ...


Event = Callable[[Any, str, str, str], None]  # (view, type, reason, message): the reconcile's own
Key = tuple[str, str]


@dataclass
class _Job:
    uid: str
    sha: str
    points: tuple[dict[str, Any], ...] = ()  # what the job's curve is (or is being) refitted to
    fallback: tuple[dict[str, Any], ...] = ()  # the points before the refit in flight
    pending: bool = False  # a refit's prediction has been asked for and not yet seen stored
    asked: bool = False  # the reconcile has been given the pending points (and so has submitted them)
    restored: bool = False  # the pending points came from the annotation (a restart), not a new look
    workers: int = 0
    since: float = 0.0  # when this replica first saw the job at ``workers``
    next_look: float = 0.0
    wake: float = 0.0  # the time a reconcile is already asked for
    said: dict[str, str] = field(default_factory=dict)  # event reason -> the message last emitted
    touched: float = 0.0
    seen: int = 0  # pods that reported in the last usable window (0: none yet)
    progress: Progress | None = None  # a job with a deadline: the examples it trained since it started


class Refitter:
    """The refit state of every job, and the one call the reconcile makes (``params``)."""

    def __init__(self, *, settings: Callable[[], ControllerSettings], store: Any, running: Callable[[str], bool],
                 metrics: Metrics,
                 enqueue_after: Callable[[Key, float], None], clock: Callable[[], float] = time.time,
                 client: Callable[[RefitConfig], PrometheusClient] | None = None) -> None:
        self._settings, self._store, self._running, self._metrics = settings, store, running, metrics
        self._enqueue_after, self._clock = enqueue_after, clock
        self._client = client or (lambda cfg: PrometheusClient(cfg.prometheus_url, timeout_s=cfg.query_timeout_s))
        self._lock = threading.Lock()
        self._jobs: dict[Key, _Job] = {}
        # (the settings object, its refit config, the problem that turns refit off): checked once per settings
        self._config_of: tuple[ControllerSettings, RefitConfig | None, str] | None = None
        self._setting_said: dict[Key, tuple[str, str]] = {}  # job -> (uid, the settings problem evented)
        self._pruned = 0.0

    def params(self, view: JobView, sha: str, base: PredictionParams, event: Event) -> PredictionParams:
        """The parameters to predict ``view`` with: ``base``, with the observed points of its refit
        when it has one. Looks at its observed throughput when that is due; never raises for a
        refit's sake (an API error of an event is the event function's to handle)."""
        cfg = self._config(view, event)
        if cfg is None or not calibratable(base.model):
            return base
        now = self._clock()
        with self._lock:
            job = self._job(view, sha, now)
        if job.pending:
            self._settle(view, job, sha, base, cfg, event, now)
        current = with_points(base, job.points, cfg.rule, cfg.misstated)
        if job.pending:
            job.asked = True
            return current
        if not self._due(view, job, cfg, now):
            return current
        return self._look(view, job, sha, base, current, cfg, event, now)

    def progress(self, view: JobView) -> Progress | None:
        """What the job with a deadline trained since it started, as last read from Prometheus; None
        before the first read, or when the read was of another run of the job (a new start time)."""
        with self._lock:
            job = self._jobs.get(view.key)
        found = job.progress if job is not None and job.uid == view.uid else None
        return found if found is not None and found.started_at == view.started_at else None

    def window_s(self, view: JobView, model: str, event: Event) -> float | None:
        """How long a job runs at a new worker count before the closed loop has observed it; None
        when it will not be (refit off, settings that cannot work, a model it cannot update)."""
        cfg = self._config(view, event)
        return None if cfg is None or not calibratable(model) else cfg.min_observation_s

    # --- steps --------------------------------------------------------------------------------------

    def _config(self, view: JobView, event: Event) -> RefitConfig | None:
        settings = self._settings()
        if self._config_of is None or self._config_of[0] is not settings:
            try:
                config, problem = refit_config(settings), ""
            except RefitSettingsError as exc:
                config, problem = None, str(exc)
                log.warning("online refit is off: %s", problem)
            self._config_of = (settings, config, problem)
        _, config, problem = self._config_of
        if problem and self._setting_said.get(view.key) != (view.uid, problem):
            self._setting_said[view.key] = (view.uid, problem)
            event(view, "Warning", "RefitSettingsInvalid", f"online refit is off: {problem}")
        return config

    def _job(self, view: JobView, sha: str, now: float) -> _Job:
        """This job's state (under the lock): new for a new job or profile, then restored from
        the ``refit`` annotation a previous leader wrote."""
        self._prune(now)
        job = self._jobs.get(view.key)
        if job is None or job.uid != view.uid or job.sha != sha:
            job = self._jobs[view.key] = _Job(view.uid, sha, workers=view.workers, since=now)
            job.points = _annotated_points(view, sha)
            if job.points:  # applied before a restart: stored under its key, or predicted again
                job.pending = job.restored = True
            job.progress = _annotated_progress(view)  # a deadline's, as a leader before this one read it
        if job.workers != view.workers:  # resized: its pods are other pods, observed afresh
            job.workers, job.since, job.seen = view.workers, now, 0
        job.touched = now
        return job

    def _settle(self, view: JobView, job: _Job, sha: str, base: PredictionParams, cfg: RefitConfig, event: Event,
                now: float) -> None:
        """A refit's prediction was asked for: stored (count it, say it), still running, or failed
        (back to the curve before it)."""
        key = prediction_key(sha, with_points(base, job.points, cfg.rule, cfg.misstated))
        stored = self._store.prediction(sha, key)
        if stored is None and (self._running(key) or not job.asked):
            return
        job.pending = job.asked = False
        job.next_look = now + cfg.interval_s
        if stored is None:
            if not job.restored:
                self._metrics.refits.labels("failed").inc()
                self._say(view, job, event, "Warning", "RefitFailed", "the refit's prediction failed; the curve "
                          "before it stays (see the controller's log); observed again later")
            job.points, job.fallback = job.fallback, ()
            return
        job.fallback = ()
        if job.restored:
            job.restored = False
            return
        doc = json.loads(stored)
        section = doc.get("refit") or {}
        outcome = "refitted" if section.get("outcome") == "refitted" else "unchanged"
        self._metrics.refits.labels(outcome).inc()
        values = section.get("parameters")
        values = values if isinstance(values, dict) else {}
        moved = [f"{name} {c.get('before')} -> {c.get('after')}" for name, c in values.items()
                 if isinstance(c, dict) and c.get("before") != c.get("after")]
        change = ", ".join(moved) or "calibration values kept"
        notes = "; ".join(section.get("notes") or [])
        self._say(view, job, event, "Normal", "Refitted" if outcome == "refitted" else "RefitUnchanged",
                  f"{change} from {_points_text(job.points)}; {_band_text(doc, job.points)}"
                  + (f" ({notes})" if notes else ""))

    def _due(self, view: JobView, job: _Job, cfg: RefitConfig, now: float) -> bool:
        """Whether to look at the job's observed throughput now; asks for a reconcile when it will be."""
        if not view.started or view.suspended or view.finished:
            return False
        when = max(job.since + cfg.min_observation_s, job.next_look)
        if now >= when:
            return True
        if not (now < job.wake <= when):
            job.wake = when
            self._enqueue_after(view.key, when - now)
        return False

    def _look(self, view: JobView, job: _Job, sha: str, base: PredictionParams, current: PredictionParams,
              cfg: RefitConfig, event: Event, now: float) -> PredictionParams:
        stored = self._store.prediction(sha, prediction_key(sha, current))
        if stored is None:  # the current curve is not predicted yet: nothing to compare with
            return current
        job.next_look = now + cfg.interval_s
        self._enqueue_after(view.key, cfg.interval_s)
        job.wake = job.next_look
        window = cfg.min_observation_s
        try:
            point = observe(self._client(cfg), view.namespace, view.name, view.workers, window_s=window, at=now)
        except ObservedQueryError as exc:
            self._metrics.refits.labels("unavailable").inc()
            log.warning("%s/%s: observed throughput unavailable: %s", view.namespace, view.name, exc)
            self._say(view, job, event, "Warning", "ObservedThroughputUnavailable",
                      f"{exc}; asked again in {cfg.interval_s:.0f} s")
            return current
        if point is None:
            self._metrics.refits.labels("no_data").inc()
            log.info("%s/%s: no observed throughput in Prometheus", view.namespace, view.name)
            if job.seen:  # it had series: they are gone (pods that stopped exporting, a broken scrape)
                self._say(view, job, event, "Warning", "ObservedSeriesMissing",
                          f"the job's advisor_training_examples_total series are gone from Prometheus over the last "
                          f"{window:.0f} s: nothing is observed, and the decision stays at {view.workers} workers")
                return current
            self._say(view, job, event, "Normal", "NoObservedThroughput",
                      f"Prometheus has no advisor_training_examples_total of this job over the last {window:.0f} s: "
                      "do its pods set ADVISOR_METRICS_PORT and does the chart's trainingPodMonitor scrape them?")
            return current
        self._read_progress(view, job, cfg, now)  # progress counts restarted pods too: read before the checks
        if point.series > view.workers:
            log.info("%s/%s: %d pods reported over the window, more than its %d workers (a resize or restarts);"
                     " observed again later", view.namespace, view.name, point.series, view.workers)
            return current
        if point.resets:
            self._metrics.refits.labels("counter_reset").inc()
            self._say(view, job, event, "Warning", "ObservedCounterReset",
                      f"advisor_training_examples_total went back {point.resets} time(s) within the last "
                      f"{window:.0f} s (a restarted pod): that window is not used, the decision stays at "
                      f"{view.workers} workers; observed again in {cfg.interval_s:.0f} s")
            return current
        if point.series < max(view.workers, job.seen):
            self._metrics.refits.labels("series_missing").inc()
            self._say(view, job, event, "Warning", "ObservedSeriesMissing",
                      f"Prometheus has series of {point.series} pod(s) over the last {window:.0f} s where "
                      f"{max(view.workers, job.seen)} reported: the job's examples/s would be understated, so that "
                      f"window is not used and the decision stays at {view.workers} workers; observed again in "
                      f"{cfg.interval_s:.0f} s")
            return current
        job.seen = point.series
        predicted = throughput_at(json.loads(stored), view.workers)
        if predicted is None or predicted["value"] <= 0:
            return current
        gap = point.examples_per_s / predicted["value"] - 1
        known = any(int(p["workers"]) == point.workers for p in job.points)
        if known and abs(gap) <= cfg.tolerance:
            self._metrics.refits.labels("agrees").inc()
            return current
        observed = point_doc(point, predicted["value"], cfg.noise)
        points = tuple(p for p in job.points if int(p["workers"]) != point.workers) + (observed,)
        job.fallback, job.points, job.pending, job.asked = job.points, points[-MAX_POINTS:], True, True
        why = "a worker count not observed before" if not known else f"more than {cfg.tolerance:.0%} off"
        self._say(view, job, event, "Normal", "Refitting",
                  f"observed {point.examples_per_s:.1f} examples/s at {point.workers} workers over {window:.0f} s, "
                  f"predicted {predicted['value']:.1f} ({gap:+.0%}; {why}): updating the curve ({cfg.rule.value})")
        return with_points(base, job.points, cfg.rule, cfg.misstated)

    def _read_progress(self, view: JobView, job: _Job, cfg: RefitConfig, now: float) -> None:
        """A job with a deadline: the examples its pods counted since its start time (``trained``),
        so that its deadline is decided for what is left. A failed read keeps the last one (logged)."""
        if DEADLINE not in view.annotations or view.started_at is None or now - view.started_at < 1:
            return
        try:
            examples = trained(self._client(cfg), view.namespace, view.name, since_s=now - view.started_at, at=now)
        except ObservedQueryError as exc:
            log.warning("%s/%s: progress unavailable: %s", view.namespace, view.name, exc)
            return
        if examples is not None:
            job.progress = Progress(examples, now, view.started_at)

    def _say(self, view: JobView, job: _Job, event: Event, type_: str, reason: str, message: str) -> None:
        """An event, unless the same was said last time for this reason."""
        if job.said.get(reason) == message:
            return
        job.said[reason] = message
        event(view, type_, reason, message[:1000])

    def _prune(self, now: float) -> None:
        if now - self._pruned < 3600:
            return
        self._pruned = now
        for key in [k for k, j in self._jobs.items() if now - j.touched > FORGET_AFTER_S]:
            del self._jobs[key]
            self._setting_said.pop(key, None)


def _annotated_points(view: JobView, sha: str) -> tuple[dict[str, Any], ...]:
    """The points of the refit annotation a leader wrote for this profile; () when none or unreadable."""
    text = view.annotations.get(ann.REFIT)
    if not text or text == "null":
        return ()
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("profile") != f"sha256:{sha}":
            return ()
        return read_points(json.dumps({"points": doc.get("points")}), f"annotation {ann.REFIT}")
    except ValueError as exc:  # JSONDecodeError is one
        log.info("%s/%s: %s ignored: %s", view.namespace, view.name, ann.REFIT, exc)
        return ()


def _annotated_progress(view: JobView) -> Progress | None:
    """The progress the ``decision`` annotation holds (written from a read of Prometheus by this
    replica or one before it), for the job's current start; None when none or unreadable."""
    if DEADLINE not in view.annotations or view.started_at is None:
        return None
    try:
        doc = json.loads(view.annotations.get(DECISION) or "null")
        done = doc.get("progress") if isinstance(doc, dict) else None
        examples, at = (float(done["examplesTrained"]), parse_rfc3339(done["at"])) if isinstance(done, dict) \
            else (math.nan, None)
    except (ValueError, KeyError, TypeError):  # JSONDecodeError is a ValueError
        return None
    if at is None or not (math.isfinite(examples) and examples >= 0) or at < view.started_at:
        return None  # none, unreadable, or read before this start (a job restarted since)
    return Progress(examples, at, view.started_at)


def _points_text(points: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"W={p['workers']} at {p['observed']:g} examples/s" for p in points)


def _band_text(prediction: Mapping[str, Any], points: Sequence[Mapping[str, Any]]) -> str:
    """The new interval at each observed W, and the predicted one it replaced where known."""
    parts = []
    for p in points:
        now = throughput_at(prediction, int(p["workers"]))
        if now is not None:
            parts.append(f"W={p['workers']} now {now['lower']:.0f}-{now['upper']:.0f} examples/s")
    return "; ".join(parts) or "the curve is predicted again"

