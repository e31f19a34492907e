"""How far a model's prediction is from what real runs measure, and the interval that includes it.

A simulation's own interval (batch means, ``core/curve.py``) holds only its sampling noise,
typically +-1-2 %; the model itself is off by 5-28 % on real multi-worker runs. ``ModelError``
holds, per regime of W, how far measured throughput fell below and above the prediction on
runs the fit had not seen: ``benchmarks/model_error.py`` measures it leave-one-job-out over
``tests/data/ps-async/measured`` (the contention constants fitted without job J, J predicted) and
keeps conformal-style quantiles of the relative residuals r = measured / predicted - 1. The
package ships them, one file per model (``advisor/data/model_error/<model>.json``, read by
``advisor/importers/model_error_file.py``); ``ModelErrors`` holds every model's.

The interval of a point is then the simulation interval widened by them:
``low = sim_low * (1 - down)``, ``high = sim_high * (1 + up)``. Where the model knows two
outcomes at one W (two PS workers alternating or drifting, ``Outlook.others``), each outcome
has its own widths: a regime with ``outcome`` set (e.g. "alternating") holds the residuals of
the runs that showed that outcome, measured against it; the regimes without one hold the
residuals of the runs that showed the predicted outcome. An outcome without regimes of its own
is widened as the prediction is. The shipped widths are
symmetric, down = up = the regime's conformal quantile of |r| at ``level`` (split conformal's
usual score; one-sided quantiles of -r and r, each at (1 + level) / 2, are the other option:
with the five jobs at hand they covered 82 % of the held-out points against 94 %, README).
With n residuals, the conformal rank is ceil((n + 1) q); when that exceeds n, the largest
residual is used and the guarantee is below the level (``ErrorRegime.exact`` False): the data
are few, and the README says so.

A model's inputs can fall in a **scope** that misses differently (``SEVERAL_PS``: a PS job whose
bytes go to several parameter servers, measured on the 2-PS runs): the model names it
(``Outlook.error_scope``), and the error measured for that scope widens the job's intervals in
place of the model's unscoped one, which still holds at the W the scope's data leave out (W = 1:
one worker alone, whatever the scope). A scope nobody measured falls back to the unscoped error.

Only the model the residuals were measured for is widened (``ModelError.model``); for another,
``widen`` leaves the interval as it is and the advice says the model error is unknown.
``ModelErrors`` widens each model by its own data: the residuals of one model say nothing about
another's (the closed forms and the ring miss in other ways than the PS simulation does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from advisor.errors import AdvisorError

# the scope of a PS job simulated with several parameter servers (``ModelError.scope``)
SEVERAL_PS = "several-ps"


def error_key(model: str, scope: str | None) -> str:
    """One model's error in one scope, by name: ``model``, or ``model@scope`` for a scope's (a
    file of model-error data is named so, ``importers/model_error_file.py``)."""
    return model if scope is None else f"{model}@{scope}"


def error_name(model: str, scope: str | None) -> str:
    """The same, in words for a message: "model 'm'" or "model 'm' in scope 's'"."""
    return f"model {model!r}" + ("" if scope is None else f" in scope {scope!r}")


class ModelErrorDataError(AdvisorError, ValueError):
    """Model-error data that cannot be used (an empty or overlapping regime, a negative width)."""


@dataclass(frozen=True, slots=True)
class ErrorRegime:
    """Widths for W in [workers_min, workers_max] (None: no upper end)."""

    workers_min: int
    workers_max: int | None
    down: float  # measured fell at most this fraction below the prediction (at the quantile)
    up: float  # measured rose at most this fraction above it
    n: int  # residuals the quantiles come from
    exact: bool = True  # the conformal rank was within the n residuals
    outcome: str | None = None  # None: the prediction's own outcome; else another one's name (e.g. "alternating")

    def __post_init__(self) -> None:
        if self.workers_min < 1 or (self.workers_max is not None and self.workers_max < self.workers_min):
            raise ModelErrorDataError(f"a regime needs 1 <= workers_min <= workers_max, got "
                                      f"{self.workers_min}..{self.workers_max}")
        if not (0 <= self.down < 1 and 0 <= self.up and math.isfinite(self.up)):
            raise ModelErrorDataError(f"widths must be 0 <= down < 1 and up >= 0, got down {self.down}, up {self.up}")

    def holds(self, workers: int) -> bool:
        return self.workers_min <= workers and (self.workers_max is None or workers <= self.workers_max)

    @property
    def label(self) -> str:
        if self.workers_max == self.workers_min:
            span = f"W={self.workers_min}"
        else:
            span = f"W>={self.workers_min}" if self.workers_max is None else f"W={self.workers_min}..{self.workers_max}"
        return span if self.outcome is None else f"{span} {self.outcome}"


@dataclass(frozen=True, slots=True)
class ModelError:
    """The measured error of ``model``, per regime of W, at ``level`` (e.g. 0.95)."""

    model: str
    level: float
    regimes: tuple[ErrorRegime, ...]
    source: str = ""
    scope: str | None = None  # None: the model's error; else the inputs it was measured on (e.g. SEVERAL_PS)

    @property
    def key(self) -> str:
        """The model and scope, as the file is named (``error_key``)."""
        return error_key(self.model, self.scope)

    def __post_init__(self) -> None:
        if self.scope is not None and not self.scope.strip():
            raise ModelErrorDataError("a scope must be a name (e.g. several-ps) or none")
        if not 0 < self.level < 1:
            raise ModelErrorDataError(f"level must be in (0, 1), got {self.level}")
        if not self.regimes:
            raise ModelErrorDataError("model-error data needs at least one regime")
        for outcome in {r.outcome for r in self.regimes}:
            ordered = sorted((r for r in self.regimes if r.outcome == outcome), key=lambda r: r.workers_min)
            for a, b in zip(ordered, ordered[1:]):
                if a.workers_max is None or a.workers_max >= b.workers_min:
                    raise ModelErrorDataError(f"regimes {a.label} and {b.label} overlap")

    def regime(self, workers: int, outcome: str | None = None) -> ErrorRegime | None:
        """The regime ``workers`` falls in for ``outcome`` (None: the prediction's own), the
        prediction's when that outcome has none; None past the data (no widening is known there)."""
        found = next((r for r in self.regimes if r.holds(workers) and r.outcome == outcome), None)
        if found is None and outcome is not None:
            return self.regime(workers)
        return found

    def widen(self, model: str, workers: int, low: float, high: float, outcome: str | None = None) -> tuple[float, float]:
        """The interval [low, high] of ``outcome`` (None: the prediction's) widened by the model
        error (as is for another model)."""
        regime = self.regime(workers, outcome) if model == self.model else None
        if regime is None:
            return low, high
        return low * (1 - regime.down), high * (1 + regime.up)


    @property
    def points(self) -> int:
        """The residuals the widths come from (each falls in one regime of its outcome)."""
        return sum(r.n for r in self.regimes)


@dataclass(frozen=True, slots=True)
class ModelErrors:
    """The measured errors of several models, one ``ModelError`` each: a model's intervals are
    widened by its own, and a model without one is not widened (its error is unknown)."""

    errors: tuple[ModelError, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for error in self.errors:
            if error.key in seen:
                raise ModelErrorDataError(f"two model-error data for {error_name(error.model, error.scope)}: keep one")
            seen.add(error.key)

    @property
    def models(self) -> tuple[str, ...]:
        """The models whose error is measured, sorted."""
        return tuple(sorted({e.model for e in self.errors}))

    def of(self, model: str, scope: str | None = None) -> ModelError | None:
        """``model``'s own measured error for inputs in ``scope``: the scope's regimes where it was
        measured, and the model's unscoped regimes at the W the scope's leave out (e.g. W = 1,
        which no scope changes); the unscoped error alone when the scope has none; None when
        neither has been measured."""
        mine = [e for e in self.errors if e.model == model]
        base = next((e for e in mine if e.scope is None), None)
        scoped = next((e for e in mine if e.scope == scope), None) if scope is not None else None
        if scoped is None or base is None or base.level != scoped.level:
            return scoped or base
        rest = tuple(g for g in base.regimes
                     if not any(_overlap(g, s) for s in scoped.regimes if s.outcome == g.outcome))
        if not rest:
            return scoped
        regimes = sorted(scoped.regimes + rest, key=lambda g: (g.outcome is not None, g.outcome or "", g.workers_min))
        return ModelError(model, scoped.level, tuple(regimes),
                          f"{scoped.source}; elsewhere the model's: {base.source}", scoped.scope)

    def widen(self, model: str, workers: int, low: float, high: float,
              outcome: str | None = None, scope: str | None = None) -> tuple[float, float]:
        """[low, high] widened by ``model``'s own error for ``scope`` (``ModelError.widen``); as
        is for a model without one."""
        error = self.of(model, scope)
        return (low, high) if error is None else error.widen(model, workers, low, high, outcome)

    def __iter__(self) -> Iterator[ModelError]:
        return iter(self.errors)

    def __len__(self) -> int:
        return len(self.errors)


def _overlap(a: ErrorRegime, b: ErrorRegime) -> bool:
    """Whether two regimes share a W."""
    return (a.workers_max is None or b.workers_min <= a.workers_max) and \
        (b.workers_max is None or a.workers_min <= b.workers_max)


def as_errors(error: ModelErrors | ModelError | None) -> ModelErrors | None:
    """One model's error as a collection of one (None stays None: no model error asked for)."""
    return ModelErrors((error,)) if isinstance(error, ModelError) else error


def measured_phrase(models: Sequence[str]) -> str:
    """Which models have a measured error, for a note: "only A's has", "only A's and B's have"."""
    if not models:
        return "no model's has"
    if len(models) == 1:
        return f"only {models[0]}'s has"
    named = [f"{m}'s" for m in models]
    return f"only {', '.join(named[:-1])} and {named[-1]} have"


def conformal_quantile(values: Sequence[float], level: float) -> tuple[float, bool]:
    """The ceil((n + 1) level)-th smallest of ``values`` and True, or the largest and False when
    that rank exceeds n (split-conformal: a new value from the same distribution is at most
    this with probability >= level when the rank is within n)."""
    if not values:
        raise ModelErrorDataError("no residuals to take a quantile of")
    ordered = sorted(values)
    rank = math.ceil((len(ordered) + 1) * level)
    return (ordered[rank - 1], True) if rank <= len(ordered) else (ordered[-1], False)


def regime_widths(residuals: Sequence[tuple[int, float]], bounds: Sequence[tuple[int, int | None]],
                  level: float, symmetric: bool = True, outcome: str | None = None) -> tuple[ErrorRegime, ...]:
    """Per regime ``(workers_min, workers_max)``, the widths from the residuals ``(W, r)`` in it
    (r = measured / predicted - 1, predicted being ``outcome``'s throughput): symmetric, the
    conformal quantile of |r| at ``level`` on both sides (split conformal's usual score); else
    the quantiles of -r and r at (1 + level) / 2 each. A regime without residuals is left out."""
    tail = (1 + level) / 2
    out = []
    for lo, hi in bounds:
        rs = [r for w, r in residuals if w >= lo and (hi is None or w <= hi)]
        if not rs:
            continue
        if symmetric:
            width, exact = conformal_quantile([abs(r) for r in rs], level)
            out.append(ErrorRegime(lo, hi, min(width, 0.99), width, len(rs), exact, outcome))
            continue
        down, d_exact = conformal_quantile([max(0.0, -r) for r in rs], tail)
        up, u_exact = conformal_quantile([max(0.0, r) for r in rs], tail)
        out.append(ErrorRegime(lo, hi, min(down, 0.99), up, len(rs), d_exact and u_exact, outcome))
    return tuple(out)


def measured_error(model: str, level: float, residuals: Iterable[tuple[int, float, str | None]],
                   bounds: Sequence[tuple[int, int | None]],
                   outcome_bounds: Sequence[tuple[int, int | None]] | None = None,
                   symmetric: bool = True, source: str = "", scope: str | None = None) -> ModelError:
    """``model``'s error from its held-out residuals ``(W, r, outcome)`` (outcome None: the
    prediction's own; else the name of the outcome the run showed, r measured against it): the
    prediction's regimes per ``bounds``, each other outcome's per ``outcome_bounds`` (default:
    ``bounds``), outcomes in name order (``regime_widths`` computes each); ``scope``: the inputs
    the residuals come from, when not the model's whole domain (``SEVERAL_PS``)."""
    rows = list(residuals)
    regimes = regime_widths([(w, r) for w, r, o in rows if o is None], bounds, level, symmetric)
    for outcome in sorted({o for _, _, o in rows if o is not None}):
        regimes += regime_widths([(w, r) for w, r, o in rows if o == outcome],
                                 bounds if outcome_bounds is None else outcome_bounds, level, symmetric, outcome)
    return ModelError(model, level, regimes, source, scope)
