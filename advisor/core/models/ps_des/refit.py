"""Refit one job's contention constants to the throughput it was observed at (the online refit).

Why: ``fit_contention`` fits one (share_sigma, multi_flow_goodput) pair for a cluster from many
jobs, offline. A running job tells more about itself: once it has trained at some worker count
W >= 2 for long enough, its observed examples/s says how its own links are shared. The
controller (``advisor/controller/pipeline/refit.py``) asks this module for the job's constants given
those points, then predicts the whole curve again with them.

What moves and what does not: the simulator's structure (the trace's ops, the PS links, the
contention rules) stays; only the two measured constants of the rules move, the same two
``fit_contention`` fits, by the same grid search (common random numbers, the same scoring).
Bounded, so that one noisy point cannot give absurd constants:

- the grid spans ``SIGMA_BOUNDS`` x ``ETA_BOUNDS`` only (plus the current values, so keeping
  them is always a candidate);
- the current constants are kept when they score within ``tie_tolerance`` of the best pair
  (the gap is within what the simulation's own noise and the grid can tell apart);
- otherwise, of the pairs scoring within ``tie_tolerance`` of the best, the one *nearest* the
  current constants is taken (normalised by the bounds' widths), not simply the best: the
  least change that explains the observations.

What it cannot do: a 1-worker observation informs neither constant (one flow per link), so the
W = 1 point of a curve never moves; a gap larger than contention can explain (another job on the
link, a wrong bandwidth, slower compute than profiled) ends at a bound, and ``notes`` says so.
Pure: no I/O; the caller brings the profile, the request (network, model and its parameters)
and the observations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from advisor.core.advice import AdviceRequest, ModelChoice
from advisor.core.models.ps_des.fit_contention import (
    DEFAULT_FIT_STEPS, ContentionFit, FitCase, GridPoint, Observation, fit_contention,
)
from advisor.core.models.ps_des.model import CONTENTION, ContentionParams
from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationSettingsError

SIGMA_BOUNDS = (0.0, 2.0)  # lognormal spread of TCP shares; the testbed's fit was 1.0 (contention.py)
ETA_BOUNDS = (0.6, 1.0)  # a shared direction delivers 60-100 % of its rate; the testbed's fit was 0.85
SIGMA_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
ETA_GRID: tuple[float, ...] = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
TIE_TOLERANCE = 0.02  # mean |relative error| within which two pairs count as explaining the points equally
UNEXPLAINED = 0.05  # a mean |relative error| left after the refit that ``notes`` reports


@dataclass(frozen=True, slots=True)
class Refit:
    """The job's constants before and after, how well each explains the observations, and why."""

    before: ContentionParams
    params: ContentionParams  # the constants to predict with from now on
    error_before: float  # mean |relative error| over the scored observations, current constants
    error_after: float  # the same with ``params``
    scored: tuple[bool, ...]  # per observation: did it inform the fit (W = 1 and alternating W = 2 do not)
    notes: tuple[str, ...]
    fit: ContentionFit  # the whole grid, for reports

    @property
    def changed(self) -> bool:
        return (self.params.share_sigma, self.params.multi_flow_goodput) != (
            self.before.share_sigma, self.before.multi_flow_goodput)

    def choice(self) -> ModelChoice:
        """The model choice that predicts with the refitted constants."""
        return ModelChoice(CONTENTION, self.params.model_dump(mode="json"))


