"""A job's deadline: what its annotations ask, and the decision taken with a stated confidence.

A job asks for a deadline with two annotations, ``training-advisor.io/examples`` (its size) and
``training-advisor.io/deadline`` (hours of training, e.g. ``36`` or ``36h``, or a time, e.g.
``2030-06-01T18:00:00Z``), and may set the
confidence, ``training-advisor.io/confidence`` (else the setting ``decision_confidence``). The
decision is the CLI's (``core/cost.decide``): the cheapest W within the job's limits whose
probability of meeting the deadline is at least the confidence, read from the stored
prediction's intervals and outcomes; when none reaches it, the W most likely to meet it. That
answer is the recommendation either way; ``DECISION`` says which it is, and the reconcile tells
a shortfall with a Warning event. A job is never failed for a deadline that cannot be met.

The hours count from the job's start (``status.startTime``). Once the closed loop has read how
many examples the job's pods trained since then (``refit.py``, from the same Prometheus
counters), every decision is for what is left: the examples not yet trained in the hours not yet
spent (``remaining``). Before that read, the whole job is planned from now. A deadline that has
passed with examples left, or a job that has trained its examples, is not decided again: the
last decision stays (``DeadlineOver``; a Warning event for the first).

In ``auto`` mode with the closed loop on, a job is sized counting on one resize
(``core/correction.py``, setting ``deadline_plan_resize``): the cheapest start whose plan, stay
if observed in time or else resize once, meets the deadline with the confidence. A W the job
has been observed at (its refit's points) is planned alone: its refitted belief is what a
window there would show.

Pure functions of the settings, the job's view and the stored prediction (schema
``advisor-prediction/1``), as ``policy.py``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from advisor.controller.jobs.tfjob import PREFIX, TFJobView, parse_time, rfc3339
from advisor.controller.settings import ControllerSettings
from advisor.core.belief import Belief, Outcome
from advisor.core.correction import Correction, Plan, best_plan, plan_shortfall, plans
from advisor.core.cost import Choice, Constraints, CostError, Prices, choose, meet_probabilities, shortfall
from advisor.errors import TFJobError

EXAMPLES = PREFIX + "examples"  # the job's size in examples
DEADLINE = PREFIX + "deadline"  # hours of training ("36" or "36h") or a time ("2030-06-01T18:00:00Z")
CONFIDENCE = PREFIX + "confidence"  # the least probability of meeting the deadline, in (0, 1)
DECISION = PREFIX + "decision"  # written: the deadline decision, compact JSON (docs/controller.md)
_HOURS = re.compile(r"^\s*(?P<num>[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*h?\s*$")


@dataclass(frozen=True, slots=True)
class Progress:
    """What a job trained: ``examples`` counted by its pods from ``started_at`` to ``at`` (unix s)."""

    examples: float
    at: float
    started_at: float


@dataclass(frozen=True, slots=True)
class JobDeadline:
    examples: float  # with ``progress``: the examples left
    hours: float  # with ``progress``: the hours left
    confidence: float
    progress: Progress | None = None  # what was done before: the deadline is then for the rest


class DeadlineOver(TFJobError):
    """A deadline that is no longer decided: it passed with examples left (``passed``), or the
    job trained its examples."""

    def __init__(self, message: str, passed: bool) -> None:
        super().__init__(message)
        self.passed = passed


def remaining(deadline: JobDeadline, progress: Progress | None) -> JobDeadline:
    """The deadline for what is left after ``progress`` (None: the whole job, from now).
    ``DeadlineOver`` when its hours are spent with examples left, or its examples are trained."""
    if progress is None:
        return deadline
    spent = (progress.at - progress.started_at) / 3600
    left, hours = deadline.examples - progress.examples, deadline.hours - spent
    if left <= 0:
        raise DeadlineOver(f"the job has trained {progress.examples:.4g} of its {deadline.examples:.4g} examples in "
                           f"{spent:.2f} h: nothing is left to decide", passed=False)
    if hours <= 0:
        raise DeadlineOver(f"its deadline, {deadline.hours:g} h from its start at {rfc3339(progress.started_at)}, "
                           f"has passed before its {deadline.examples:.4g} examples were trained: the last decision "
                           "stays", passed=True)
    return JobDeadline(left, hours, deadline.confidence, progress)


def job_deadline(settings: ControllerSettings, view: TFJobView, now: float) -> JobDeadline | None:
    """The deadline the job's annotations ask for; None without one. ``TFJobError`` names the
    annotation that cannot work (not a number, not positive, a confidence outside (0, 1), one
    of examples and deadline without the other, a time before the job's start or, for a job not
    started, before ``now``). A time is turned into hours from the job's start (from ``now``
    while it has not started)."""
    notes = view.annotations
    if EXAMPLES not in notes and DEADLINE not in notes:
        if CONFIDENCE in notes:
            _confidence(view, settings)  # a bad one is still reported
        return None
    where = f"{view.kind} {view.namespace}/{view.name}"
    if EXAMPLES not in notes or DEADLINE not in notes:
        given, missing = (EXAMPLES, DEADLINE) if EXAMPLES in notes else (DEADLINE, EXAMPLES)
        raise TFJobError(f"{where}: annotation {given} needs {missing} too (a deadline is for a job of a known size)")
    examples = positive_annotation(view, EXAMPLES, notes[EXAMPLES], "a number of examples > 0, e.g. 1e7")
    m = _HOURS.match(notes[DEADLINE])
    if m:
        hours = positive_annotation(view, DEADLINE, m["num"], "a number of hours > 0, e.g. 36h")
    else:
        hours = _hours_until(view, notes[DEADLINE], now)
    return JobDeadline(examples, hours, _confidence(view, settings))


def _hours_until(view: TFJobView, text: str, now: float) -> float:
    """The hours from the job's start (or ``now``, before it starts) to the time ``text``."""
    where = f"{view.kind} {view.namespace}/{view.name}: annotation {DEADLINE}={text!r}"
    at = parse_time(text)
    if at is None:
        raise TFJobError(f"{where} is neither a number of hours (e.g. 36 or 36h) nor a time "
                         "(e.g. 2030-06-01T18:00:00Z)")
    start, since = (view.started_at, "the job's start") if view.started_at is not None else (now, "now")
    if at <= start:
        raise TFJobError(f"{where} is not after {since} ({rfc3339(start)}): a deadline must be in the future")
    return (at - start) / 3600


