"""Measure the parameter server's link rate from a 1-worker profile, when nobody wrote it down.

Why: a prediction needs the PS link's capacity, and a platform team often does not know the
rate a pod really gets between two nodes (overlay network, shaping, NIC sharing). The profile
already measured it: in every step the worker requests all its pulls at once and pushes all
its gradients at once, so the streams of a link direction queue behind each other, and *when*
each one ends depends on the bytes ahead of it divided by the link rate. The per-stream
overhead model (alpha x bytes + beta, section 3.2.1 of Li et al.) cannot imitate that queueing,
so the rate is identifiable: for a candidate rate R each link direction of each step is
replayed alone (``calibration.replay_link``, the simulator's HTTP/2 rules), alpha and beta are
fitted to the rest by non-negative least squares, and the R with the smallest mean absolute
error of the recorded end times wins (a log grid, 24 points per decade, then golden-section
search to 0.5 %). That is the rate one TCP flow got (payload per second); the link's
capacity, which is what ``--bandwidth`` means, is that rate divided by the goodput fraction the
predictor assumes (``AdviceRequest.goodput``, 0.95 by default), so that the prediction replays
the transfers at the rate measured.

When the transfers are small next to the overhead (a fast network, a small model) the error
hardly changes with R: the rate is then not measurable from this trace and
``BandwidthNotMeasurable`` says so (the error at twice and at half the estimate must both be
worse by ``MIN_CONTRAST``), rather than returning a number nobody should trust.

A trace whose transfers carry no network times (``ProgramKind.transfers_timed``: the one worker
of an all-reduce trace reduces with nobody) has nothing to measure: ``LinkRateMissing`` then says
that the rate must be given, and where (``link_rate_missing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from advisor.core.calibration import CalibrationError, link_groups, replay_link
from advisor.core.advice import DEFAULT_GOODPUT
from advisor.core.profile import Profile

LOW_BPS, HIGH_BPS = 1e6, 1e12  # the search range: 1 Mbit/s to 1 Tbit/s
POINTS_PER_DECADE = 24
WINDOWS: tuple[float | None, ...] = (None, 64e3, 1e6)  # HTTP/2 windows tried at each rate
MIN_CONTRAST = 1.10  # the fit at 2x and at 0.5x the estimate must be at least 10 % worse
REL_TOLERANCE = 0.005


class BandwidthNotMeasurable(CalibrationError):
    """The profile's transfer times do not pin the link rate down (see the module docstring)."""


class LinkRateMissing(BandwidthNotMeasurable):
    """The profile's transfers carry no network times (an all-reduce trace), and a rate is wanted."""


def link_rate_missing(profile: Profile) -> LinkRateMissing:
    """What to say when a rate would be measured from a profile whose transfers are not timed: what
    is missing, why it cannot be measured, and the flag and the controller setting that give it."""
    kind = profile.job.kind.value
    missing = ("the profile records no link rate, and " if profile.job.recorded_bandwidth_bps is None else "")
    return LinkRateMissing(
        f"{missing}a {kind} (all-reduce) profile has no transfers to measure the link rate from (its one "
        "worker reduced with nobody): give the rate of each worker's link with --bandwidth RATE (e.g. "
        "--bandwidth 10Gbit/s); the controller takes its 'bandwidth' setting (Helm config.bandwidth), which "
        "its profiling runs also record in the profile")


@dataclass(frozen=True, slots=True)
class BandwidthEstimate:
    bps: float  # the link capacity (what --bandwidth means): flow_bps / goodput
    flow_bps: float  # the payload rate one flow got, bits per second
    goodput: float  # the goodput fraction assumed to convert one into the other
    mean_abs_error_us: float  # of the recorded transfer end times, at the estimate
    contrast: float  # min(error at 2x, error at 0.5x) / error at the estimate: above 1, the sharper the better
    win_bytes: float | None  # the HTTP/2 window that fitted best at the estimate
    transfers: int


