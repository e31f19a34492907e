"""Every model's curve for one job, side by side, and each one's error against measurements.

``advisor compare`` shows it. A model that cannot predict this job (it needs a layer spec and
there is only a trace, or a parameter it refuses) is reported with its reason instead of
failing the whole comparison; so is one whose prediction fails for these inputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from advisor.core.advice import AdviceRequest, ModelChoice, model_inputs
from advisor.core.curve import CurvePoint, Progress, predict_curve
from advisor.core.models import registry
from advisor.core.profile import Profile
from advisor.errors import AdvisorError


@dataclass(frozen=True, slots=True)
class ModelCurve:
    """One model's answer: its points, or why it has none."""

    name: str
    description: str
    points: tuple[CurvePoint, ...] = ()
    why_not: str | None = None

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
            progress: Progress | None = None) -> tuple[ModelCurve, ...]:
    """The curve of each model in ``names`` (default: every registered one) with its default
    parameters, except the request's own model, which keeps the parameters asked for."""
    curves = []
    chosen = list(names) if names is not None else list(registry.names())
    for i, name in enumerate(chosen):
        choice = request.model if name == request.model.name else ModelChoice(name)
        curves.append(_one(profile, replace(request, model=choice)))
        if progress is not None:
            progress(i + 1, len(chosen))
    return tuple(curves)


def _one(profile: Profile | None, request: AdviceRequest) -> ModelCurve:
    model = registry.get(request.model.name)
    try:
        _, params = request.model.resolve()
        inputs = model_inputs(profile, request)
        model.check(inputs, params)
        points = predict_curve(model, inputs, params, request.curve)
    except AdvisorError as exc:  # this model cannot predict this job: say why, in its column
        return ModelCurve(model.name, model.description, why_not=str(exc))
    return ModelCurve(model.name, model.description, points)


def errors(curve: ModelCurve, observed: Mapping[int, float]) -> ModelErrors:
    per_worker = {}
    for w, measured in sorted(observed.items()):
        predicted = curve.throughput(w)
        if predicted is not None:
            per_worker[w] = abs(predicted / measured - 1)
    return ModelErrors(curve.name, per_worker)
