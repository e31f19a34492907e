"""The whole answer for one job: curve, models side by side, saturation point and cost-optimal W.

This is the predictor's public API: the CLI and the Kubernetes controller both call ``advise``
with a profile and an ``AdviceRequest`` and render the ``Advice`` it returns. It knows models
only through the protocol and the registry (``core/models``): which model predicts is
``AdviceRequest.model``, a name and its parameters. Preprocessing of the trace (parsing-overhead
split, section 3.2.1 of Li et al.; the client's time between steps) happens here, once, so every
caller predicts the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.core.belief import Belief, Outcome
from advisor.core.correction import Correction, Plan, best_plan, plans
from advisor.core.cost import (
    Choice, Constraints, Prices, cost_per_example, decide, expected_cost_per_example, meet_probabilities,
    saturation_point,
)
from advisor.core.curve import CurveSettings, Mapper, Progress, predict_curve
from advisor.core.model_error import ModelError, ModelErrors, as_errors, measured_phrase
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs, ModelParams, Outlook, ThroughputModel
from advisor.core.posterior import CurvePosterior
from advisor.core.preprocess import add_client_gap, split_parsing_overhead
from advisor.core.profile import Profile
from advisor.core.profile_check import ProfileCheck, check_one_worker, contradiction_note, w1_width
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from advisor.core.summary import tracing_cost
from advisor.errors import ModelInputError, ModelRegimeError

DEFAULT_GOODPUT = 0.95  # TCP payload per wire byte with 1500-byte frames: 1448 / 1538
DEFAULT_MODEL = registry.DEFAULT_MODEL
# closed-form models shown beside every prediction (the JSON's "baselines" keep their old names)
SIDE_BY_SIDE: tuple[str, ...] = ("cynthia", "phase-mva")


@dataclass(frozen=True, slots=True)
class Overhead:
    """Parsing overhead per received tensor, alpha x bytes + beta (microseconds)."""

    alpha_us_per_byte: float = 0.0
    beta_us: float = 0.0


@dataclass(frozen=True)
class ModelChoice:
    """Which model predicts and with which parameters (as given: strings are converted by the
    model's ``Params``)."""

    name: str = DEFAULT_MODEL
    params: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self) -> tuple[ThroughputModel, ModelParams]:
        """The registered model and its validated parameters; ``ModelInputError`` otherwise."""
        model = registry.get(self.name)
        return model, registry.params_for(model, self.params)


@dataclass(frozen=True)
class AdviceRequest:
    network: NetworkModel | None  # None: no link rate known (models that need one say so)
    curve: CurveSettings
    overhead: Overhead = Overhead()
    prices: Prices = Prices()
    constraints: Constraints = Constraints()
    saturation_threshold: float = 0.05
    goodput: float = DEFAULT_GOODPUT  # fraction of the nominal link rate that TCP delivers as payload
    client_gap: bool = True  # replay the client's time between steps (preprocess.add_client_gap)
    model: ModelChoice = ModelChoice()
    side_by_side: tuple[str, ...] = SIDE_BY_SIDE
    worker_speeds: tuple[float, ...] = ()  # compute multiplier per worker (heterogeneous workers)
    worker_bandwidths_bps: tuple[float, ...] = ()  # per-worker link rate, nominal
    parameter_servers: int | None = None  # a PS-count what-if; None: as traced
    spec: Any = None  # inputs that are not a trace (layer or cluster spec)
    extras: Mapping[str, Any] = field(default_factory=dict)  # other loaded inputs, by key (e.g. an op database)
    # measured model errors, per model (core/model_error.py): the predicting model's own widens each
    # point's interval beyond the simulation's; one ModelError is a collection of one; None: the
    # intervals are the simulation's alone, and no note says the model's error is unknown
    model_error: ModelErrors | ModelError | None = None
    # the curve conditioned on the job's observed throughput (core/online_calibration.py), put in
    # place of the model's points and intervals where it has them; None: as the model predicts
    posterior: CurvePosterior | None = None
    # a deadline planned on one resize after the job is observed (core/correction.py); None: one-shot
    correction: Correction | None = None

    @property
    def model_errors(self) -> ModelErrors | None:
        """``model_error`` as a collection (None: none asked for)."""
        return as_errors(self.model_error)

    def error_of(self, model: str, scope: str | None = None) -> ModelError | None:
        """``model``'s own measured error in the request (``scope``'s where measured), None when it has none."""
        errors = self.model_errors
        return None if errors is None else errors.of(model, scope)

    def __post_init__(self) -> None:
        if not 0 < self.goodput <= 1:
            raise SimulationSettingsError(f"goodput must be in (0, 1], got {self.goodput}")
        if not 0 < self.saturation_threshold < 1:
            raise SimulationSettingsError(f"saturation threshold must be in (0, 1), got {self.saturation_threshold}")


