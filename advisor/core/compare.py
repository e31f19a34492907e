"""Every model's curve for one job, side by side, and each one's error against measurements.

``advisor compare`` shows it. A model that cannot predict this job (it needs a layer spec and
there is only a trace, or a parameter it refuses) is reported with its reason instead of
failing the whole comparison; so is one whose prediction fails for these inputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.core.advice import AdviceRequest, ModelChoice, model_inputs
from advisor.core.curve import CurvePoint, CurveSettings, Progress, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import Profile
from advisor.errors import AdvisorError


@dataclass(frozen=True, slots=True)
class ModelCurve:
    """One model's answer: its points, or why it has none; ``params`` are the parameters it ran
    with (all of them, JSON values), ``given`` the names of those that were asked for rather
    than left at the model's defaults."""

    name: str
    description: str
    points: tuple[CurvePoint, ...] = ()
    why_not: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    given: tuple[str, ...] = ()

    def throughput(self, workers: int) -> float | None:
        return next((p.throughput for p in self.points if p.workers == workers), None)


@dataclass(frozen=True, slots=True)
class ModelErrors:
    """|predicted / measured - 1| per measured W that the model predicted, and their summary."""

    name: str
    per_worker: Mapping[int, float]

    @property
    def median(self) -> float | None:
        return statistics.median(self.per_worker.values()) if self.per_worker else None

    @property
    def max(self) -> float | None:
        return max(self.per_worker.values()) if self.per_worker else None


def compare(profile: Profile | None, request: AdviceRequest, names: Sequence[str] | None = None,
            progress: Progress | None = None,
            params: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[ModelCurve, ...]:
    """The curve of each model in ``names`` (default: every registered one) with the parameters
    ``params`` gives it by name, else its defaults (the request's own model: the parameters it
    asks for). The inputs (the prepared profile above all) are built once and shared by every
    model."""
    try:
        inputs: ModelInputs | None = model_inputs(profile, request)
        problem = None
    except AdvisorError as exc:  # every model then says so in its column
        inputs, problem = None, str(exc)
    curves = []
    chosen = list(names) if names is not None else list(registry.names())
    for i, name in enumerate(chosen):
        if params is not None and name in params:
            choice = ModelChoice(name, params[name])
        else:
            choice = request.model if name == request.model.name else ModelChoice(name)
        curves.append(_one(choice, inputs, problem, request.curve))
        if progress is not None:
            progress(i + 1, len(chosen))
    return tuple(curves)


def _one(choice: ModelChoice, inputs: ModelInputs | None, problem: str | None, cfg: CurveSettings) -> ModelCurve:
    model = registry.get(choice.name)
    ran_with: dict[str, Any] = {}
    given = tuple(choice.params)
    try:
        _, params = choice.resolve()
        ran_with = params.model_dump(mode="json")
        if inputs is None:
            return ModelCurve(model.name, model.description, why_not=problem, params=ran_with, given=given)
        model.check(inputs, params)
        points = predict_curve(model, inputs, params, cfg)
    except AdvisorError as exc:  # this model cannot predict this job: say why, in its column
        return ModelCurve(model.name, model.description, why_not=str(exc), params=ran_with, given=given)
    return ModelCurve(model.name, model.description, points, params=ran_with, given=given)


def errors(curve: ModelCurve, observed: Mapping[int, float]) -> ModelErrors:
    per_worker = {}
    for w, measured in sorted(observed.items()):
        predicted = curve.throughput(w)
        if predicted is not None:
            per_worker[w] = abs(predicted / measured - 1)
    return ModelErrors(curve.name, per_worker)
