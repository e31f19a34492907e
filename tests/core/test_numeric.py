"""The core's own t quantile and NNLS (advisor/core/numeric.py), which replace scipy.

Expected values: a published t table, the t distribution's closed-form quantiles for 1, 2 and 4
degrees of freedom, hand-solved least-squares problems, and the Karush-Kuhn-Tucker conditions
that characterise the NNLS optimum. scipy, where installed (the test extra), is a second opinion.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from advisor.core.numeric import nnls, regularized_incomplete_beta, student_t_quantile

# NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, "Critical Values of the
# Student's t Distribution" (upper-tail probability alpha, values to three decimals).
ALPHAS = (0.10, 0.05, 0.025, 0.01, 0.005)
NIST_T_TABLE = {
    1: (3.078, 6.314, 12.706, 31.821, 63.657),
    2: (1.886, 2.920, 4.303, 6.965, 9.925),
    5: (1.476, 2.015, 2.571, 3.365, 4.032),
    9: (1.383, 1.833, 2.262, 2.821, 3.250),  # df 9: the batch-means interval's default (10 batches)
    10: (1.372, 1.812, 2.228, 2.764, 3.169),
    19: (1.328, 1.729, 2.093, 2.539, 2.861),
    30: (1.310, 1.697, 2.042, 2.457, 2.750),
    100: (1.290, 1.660, 1.984, 2.364, 2.626),
}


@pytest.mark.parametrize("df", sorted(NIST_T_TABLE))
def test_t_quantiles_match_the_nist_table(df: int) -> None:
    for alpha, tabled in zip(ALPHAS, NIST_T_TABLE[df]):
        assert student_t_quantile(1 - alpha, df) == pytest.approx(tabled, abs=0.0005), (df, alpha)
        assert student_t_quantile(alpha, df) == pytest.approx(-tabled, abs=0.0005)  # symmetry


def closed_form_t(p: float, df: int) -> float:
    """Student t quantiles in closed form (e.g. Hill 1970; Wikipedia "Student's t-distribution"):
    df 1 is the Cauchy distribution, tan(pi (p - 1/2)); df 2: (2p - 1) / sqrt(2 p (1 - p));
    df 4: sign(p - 1/2) 2 sqrt(q - 1) with q = cos(arccos(sqrt(a)) / 3) / sqrt(a), a = 4 p (1 - p)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    a = 4 * p * (1 - p)
    q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
    return math.copysign(2 * math.sqrt(q - 1), p - 0.5)


@pytest.mark.parametrize("df", [1, 2, 4])
@pytest.mark.parametrize("p", [0.001, 0.1, 0.3, 0.49, 0.51, 0.75, 0.9, 0.975, 0.999, 0.999999])
def test_t_quantiles_match_the_closed_forms(p: float, df: int) -> None:
    assert student_t_quantile(p, df) == pytest.approx(closed_form_t(p, df), rel=1e-9)


def test_t_quantile_tends_to_the_normal_one() -> None:
    # z_0.975 = 1.959963984540054 (the normal quantile; e.g. NIST 1.3.6.7.1); t_df -> z as df grows.
    assert student_t_quantile(0.975, 1e7) == pytest.approx(1.959963984540054, rel=1e-6)
    assert student_t_quantile(0.5, 3) == 0.0


def test_incomplete_beta_hand_values() -> None:
    # I_x(1, 1) = x (uniform); I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b.
    assert regularized_incomplete_beta(1, 1, 0.3) == pytest.approx(0.3, rel=1e-14)
    assert regularized_incomplete_beta(2.5, 1, 0.4) == pytest.approx(0.4**2.5, rel=1e-13)
    assert regularized_incomplete_beta(1, 3, 0.8) == pytest.approx(1 - 0.2**3, rel=1e-13)


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.5, 0), (0.9, math.inf), (math.nan, 3)])
def test_t_quantile_refuses_what_it_cannot_answer(p: float, df: float) -> None:
    with pytest.raises(ValueError, match="quantile needs|degrees of freedom"):
        student_t_quantile(p, df)


