"""A step seen as phases (downlink, compute, uplink, update): what the coarse models read.

Cynthia and the queueing models of Lin et al. see a step as sequential phases rather than a graph
of overlapping operations, which is why they miss the overlap of computation with communication
(Li et al. 2020, sections 1 and 4.4). The phase times and the exact Mean Value Analysis of their
closed network live here once, so that the model modules that use them stay independent of each
other. ``ps_link_bound`` is the ceiling the PS links put on any PS model's throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from advisor.core.preprocess import transfer_time_us
from advisor.core.profile import Profile, Resource
from advisor.core.sim_types import SimulationSettingsError


@dataclass(frozen=True, slots=True)
class Phases:
    """Mean per-step phase times of a profile at a given bandwidth, in seconds."""

    downlink_s: float  # all parameters, alone on the link
    compute_s: float  # worker computation
    uplink_s: float  # all gradients, alone on the link
    update_s: float  # PS computation
    batch_size: int

    @property
    def transfer_s(self) -> float:
        """T_C: one model's transmission time, the mean of the two directions."""
        return (self.downlink_s + self.uplink_s) / 2


def phases(profile: Profile, bandwidth_bps: float, efficiency: float = 1.0) -> Phases:
    """Phase times from a profile: transfers re-timed for ``bandwidth_bps``, compute as recorded
    (the sum of every worker op's time, overlapped or not)."""
    _check_bandwidth(bandwidth_bps)
    mean = np.array([s.duration_us for s in profile.steps]).mean(axis=0)
    total = {r: 0.0 for r in Resource}
    for op, dur in zip(profile.ops, mean):
        seconds = transfer_time_us(op.bytes, bandwidth_bps, efficiency) if op.resource.is_transfer else dur
        total[op.resource] += seconds / 1e6
    return Phases(
        downlink_s=total[Resource.DOWNLINK],
        compute_s=total[Resource.WORKER],
        uplink_s=total[Resource.UPLINK],
        update_s=total[Resource.PS],
        batch_size=profile.job.batch_size,
    )


def lin_phases(profile: Profile, bandwidth_bps: float, efficiency: float = 1.0) -> Phases:
    """Phases as Lin et al. extract them: compute is the time from the end of a step's last pull
    to the start of its first push after it (the worker's stretch with no transfer in flight),
    averaged over the recorded steps; transfers are re-timed alone on the link and the update is
    the PS's compute, as in ``phases``. Computation that overlaps a transfer is thus not counted as
    compute. A push that starts before the pulls end (TensorFlow sends constants such as the
    learning rate at the step's start) is not the end of the compute phase and is passed over."""
    base = phases(profile, bandwidth_bps, efficiency)
    pulls = [i for i, op in enumerate(profile.ops) if op.resource is Resource.DOWNLINK]
    pushes = [i for i, op in enumerate(profile.ops) if op.resource is Resource.UPLINK]
    if not pulls or not pushes:
        return base
    gaps = []
    for step in profile.steps:
        last_pull_end = max(step.start_us[i] + step.duration_us[i] for i in pulls)
        first_push_start = min((step.start_us[i] for i in pushes if step.start_us[i] >= last_pull_end),
                               default=last_pull_end)
        gaps.append(first_push_start - last_pull_end)
    return Phases(base.downlink_s, float(np.mean(gaps)) / 1e6, base.uplink_s, base.update_s, base.batch_size)


def mva_throughput(p: Phases, workers: int) -> float:
    """Throughput in examples/s of the closed network downlink -> compute -> uplink -> update
    with ``workers`` jobs, by exact Mean Value Analysis: the queueing stations (the two links and
    the PS) have residence time R_k(n) = D_k (1 + Q_k(n-1)); the worker's compute is a delay
    station, R = D."""
    check_workers(workers)
    queues = np.array([p.downlink_s, p.uplink_s, p.update_s])
    delay = p.compute_s
    q = np.zeros_like(queues)
    x = 0.0
    for n in range(1, workers + 1):
        residence = queues * (1 + q)
        x = n / (residence.sum() + delay)
        q = x * residence
    return x * p.batch_size


def ps_link_bound(profile: Profile, rate_bps: float) -> float:
    """Examples/s the busiest PS link direction can carry when every step moves the profile's
    bytes over it at ``rate_bps`` (math.inf when the profile moves no bytes)."""
    bits: dict[tuple[int | None, str], float] = {}
    for op in profile.ops:
        if op.resource.is_transfer:
            key = (op.ps, op.resource.value)
            bits[key] = bits.get(key, 0.0) + 8.0 * op.bytes
    busiest = max(bits.values(), default=0.0)
    return math.inf if busiest == 0 else profile.job.batch_size * rate_bps / busiest


def check_workers(workers: int) -> None:
    if workers < 1:
        raise SimulationSettingsError(f"workers must be >= 1, got {workers}")


def _check_bandwidth(bandwidth_bps: float) -> None:
    if not (isinstance(bandwidth_bps, (int, float)) and math.isfinite(bandwidth_bps) and bandwidth_bps > 0):
        raise SimulationSettingsError(f"bandwidth must be > 0, got {bandwidth_bps!r}")
