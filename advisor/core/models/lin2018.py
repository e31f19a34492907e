"""Lin et al.'s model as Li et al. (2020, sections 1, 4.4 and 5) characterise it: phases
extracted from a one-worker profile the way Lin did (compute = from the end of the step's last
parameter pull to the start of its first gradient push after it; downlink and uplink = the
model's bytes alone on the link; update = the PS's compute), and the closed queueing network
downlink -> compute -> uplink -> update with W workers solved by exact Mean Value Analysis.

It predicts small-batch models well and saturates too early where computation overlaps
communication (Li et al., section 4.4): computation overlapped with a transfer is not compute here.
"""

from __future__ import annotations

from advisor.core.models.ps_phases import PhaseModel
from advisor.core.phases import lin_phases, mva_throughput
from advisor.core.profile import Profile


class Lin2018(PhaseModel):
    name = "lin2018-mva"
    description = "Lin et al.: phases from the trace (compute between last pull and first push), exact MVA"

    def throughput(self, profile: Profile, rate_bps: float, workers: int) -> float:
        return mva_throughput(lin_phases(profile, rate_bps), workers)


MODELS = (Lin2018(),)