@dataclass(frozen=True, slots=True)
class DeadlineDecision:
    choice: Choice  # the recommended W: confident, or the likeliest
    p_meet: Mapping[int, float]  # every W inside the limits: its probability of meeting the deadline
    plan: Plan | None = None  # counting on one resize: the start's plan (``choice`` is its start)
    deadline: JobDeadline | None = None  # what was decided: with progress, the examples and hours left
    switch_hours: float = 0.0  # what a move from the running W loses (decided for a running job)


def decide_deadline(prediction: Mapping[str, Any], prices: Prices, workers_range: tuple[int, int],
                    deadline: JobDeadline, correction: Correction | None = None, *, running: int | None = None,
                    switch_hours: float = 0.0) -> DeadlineDecision:
    """The W for the deadline within ``workers_range`` (min, max): confident, or the likeliest;
    with ``correction``, the start of the plan with one resize (``p_meet``: each start's plan's).
    A job ``running`` at some W keeps its hours there; any other W has ``switch_hours`` fewer (what
    a resize loses), so that a move has to pay for itself in time as well as in cost."""
    lo, hi = workers_range
    points = [p for p in prediction["curve"] if lo <= int(p["workers"]) <= hi]
    if not points:
        raise TFJobError(f"the prediction covers no worker count inside the job's limits {lo}..{hi}")
    level = float((prediction.get("settings") or {}).get("confidence", 0.95))
    workers, thr = [int(p["workers"]) for p in points], [float(p["throughput"]) for p in points]
    beliefs = [belief_of(p, level) for p in points]
    ps = int(prediction["job"]["parameter_servers"])
    c = Constraints(examples=deadline.examples, deadline_hours=deadline.hours, confidence=deadline.confidence)

    def evaluate(constraints: Constraints) -> list[Any]:  # per W: a Plan with ``correction``, else a Choice
        if correction is not None:
            return plans(workers, thr, prices, beliefs, parameter_servers=ps, constraints=constraints,
                         correction=correction)
        return meet_probabilities(workers, thr, prices, beliefs, parameter_servers=ps, constraints=constraints)

    try:
        found = evaluate(c)
        if running is not None and switch_hours > 0 and deadline.hours > switch_hours:
            moved = evaluate(replace(c, deadline_hours=deadline.hours - switch_hours))
            found = sorted([o for o in found if o.workers == running] + [o for o in moved if o.workers != running],
                           key=lambda o: o.workers)
        switch = switch_hours if running is not None else 0.0
        if correction is not None:
            plan = best_plan(found)
            return DeadlineDecision(plan.choice, {p.workers: p.choice.p_meet or 0.0 for p in found}, plan, deadline,
                                    switch)
        choice = choose(found)
    except CostError as exc:
        raise TFJobError(str(exc)) from None
    return DeadlineDecision(choice, {o.workers: o.p_meet or 0.0 for o in found}, deadline=deadline,
                            switch_hours=switch)


