"""Fit the contention parameters (share_sigma, multi_flow_goodput) to throughput a cluster measured.

(For jobs with several PS, eta is ``multi_ps_flow_goodput``, the goodput their prediction reads;
jobs of both kinds are refused together: fit them separately.)

Why: sigma (how unevenly TCP connections share a contended link) and eta (what a link direction
delivers while several workers' flows share it) were fitted on one testbed
(``core/models/ps_des/contention.py``); a 1-worker profile cannot reveal them. A team that has watched a few
multi-worker runs of any job on its cluster (``advisor_training_examples_total`` from the
profiling library, or any log) can fit them once and give them to every later prediction
(``advisor predict --share-sigma/--multi-flow-goodput``, controller settings ``share_sigma``,
``multi_flow_goodput``).

Method: a grid search. Every (sigma, eta) on the grid predicts the observed worker counts with
the same seed (common random numbers, so grid points differ by their parameters, not by their
luck) and is scored by the mean |relative error| over the observations, ties broken by the
largest. A grid, not a gradient: the simulated throughput is a noisy, piecewise function of the
two parameters, and 42 points of a few hundred simulated steps take seconds.

What it cannot fit: a 1-worker observation (one flow: neither parameter acts), and a W = 2
observation in the *alternating* regime (``two_way.alternating_rate``), which says nothing
about sharing; such points are reported and left out of the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models.ps_des.two_way import alternating_rate, two_way
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ps_des.model import CONTENTION, ContentionParams, PsDes
from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationSettingsError

DEFAULT_SIGMAS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
DEFAULT_ETAS: tuple[float, ...] = (0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
DEFAULT_FIT_STEPS = 400  # per worker and grid point; the score compares points, it need not be tight


@dataclass(frozen=True, slots=True)
class Observation:
    """Throughput measured with ``workers`` workers (examples/s, the whole job)."""

    workers: int
    throughput: float

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise SimulationSettingsError(f"an observation needs a worker count >= 1, got {self.workers!r}")
        if not (isinstance(self.throughput, (int, float)) and math.isfinite(self.throughput) and self.throughput > 0):
            raise SimulationSettingsError(
                f"observed throughput with {self.workers} workers must be finite and > 0, got {self.throughput!r}")


@dataclass(frozen=True, slots=True)
class FitCase:
    """One job's 1-worker profile, how it is predicted, and what its multi-worker runs measured."""

    name: str
    profile: Profile
    request: AdviceRequest  # bandwidth, goodput, overhead, congestion control, queue: all but sigma and eta
    observed: tuple[Observation, ...]


@dataclass(frozen=True, slots=True)
class GridPoint:
    share_sigma: float
    multi_flow_goodput: float
    mean_error: float  # mean |relative error| over the scored observations
    max_error: float
    predicted: tuple[float, ...]  # per observation, cases in order, observations in order


@dataclass(frozen=True, slots=True)
class ObservationFit:
    case: str
    observation: Observation
    scored: bool
    predicted_before: float  # with the case's own sigma and eta
    predicted_after: float  # with the fitted ones
    why_not_scored: str = ""

    @property
    def error_before(self) -> float:
        return self.predicted_before / self.observation.throughput - 1

    @property
    def error_after(self) -> float:
        return self.predicted_after / self.observation.throughput - 1


@dataclass(frozen=True, slots=True)
class ContentionFit:
    share_sigma: float
    multi_flow_goodput: float
    before: GridPoint  # each case's own parameters, scored the same way (NaN sigma, eta if they differ)
    best: GridPoint
    observations: tuple[ObservationFit, ...]
    grid: tuple[GridPoint, ...]
    notes: tuple[str, ...]
    # the parameter eta is: multi_flow_goodput for jobs with one PS, multi_ps_flow_goodput for several
    goodput_param: str = "multi_flow_goodput"


Progress = Callable[[int, int], None]


def fit_contention(
    cases: Sequence[FitCase],
    *,
    sigmas: Sequence[float] = DEFAULT_SIGMAS,
    etas: Sequence[float] = DEFAULT_ETAS,
    steps: int = DEFAULT_FIT_STEPS,
    progress: Progress | None = None,
) -> ContentionFit:
    """The grid's (sigma, eta) that best predicts every case's observations, jointly.

    One pair for the cluster: the more jobs and worker counts observed, the more it can be
    trusted. Raises ``SimulationSettingsError`` when nothing can be fitted (no observation with
    W >= 2 outside the alternating regime, an empty grid, a case that asks for equal sharing).
    """
    if not cases:
        raise SimulationSettingsError("give at least one job with observed throughput")
    if not sigmas or not etas:
        raise SimulationSettingsError("the grid needs at least one share_sigma and one multi_flow_goodput")
    models = [_CaseModel(case, steps) for case in cases]
    eta_names = {m.eta_name for m in models}
    if len(eta_names) > 1:
        by = {name: [m.case.name for m in models if m.eta_name == name] for name in sorted(eta_names)}
        raise SimulationSettingsError(
            "jobs with one PS and with several PS read different multi-flow goodputs ("
            + "; ".join(f"{name}: {', '.join(jobs)}" for name, jobs in by.items()) + "): fit them separately")
    observed = [o for case in cases for o in case.observed]
    before_curves = [m.predicted(m.own.share_sigma, m.own_eta) for m in models]
    scored: list[bool] = []
    reasons: list[str] = []
    for m, curve in zip(models, before_curves):
        s, r = _choose_scored(m.case.observed, curve, m.alternating(curve))
        scored += s
        reasons += [f"{m.case.name}: {why}" if why else "" for why in r]
    if not any(scored):
        raise SimulationSettingsError(
            "no observation can inform the fit: " + "; ".join(r for r in reasons if r)
            + ". Observe jobs with 2 or more workers (3 or more avoids the alternating regime of 2)")

    total = len(sigmas) * len(etas)
    grid: list[GridPoint] = []
    for sigma in sigmas:
        for eta in etas:
            curves = [m.predicted(sigma, eta) for m in models]
            grid.append(_score(sigma, eta, models, scored, curves))
            if progress is not None:
                progress(len(grid), total)
    best = min(grid, key=lambda g: (round(g.mean_error, 6), round(g.max_error, 6), g.share_sigma,
                                    -g.multi_flow_goodput))
    owns = {(m.own.share_sigma, m.own_eta) for m in models}
    own_sigma, own_eta = owns.pop() if len(owns) == 1 else (math.nan, math.nan)
    before = _score(own_sigma, own_eta, models, scored, before_curves)
    names = [m.case.name for m in models for _ in m.case.observed]
    fits = tuple(ObservationFit(n, o, s, before.predicted[i], best.predicted[i], r)
                 for i, (n, o, s, r) in enumerate(zip(names, observed, scored, reasons)))
    eta_name = eta_names.pop()
    return ContentionFit(best.share_sigma, best.multi_flow_goodput, before, best, fits, tuple(grid),
                         _notes(best, sigmas, etas, sum(scored), eta_name), eta_name)


