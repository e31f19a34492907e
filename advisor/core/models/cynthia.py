"""Cynthia (Zheng et al., ICPP'19) as Li et al. (2020, eq. in section 1) state it, and the
variant they tried in section 4.4 with the transmission time halved (separate uplink and
downlink resources).

throughput(W) = W K / (T_P max(1, W U_1) + 2 T_C), U_1 = T_C / (T_P + 2 T_C): T_P is the time to
process a batch (worker compute plus the PS update), T_C one model's transmission time (the
mean of the two directions, re-timed alone on the link), U_1 the share of a one-worker step in
which one link direction is busy.
"""

from __future__ import annotations

from advisor.core.models.ps_phases import PhaseModel
from advisor.core.phases import Phases, check_workers, phases
from advisor.core.profile import Profile


def cynthia_throughput(p: Phases, workers: int, transfer_scale: float = 1.0) -> float:
    """Cynthia's examples/s at ``workers``; ``transfer_scale`` 0.5 is the halved-T_C variant."""
    check_workers(workers)
    t_p = p.compute_s + p.update_s
    t_c = p.transfer_s * transfer_scale
    u_1 = t_c / (t_p + 2 * t_c)
    return workers * p.batch_size / (t_p * max(1.0, workers * u_1) + 2 * t_c)


class Cynthia(PhaseModel):
    # As published, the formula ignores link capacity: once W U_1 > 1 it tends to K (T_P + 2 T_C) /
    # (T_P T_C) as W grows, above the K / T_C a link direction can carry (tests/core/test_model_contract.py)
    capacity_bound = False

    def __init__(self, name: str, description: str, transfer_scale: float) -> None:
        self.name, self.description, self._scale = name, description, transfer_scale

    def throughput(self, profile: Profile, rate_bps: float, workers: int) -> float:
        return cynthia_throughput(phases(profile, rate_bps), workers, self._scale)


MODELS = (
    Cynthia("cynthia", "Cynthia (Zheng et al. 2019): phases, utilisation-scaled; Li et al.'s baseline", 1.0),
    Cynthia("cynthia-half-tc", "Cynthia with the transmission time halved (Li et al. 2020, section 4.4)", 0.5),
)
