"""A phase-level queueing model in the spirit of Lin et al.: each worker cycles through
downlink, compute, uplink and update; the PS links and the PS are single queues shared by the
workers, computation is private to each worker (a delay station). Solved exactly by Mean Value
Analysis (``advisor.core.phases.mva_throughput``). Its compute phase is every worker op's time,
overlapped with transfers or not (``phases``); ``lin2018`` extracts phases as Lin did.
"""

from __future__ import annotations

from advisor.core.models.ps_phases import PhaseModel
from advisor.core.phases import mva_throughput, phases
from advisor.core.profile import Profile


class PhaseMva(PhaseModel):
    name = "phase-mva"
    description = "closed queueing network of phases (all worker compute), exact MVA"

    def throughput(self, profile: Profile, rate_bps: float, workers: int) -> float:
        return mva_throughput(phases(profile, rate_bps), workers)


MODELS = (PhaseMva(),)
