"""Pei et al.'s transmission model: the sigmoid throughput curve, PS mode and NCCL mode (eq. 20-32).

Throughput curve (eq. 20, 21): a transfer of e^x MB moves at y = k / (a + e^(-w x)) GB/s and takes
t = e^x / (1000 y) seconds. The latency-bandwidth line t = alpha + MB / (1000 beta) is such a
curve with w = 1, k = 1 / (1000 alpha), a = 1 / (1000 alpha beta) (alpha in s, beta in GB/s):
that is the default when neither the spec nor a profile gives k, a, w. ``fit_sigmoid`` fits the
three to measured transfers (numpy least squares over a grid of w).

Gradients are counted per layer with weights, in network order (index 0 = the first layer). The
paper overlaps layer l's transfer with "the backward time of layer l-1"; here that window is the
backward time that runs after layer l's gradient is ready and until the next gradient (of the
layer with weights below it) is ready, which is the same thing when every layer has weights.

PS mode (eq. 22-25), W GPUs sharing each host link ``link_num`` ways:
    t_r^l      = t_d2h^l * link_num + t_CPU_a^l                 (gradient up, averaged on the host)
    t_reduce   = t_r^1 + sum_{l>=2} (t_r^l - min(t_r^l, window^l))   (queued: see ``overlap``)
    t_broadcast= sum_l (t_h2d^l * link_num + (W - 1) * t_lat)   (parameters down)
NCCL mode (eq. 26-32), ring all-reduce on the GPUs:
    t_ar^l     = (W - 1) * (t_sr^l + t_ag^l), t_sr = t_ring + t_GPU_avg, t_ag = t_ring,
                 t_ring = transfer of K_l / W bytes (2 (W - 1) rounds of K_l / W bytes in all)
    backward window slowed by sm / (sm - 1) while the all-reduce holds one SM (eq. 31):
                 w_hat = w * sm/(sm-1) if t_ar >= w * sm/(sm-1) else w + t_ar / sm
    t_bo^l     = min(w_hat^l, t_ar^l)                            (eq. 32)
    t_allreduce= t_ar^1 + sum_{l>=2} (t_ar^l - t_bo^l)           (eq. 27; queued: see ``overlap``)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from advisor.core.pei.kernels import elementwise, kernel_time
from advisor.core.spec import GpuSpec, Sigmoid

MB = 1e6


def seconds(curve: Sigmoid, nbytes: float) -> float:
    """Eq. 20-21: time of one transfer of ``nbytes`` bytes."""
    if nbytes <= 0:
        return 0.0
    x = math.log(nbytes / MB)
    y = curve.k / (curve.a + math.exp(-curve.w * x))
    return (nbytes / MB) / (1000.0 * y)


def latency_bandwidth_curve(bandwidth_gbps: float, latency_s: float) -> Sigmoid:
    """The sigmoid equal to t = latency + bytes / bandwidth (w = 1)."""
    return Sigmoid(k=1.0 / (1000.0 * latency_s), a=1.0 / (1000.0 * latency_s * bandwidth_gbps), w=1.0)


@dataclass(frozen=True)
class SigmoidFit:
    curve: Sigmoid
    rms_relative_error: float  # of the transfer times the curve gives back, over all points
    points: int
    distinct_sizes: int


class FitError(ValueError):
    """Too few or unusable transfers to fit a curve."""


def fit_sigmoid(sizes_bytes: ArrayLike, durations_s: ArrayLike) -> SigmoidFit:
    """k, a, w of eq. 21 fitted to measured transfers, minimising the relative error of the times.

    For a fixed w, 1 / y = a / k + (1 / k) e^(-w x) is linear in (a / k, 1 / k), and the relative
    error of t equals that of 1 / y: a weighted linear least squares. w is searched on a grid.
    """
    size = np.asarray(sizes_bytes, dtype=float)
    dur = np.asarray(durations_s, dtype=float)
    keep = (size > 0) & (dur > 0) & np.isfinite(size) & np.isfinite(dur)
    size, dur = size[keep], dur[keep]
    distinct = len(np.unique(size))
    if distinct < 3:
        raise FitError(f"fitting k, a, w needs transfers of at least 3 sizes, found {distinct}")
    x = np.log(size / MB)
    inv_y = 1000.0 * dur / (size / MB)  # 1 / throughput, s per GB
    best = (math.inf, 1.0, 1.0, 1.0)
    for w in np.geomspace(0.02, 5.0, 240):
        e = np.exp(-w * x)
        design = np.column_stack([1.0 / inv_y, e / inv_y])
        coef, *_ = np.linalg.lstsq(design, np.ones_like(inv_y), rcond=None)
        c0, c1 = float(coef[0]), float(coef[1])
        if c0 <= 0 or c1 <= 0:  # one term alone, the other at a negligible positive value
            c0_only = float(np.sum(1.0 / inv_y) / np.sum(1.0 / inv_y**2))
            c1_only = float(np.sum(e / inv_y) / np.sum((e / inv_y) ** 2))
            err0 = np.sum((c0_only / inv_y - 1) ** 2)
            err1 = np.sum((c1_only * e / inv_y - 1) ** 2)
            c0, c1 = (c0_only, c0_only * 1e-9) if err0 <= err1 else (c1_only * 1e-9, c1_only)
        rel = (c0 + c1 * e) / inv_y - 1.0
        err = float(np.sqrt(np.mean(rel**2)))
        if err < best[0]:
            best = (err, float(w), c0, c1)
    err, w, c0, c1 = best
    return SigmoidFit(Sigmoid(k=1.0 / c1, a=c0 / c1, w=w), err, int(len(size)), distinct)


# --- overlap of transfers with the backward pass -------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    exposed: float  # transfer time left after the backward pass ends
    backward: float  # the backward pass's length, slowed where it shared the GPU


def overlap(windows: Sequence[float], transfers: Sequence[float], slowdown: float = 1.0) -> Overlap:
    """Transfers of the weighted layers (network order) against the backward pass.

    Backward runs from the last layer to the first; weighted layer i's transfer is queued when its
    gradient is ready and the link serves the queue in order. ``windows[i]`` is the backward time
    after layer i's gradient is ready (``windows[0]`` is unused: layer 0's gradient comes last).
    While a transfer is on the link, backward runs ``slowdown`` times slower (NCCL: sm / (sm - 1)).
    When each transfer fits its window this is eq. 23 (PS) and eq. 27 with eq. 31-32 (NCCL); a
    transfer longer than its window carries into the next window instead of being exposed at once,
    so the answer does not depend on how finely the layers are split.
    """
    t = 0.0  # wall time since the last weighted layer's gradient was ready
    link_free = 0.0
    work = 0.0
    for i in range(len(transfers) - 1, -1, -1):
        link_free = max(link_free, t) + transfers[i]
        if i == 0:
            break
        remaining = windows[i]
        work += remaining
        if t < link_free:
            busy = link_free - t
            if remaining * slowdown <= busy:
                t += remaining * slowdown
                remaining = 0.0
            else:
                remaining -= busy / slowdown
                t = link_free
        t += remaining
    return Overlap(max(0.0, link_free - t), t - work + sum(windows[1:]))


# --- PS mode --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PsUpdate:
    t_reduce: float
    t_broadcast: float
    t_r: tuple[float, ...]  # per layer with weights: up + host average
    link_seconds: float  # busy time of one host link (both directions) per iteration

    @property
    def t_update(self) -> float:
        return self.t_reduce + self.t_broadcast


def ps_update(grad_bytes: Sequence[float], windows: Sequence[float], workers: int, link_num: int,
              curve: Sigmoid, latency_s: float, host_reduce_gbps: float) -> PsUpdate:
    """Eq. 22-25. ``grad_bytes[i]`` and ``windows[i]`` per layer with weights, in network order;
    ``windows[i]`` is the backward time after layer i's gradient is ready (unused for i = 0)."""
    t_d2h = [seconds(curve, b) for b in grad_bytes]
    t_cpu = [workers * b / (host_reduce_gbps * 1e9) for b in grad_bytes]
    t_r = [d * link_num + c for d, c in zip(t_d2h, t_cpu, strict=True)]
    t_reduce = overlap(windows, t_r).exposed
    t_broadcast = sum(seconds(curve, b) * link_num + (workers - 1) * latency_s for b in grad_bytes)
    link = sum(2 * d * link_num for d in t_d2h)
    return PsUpdate(t_reduce, t_broadcast, tuple(t_r), link)