@dataclass(frozen=True, slots=True)
class AdvicePoint:
    workers: int
    throughput: float
    low: float  # the interval: simulation noise and, when known, the model's measured error
    high: float
    steps: int
    events: int
    cost_per_example: float  # at the point estimate
    models: Mapping[str, float] = field(default_factory=dict)  # side-by-side models' examples/s at this W
    # the throughput of another outcome the model says can happen instead (W = 2 PS workers in
    # alternation); ``outcomes`` holds both with their intervals and probabilities
    alternating: float | None = None
    expected_cost_per_example: float | None = None  # over the outcomes (core/cost.py): what the choice compares
    sim_low: float | None = None  # the simulation's own interval (sampling noise only); None: as low, high
    sim_high: float | None = None
    # every outcome at this W, the predicted one first; one ("predicted", probability 1) for most points
    outcomes: tuple[Outcome, ...] = ()
    # the probability that this W meets the deadline, the budget, and both (None: no such constraint)
    p_deadline: float | None = None
    p_budget: float | None = None
    p_meet: float | None = None
    # with a correction: the probability that a plan starting here meets them (core/correction.py)
    p_plan: float | None = None

    @property
    def cynthia(self) -> float | None:
        return self.models.get("cynthia")

    @property
    def phase_queueing(self) -> float | None:
        return self.models.get("phase-mva")


@dataclass(frozen=True, slots=True)
class Advice:
    model: str
    points: tuple[AdvicePoint, ...]
    saturation_workers: int
    recommended: Choice
    parameter_servers: int
    batch_size: int
    notes: tuple[str, ...] = field(default=())
    params: Mapping[str, Any] = field(default_factory=dict)  # the model's parameters as used (Outlook.params)
    details: Mapping[str, Any] = field(default_factory=dict)  # what the model derived from them (Outlook.details)
    model_error: ModelError | None = None  # the predicting model's own error, which widened the intervals (None: not)
    profile_check: ProfileCheck | None = None  # the model's W = 1 against the profile's own rate (core/profile_check.py)
    plan: Plan | None = None  # with a correction: the recommended start and what to do after it is observed

    def point(self, workers: int) -> AdvicePoint:
        """The curve's point for ``workers``; ``KeyError`` if it was not predicted."""
        for p in self.points:
            if p.workers == workers:
                return p
        raise KeyError(workers)


