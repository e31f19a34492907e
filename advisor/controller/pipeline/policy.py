"""What the controller decides from a prediction: limits, the recommendation, and whether to resize.

Pure functions of the settings, the job's view and the stored prediction (schema
``advisor-prediction/1``): no cluster, no clock (``now`` is passed in). The recommendation
follows the Vertical Pod Autoscaler's shape: ``target`` (within policy), ``lowerBound`` and
``upperBound`` (the worker counts whose predicted cost per example is within
``BOUND_TOLERANCE`` of the target's: the flat bottom of the cost curve, where any choice is
about as good) and ``uncappedTarget`` (the cost optimum ignoring the per-job limits).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.controller.pipeline.deadline import DeadlineDecision, JobDeadline, decide_deadline
from advisor.controller.settings import ControllerSettings, Mode
from advisor.controller.jobs.tfjob import PREFIX, TFJobView
from advisor.core.advice import ModelChoice
from advisor.core.correction import Correction
from advisor.core.cost import Constraints, CostError, Prices, cost_optimal, cost_per_example
from advisor.core.models.registry import default_model_for
from advisor.errors import ModelInputError, TFJobError

BOUND_TOLERANCE = 0.05
MIN_WORKERS = PREFIX + "min-workers"
MAX_WORKERS = PREFIX + "max-workers"
MODE = PREFIX + "mode"
PREDICT_MODEL = PREFIX + "predict-model"  # a model name (advisor models): overrides the setting for this job
PREDICT_MODEL_PARAMS = PREFIX + "predict-model-params"  # a JSON object of that model's parameters
PRIORITY = PREFIX + "priority"  # cluster mode: a number > 0 weighing the job's gain (default 1)


@dataclass(frozen=True, slots=True)
class Limits:
    min_workers: int
    max_workers: int
    mode: Mode


@dataclass(frozen=True, slots=True)
class Recommendation:
    target: int
    lower: int
    upper: int
    uncapped: int
    throughput: float  # at target
    cost_per_example: float
    # with a deadline (deadline.py): the decision behind ``target`` and the confidence asked; else None
    deadline: DeadlineDecision | None = None
    confidence: float | None = None


def job_prices(settings: ControllerSettings, view: TFJobView) -> Prices:
    """Prices for this job: its Worker and PS node types' prices where configured, else the defaults."""
    p = settings.prices
    worker_type = view.node_types.get("Worker") or view.node_types.get("Chief") or view.node_types.get("Master")
    worker = p.node_types[worker_type].worker_per_hour if worker_type in p.node_types else p.worker_per_hour
    ps_type = view.node_types.get("PS")
    ps = p.node_types[ps_type].ps_per_hour if ps_type in p.node_types else p.ps_per_hour
    try:
        return Prices(worker, ps)
    except CostError as exc:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: {exc}") from None


def job_model(settings: ControllerSettings, view: TFJobView, *, synchronous: bool = False) -> ModelChoice:
    """The model for this job: the settings' choice, or the job's ``predict-model`` annotation
    with its ``predict-model-params`` (a JSON object). The settings' parameters carry over only
    when the job names the same model. Problems are ``TFJobError`` naming the annotation.

    The settings' model is the parameter-server jobs' model; a job whose program is all-reduce
    (TFJob without PS, PyTorchJob) defaults to ``default_model_for(allreduce=True)`` (the ring):
    a PS model cannot read its trace. ``synchronous``: the job's profile is a trace of
    SyncReplicasOptimizer (known once it has arrived); a job that names no model then gets the
    synchronous default in place of the asynchronous one (``ControllerSettings.model_choice``),
    which would refuse that trace. A job that names a model keeps it."""
    named = view.annotations.get(PREDICT_MODEL)
    default = settings.model_choice(synchronous=synchronous and named is None)
    if view.program != "tf-ps":
        default = ModelChoice(default_model_for(True))
    name = (default.name if named is None else named).strip()
    text = view.annotations.get(PREDICT_MODEL_PARAMS)
    try:
        given = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {PREDICT_MODEL_PARAMS} is not JSON "
                         f"({exc.msg} at column {exc.colno})") from None
    if not isinstance(given, dict):
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {PREDICT_MODEL_PARAMS} must be a JSON "
                         f"object of parameters, not {type(given).__name__}")
    choice = ModelChoice(name, {**(default.params if name == default.name else {}), **given})
    try:
        choice.resolve()
    except ModelInputError as exc:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {PREDICT_MODEL}: {exc}") from None
    return choice


