"""The closed loop's update: a job's observed throughput corrects its model's calibration parameters
and conditions its curve, for any model that declares such parameters.

Why: a prediction from a one-worker profile rests on values a profile cannot reveal (the
contention constants, the link's delivered rate, a ring round's latency, a synchronous update's
cost). Once the job has run at some worker counts, its examples/s there say what they are.
Every model declares those parameters through the protocol (``ThroughputModel.calibration``),
so this module, and the controller that calls it, know no model's internals.

How (``docs/decisions.md``): every combination of the declared values (``grid``, thinned to at
most ``MAX_GRID`` combinations) predicts the curve once, cheaply (``GRID_STEPS`` steps, the
request's seed: common random numbers, so grid points differ by their values, not their luck).
Then a rule (``Rule``) turns the observations into the curve to decide with:

- ``posterior``: every grid row weighted by how well it, plus a discrepancy the model's own
  error allows, explains the observations, times a prior under which the stated values are all
  right with probability ``1 - MISSTATED`` (the model's measured error then its whole
  discrepancy), each one right or wrong on its own, a wrong one spread around it over its axis
  (``two_hypothesis_log_prior``). The curve is the mixture's median and interval, each row's discrepancy conditioned on
  the observations (``core/posterior.py``). So an observation the model's own error explains
  (8 % off where the model errs by 10 %) stays a discrepancy, seen at its neighbours as they
  correlate, and only one that it does not explain (a bandwidth stated 2x too high) moves the
  values;
- ``refit``: the values that explain the observations best (mean |relative error| within
  ``TIE_TOLERANCE`` of the best, the nearest to the stated values), predicted as a first
  prediction is, interval and all: a weighted refit;
- ``refit-condition``: the refit's values, and their curve conditioned on the observations;
- ``condition``: the stated values kept, only the curve conditioned (no grid to run).

``benchmarks/calibration_rules.py`` measures them on the repository's real curves (one
observation, scored at the worker counts it did not show); ``posterior`` had the smallest
large errors and the best coverage while narrowing the intervals, and is the default
(``docs/decisions.md`` has the table). The grid does not depend on the observations, so a
caller that observes the same job again passes ``cache`` and pays for it once. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, MutableMapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist
from typing import Any

import numpy as np

from advisor.core.advice import AdviceRequest, ModelChoice, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import GOODPUT, CalibrationParam, ModelInputs, ModelParams, ThroughputModel
from advisor.core.posterior import CurvePosterior, Discrepancy, condition, normalised, posterior_table
from advisor.core.profile import Profile
from advisor.core.profile_check import PROFILE_NOISE, ProfileCheck
from advisor.core.sim_types import SimulationSettingsError
from advisor.errors import ModelInputError

MAX_GRID = 160  # combinations of calibration values predicted per job (module docstring)
GRID_STEPS = 250  # steps per worker of each grid curve: they are compared, not reported
UNMEASURED_HALF_WIDTH = 0.10  # the model error assumed where none was measured: +-10 % at 95 %
PRIOR_SD = 0.5  # the prior around the stated values if they are wrong, in widths of each parameter's range
# the prior probability that the stated values are wrong (a bandwidth misstated, another cluster's
# contention constants, which every cluster but the testbed has): about one job in three
# (benchmarks/calibration_rules.py prints 0.03, 0.1 and 1 beside it; docs/decisions.md)
MISSTATED = 0.3
DEFAULT_RHO = 0.7  # correlation of the model's error between neighbouring worker counts (measured)
TIE_TOLERANCE = 0.02  # refit rule: mean |relative error| within which values explain equally well
MIN_NOISE = 0.005  # an observation is never taken as exact


class CalibrationError(SimulationSettingsError):
    """Observations that cannot calibrate this model (none usable, or no calibration parameters)."""


class Rule(StrEnum):
    """How observations update the curve (module docstring)."""

    REFIT = "refit"  # the values that explain them best; the model's own interval
    CONDITION = "condition"  # the stated values; the curve conditioned on them
    REFIT_CONDITION = "refit-condition"  # the refit's values, and the curve conditioned on them
    POSTERIOR = "posterior"  # the grid's posterior mixture, conditioned


DEFAULT_RULE = Rule.POSTERIOR


@dataclass(frozen=True, slots=True)
class Observation:
    """The job's examples/s at ``workers``, with its relative noise (a log-scale sd)."""

    workers: int
    throughput: float
    noise: float

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise CalibrationError(f"an observation needs a worker count >= 1, got {self.workers!r}")
        if not (math.isfinite(self.throughput) and self.throughput > 0):
            raise CalibrationError(f"observed examples/s at W={self.workers} must be finite and > 0, "
                                   f"got {self.throughput!r}")
        if not (math.isfinite(self.noise) and 0 <= self.noise < 1):
            raise CalibrationError(f"an observation's relative noise must be in [0, 1), got {self.noise!r}")


