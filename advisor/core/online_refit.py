"""The online refit for callers that know models only through the protocol (the controller).

Why a module of its own: the controller must not reach into a model's package
(``tests/core/test_model_contract.py``), yet a refit is model-specific: today only the contention
model (``li2020-des+contention``) has measured constants a running job can refit
(``core/models/ps_des/refit.py``). This module names which models can be refitted and turns
plain (W, examples/s) points into the refitted model choice and a plain account of the change.
Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from advisor.core.advice import AdviceRequest, ModelChoice
from advisor.core.models.ps_des.fit_contention import Observation
from advisor.core.models.ps_des.model import CONTENTION
from advisor.core.models.ps_des.refit import refit_contention
from advisor.core.profile import Profile

REFITTABLE = frozenset({CONTENTION})  # models whose measured constants an online refit moves


@dataclass(frozen=True, slots=True)
class RefitOutcome:
    choice: ModelChoice  # the model with the refitted constants
    changed: bool
    before: dict[str, float]  # constant -> value, before and after
    after: dict[str, float]
    error_before: float  # mean |relative error| at the points that informed the fit
    error_after: float
    notes: tuple[str, ...]


def refittable(model: str) -> bool:
    """Whether ``model`` (a registry name) has constants an online refit can move."""
    return model in REFITTABLE


def refit_model(profile: Profile, request: AdviceRequest, points: Sequence[tuple[int, float]]) -> RefitOutcome:
    """Refit ``request.model``'s measured constants to ``points`` ((W, examples/s), the whole job).

    ``SimulationSettingsError`` when the model cannot be refitted, a point is impossible, or no
    point can inform the fit (only W = 1, or an alternating W = 2)."""
    refit = refit_contention(profile, request, tuple(Observation(w, t) for w, t in points))
    names = ("share_sigma", "multi_flow_goodput")
    return RefitOutcome(refit.choice(), refit.changed, {n: getattr(refit.before, n) for n in names},
                        {n: getattr(refit.params, n) for n in names}, refit.error_before, refit.error_after,
                        refit.notes)
