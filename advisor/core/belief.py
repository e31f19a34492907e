"""What the advisor believes the throughput at one W will be: a probability for every rate.

A decision under a deadline asks one question of each W: how likely is its throughput T to be
at least the rate r the deadline needs? The prediction gives, per W, one or more *outcomes*,
each a point estimate with an interval at level L (``CurveSettings.confidence``, 0.95): the
simulation's batch-means Student-t interval widened by the model's measured error
(``core/model_error.py``). This module turns them into a distribution of T:

- **One outcome** is a **split normal** (two half-normals joined at the point estimate m):
  sigma_low = (m - low) / z and sigma_high = (high - m) / z with z = Phi^-1((1 + L) / 2), so that
  each end of the interval is its own side's (1 + L) / 2 quantile. Why this shape: the width is
  almost all model error (a conformal quantile of held-out residuals, which says how far, not
  in what shape), the simulation's own t interval being +-1-2 %; a normal per side is the least
  assuming shape that keeps the interval's two ends, and its lower quantiles were checked on
  held-out jobs (``benchmarks/deadline_decisions.py`` prints how often the measured throughput
  was at least the level-P lower quantile, for P = 0.8, 0.9, 0.95; docs/decisions.md).
  P(T >= r) has a closed form (``Spread.p_at_least``).
- **Several outcomes** (two workers that either alternate their pulls and pushes or drift, W = 2
  on a parameter server) are a **mixture**: outcome i happens with probability p_i and then T
  follows its own split normal, so P(T >= r) = sum_i p_i P_i(T >= r) and E[1 / T] =
  sum_i p_i E_i[1 / T].

Nothing here knows where the outcomes or their probabilities come from: the model says
(``Outlook.others``), the advice builds the outcomes (``core/advice.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from advisor.errors import AdvisorError


class BeliefError(AdvisorError, ValueError):
    """Outcomes that are not a distribution (probabilities outside [0, 1] or not summing to 1)."""


@dataclass(frozen=True, slots=True)
class Spread:
    """The throughput of one outcome as a split normal: mode ``mode``, sigma below and above."""

    mode: float
    sigma_low: float
    sigma_high: float

    @classmethod
    def from_interval(cls, throughput: float, low: float, high: float, confidence: float = 0.95) -> Spread:
        """The split normal whose (1 +- ``confidence``) / 2 quantiles are ``low`` and ``high``."""
        z = NormalDist().inv_cdf((1 + confidence) / 2)
        return cls(throughput, max(throughput - low, 0.0) / z, max(high - throughput, 0.0) / z)

    def p_at_least(self, value: float) -> float:
        """P(T >= value): below the mode, 1 minus the lower half's share of mass under ``value``."""
        m, a, b = self.mode, self.sigma_low, self.sigma_high
        if a + b == 0:
            return 1.0 if m >= value else 0.0
        if value <= m:
            below = 2 * a / (a + b) * NormalDist().cdf((value - m) / a) if a > 0 else 0.0
            return 1.0 - below
        return 2 * b / (a + b) * (1 - NormalDist().cdf((value - m) / b)) if b > 0 else 0.0

    def mean_inverse(self, points: int = 400) -> float:
        """E[1 / T], over T within 6 sigma of the mode on each side and above 2 % of the mode
        (the split normal puts mass on T <= 0, which no run has: it is cut off and the rest
        renormalised). Midpoint rule on each side."""
        m, a, b = self.mode, self.sigma_low, self.sigma_high
        if m <= 0:
            return math.inf
        if a + b == 0:
            return 1 / m
        norm = NormalDist()
        total = weight = 0.0
        for sigma, sign in ((a, -1.0), (b, 1.0)):
            if sigma == 0:
                continue
            side = 2 * sigma / (a + b)  # this side's probability mass
            span = 6.0 if sign > 0 else min(6.0, (m - 0.02 * m) / sigma)
            for i in range(points):
                u = (i + 0.5) * span / points  # in sigmas from the mode
                t = m + sign * u * sigma
                w = side * norm.pdf(u) / sigma * (span / points * sigma)
                total += w / t
                weight += w
        return total / weight


@dataclass(frozen=True, slots=True)
class Outcome:
    """One way the job can run at one W: its throughput, interval, and the chance it happens."""

    name: str  # "predicted" for a point with one outcome; else the model's name for it ("drifting", ...)
    throughput: float
    low: float
    high: float
    probability: float = 1.0
    basis: str = ""  # where the probability comes from, in words
    known: bool = True  # False: no data says which outcome happens; the probability is a stated guess


@dataclass(frozen=True, slots=True)
class Belief:
    """The distribution of the throughput at one W: outcomes with probabilities, each a Spread."""

    parts: tuple[tuple[float, Spread], ...]
    low: float  # the lowest end of any outcome's interval (the throughput a cautious reader plans for)

    def __post_init__(self) -> None:
        if not self.parts:
            raise BeliefError("a belief needs at least one outcome")
        if any(not 0 <= p <= 1 for p, _ in self.parts) or abs(sum(p for p, _ in self.parts) - 1) > 1e-9:
            raise BeliefError(f"outcome probabilities must lie in [0, 1] and sum to 1, got "
                              f"{[p for p, _ in self.parts]}")

    @classmethod
    def exact(cls, throughput: float) -> Belief:
        """Certain: T is ``throughput`` (a point estimate taken at its word)."""
        return cls(((1.0, Spread(throughput, 0.0, 0.0)),), throughput)

    @classmethod
    def interval(cls, throughput: float, low: float, high: float, level: float) -> Belief:
        """One outcome: the split normal of the interval [low, high] at ``level``."""
        return cls(((1.0, Spread.from_interval(throughput, low, high, level)),), low)

    @classmethod
    def of(cls, outcomes: Sequence[Outcome], level: float) -> Belief:
        """The mixture of ``outcomes``, each the split normal of its interval at ``level``."""
        return cls(tuple((o.probability, Spread.from_interval(o.throughput, o.low, o.high, level)) for o in outcomes),
                   min((o.low for o in outcomes), default=math.nan))

    def p_at_least(self, rate: float) -> float:
        """P(T >= rate) = sum_i p_i P_i(T >= rate)."""
        return min(1.0, sum(p * s.p_at_least(rate) for p, s in self.parts if p > 0))

    def mean_inverse(self) -> float:
        """E[1 / T] = sum_i p_i E_i[1 / T] (what the expected cost per example is priced at)."""
        return sum(p * s.mean_inverse() for p, s in self.parts if p > 0)

    def quantile_at_least(self, p: float, tolerance: float = 1e-9) -> float:
        """The rate r with P(T >= r) = ``p``: the level-p lower bound (bisection over the parts' range)."""
        if not 0 < p < 1:
            raise BeliefError(f"a lower bound's level must be in (0, 1), got {p}")
        spreads = [s for w, s in self.parts if w > 0]
        lo = min(s.mode - 8 * s.sigma_low for s in spreads)
        hi = max(s.mode + 8 * s.sigma_high for s in spreads)
        if hi - lo == 0:
            return lo
        while hi - lo > tolerance * max(1.0, abs(hi)):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.p_at_least(mid) >= p else (lo, mid)
        return lo
