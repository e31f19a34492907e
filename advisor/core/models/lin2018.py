"""Lin et al.'s model as Li et al. (2020, sections 1, 4.4 and 5) characterise it: phases
extracted from a one-worker profile the way Lin did (compute = from the end of the step's last
parameter pull to the start of its first gradient push; downlink and uplink = the model's bytes
alone on the link; update = the PS's compute), and the closed queueing network
downlink -> compute -> uplink -> update with W workers solved by exact Mean Value Analysis.

It predicts small-batch models well and saturates too early where computation overlaps
communication (Li et al., section 4.4): computation overlapped with a transfer is not compute here.
"""

from __future__ import annotations

from advisor.core.models import ps_phases
from advisor.core.models.protocol import Exact, ExactRun, ModelBase, ModelInputs, ModelParams, Need, Run
from advisor.core.phases import lin_phases, mva_throughput


class Lin2018Params(ModelParams):
    pass


class Lin2018(ModelBase):
    anchored = False  # phases summed: the overlap a trace shows is not reproduced at W = 1
    name = "lin2018-mva"
    description = "Lin et al.: phases from the trace (compute between last pull and first push), exact MVA"
    Params = Lin2018Params
    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        ps_phases.trace_and_rate(self.name, inputs)

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, rate = ps_phases.trace_and_rate(self.name, inputs)
        return ExactRun(Exact(mva_throughput(lin_phases(profile, rate), workers)))

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        return ps_phases.link_bound(self.name, inputs)


MODELS = (Lin2018(),)
