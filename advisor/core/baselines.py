"""The coarse models that Li et al. (2020) compare against, offered side by side.

Both see a step as phases, not as a graph of overlapping operations, which is why they miss
the overlap of computation with communication; they are here so a user can see how much the
fine-grained simulation changes the answer for their job.

- ``cynthia``: Zheng et al.'s Cynthia, throughput = W K / (T_P max(1, W U_1) + 2 T_C).
- ``phase_queueing``: a phase-level model in the spirit of Lin et al.: each worker cycles
  through downlink, compute, uplink and update; the PS links are single queues shared by the
  workers, computation is private to each worker. Solved exactly with Mean Value Analysis
  of the closed queueing network with W jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.models.ps_des.preprocess import transfer_time_us
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
    """Phase times from a profile: transfers re-timed for ``bandwidth_bps``, compute as recorded."""
    if not bandwidth_bps > 0:
        raise SimulationSettingsError(f"bandwidth must be > 0, got {bandwidth_bps!r}")
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


def cynthia(p: Phases, workers: int) -> float:
    """Cynthia's throughput in examples/s: W K / (T_P max(1, W U_1) + 2 T_C).

    T_P is the batch's processing time (worker + PS computation), T_C one model's transfer
    time, and U_1 the single worker's network utilisation, T_C / (T_P + 2 T_C): the share of
    a one-worker step in which one link direction is busy.
    """
    _check_workers(workers)
    t_p = p.compute_s + p.update_s
    t_c = p.transfer_s
    u_1 = t_c / (t_p + 2 * t_c)
    return workers * p.batch_size / (t_p * max(1.0, workers * u_1) + 2 * t_c)


def phase_queueing(p: Phases, workers: int) -> float:
    """Throughput in examples/s of the closed network downlink -> compute -> uplink -> update.

    Exact MVA: queueing stations (the two links and the PS) have residence time
    R_k(n) = D_k (1 + Q_k(n-1)); the worker's compute is a delay station, R = D.
    """
    _check_workers(workers)
    queues = np.array([p.downlink_s, p.uplink_s, p.update_s])
    delay = p.compute_s
    q = np.zeros_like(queues)
    x = 0.0
    for n in range(1, workers + 1):
        residence = queues * (1 + q)
        x = n / (residence.sum() + delay)
        q = x * residence
    return x * p.batch_size


def _check_workers(workers: int) -> None:
    if workers < 1:
        raise SimulationSettingsError(f"workers must be >= 1, got {workers}")