@dataclass(frozen=True)
class Grid:
    """Every combination of calibration values tried (``values``, one row per combination, in the
    order of ``params``) and the curve each predicts at ``workers`` (``curves``, examples/s;
    ``sim_sd``, each point's own relative sampling sd)."""

    params: tuple[CalibrationParam, ...]
    stated: tuple[float, ...]
    values: np.ndarray  # (n, p)
    workers: tuple[int, ...]
    curves: np.ndarray  # (n, W)
    sim_sd: np.ndarray  # (n, W)

    @property
    def stated_row(self) -> int:
        return int(np.argmin(np.abs(self.values - np.asarray(self.stated)[None, :]).sum(axis=1)))


@dataclass(frozen=True)
class Calibrated:
    """What an update gives: the request to predict with (its model's values and goodput set,
    and for the conditioning rules the curve to put in place of the model's), and a plain
    account of it (``report``: JSON-able)."""

    request: AdviceRequest
    values: dict[str, float]  # the calibration values predicted with
    stated: dict[str, float]
    error_before: float  # mean |relative error| at the observations, stated values
    error_after: float  # the same for the curve after the update
    notes: tuple[str, ...]
    weights: tuple[float, ...] = ()  # the posterior's weight of each grid row (posterior rule)
    stated_probability: float | None = None  # the posterior probability that the stated values are right (posterior rule)

    @property
    def changed(self) -> bool:
        return self.values != self.stated or self.request.posterior is not None

    def report(self) -> dict[str, Any]:
        return {"parameters": {k: {"before": _r(self.stated[k]), "after": _r(self.values[k])} for k in self.stated},
                "error_before": round(self.error_before, 4), "error_after": round(self.error_after, 4),
                **({} if self.stated_probability is None else
                   {"stated_values_probability": round(self.stated_probability, 4)}),
                "notes": list(self.notes)}


def calibratable(model: str) -> bool:
    """Whether ``model`` (a registry name) declares calibration parameters; False for an unknown name."""
    try:
        return bool(registry.get(model).calibration)
    except ModelInputError:
        return False


def stated_values(calibration: Sequence[CalibrationParam], params: ModelParams, goodput: float) -> tuple[float, ...]:
    """The values the request states for the ``calibration`` parameters (``calibration_for``)."""
    return tuple(float(goodput) if p.name == GOODPUT else float(getattr(params, p.name)) for p in calibration)


def with_values(model: ThroughputModel, inputs: ModelInputs, params: ModelParams,
                values: Sequence[float]) -> tuple[ModelInputs, ModelParams]:
    """``inputs`` and ``params`` with the calibration parameters that act on this job
    (``model.calibration_for(inputs)``) set to ``values``."""
    calibration = model.calibration_for(inputs)
    update = {p.name: float(v) for p, v in zip(calibration, values) if p.name != GOODPUT}
    goodput = next((float(v) for p, v in zip(calibration, values) if p.name == GOODPUT), None)
    params = params.model_copy(update=update) if update else params
    return (replace(inputs, goodput=goodput) if goodput is not None else inputs), params


