"""Does the prediction at W = 1 agree with what the profiling run itself measured?

A one-worker profile is also the first observation of the job: its client timed every step it
ran, traced and (with the PS hook's untraced tail) untraced. The prediction's W = 1 replays the
same steps, so the two agree to within the model's measured W = 1 error and what tracing cost
those steps: on the repository's real curves, stated as measured, the prediction's W = 1 lay
0.3 % to 9.6 % above the traced steps' own rate (the CNN's most: ``fifo`` order, and its traced
steps slowed by tracing). A larger gap says a stated input is wrong: with the link stated at
twice its rate every PS curve's W = 1 came out 21 % (the compute-bound CNN) to 92 % (the
transfer-bound MLP) above its profile's rate (``python -m benchmarks.profile_check``).

The check: the gap counts as a contradiction above ``limit`` = the model's own W = 1 width (its
shipped model error, ``FALLBACK_W1_WIDTH`` where none is measured) plus ``TRACING_ALLOWANCE``,
the most tracing slowed a step in ``tests/data/tracing-cost`` (+10.3 %). A contradicted
prediction says so; anchored (``advisor predict --anchor``, and the controller by itself), the
profile's rate is an observation at W = 1 with ``PROFILE_NOISE`` as its relative noise, which
the closed loop's posterior (``core/online_calibration.py``) takes like any observed throughput:
the calibration parameters (the goodput first: a link stated 2x too fast) move to explain it.
Contention constants do not show at W = 1; a profile cannot contradict them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from advisor.core.model_error import ModelError
from advisor.core.profile import Profile

TRACING_ALLOWANCE = 0.10  # tracing slowed a step by up to +10.3 % (tests/data/tracing-cost)
FALLBACK_W1_WIDTH = 0.10  # a model whose W = 1 error is not measured
PROFILE_NOISE = 0.05  # relative sd of the profile's rate as an observation: tracing's cost and a run's own spread


@dataclass(frozen=True, slots=True)
class ProfileRate:
    """The examples/s the profiling run's worker achieved, and which of its steps say so."""

    throughput: float
    steps: int
    untraced: bool  # from the steps timed untraced after the traced ones; else from the traced steps

    @property
    def source(self) -> str:
        return f"its {self.steps} {'untraced' if self.untraced else 'traced'} steps"


@dataclass(frozen=True, slots=True)
class ProfileCheck:
    """The prediction's W = 1 against the profile's own rate."""

    rate: ProfileRate
    predicted: float  # the prediction at W = 1
    limit: float  # the largest |gap| the model's W = 1 error and tracing's cost explain

    @property
    def gap(self) -> float:
        """predicted / profile rate - 1."""
        return self.predicted / self.rate.throughput - 1

    @property
    def contradicts(self) -> bool:
        return bool(abs(self.gap) > self.limit)


def profile_rate(profile: Profile) -> ProfileRate | None:
    """batch / mean client wall of the steps the profiling run timed untraced, else of its traced
    steps (``traced_rate``); None when the profile records neither."""
    untraced = profile.job.untraced_walls_us
    if untraced:
        return ProfileRate(float(profile.job.batch_size / (statistics.fmean(untraced) * 1e-6)), len(untraced), True)
    traced = traced_rate(profile)
    return None if traced is None else ProfileRate(traced, len(profile.steps), False)


def traced_rate(profile: Profile) -> float | None:
    """batch / mean client wall of the traced steps (every one must be timed), or None: what the
    profiled run itself achieved while tracing."""
    walls = [s.wall_us for s in profile.steps]
    timed = [w for w in walls if w is not None and w > 0]
    if not walls or len(timed) < len(walls):
        return None
    return float(profile.job.batch_size / (statistics.fmean(timed) * 1e-6))


def w1_width(error: ModelError | None, model: str) -> float:
    """The model's measured W = 1 half-width (the larger side), ``FALLBACK_W1_WIDTH`` unmeasured."""
    regime = error.regime(1) if error is not None and error.model == model else None
    return FALLBACK_W1_WIDTH if regime is None else max(regime.down, regime.up)


def check_one_worker(profile: Profile | None, predicted_w1: float, width: float) -> ProfileCheck | None:
    """The check of a prediction whose W = 1 is ``predicted_w1`` (module docstring); None when the
    profile records no rate or the prediction is not a number."""
    rate = None if profile is None else profile_rate(profile)
    if rate is None or not (math.isfinite(predicted_w1) and predicted_w1 > 0):
        return None
    return ProfileCheck(rate, float(predicted_w1), float(width) + TRACING_ALLOWANCE)


def contradiction_note(check: ProfileCheck) -> str:
    """What a contradicted prediction says."""
    return (f"W=1 is predicted at {check.predicted:,.1f} ex/s, {check.gap:+.0%} from the profiling run's own "
            f"{check.rate.throughput:,.1f} ex/s ({check.rate.source}): more than the model's W = 1 error and "
            f"tracing's cost explain (+-{check.limit:.0%}), so a stated input is likely wrong (the bandwidth, the "
            "goodput, the PS count); --anchor takes the profile's rate as an observation at W = 1 "
            "(docs/decisions.md, the profile as the first observation)")


def anchored_note(check: ProfileCheck) -> str:
    """What an anchored prediction says."""
    return (f"anchored on the profiling run's own {check.rate.throughput:,.1f} ex/s at W = 1 ({check.rate.source}, "
            f"relative noise {PROFILE_NOISE:.0%}): the prediction's W = 1 had been {check.gap:+.0%} from it")