def estimate_bandwidth(profile: Profile, goodput: float = DEFAULT_GOODPUT) -> BandwidthEstimate:
    """The PS link capacity that, at ``goodput``, best explains the profile's transfer end times."""
    if not 0 < goodput <= 1:
        raise ValueError(f"goodput must be in (0, 1], got {goodput}")
    if not profile.job.kind.transfers_timed:
        raise link_rate_missing(profile)
    groups = link_groups(profile)
    sizes = np.array([b for _, nbytes, _ in groups for b in nbytes], dtype=float)
    recorded = np.array([e for _, _, ends in groups for e in ends], dtype=float)
    if not len(sizes) or not sizes.any():
        raise BandwidthNotMeasurable("the profile has no transfers with bytes to measure the link rate from")

    def error(rate: float) -> tuple[float, float | None]:
        best: tuple[float, float | None] = (math.inf, None)
        for win in WINDOWS:
            net = np.array([c for starts, nbytes, _ in groups for c in replay_link(starts, nbytes, rate, win)])
            residual = recorded - net
            alpha, beta = nonnegative_line(sizes, residual)
            err = float(np.abs(residual - alpha * sizes - beta).mean())
            best = min(best, (err, win), key=lambda e: e[0])
        return best

    grid = np.geomspace(LOW_BPS, HIGH_BPS, int(round(math.log10(HIGH_BPS / LOW_BPS) * POINTS_PER_DECADE)) + 1)
    errors = [error(float(r))[0] for r in grid]
    k = int(np.argmin(errors))
    lo, hi = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)])
    rate = _golden_log(lambda r: error(r)[0], lo, hi)
    err, win = error(rate)
    contrast = min(error(min(2 * rate, HIGH_BPS))[0], error(max(rate / 2, LOW_BPS))[0]) / max(err, 1e-9)
    if contrast < MIN_CONTRAST:
        raise BandwidthNotMeasurable(
            f"the recorded transfer times fit about as well at half or twice a flow rate of {rate / 1e6:.4g} Mbit/s "
            f"(contrast {contrast:.3f} < {MIN_CONTRAST}): the transfers are too small or the network too fast "
            "to measure from this trace; give the bandwidth")
    return BandwidthEstimate(bps=rate / goodput, flow_bps=rate, goodput=goodput, mean_abs_error_us=err,
                             contrast=contrast, win_bytes=win, transfers=len(sizes))


def choose_bandwidth(given_bps: float | None, recorded_bps: float | None, *,
                     measure: bool = False) -> tuple[float | None, str]:
    """The link rate to predict for and where it comes from: the one given, else the one recorded
    with the profile, else (or with ``measure``) None with source ``measured``: the caller
    measures it with ``estimate_bandwidth``. The CLI and the controller decide alike."""
    if measure:
        return None, "measured"
    if given_bps:
        return given_bps, "given"
    if recorded_bps:
        return recorded_bps, "recorded"
    return None, "measured"


def resolve_bandwidth(profile: Profile, given_bps: float | None, goodput: float = DEFAULT_GOODPUT, *,
                      measure: bool = False) -> tuple[float, str, str | None]:
    """``choose_bandwidth``, then the measurement when it is needed: (link rate, source, the
    note to show when measured). What the command-line tools do; raises
    ``BandwidthNotMeasurable`` (saying why, asking for the bandwidth) when it cannot measure."""
    bandwidth, source = choose_bandwidth(given_bps, profile.job.recorded_bandwidth_bps, measure=measure)
    if bandwidth is not None:
        return bandwidth, source, None
    estimate = estimate_bandwidth(profile, goodput)
    return estimate.bps, source, bandwidth_note(estimate)


def bandwidth_note(estimate: BandwidthEstimate) -> str:
    """The line a prediction's notes carry when its bandwidth was measured, not given."""
    return (f"bandwidth {estimate.bps / 1e6:.4g} Mbit/s measured from the profile's transfer times "
            f"(one flow got {estimate.flow_bps / 1e6:.4g} Mbit/s, taken as {estimate.goodput:.0%} goodput; "
            f"{estimate.transfers} transfers; the fit is {estimate.contrast:.2g}x worse at half or twice the rate); "
            "give the bandwidth to predict for another network")


def nonnegative_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares y ~ a x + b with a, b >= 0 (the two-variable NNLS, solved exactly).

    The optimum is the unconstrained fit if that is feasible, else the better of the fits on
    each face (a = 0: b = mean y; b = 0: a = x.y / x.x), clipped at zero.
    """
    design = np.column_stack([x, np.ones_like(x)])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    if a >= 0 and b >= 0:
        return float(a), float(b)
    faces = [(0.0, max(float(y.mean()), 0.0)), (max(float(x @ y) / max(float(x @ x), 1e-300), 0.0), 0.0)]
    return min(faces, key=lambda ab: float(((y - ab[0] * x - ab[1]) ** 2).sum()))


def _golden_log(func: Callable[[float], float], lo: float, hi: float) -> float:
    """Minimise ``func`` over [lo, hi] in log space by golden-section search to ``REL_TOLERANCE``."""
    g = (math.sqrt(5) - 1) / 2
    a, b = math.log(lo), math.log(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = func(math.exp(c)), func(math.exp(d))
    while b - a > REL_TOLERANCE:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = func(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = func(math.exp(d))
    return math.exp((a + b) / 2)