def axes(params: Sequence[CalibrationParam], stated: Sequence[float], limit: int = MAX_GRID) -> list[list[float]]:
    """Each parameter's values to try: its grid and the stated value (when inside the range),
    thinned until the combinations number at most ``limit``. The axis with the most values (the
    earlier one on a tie) gives up one at a time, down to its ends and the stated value; then each
    axis keeps its ends, the stated value and, one at a time, the value farthest (in the axis's own
    scale: log for a ``log`` parameter) from those kept. So every axis keeps values spread over its
    whole range: a goodput axis of four keeps about 0.5 (a bandwidth stated 2x too high) beside
    0.25, the stated 0.95 and 1.0, where halving the longest axis again and again had left a
    synchronous job [0.25, 0.9, 0.95, 1.0] and, for some stated values, never ended (an axis whose
    halving kept every value)."""
    full = [sorted({*p.grid, s} if p.low <= s <= p.high else set(p.grid)) for p, s in zip(params, stated)]
    fixed = [sorted({a[0], a[-1], *([s] if s in a else [])}) for a, s in zip(full, stated)]
    counts = [len(a) for a in full]
    while math.prod(counts) > limit:
        movable = [j for j in range(len(full)) if counts[j] > len(fixed[j])]
        if not movable:
            break  # only ends and stated values left: at most 3 per axis
        j = max(movable, key=lambda i: (counts[i], -i))
        counts[j] -= 1
    return [_spread(a, f, n, p.log) for a, f, n, p in zip(full, fixed, counts, params)]


def _spread(values: list[float], kept: list[float], count: int, log: bool) -> list[float]:
    """``kept`` and, one at a time up to ``count``, the value of ``values`` farthest from those kept."""
    scale = (lambda v: math.log(v)) if log else (lambda v: v)
    chosen, rest = list(kept), [v for v in values if v not in kept]
    while len(chosen) < count and rest:
        best = max(rest, key=lambda v: (min(abs(scale(v) - scale(c)) for c in chosen), -v))
        chosen.append(best)
        rest.remove(best)
    return sorted(chosen)


def grid_for(model: ThroughputModel, inputs: ModelInputs, params: ModelParams, curve: CurveSettings,
             stated: Sequence[float]) -> Grid:
    """Predict the curve of every combination of calibration values (``axes``)."""
    calibration = model.calibration_for(inputs)
    combos = list(itertools.product(*axes(calibration, stated)))
    cfg = replace(curve, steps=max(GRID_STEPS, curve.warmup_steps + 50), target_rel_halfwidth=None)
    z = NormalDist().inv_cdf((1 + cfg.confidence) / 2)
    curves, sds = [], []
    for combo in combos:
        inp, par = with_values(model, inputs, params, combo)
        points = predict_curve(model, inp, par, cfg)
        curves.append([p.throughput for p in points])
        sds.append([(p.high - p.low) / (2 * z * p.throughput) if p.throughput > 0 else 0.0 for p in points])
    return Grid(tuple(calibration), tuple(stated), np.asarray(combos, dtype=np.float64), cfg.workers,
                np.asarray(curves, dtype=np.float64), np.asarray(sds, dtype=np.float64))


def prior_sd(request: AdviceRequest, model: str, workers: Sequence[int]) -> tuple[float, ...]:
    """The model's own relative error per W as a log-scale sd: its measured model error where the
    request has it for this model, else ``UNMEASURED_HALF_WIDTH`` at 95 %."""
    error = request.error_of(model)
    out = []
    for w in workers:
        regime = error.regime(w) if error is not None else None
        if regime is None:
            z = NormalDist().inv_cdf(0.975)
            out.append(math.log((1 + UNMEASURED_HALF_WIDTH) / (1 - UNMEASURED_HALF_WIDTH)) / (2 * z))
        else:
            z = NormalDist().inv_cdf((1 + error.level) / 2)  # type: ignore[union-attr]
            out.append(max(math.log((1 + regime.up) / (1 - regime.down)) / (2 * z), 1e-3))
    return tuple(out)