# --- NCCL mode ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclUpdate:
    t_allreduce: float
    t_ar: tuple[float, ...]
    backward_extra: float  # sum of (w_hat - w): backward slowed by the all-reduce's SM
    link_seconds: float  # busy time of one GPU's ring link per iteration

    @property
    def t_update(self) -> float:
        return self.t_allreduce


def ring_rounds(workers: int) -> int:
    """Transfers per GPU of one ring all-reduce: W - 1 scatter-reduce + W - 1 all-gather."""
    return 2 * (workers - 1)


def ring_bytes(nbytes: float, workers: int) -> float:
    """Bytes each GPU sends (and receives) in a ring all-reduce of ``nbytes``: 2 (W - 1) K / W."""
    return ring_rounds(workers) * nbytes / workers


def slowed_window(window: float, t_ar: float, sm_num: int) -> float:
    """Eq. 31: a backward window of ``window`` s while an all-reduce of ``t_ar`` s holds one SM."""
    slow = sm_num / (sm_num - 1)
    if t_ar >= window * slow:
        return window * slow
    return window + t_ar / sm_num


def allreduce_seconds(nbytes: float, workers: int, curve: Sigmoid, gpu: GpuSpec, data_bytes: int) -> float:
    """Eq. 28-30: (W - 1) * (2 t_ring + t_GPU_avg), the average done on the one SM the kernel holds."""
    if workers < 2 or nbytes <= 0:
        return 0.0
    chunk = nbytes / workers
    t_ring = seconds(curve, chunk)
    values = max(1, math.ceil(chunk / data_bytes))
    t_avg = kernel_time(elementwise("allreduce-avg", values, 2, 1, 1, data_bytes), gpu, 1.0, sms=1).seconds
    return (workers - 1) * (2 * t_ring + t_avg)


def nccl_update(grad_bytes: Sequence[float], windows: Sequence[float], workers: int, curve: Sigmoid,
                gpu: GpuSpec, data_bytes: int = 4) -> NcclUpdate:
    """Eq. 26-32, per layer with weights in network order (see ``ps_update`` for ``windows``)."""
    t_ar = [allreduce_seconds(b, workers, curve, gpu, data_bytes) for b in grad_bytes]
    result = overlap(windows, t_ar, gpu.sm_count / (gpu.sm_count - 1)) if gpu.sm_count > 1 else overlap(windows, t_ar)
    total, extra = result.exposed, result.backward - sum(windows[1:])
    link = sum(ring_rounds(workers) * seconds(curve, b / workers) for b in grad_bytes) if workers > 1 else 0.0
    return NcclUpdate(total, tuple(t_ar), extra, link)