def advise(profile: Profile | None, request: AdviceRequest, progress: Progress | None = None,
           mapper: Mapper | None = None) -> Advice:
    """Predict the curve for the job and derive the saturation point and the cheapest W;
    ``mapper`` computes the curve's points (e.g. over processes: ``advisor/parallel.py``)."""
    model, params = request.model.resolve()
    inputs = model_inputs(profile, request)
    model.check(inputs, params)
    curve = predict_curve(model, inputs, params, request.curve, progress, mapper)
    outlook = model.outlook(inputs, params, {p.workers: p.throughput for p in curve})
    others, left_out = side_by_side(inputs, request)
    batch = profile.job.batch_size if profile is not None else int(outlook.details.get("batch_size", 0))
    # an all-reduce program runs no parameter servers: none to pay for
    ps = request.parameter_servers or (profile.job.parameter_servers if profile is not None and not profile.job.kind.allreduce else 0)
    errors = request.model_errors
    # the predicting model's own (another's says nothing of it), measured in the inputs' scope where it was
    error = request.error_of(model.name, outlook.error_scope)
    outcomes = [point_outcomes(p.workers, p.throughput, p.low, p.high, outlook, model.name, error) for p in curve]
    level = request.curve.confidence
    beliefs = [Belief.of(o, level) for o in outcomes]
    workers = [p.workers for p in curve]
    if request.posterior is not None:  # observed throughput re-centres and narrows the points
        outcomes = observed_outcomes(workers, outcomes, request.posterior)
        beliefs = [Belief.of(o, level) for o in outcomes]
    thr = [outs[0].throughput for outs in outcomes]  # the predicted (or observed) outcome comes first
    c = request.constraints
    chances = meet_probabilities(workers, thr, request.prices, beliefs, parameter_servers=ps, constraints=c)
    plan, by_start = None, {}
    if request.correction is not None:  # the first W counts on one resize after it is observed
        found = plans(workers, thr, request.prices, beliefs, parameter_servers=ps, constraints=c,
                      correction=request.correction)
        by_start = {p.workers: p.choice.p_meet for p in found}
        plan = best_plan(found)
        recommended = plan.choice
    else:
        recommended = decide(workers, thr, request.prices, parameter_servers=ps, constraints=c, beliefs=beliefs)
    points = tuple(
        AdvicePoint(
            workers=p.workers, throughput=t, low=outs[0].low, high=outs[0].high, steps=p.steps,
            events=p.events, cost_per_example=cost_per_example(request.prices, p.workers, ps, t),
            expected_cost_per_example=expected_cost_per_example(request.prices, p.workers, ps, t,
                                                                outs[0].low, outs[0].high, level, belief),
            models={name: values[i] for name, values in others.items()},
            alternating=outs[1].throughput if len(outs) > 1 else None,
            sim_low=p.low, sim_high=p.high, outcomes=outs,
            p_deadline=chance.p_deadline, p_budget=chance.p_budget, p_meet=chance.p_meet,
            p_plan=by_start.get(p.workers),
        )
        for i, (p, t, outs, belief, chance) in enumerate(zip(curve, thr, outcomes, beliefs, chances))
    )
    one = next((p.throughput for p in curve if p.workers == 1), None)
    # a what-if's W = 1 is not the profiled run: the profile cannot check it
    check = None if one is None or outlook.what_if else check_one_worker(profile, one, w1_width(error, model.name))
    notes = outlook.notes + left_out + tracing_notes(profile)
    if check is not None and check.contradicts and request.posterior is None:
        notes += (contradiction_note(check),)
    if errors is not None and error is None:
        notes += (f"the intervals hold simulation noise only: the model error of {model.name} has not been measured "
                  f"({measured_phrase(errors.models)})",)
    return Advice(
        model=model.name,
        points=points,
        saturation_workers=saturation_point(workers, thr, request.saturation_threshold),
        recommended=recommended,
        parameter_servers=ps,
        batch_size=batch,
        notes=notes,
        params={**params.model_dump(mode="json"), **outlook.params},
        details=outlook.details,
        model_error=error,
        profile_check=check,
        plan=plan,
    )


TRACING_NOTE = 0.03  # a profile whose traced steps ran this much longer than its untraced ones says so


def tracing_notes(profile: Profile | None) -> tuple[str, ...]:
    """What the profile's untraced steps say of tracing's cost, when it is large enough to matter:
    the simulation replays the traced steps, so every W inherits their slowdown."""
    if profile is None:
        return ()
    cost = tracing_cost(profile)
    if cost is None or cost < TRACING_NOTE:
        return ()
    return (f"tracing made the profiled steps {cost:.1%} longer on average than the "
            f"{len(profile.job.untraced_walls_us or ())} steps timed untraced after them; the prediction replays "
            "the traced steps, so it may be low by up to about that (docs/accuracy.md, what tracing costs)",)