def calibrate(profile: Profile | None, request: AdviceRequest, observations: Sequence[Observation], *,
              rule: Rule = DEFAULT_RULE, rho: float = DEFAULT_RHO, prior_width: float = PRIOR_SD,
              misstated: float = MISSTATED, cache: MutableMapping[Hashable, Grid] | None = None,
              cache_key: Hashable | None = None) -> Calibrated:
    """The request to predict ``profile`` with after ``observations`` (module docstring).

    ``CalibrationError`` when the model declares no calibration parameters or no observation
    lies on the request's curve, or ``misstated`` is not in (0, 1]; other problems of the
    request are the model's own errors. ``cache`` (with ``cache_key`` naming the profile) keeps
    the grid for the next call."""
    if not (isinstance(misstated, (int, float)) and 0 < misstated <= 1):
        raise CalibrationError(f"the prior probability of misstated values must be in (0, 1], got {misstated!r}")
    model, params = request.model.resolve()
    if not model.calibration:
        raise CalibrationError(f"model {model.name!r} has no calibration parameters: {model.calibration_note}")
    inputs = model_inputs(profile, request)
    model.check(inputs, params)
    params = model.resolved(inputs, params)  # the values the prediction uses, where the inputs decide them
    workers = request.curve.workers
    usable = [o for o in observations if o.workers in workers]
    notes = [f"W={o.workers} is outside the curve (W = {workers[0]}..{workers[-1]}): not used"
             for o in observations if o.workers not in workers]
    if not usable:
        raise CalibrationError("no observation lies on the curve: " + "; ".join(notes))
    calibration = model.calibration_for(inputs)
    stated = stated_values(calibration, params, request.goodput)
    grid = _grid(model, inputs, params, request, stated, rule, cache, cache_key)
    before = _mean_error(grid.curves[grid.stated_row], workers, usable)
    posterior: CurvePosterior | None = None
    weights: tuple[float, ...] = ()
    right: float | None = None
    if rule is Rule.REFIT:
        row = _refit_row(grid, usable)
        values = tuple(float(v) for v in grid.values[row])
        after = _mean_error(grid.curves[row], workers, usable)
    else:
        w, table, right = _conditioned(grid, request, model.name, usable, rule, rho, prior_width, misstated)
        values = tuple(float(v) for v in grid.values[_likeliest_row(grid, w, right)])
        posterior, weights = CurvePosterior(table), tuple(float(x) for x in w)
        after = _mean_error(np.asarray([table[x][0] for x in workers]), workers, usable)
    inputs_after, params_after = with_values(model, inputs, params, values)
    choice = ModelChoice(model.name, params_after.model_dump(mode="json"))
    new = replace(request, model=choice, goodput=inputs_after.goodput, posterior=posterior)
    names = [p.name for p in calibration]
    notes += _edge_notes(calibration, values, after)
    return Calibrated(new, dict(zip(names, values)), dict(zip(names, stated)), before, after, tuple(notes), weights,
                      right)


def _likeliest_row(grid: Grid, w: np.ndarray, right: float | None) -> int:
    """The row whose values an update reports and predicts with: the stated one while "the stated
    values are right" is the likelier hypothesis, else the likeliest row under the other. The
    most weighted row alone would not do: the stated row holds the first hypothesis's whole
    mass, so it can outweigh every other row when that hypothesis has lost (P < 0.5)."""
    if right is None:
        return int(np.argmax(w))
    if right >= 0.5:
        return grid.stated_row
    wrong = w.copy()
    wrong[grid.stated_row] = max(wrong[grid.stated_row] - right, 0.0)
    return int(np.argmax(wrong))