def resize_correction(prediction: Mapping[str, Any], observation_s: float, cooldown_s: float,
                      loss_s: float) -> Correction:
    """The one resize a deadline's decision counts on: after the closed loop's observation
    (``observation_s``) or the resize cooldown, whichever is longer, losing ``loss_s``; the worker
    counts ``prediction`` was refitted on are planned alone."""
    return Correction(max(observation_s, cooldown_s) / 3600, loss_s / 3600, observed_workers(prediction))


def observed_workers(prediction: Mapping[str, Any]) -> frozenset[int]:
    """The worker counts a stored prediction's refit observed the job at (its ``refit.points``);
    an entry without a usable count is passed over, not an error (the advisor wrote the section
    itself, checked; a reconcile never fails on it)."""
    refit = prediction.get("refit")
    points = refit.get("points") if isinstance(refit, Mapping) else None
    found = set()
    for p in points if isinstance(points, list) else ():
        w = p.get("workers") if isinstance(p, Mapping) else None
        if isinstance(w, int) and not isinstance(w, bool) and w >= 1:
            found.add(w)
    return frozenset(found)


def belief_of(point: Mapping[str, Any], level: float) -> Belief:
    """A stored curve point's belief: its outcomes when it lists them, else its interval."""
    outcomes = point.get("outcomes")
    if isinstance(outcomes, list) and outcomes:
        return Belief.of([Outcome(str(o["name"]), float(o["throughput"]), float(o["low"]), float(o["high"]),
                                  float(o["probability"])) for o in outcomes], level)
    return Belief.interval(float(point["throughput"]), float(point["low"]), float(point["high"]), level)


def deadline_json(choice: Choice, confidence: float, plan: Plan | None = None,
                  decided: JobDeadline | None = None) -> str:
    """``DECISION``: the chosen W, its probability of meeting the deadline, and the confidence
    asked (compact JSON; ``confident`` false: no W reaches it and this is the likeliest); with a
    ``plan``, also ``plan``: when it is observed, what a resize loses, the start's probability
    alone, the rate it stays from, and below it ``then``: [examples/s from, W] highest first;
    when ``decided`` is a deadline for what is left, also ``progress``: the examples trained,
    left, the hours left, and when that was read."""
    doc: dict[str, Any] = {"confidence": confidence, "confident": choice.confident,
                           "neededThroughput": _r(choice.needed_throughput), "probability": _r(choice.p_meet, 4),
                           "workers": choice.workers}
    if plan is not None:
        doc["plan"] = {"afterHours": _r(plan.correction.window_hours, 4),
                       "lossHours": _r(plan.correction.restart_hours, 4), "alone": _r(plan.alone, 4),
                       "stayAtLeast": _r(plan.stay_at_least),
                       "then": [[_r(f.at_least), f.workers] for f in plan.fallbacks if f.in_time]}
    if decided is not None and decided.progress is not None:
        done = decided.progress
        doc["progress"] = {"examplesTrained": _r(done.examples, 0), "examplesLeft": _r(decided.examples, 0),
                           "hoursLeft": _r(decided.hours, 4),
                           "at": rfc3339(done.at)}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def shortfall_message(choice: Choice, deadline: JobDeadline, workers_range: tuple[int, int],
                      plan: Plan | None = None) -> str:
    """The Warning event's message when no W (or plan) reaches the confidence (the CLI's warning line)."""
    c = Constraints(examples=deadline.examples, deadline_hours=deadline.hours, confidence=deadline.confidence)
    said = plan_shortfall(plan, c, list(workers_range)) if plan is not None else shortfall(choice, c, list(workers_range))
    return said + "; recommended anyway"


def _confidence(view: TFJobView, settings: ControllerSettings) -> float:
    text = view.annotations.get(CONFIDENCE)
    if text is None:
        return settings.decision_confidence
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {CONFIDENCE}={text!r} must be a "
                         "probability strictly between 0 and 1, e.g. 0.9")
    return value


def positive_annotation(view: TFJobView, key: str, text: str, what: str) -> float:
    """The number ``text`` (annotation ``key``'s value) when finite and > 0, else ``TFJobError`` saying it must be ``what``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {key}={view.annotations[key]!r} "
                         f"must be {what}")
    return value


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)