def point_outcomes(workers: int, throughput: float, sim_low: float, sim_high: float, outlook: Outlook, model: str,
                   error: ModelError | None) -> tuple[Outcome, ...]:
    """The outcomes at one W, the predicted one first, each with its interval widened by the
    model error measured for it (``ModelError.widen``) and its probability (``Outlook.others``)."""
    def widen(low: float, high: float, outcome: str | None = None) -> tuple[float, float]:
        return error.widen(model, workers, low, high, outcome) if error is not None else (low, high)

    other = outlook.others.get(workers)
    # the predicted outcome of a two-outcome point by its name: its own widths where the error has
    # them (the synchronous "in step"), else the prediction's (``ModelError.regime`` falls back)
    low, high = widen(sim_low, sim_high, None if other is None else other.instead_of)
    if other is None:
        return (Outcome("predicted", throughput, low, high),)
    a_low, a_high = widen(other.throughput, other.throughput, other.name)
    return (Outcome(other.instead_of, throughput, low, high, 1 - other.probability, other.basis, other.known),
            Outcome(other.name, other.throughput, a_low, a_high, other.probability, other.basis, other.known))


def observed_outcomes(workers: Sequence[int], outcomes: Sequence[tuple[Outcome, ...]],
                      posterior: CurvePosterior) -> list[tuple[Outcome, ...]]:
    """The outcomes once observed throughput has conditioned the curve: where the posterior has a
    point, its median and interval are the one outcome (the observations already say which
    arrangement the workers run in, and its width already holds the model's remaining error)."""
    return [(Outcome("observed", *posterior.table[w]),) if w in posterior.table else outs
            for w, outs in zip(workers, outcomes)]


def model_inputs(profile: Profile | None, request: AdviceRequest) -> ModelInputs:
    """What every model may read, from the profile and the request."""
    return ModelInputs(
        profile=None if profile is None else prepare_profile(profile, request),
        recorded=profile,
        network=request.network,
        goodput=request.goodput,
        worker_speeds=request.worker_speeds,
        worker_bandwidths_bps=request.worker_bandwidths_bps,
        parameter_servers=request.parameter_servers,
        spec=request.spec,
        extras=request.extras,
    )


def side_by_side(inputs: ModelInputs, request: AdviceRequest) -> tuple[dict[str, tuple[float, ...]], tuple[str, ...]]:
    """The throughput of each ``request.side_by_side`` model that applies, per W of the curve, and
    notes. A model that does not apply to these inputs is left out; one that predicts another
    training regime than the trace's (``ModelRegimeError``: the asynchronous ones beside a
    synchronous trace) with a note that says so, since the user would expect it beside the curve."""
    found = {}
    refused: dict[tuple[str, str], list[str]] = {}  # (regime predicted, the trace's) -> models
    for name in request.side_by_side:
        model = registry.get(name)
        params = registry.params_for(model)
        try:
            model.check(inputs, params)
        except ModelRegimeError as exc:
            refused.setdefault((exc.predicts, exc.trace), []).append(name)
            continue
        except ModelInputError:
            continue
        curve = predict_curve(model, inputs, params, request.curve)
        found[name] = tuple(p.throughput for p in curve)
    notes = tuple(f"{' and '.join(names)} left out beside the prediction: "
                  f"{'they predict' if len(names) > 1 else 'it predicts'} {predicts}, and this trace is of {trace}"
                  for (predicts, trace), names in refused.items())
    return found, notes


def prepare_profile(profile: Profile, request: AdviceRequest) -> Profile:
    """The profile as the simulation replays it: overhead split out, client gap added."""
    prepared = profile
    if request.overhead.alpha_us_per_byte or request.overhead.beta_us:
        prepared = split_parsing_overhead(prepared, request.overhead.alpha_us_per_byte, request.overhead.beta_us)
    if request.client_gap:
        prepared = add_client_gap(prepared)
    return prepared