def _conditioned(grid: Grid, request: AdviceRequest, model: str, observed: Sequence[Observation], rule: Rule,
                 rho: float, prior_width: float, misstated: float = MISSTATED,
                 ) -> tuple[np.ndarray, dict[int, tuple[float, float, float]], float | None]:
    """The grid rows' weights and the curve conditioned on ``observed`` (``core/posterior.py``):
    the posterior over every row, or all the weight on one (the stated values, or the refit's);
    for the posterior, the probability that the stated values are right."""
    workers = request.curve.workers
    log_mu = np.log(grid.curves)
    # the model's measured error is its error with the right values: the discrepancy under either hypothesis
    sd = prior_sd(request, model, workers)
    cond = condition(Discrepancy(workers, sd, rho), log_mu,
                     [(o.workers, o.throughput, max(o.noise, MIN_NOISE)) for o in observed])
    right: float | None = None
    if rule is Rule.POSTERIOR:
        log_w = cond.loglik + two_hypothesis_log_prior(grid, prior_width, misstated)
        w = normalised(log_w)
        # "the stated values are right": its prior times the stated row's likelihood, over the evidence
        right = 0.0 if misstated == 1 else float(np.exp(
            math.log1p(-misstated) + cond.loglik[grid.stated_row] - np.logaddexp.reduce(log_w)))
    else:
        w = np.zeros(len(log_mu))
        w[grid.stated_row if rule is Rule.CONDITION else _refit_row(grid, observed)] = 1.0
    extra = np.median(grid.sim_sd, axis=0) ** 2  # the grid curves' own sampling noise
    return w, posterior_table(workers, w, log_mu, cond, extra, request.curve.confidence), right


def _grid(model: ThroughputModel, inputs: ModelInputs, params: ModelParams, request: AdviceRequest,
          stated: tuple[float, ...], rule: Rule, cache: MutableMapping[Hashable, Grid] | None,
          cache_key: Hashable | None) -> Grid:
    """The grid (only the stated row for the discrepancy rule), from ``cache`` when it has it."""
    if rule is Rule.CONDITION:
        cfg = replace(request.curve, steps=max(GRID_STEPS, request.curve.warmup_steps + 50),
                      target_rel_halfwidth=None)
        z = NormalDist().inv_cdf((1 + cfg.confidence) / 2)
        points = predict_curve(model, inputs, params, cfg)
        return Grid(tuple(model.calibration_for(inputs)), stated, np.asarray([stated]), cfg.workers,
                    np.asarray([[p.throughput for p in points]]),
                    np.asarray([[(p.high - p.low) / (2 * z * p.throughput) for p in points]]))
    key = None if cache is None or cache_key is None else (cache_key, _request_key(request, model.calibration_for(inputs)))
    if key is not None and cache is not None and key in cache:
        return cache[key]
    grid = grid_for(model, inputs, params, request.curve, stated)
    if key is not None and cache is not None:
        cache[key] = grid
    return grid


def _request_key(request: AdviceRequest, calibration: Sequence[CalibrationParam]) -> str:
    """What the grid depends on besides the profile: the request without the calibration values
    (which the grid spans) and without prices and constraints (which it does not read)."""
    model, params = request.model.resolve()
    fixed = {k: v for k, v in params.model_dump(mode="json").items() if k not in {p.name for p in calibration}}
    return repr((model.name, sorted(fixed.items()), request.network, request.overhead, request.client_gap,
                 request.curve.workers, request.curve.seed, request.curve.warmup_steps, request.curve.confidence,
                 request.worker_speeds, request.worker_bandwidths_bps, request.parameter_servers,
                 None if GOODPUT in {p.name for p in calibration} else request.goodput))


def _axis_log_prior(param: CalibrationParam, values: np.ndarray, stated: float, width: float = PRIOR_SD) -> np.ndarray:
    """Normal around the stated value, ``width`` of the range wide (log scale where declared)."""
    if param.log:
        d = (np.log(values) - math.log(min(max(stated, param.low), param.high))) / math.log(param.high / param.low)
    else:
        d = (values - stated) / (param.high - param.low)
    return -0.5 * (d / width) ** 2


