"""The two numerical routines the core needed from scipy: a Student t quantile and NNLS.

Why: scipy (about 114 MB installed) served exactly one ``stats.t.ppf`` (the batch-means
interval of a prediction) and one ``optimize.nnls`` (the link-overhead fit of calibration).
Both are small, classical algorithms; writing them here keeps the controller image and the
prediction workers free of scipy. Only the standard library and numpy are used.

- ``student_t_quantile(p, df)``: the t distribution's CDF through the regularized incomplete
  beta function, ``P(T > t) = I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)`` (Abramowitz and
  Stegun 26.7.1 and 26.5.27), the incomplete beta by its continued fraction evaluated with the
  modified Lentz method (Numerical Recipes, 3rd ed., section 6.4), inverted by bisection to the
  last representable digits. Accurate to about 1e-12 relative for df >= 1.
- ``nnls(a, b)``: min ||a x - b|| subject to x >= 0 by the active-set method of Lawson and
  Hanson (Solving Least Squares Problems, 1974, chapter 23), each subproblem solved with
  ``numpy.linalg.lstsq``; same return value as ``scipy.optimize.nnls`` (x, residual norm).
"""

from __future__ import annotations

import math

import numpy as np

_EPS = 2.220446049250313e-16
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf), modified Lentz."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 4 * _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast for x < (a + 1) / (a + b + 2); beyond, use I_x(a,b) = 1 - I_{1-x}(b,a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (scipy's ``stats.t.ppf(p, df)``), for 0 < p < 1 and df > 0."""
    if not (0.0 < p < 1.0):
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if not (df > 0 and math.isfinite(df)):
        raise ValueError(f"the t distribution needs finite degrees of freedom > 0, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    # Bisection on a function of t that is monotone and computed without cancellation: the
    # upper tail far from the centre, the central probability P(|T| < t) = I_{t^2/(df+t^2)}(1/2, df/2)
    # near it (1 - p and 2p - 1 are both exact in floating point for the p each branch gets).
    if p > 0.75:
        target, below = 1.0 - p, lambda t: student_t_upper_tail(t, df) > target
    else:
        target = 2.0 * p - 1.0
        below = lambda t: regularized_incomplete_beta(0.5, df / 2.0, t * t / (df + t * t)) < target  # noqa: E731
    lo, hi = 0.0, 1.0
    while below(hi):
        lo, hi = hi, hi * 2.0
    while hi - lo > 4 * _EPS * hi:
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> tuple[np.ndarray, float]:
    """Non-negative least squares (Lawson-Hanson): (x >= 0 minimising ||a x - b||, that norm)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 1 or a.shape[0] != b.shape[0]:
        raise ValueError(f"nnls needs a matrix and a vector of as many rows, got shapes {a.shape} and {b.shape}")
    m, n = a.shape
    max_iter = 3 * n + 10 if max_iter is None else max_iter
    tol = 10 * _EPS * max(m, n) * max(float(np.abs(a).sum(axis=0).max(initial=0.0)), 1.0)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)

    def solve_on(columns: np.ndarray) -> np.ndarray:
        z = np.zeros(n)
        z[columns] = np.linalg.lstsq(a[:, columns], b, rcond=None)[0]
        return z

    w = a.T @ (b - a @ x)
    iterations = 0
    while not passive.all() and (w[~passive] > tol).any():
        iterations += 1
        if iterations > max_iter:
            raise ArithmeticError(f"nnls did not converge in {max_iter} iterations")
        passive[int(np.argmax(np.where(passive, -np.inf, w)))] = True
        z = solve_on(passive)
        while (z[passive] <= 0).any():  # step back to the feasible region, drop what hit zero
            iterations += 1
            if iterations > max_iter:
                raise ArithmeticError(f"nnls did not converge in {max_iter} iterations")
            blocking = passive & (z <= 0)
            # x > z there, so the step is in [0, 1); x = z = 0 (a column just added) gives 0
            alpha = float(np.min(x[blocking] / np.maximum(x[blocking] - z[blocking], _TINY)))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
            z = solve_on(passive)
        x = z
        w = a.T @ (b - a @ x)
    return x, float(np.linalg.norm(a @ x - b))