class _CaseModel:
    """One case, prepared once; predicts its observed worker counts for any (sigma, eta)."""

    def __init__(self, case: FitCase, steps: int) -> None:
        request = case.request
        if request.model.name != CONTENTION:
            raise SimulationSettingsError(f"{case.name}: fitting share_sigma and multi_flow_goodput needs the "
                                          f"contention model ({CONTENTION}), not {request.model.name}")
        if not case.observed:
            raise SimulationSettingsError(f"{case.name}: no observed throughput")
        if steps <= request.curve.warmup_steps:
            raise SimulationSettingsError(f"fit steps ({steps}) must exceed the warm-up ({request.curve.warmup_steps})")
        model, params = request.model.resolve()
        if not isinstance(model, PsDes) or not isinstance(params, ContentionParams):  # the name check says so
            raise SimulationSettingsError(f"{case.name}: {request.model.name} is not the contention model")
        self.case: FitCase = case
        self._model: PsDes = model
        self.own: ContentionParams = params
        workers = tuple(sorted({o.workers for o in case.observed} | {1, 2}))
        self._cfg: CurveSettings = replace(request.curve, workers=workers, steps=steps, target_rel_halfwidth=None,
                            min_steps=min(request.curve.min_steps, steps),
                            max_steps=max(request.curve.max_steps, steps))
        self._inputs: ModelInputs = model_inputs(case.profile, request)
        # the goodput the contention rules read for this job's PS count (Contention.flow_goodput)
        self.eta_name = "multi_ps_flow_goodput" if model.simulated_ps(self._inputs) >= 2 else "multi_flow_goodput"
        self.own_eta: float = float(getattr(params, self.eta_name))

    def predicted(self, sigma: float, eta: float) -> dict[int, float]:
        params = ContentionParams(**{**self.own.model_dump(), "share_sigma": sigma, self.eta_name: eta})
        return {p.workers: p.throughput for p in predict_curve(self._model, self._inputs, params, self._cfg)}

    def alternating(self, curve: dict[int, float]) -> float:
        rate = self._model.network(self._inputs, self.own).bandwidth_bps
        return alternating_rate(self.case.profile, curve[1], rate, two_way(self.own.contention()).efficiency)


def _choose_scored(observed: Sequence[Observation], baseline: dict[int, float],
                   alternating: float) -> tuple[list[bool], list[str]]:
    scored, reasons = [], []
    for o in observed:
        if o.workers == 1:
            scored.append(False)
            reasons.append("W=1 has one flow per link: neither parameter acts on it")
        elif o.workers == 2 and alternating > baseline[2] and \
                abs(o.throughput - alternating) < abs(o.throughput - baseline[2]):
            scored.append(False)
            reasons.append(f"W=2 at {o.throughput:.0f} ex/s is nearer the alternating outcome ({alternating:.0f}) "
                           f"than the shared one ({baseline[2]:.0f}): it says nothing about sharing")
        else:
            scored.append(True)
            reasons.append("")
    return scored, reasons


def _score(sigma: float, eta: float, models: Sequence[_CaseModel], scored: Sequence[bool],
           curves: Sequence[dict[int, float]]) -> GridPoint:
    observed = [o for m in models for o in m.case.observed]
    predicted = tuple(curve[o.workers] for m, curve in zip(models, curves) for o in m.case.observed)
    errors = [abs(p / o.throughput - 1) for p, o, s in zip(predicted, observed, scored) if s]
    return GridPoint(sigma, eta, sum(errors) / len(errors), max(errors), predicted)


def _notes(best: GridPoint, sigmas: Sequence[float], etas: Sequence[float], n_scored: int,
           eta_name: str = "multi_flow_goodput") -> tuple[str, ...]:
    notes = []
    if n_scored == 1:
        notes.append("one observation fits two parameters: many pairs fit it equally; observe more worker counts")
    if best.share_sigma in (min(sigmas), max(sigmas)) and len(sigmas) > 1:
        notes.append(f"share_sigma {best.share_sigma:g} is at the edge of the grid: the best value may lie beyond it")
    if best.multi_flow_goodput == min(etas) and len(etas) > 1:
        notes.append(f"{eta_name} {best.multi_flow_goodput:g} is at the grid's low edge: the best value may "
                     "lie below it (is the bandwidth right?)")
    return tuple(notes)
