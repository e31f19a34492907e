"""A phase-level queueing model in the spirit of Lin et al.: each worker cycles through
downlink, compute, uplink and update; the PS links and the PS are single queues shared by the
workers, computation is private to each worker (a delay station). Solved exactly by Mean Value
Analysis (``advisor.core.phases.mva_throughput``). Its compute phase is every worker op's time,
overlapped with transfers or not (``phases``); ``lin2018`` extracts phases as Lin did.
"""

from __future__ import annotations

from advisor.core.models import ps_phases
from advisor.core.models.protocol import Exact, ExactRun, ModelBase, ModelInputs, ModelParams, Need, Run
from advisor.core.phases import mva_throughput, phases


class PhaseMvaParams(ModelParams):
    pass


class PhaseMva(ModelBase):
    anchored = False  # phases summed: the overlap a trace shows is not reproduced at W = 1
    name = "phase-mva"
    description = "closed queueing network of phases (all worker compute), exact MVA"
    Params = PhaseMvaParams
    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        ps_phases.trace_and_rate(self.name, inputs)

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, rate = ps_phases.trace_and_rate(self.name, inputs)
        return ExactRun(Exact(mva_throughput(phases(profile, rate), workers)))

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        return ps_phases.link_bound(self.name, inputs)


MODELS = (PhaseMva(),)