def model_note(settings: ControllerSettings, view: TFJobView, choice: ModelChoice) -> str:
    """Why ``choice`` (``job_model`` for a synchronous profile) is not the model the settings
    name: the prediction's note for a job that named none; "" when it is the settings' own."""
    usual = job_model(settings, view)
    if choice.name == usual.name:
        return ""
    return (f"the profile is of a synchronous program (SyncReplicasOptimizer: its token queue and gradient "
            f"accumulators are in the trace): predicted with {choice.name}, the synchronous default, in place of "
            f"{usual.name}, which predicts asynchronous PS; the annotation {PREDICT_MODEL} chooses another")


def job_limits(settings: ControllerSettings, view: TFJobView, prices: Prices) -> Limits:
    """Worker range for this job: settings, narrowed by the job's annotations and the hourly budget."""
    low = _annotation_int(view, MIN_WORKERS, settings.min_workers)
    high = _annotation_int(view, MAX_WORKERS, settings.max_workers)
    if not settings.min_workers <= low <= high <= settings.max_workers:
        raise TFJobError(
            f"{view.kind} {view.namespace}/{view.name}: workers {low}..{high} from its annotations lie outside the "
            f"controller's policy {settings.min_workers}..{settings.max_workers} or are reversed")
    if settings.budget_per_hour is not None and prices.worker_per_hour > 0:
        spare = settings.budget_per_hour - view.parameter_servers * prices.ps_per_hour
        affordable = math.floor(spare / prices.worker_per_hour + 1e-9)
        if affordable < low:
            raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: the hourly budget {settings.budget_per_hour:g} "
                             f"affords {max(affordable, 0)} workers, fewer than the minimum {low}")
        high = min(high, affordable)
    if view.worker_range is not None:  # the job's own bounds (a PyTorchJob's elasticPolicy)
        low, high = max(low, view.worker_range[0]), min(high, view.worker_range[1])
        if low > high:
            raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: the job allows {view.worker_range[0]}.."
                             f"{view.worker_range[1]} workers, none inside the advisor's limits")
    mode_text = view.annotations.get(MODE, settings.mode.value)
    try:
        mode = Mode(mode_text)
    except ValueError:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {MODE}={mode_text!r} is not one of "
                         f"{', '.join(m.value for m in Mode)}") from None
    return Limits(low, high, mode)


def recommend(prediction: Mapping[str, Any], prices: Prices, limits: Limits,
              deadline: JobDeadline | None = None, correction: Correction | None = None, *,
              running: int | None = None, switch_hours: float = 0.0) -> Recommendation:
    """Cost-optimal W within ``limits`` from a stored prediction, with VPA-style bounds; with a
    ``deadline``, the cheapest W that meets it with the confidence asked, or the likeliest
    (``deadline.py``; with ``correction``, the start of the plan with one resize; a job
    ``running`` at a W loses ``switch_hours`` by moving), and the bounds among the W at least as
    likely to meet it."""
    curve = [p for p in prediction["curve"]]
    workers = [int(p["workers"]) for p in curve]
    thr = [float(p["throughput"]) for p in curve]
    ps = int(prediction["job"]["parameter_servers"])
    uncapped = cost_optimal(workers, thr, prices, parameter_servers=ps).workers
    inside = [(w, t) for w, t in zip(workers, thr) if limits.min_workers <= w <= limits.max_workers]
    if not inside:
        raise TFJobError(f"the prediction covers W = {workers[0]}..{workers[-1]}, none inside the job's limits "
                         f"{limits.min_workers}..{limits.max_workers}")
    if deadline is not None:
        return _deadline_recommendation(prediction, prices, limits, deadline, inside, ps, correction,
                                        running=running, switch_hours=switch_hours)
    choice = cost_optimal([w for w, _ in inside], [t for _, t in inside], prices, parameter_servers=ps,
                          constraints=Constraints(max_workers=limits.max_workers))
    near = [w for w, t in inside if cost_per_example(prices, w, ps, t) <= choice.cost_per_example * (1 + BOUND_TOLERANCE)]
    return Recommendation(target=choice.workers, lower=min(near), upper=max(near), uncapped=uncapped,
                          throughput=choice.throughput, cost_per_example=choice.cost_per_example)


