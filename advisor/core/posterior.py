"""A throughput curve conditioned on what the job was observed to do: the closed loop's arithmetic.

Why a module of its own: the update rule is a few lines of linear algebra that must be checkable
by hand, apart from the models and the grid that feed it (``core/online_calibration.py``).

The model. On a log scale, the job's true throughput at W is the model's prediction with some
calibration values theta, plus a *discrepancy* the model cannot express:

    log T(W) = log mu_theta(W) + d(W),   d ~ Normal(0, K),   K(W, W') = s(W) s(W') rho^|W - W'|

``s(W)`` is the model's own relative error at W (the prediction's band before any observation:
its measured model error, else an assumed one), ``rho`` how much the discrepancy at one worker
count says about the next. An observation y_k at W_k has its own relative noise sigma_k:
log y_k = log T(W_k) + e_k, e_k ~ Normal(0, sigma_k^2). This is Kennedy and O'Hagan's calibration
(2001) with theta on a grid. Given the observations, for each grid point theta_i:

- its weight is prior(theta_i) x Normal(r_i; 0, K_oo + diag(sigma^2)), r_i = log y - log mu_i at
  the observed W (how well theta_i, plus a plausible discrepancy, explains them);
- the discrepancy's posterior is Gaussian (``condition``): mean m_i(W) = k_W' A^-1 r_i and
  variance v(W) = s(W)^2 - k_W' A^-1 k_W, A = K_oo + diag(sigma^2).

The curve after the observations is the mixture over theta_i of Normal(log mu_i(W) + m_i(W), v(W)):
its median is the point, its quantiles the interval. At an observed W, v shrinks to about
sigma^2 s^2 / (sigma^2 + s^2), the observation's own noise when the model's error is the larger;
a neighbour's shrinks by rho^(2|W - W_k|) of that, so it tightens in proportion to how much
the two worker counts share. Pure numpy; no model is run here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

BISECTIONS = 60  # halvings of a quantile's bracket: far below any throughput's resolution
NEGLIGIBLE = 1e-9  # mixture components below this share of the weight are left out


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """The prior of the model's error across worker counts: ``sd[j]`` at ``workers[j]`` (log
    scale), correlated ``rho^|W - W'|`` between worker counts."""

    workers: tuple[int, ...]
    sd: tuple[float, ...]
    rho: float

    def __post_init__(self) -> None:
        if len(self.workers) != len(self.sd) or not self.workers:
            raise ValueError("a discrepancy needs one sd per worker count")
        if not 0 <= self.rho < 1:
            raise ValueError(f"the correlation rho must be in [0, 1), got {self.rho}")
        if any(not (math.isfinite(s) and s > 0) for s in self.sd):
            raise ValueError("every sd of the discrepancy must be finite and > 0")

    def covariance(self) -> np.ndarray:
        w = np.asarray(self.workers, dtype=np.float64)
        s = np.asarray(self.sd, dtype=np.float64)
        return np.outer(s, s) * self.rho ** np.abs(w[:, None] - w[None, :])


@dataclass(frozen=True, slots=True)
class Conditioned:
    """The discrepancy given the observations, for every grid point: ``mean`` (n, W), ``var`` (W,)
    (the same for every grid point: it does not depend on the observed values), and each grid
    point's log marginal likelihood ``loglik`` (n,)."""

    mean: np.ndarray
    var: np.ndarray
    loglik: np.ndarray


def condition(prior: Discrepancy, log_mu: np.ndarray, observed: Sequence[tuple[int, float, float]]) -> Conditioned:
    """Condition the discrepancy of each grid curve ``log_mu`` (n, W; log examples/s at
    ``prior.workers``) on ``observed`` ((W, examples/s, relative noise sd), W among the workers)."""
    log_mu = np.atleast_2d(np.asarray(log_mu, dtype=np.float64))
    K = prior.covariance()
    if not observed:
        return Conditioned(np.zeros_like(log_mu), np.diag(K).copy(), np.zeros(len(log_mu)))
    index = [prior.workers.index(w) for w, _, _ in observed]
    y = np.log([t for _, t, _ in observed])
    noise = np.asarray([n * n for _, _, n in observed])
    A = K[np.ix_(index, index)] + np.diag(noise)
    r = y[None, :] - log_mu[:, index]  # (n, k)
    chol = np.linalg.cholesky(A)
    solved = np.linalg.solve(chol, r.T)  # L^-1 r: (k, n)
    k_all = K[:, index]  # (W, k)
    kl = np.linalg.solve(chol, k_all.T)  # L^-1 k: (k, W)
    mean = (kl.T @ solved).T  # (n, W): k_W' A^-1 r
    var = np.maximum(np.diag(K) - np.sum(kl * kl, axis=0), 0.0)
    logdet = 2 * float(np.sum(np.log(np.diag(chol))))
    loglik = -0.5 * (np.sum(solved * solved, axis=0) + logdet + len(index) * math.log(2 * math.pi))
    return Conditioned(mean, var, loglik)


def normalised(log_weights: np.ndarray) -> np.ndarray:
    """Weights from log weights, summing to 1 (the largest taken out first, against underflow)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    w = np.exp(lw - np.max(lw))
    return w / w.sum()


def mixture_quantiles(weights: np.ndarray, means: np.ndarray, sd: float, levels: Sequence[float]) -> list[float]:
    """Quantiles of the mixture sum_i weights[i] Normal(means[i], sd) (one worker count), by bisection."""
    keep = weights > NEGLIGIBLE * weights.max()
    w, m = weights[keep] / weights[keep].sum(), means[keep]
    if sd <= 0:  # point masses: the weighted quantile of the means
        order = np.argsort(m)
        cum = np.cumsum(w[order])
        return [float(m[order][min(int(np.searchsorted(cum, q)), len(cum) - 1)]) for q in levels]
    cdf = NormalDist().cdf
    out = []
    for q in levels:
        lo, hi = float(m.min()) - 10 * sd, float(m.max()) + 10 * sd
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            if sum(wi * cdf((mid - mi) / sd) for wi, mi in zip(w, m)) < q:
                lo = mid
            else:
                hi = mid
        out.append((lo + hi) / 2)
    return out


@dataclass(frozen=True)
class CurvePosterior:
    """The curve after observations, per worker count: (throughput, low, high) in examples/s.
    ``advise`` puts it in place of the model's own points and intervals (``AdviceRequest.posterior``)."""

    table: Mapping[int, tuple[float, float, float]] = field(default_factory=dict)


def posterior_table(workers: Sequence[int], weights: np.ndarray, log_mu: np.ndarray, conditioned: Conditioned,
                    extra_var: np.ndarray, confidence: float) -> dict[int, tuple[float, float, float]]:
    """Per worker count, the mixture's median and its central ``confidence`` interval (examples/s);
    ``extra_var`` (W,) is variance outside the discrepancy (the simulation's own noise)."""
    tail = (1 - confidence) / 2
    table = {}
    for j, w in enumerate(workers):
        sd = math.sqrt(float(conditioned.var[j] + extra_var[j]))
        low, mid, high = mixture_quantiles(weights, log_mu[:, j] + conditioned.mean[:, j], sd, (tail, 0.5, 1 - tail))
        table[int(w)] = (math.exp(mid), math.exp(low), math.exp(high))
    return table