def test_t_quantile_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats", reason="scipy (the test extra's second opinion) is not installed")
    for df in (1, 3, 9, 19, 50, 1000):
        for p in (0.6, 0.9, 0.95, 0.975, 0.995, 0.9999):
            assert student_t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9), (p, df)


# --- NNLS --------------------------------------------------------------------------------------


def test_nnls_identity_clips_the_negative_part() -> None:
    # min (x1 - 1)^2 + (x2 + 2)^2 with x >= 0: x = (1, 0), residual |(0, 2)| = 2.
    x, residual = nnls(np.eye(2), np.array([1.0, -2.0]))
    assert x.tolist() == [1.0, 0.0] and residual == pytest.approx(2.0)


def test_nnls_keeps_a_feasible_exact_solution() -> None:
    # x = (1, 2) solves all three rows exactly (1, 2, 1 + 2 = 3) and is non-negative.
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    x, residual = nnls(a, np.array([1.0, 2.0, 3.0]))
    assert x == pytest.approx([1.0, 2.0]) and residual == pytest.approx(0.0, abs=1e-12)


def test_nnls_line_with_a_falling_trend_takes_the_flat_face() -> None:
    """y ~ a t + b on t = 0, 1, 2 with y = 3, 2, 1: unconstrained a = -1. Faces: a = 0 gives
    b = mean y = 2, squared error 1 + 0 + 1 = 2; b = 0 gives a = t.y / t.t = 4/5, squared error
    9 + 1.44 + 0.36 = 10.8. So (a, b) = (0, 2), residual sqrt(2)."""
    t = np.array([0.0, 1.0, 2.0])
    x, residual = nnls(np.column_stack([t, np.ones(3)]), np.array([3.0, 2.0, 1.0]))
    assert x == pytest.approx([0.0, 2.0], abs=1e-12) and residual == pytest.approx(math.sqrt(2))


def test_nnls_all_negative_gives_zero() -> None:
    # every column correlates negatively with b: the gradient at 0 is a^T b < 0, so x = 0.
    x, residual = nnls(np.array([[1.0, 2.0], [1.0, 1.0]]), np.array([-1.0, -3.0]))
    assert x.tolist() == [0.0, 0.0] and residual == pytest.approx(math.sqrt(10))


@pytest.mark.parametrize("seed", range(40))
def test_nnls_meets_the_kkt_conditions(seed: int) -> None:
    """The optimum of a convex problem is where the KKT conditions hold: x >= 0, the gradient
    w = a^T (b - a x) <= 0 everywhere, and w = 0 where x > 0."""
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 15)), int(rng.integers(1, 8))
    a, b = rng.normal(size=(m, n)), rng.normal(size=m)
    x, residual = nnls(a, b)
    w = a.T @ (b - a @ x)
    scale = float(np.abs(a).sum() * np.abs(b).sum()) + 1.0
    assert (x >= 0).all()
    assert (w <= 1e-9 * scale).all()
    assert np.abs(w[x > 0]).max(initial=0.0) <= 1e-9 * scale
    assert residual == pytest.approx(float(np.linalg.norm(a @ x - b)))


def test_nnls_agrees_with_scipy_on_the_calibration_shape() -> None:
    optimize = pytest.importorskip("scipy.optimize", reason="scipy (the test extra's second opinion) is not installed")
    rng = np.random.default_rng(7)
    for _ in range(50):  # calibration's design: [bytes, 1] with bytes up to ~10 MB
        sizes = rng.uniform(0, 1e7, 40)
        y = rng.normal(rng.normal(0, 1e-4) * sizes + rng.normal(0, 50), 20)
        a = np.column_stack([sizes, np.ones_like(sizes)])
        assert nnls(a, y)[1] == pytest.approx(optimize.nnls(a, y)[1], rel=1e-9, abs=1e-9)


def test_nnls_refuses_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="shapes"):
        nnls(np.ones((3, 2)), np.ones(2))