def _deadline_recommendation(prediction: Mapping[str, Any], prices: Prices, limits: Limits, deadline: JobDeadline,
                             inside: list[tuple[int, float]], ps: int,
                             correction: Correction | None = None, *, running: int | None = None,
                             switch_hours: float = 0.0) -> Recommendation:
    """The deadline's decision as a Recommendation: bounds among the W that meet the deadline at
    least as likely as the target (or with the confidence asked) and cost within the tolerance."""
    decision = decide_deadline(prediction, prices, (limits.min_workers, limits.max_workers), deadline, correction,
                               running=running, switch_hours=switch_hours)
    choice, p_meet = decision.choice, decision.p_meet
    floor = min(deadline.confidence, p_meet[choice.workers])
    near = [w for w, t in inside if p_meet[w] >= floor - 1e-12
            and cost_per_example(prices, w, ps, t) <= choice.cost_per_example * (1 + BOUND_TOLERANCE)] or [choice.workers]
    every = [int(p["workers"]) for p in prediction["curve"]]
    if len(inside) == len(every):  # the limits cut nothing off the curve: the same decision
        uncapped = choice.workers
    else:
        uncapped = decide_deadline(prediction, prices, (every[0], every[-1]), deadline, correction, running=running,
                                   switch_hours=switch_hours).choice.workers
    return Recommendation(target=choice.workers, lower=min(near), upper=max(near), uncapped=uncapped,
                          throughput=choice.throughput, cost_per_example=choice.cost_per_example, deadline=decision,
                          confidence=deadline.confidence)


def throughput_at(prediction: Mapping[str, Any], workers: int) -> Mapping[str, float] | None:
    for p in prediction["curve"]:
        if int(p["workers"]) == workers:
            return {"value": float(p["throughput"]), "lower": float(p["low"]), "upper": float(p["high"])}
    return None


def resize_target(
    limits: Limits, view: TFJobView, rec: Recommendation, prediction: Mapping[str, Any], prices: Prices,
    *, last_resize: float | None, now: float, min_gain: float, cooldown_s: float,
) -> int | None:
    """In ``auto`` mode, the worker count to set on a running job, or None to leave it.

    Only jobs that allow it (``enableDynamicWorker``), never within the cooldown, and only when
    the *expected* cost per example at the target (over its interval: an uncertain point costs
    more on average, ``core/cost.py``) beats the current count's by more than ``min_gain``: the
    hysteresis that keeps a job from flapping between counts the curve can barely tell apart.
    """
    if limits.mode is not Mode.AUTO or not view.dynamic_workers or view.finished or "Worker" not in view.spec_keys:
        return None
    if rec.target == view.workers or (last_resize is not None and now - last_resize < cooldown_s):
        return None
    if rec.deadline is not None and rec.confidence is not None:  # a job with a deadline: meeting it comes first
        p_meet = rec.deadline.p_meet
        now_p, target_p = p_meet.get(view.workers), p_meet[rec.target]
        if now_p is not None and now_p < rec.confidence and target_p > now_p:
            return rec.target  # the current count misses the confidence asked and the target is likelier
        alone = rec.deadline.plan.alone if rec.deadline.plan is not None else target_p
        if now_p is not None and now_p >= rec.confidence and min(target_p, alone) < 1 - (1 - rec.confidence) / 2:
            return None  # from a W that meets it, only to a W that alone has half the risk asked: no trials
    current = throughput_at(prediction, view.workers)
    if current is None or current["value"] <= 0:
        return rec.target  # the current count is outside the curve (e.g. above the maximum): bring it in
    ps = int(prediction["job"]["parameter_servers"])
    cost_now = expected_cost_at(prediction, view.workers) or cost_per_example(prices, view.workers, ps,
                                                                             current["value"])
    cost_target = expected_cost_at(prediction, rec.target) or rec.cost_per_example
    gain = 1 - cost_target / cost_now
    decided = rec.deadline
    left = decided.deadline if decided is not None else None
    if decided is not None and left is not None and left.progress is not None and decided.switch_hours > 0:
        # what is left is known, and a move restarts the job: that time is paid without progress, which
        # near the end outweighs any saving per example (a move for the last minutes had missed a deadline)
        restart = prices.hourly(rec.target, ps) * decided.switch_hours
        gain = 1 - (cost_target * left.examples + restart) / (cost_now * left.examples)
    return rec.target if gain > min_gain else None


def expected_cost_at(prediction: Mapping[str, Any], workers: int) -> float | None:
    """The stored expected cost per example at ``workers`` (None when the prediction has none)."""
    for p in prediction["curve"]:
        if int(p["workers"]) == workers:
            value = p.get("expected_cost_per_example")
            return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None
    return None


def _annotation_int(view: TFJobView, key: str, default: int) -> int:
    text = view.annotations.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {key}={text!r} is not an integer") from None
    if value < 1:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name}: annotation {key}={text!r} must be >= 1")
    return value


def clamp(workers: int, limits: Limits) -> int:
    return min(max(workers, limits.min_workers), limits.max_workers)
