"""Estimate the overhead model (alpha, beta), the HTTP/2 window and TCP goodput from a profile.

A 1-worker profile recorded at a known bandwidth B tells, per step, when each stream was
requested (recorded start) and when its receiver had it (recorded end). For a candidate window
WIN and goodput g, each link direction of each step is replayed alone at rate g x B under the
simulator's HTTP/2 rules (``replay_link``), giving each stream's network completion c_i. The
model says recorded end e_i = c_i + alpha x bytes_i + beta (section 3.2.1 of Li et al.), so for
fixed (WIN, g) the residuals e_i - c_i are linear in bytes and (alpha, beta) follow from
non-negative least squares. The (WIN, g) with the smallest mean absolute error wins.

``replay_link`` restates, for one worker, the scheduling rules of ``simulator/reference.py``
(one stream in service per link direction; a stream's first service is at most WIN bytes; a
stream preempted after its first service waits behind every stream still waiting for its
first; FIFO by request time). A test pins it to the simulator so the two cannot drift apart.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advisor.core.profile import Profile, Resource
from advisor.errors import AdvisorError

DEFAULT_WINDOWS: tuple[float | None, ...] = (None, 16e3, 64e3, 256e3, 1e6, 4e6)
DEFAULT_GOODPUTS: tuple[float, ...] = (0.85, 0.9, 0.95, 1.0)


class CalibrationError(AdvisorError, ValueError):
    """The profile cannot be calibrated (no bandwidth recorded, no transfers with bytes...)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    alpha_us_per_byte: float
    beta_us: float
    win_bytes: float | None
    goodput: float
    mean_abs_error_us: float  # of the predicted transfer end times, after the fit
    median_rel_error: float  # |predicted - recorded end| / recorded end (step-relative)
    p95_rel_error: float
    transfers: int  # stream records used
    candidates: tuple[tuple[float | None, float, float], ...]  # (WIN, goodput, mean abs error us)


def replay_link(starts_us: Sequence[float], nbytes: Sequence[int], rate_bps: float, win_bytes: float | None) -> list[float]:
    """Network completion time of each stream on one link direction used by one worker."""
    order = sorted(range(len(starts_us)), key=lambda i: (starts_us[i], i))
    remaining = [float(b) for b in nbytes]
    ends = [0.0] * len(starts_us)
    queue: list[tuple[int, int, int]] = []  # (service round, sequence, stream)
    seq, nxt, now = 0, 0, 0.0
    while nxt < len(order) or queue:
        if not queue:
            now = max(now, starts_us[order[nxt]])
        while nxt < len(order) and starts_us[order[nxt]] <= now:
            i = order[nxt]
            nxt += 1
            if remaining[i] == 0:
                ends[i] = starts_us[i]
            else:
                heapq.heappush(queue, (0, seq, i))
                seq += 1
        if not queue:
            continue
        rnd, _, i = heapq.heappop(queue)
        chunk = remaining[i] if (rnd or win_bytes is None) else min(remaining[i], win_bytes)
        now += chunk * 8 / rate_bps * 1e6
        remaining[i] -= chunk
        if remaining[i] > 0:
            heapq.heappush(queue, (1, seq, i))
            seq += 1
        else:
            ends[i] = now
    return ends


def calibrate(
    profile: Profile,
    bandwidth_bps: float | None = None,
    windows: Sequence[float | None] = DEFAULT_WINDOWS,
    goodputs: Sequence[float] = DEFAULT_GOODPUTS,
) -> Calibration:
    """Fit alpha, beta, WIN and goodput to the profile's recorded transfer end times."""
    bandwidth = bandwidth_bps or profile.job.recorded_bandwidth_bps
    if bandwidth is None or not (math.isfinite(bandwidth) and bandwidth > 0):
        raise CalibrationError("calibration needs the bandwidth the profile was recorded at (--recorded-bandwidth)")
    groups = link_groups(profile)
    sizes = np.array([b for _, b_list, _ in groups for b in b_list], dtype=float)
    recorded = np.array([e for _, _, e_list in groups for e in e_list])
    if not len(sizes) or not sizes.any():
        raise CalibrationError("the profile has no transfers with bytes to calibrate against")
    design = np.column_stack([sizes, np.ones_like(sizes)])
    results = []
    for win in windows:
        for g in goodputs:
            net = np.array([c for starts, b_list, _ in groups for c in replay_link(starts, b_list, bandwidth * g, win)])
            from advisor.core.numeric import nnls

            (alpha, beta), _ = nnls(design, recorded - net)
            predicted = net + alpha * sizes + beta
            results.append((float(np.abs(predicted - recorded).mean()), win, g, alpha, beta, predicted))
    err, win, g, alpha, beta, predicted = min(results, key=lambda r: (r[0], r[1] is not None, -r[2]))
    rel = np.abs(predicted - recorded) / np.maximum(recorded, 1.0)
    return Calibration(
        alpha_us_per_byte=float(alpha),
        beta_us=float(beta),
        win_bytes=win,
        goodput=g,
        mean_abs_error_us=err,
        median_rel_error=float(np.median(rel)),
        p95_rel_error=float(np.percentile(rel, 95)),
        transfers=len(sizes),
        candidates=tuple((r[1], r[2], r[0]) for r in results),
    )


def link_groups(profile: Profile) -> list[tuple[list[float], list[int], list[float]]]:
    """Per step and link direction: stream starts, bytes and recorded ends (step-relative us)."""
    links: dict[tuple[Resource, int | None], list[int]] = {}
    for i, op in enumerate(profile.ops):
        if op.resource.is_transfer:
            links.setdefault((op.resource, op.ps), []).append(i)
    groups = []
    for step in profile.steps:
        for members in links.values():
            starts = [step.start_us[i] for i in members]
            ends = [step.start_us[i] + step.duration_us[i] for i in members]
            groups.append((starts, [profile.ops[i].bytes for i in members], ends))
    return groups