def refit_contention(
    profile: Profile,
    request: AdviceRequest,
    observed: Sequence[Observation],
    *,
    steps: int = DEFAULT_FIT_STEPS,
    tie_tolerance: float = TIE_TOLERANCE,
) -> Refit:
    """Fit this job's share_sigma and multi_flow_goodput to ``observed``, within the bounds.

    ``request`` is the job's prediction request: its network, goodput, overhead and model (the
    contention model, with the current constants) are what the fit predicts with. Raises
    ``SimulationSettingsError`` when the model is not the contention model or no observation
    can inform the fit (only W = 1, or a W = 2 in the alternating regime).
    """
    if not observed:
        raise SimulationSettingsError("a refit needs at least one observed throughput")
    if not 0 <= tie_tolerance < 1:
        raise SimulationSettingsError(f"tie_tolerance must be in [0, 1), got {tie_tolerance!r}")
    if request.model.name != CONTENTION:
        raise SimulationSettingsError(f"only the contention model ({CONTENTION}) has constants to refit, "
                                      f"not {request.model.name}")
    _, current = request.model.resolve()
    if not isinstance(current, ContentionParams):  # the name check says so
        raise SimulationSettingsError(f"{request.model.name} has no contention constants")
    sigmas = tuple(sorted({*SIGMA_GRID, current.share_sigma}))
    etas = tuple(sorted({*ETA_GRID, current.multi_flow_goodput}))
    fit = fit_contention([FitCase("job", profile, request, tuple(observed))], sigmas=sigmas, etas=etas, steps=steps)
    scored = tuple(o.scored for o in fit.observations)
    chosen = _choose(fit, current, tie_tolerance)
    params = current.model_copy(update={"share_sigma": chosen.share_sigma,
                                        "multi_flow_goodput": chosen.multi_flow_goodput})
    notes = [o.why_not_scored for o in fit.observations if o.why_not_scored]
    notes += _gap_notes(chosen, fit.before.mean_error)
    return Refit(current, params, fit.before.mean_error, chosen.mean_error, scored, tuple(notes), fit)


def _choose(fit: ContentionFit, current: ContentionParams, tie_tolerance: float) -> GridPoint:
    """The current pair when it is as good as the best; else the nearest pair that is."""
    best = fit.best.mean_error
    if fit.before.mean_error <= best + tie_tolerance:
        return fit.before
    good = [g for g in fit.grid if g.mean_error <= best + tie_tolerance
            and SIGMA_BOUNDS[0] <= g.share_sigma <= SIGMA_BOUNDS[1] and ETA_BOUNDS[0] <= g.multi_flow_goodput
            <= ETA_BOUNDS[1]]
    if not good:  # the best lies on the current value outside the bounds: it is kept (see ``_choose``'s rule)
        return fit.before
    sigma_span, eta_span = SIGMA_BOUNDS[1] - SIGMA_BOUNDS[0], ETA_BOUNDS[1] - ETA_BOUNDS[0]

    def distance(g: GridPoint) -> tuple[float, float, float, float]:
        d = abs(g.share_sigma - current.share_sigma) / sigma_span + abs(
            g.multi_flow_goodput - current.multi_flow_goodput) / eta_span
        return round(d, 9), round(g.mean_error, 9), g.share_sigma, -g.multi_flow_goodput

    return min(good, key=distance)


def _gap_notes(chosen: GridPoint, error_before: float) -> list[str]:
    """What a refit that leaves more than ``UNEXPLAINED`` of the gap says about it."""
    notes: list[str] = []
    if chosen.mean_error <= UNEXPLAINED:
        return notes
    if chosen.multi_flow_goodput <= ETA_BOUNDS[0]:
        notes.append(f"multi_flow_goodput is at its lower bound {ETA_BOUNDS[0]:g} and the curve still misses the "
                     f"observations by {chosen.mean_error:.0%}: more than link sharing explains (another job on "
                     "the links, a wrong bandwidth, slower compute than profiled?)")
    elif chosen.multi_flow_goodput >= ETA_BOUNDS[1]:
        notes.append(f"multi_flow_goodput is at its upper bound {ETA_BOUNDS[1]:g} and the curve still misses the "
                     f"observations by {chosen.mean_error:.0%}: the job runs faster than its contention allows "
                     "(is the bandwidth right?)")
    elif chosen.mean_error < error_before:
        notes.append(f"the refit explains part of the gap: {error_before:.0%} before, {chosen.mean_error:.0%} after")
    return notes