def two_hypothesis_log_prior(grid: Grid, width: float = PRIOR_SD, misstated: float = MISSTATED) -> np.ndarray:
    """The log prior of every grid row (module docstring): all the stated values are right with
    probability ``1 - misstated``. Each parameter's is right or wrong on its own, each right with
    ``(1 - misstated)^(1/k)`` of k parameters, and a wrong one is spread over its axis as a normal
    ``width`` of its range wide around it. So an observation that shows one stated value wrong (a
    bandwidth: a throughput at one worker that only the goodput explains) leaves the others on
    theirs; one prior over all of them at once had made every value doubtful with it (a
    synchronous job observed at W = 1 lost its barrier and sharing constants to the spread, and
    its W = 2 came out 8 % low). With one parameter: ``1 - misstated`` on its stated value."""
    k = len(grid.params)
    each = 1.0 - (1.0 - misstated) ** (1.0 / k)  # a parameter's own probability of being wrong
    total = np.zeros(len(grid.values))
    with np.errstate(divide="ignore"):
        for j, param in enumerate(grid.params):
            column = grid.values[:, j]
            axis = np.unique(column)
            stated = axis[np.argmin(np.abs(axis - grid.stated[j]))]  # as ``Grid.stated_row`` finds it
            spread = normalised(_axis_log_prior(param, axis, grid.stated[j], width))
            prob = each * spread + (1 - each) * (axis == stated)
            total += np.log(prob)[np.searchsorted(axis, column)]
    return total


def _refit_row(grid: Grid, observed: Sequence[Observation]) -> int:
    """The stated row when it explains the observations about as well as the best; else, of the
    rows that do, the nearest to it (least change that explains them)."""
    errors = np.asarray([_mean_error(c, grid.workers, observed) for c in grid.curves])
    best = float(errors.min())
    stated = grid.stated_row
    if errors[stated] <= best + TIE_TOLERANCE:
        return stated
    spans = np.asarray([math.log(p.high / p.low) if p.log else p.high - p.low for p in grid.params])
    scaled = np.asarray([[math.log(x) if p.log else x for p, x in zip(grid.params, row)] for row in grid.values])
    distance = np.abs(scaled - scaled[stated][None, :]) / spans[None, :]
    good = np.flatnonzero(errors <= best + TIE_TOLERANCE)
    return int(min(good, key=lambda i: (round(float(distance[i].sum()), 9), float(errors[i]))))


def _mean_error(curve: np.ndarray, workers: Sequence[int], observed: Sequence[Observation]) -> float:
    return float(np.mean([abs(curve[workers.index(o.workers)] / o.throughput - 1) for o in observed]))


def _edge_notes(params: Sequence[CalibrationParam], values: Sequence[float], error: float) -> list[str]:
    """What a value at an end of its range means, when the curve still misses the observations."""
    if error <= 0.05:
        return []
    notes = []
    for p, v in zip(params, values):
        if v == p.low:
            notes.append(f"{p.name} is at the low end of its range ({p.low:g}) and the curve still misses the "
                         f"observations by {error:.0%}: more is wrong than this parameter can say")
        elif v == p.high:
            notes.append(f"{p.name} is at the high end of its range ({p.high:g}) and the curve still misses the "
                         f"observations by {error:.0%}" + (": is the bandwidth stated too low?" if p.name == GOODPUT
                                                           else ""))
    return notes


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def profile_anchored(profile: Profile | None, request: AdviceRequest, check: ProfileCheck) -> AdviceRequest:
    """``request`` conditioned on the profiling run's own rate as an observation at W = 1
    (``core/profile_check.py``): what ``advisor predict --anchor`` and the controller predict with
    when the profile contradicts the prediction."""
    return calibrate(profile, request, [Observation(1, check.rate.throughput, PROFILE_NOISE)]).request
