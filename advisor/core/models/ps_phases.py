"""What the coarse PS models share: their inputs (a profile and a bandwidth), their checks, and
the link ceiling. Not a model itself: ``cynthia``, ``phase_mva`` and ``lin2018`` build on it and
stay independent of one another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from advisor.core.models.protocol import (LINK_GOODPUT, CalibrationParam, Exact, ExactRun, ModelBase, ModelInputs,
                                          ModelParams, Need, Run, require_asynchronous_ps, require_ps_profile)
from advisor.core.phases import ps_link_bound
from advisor.core.profile import Profile
from advisor.errors import ModelInputError


class NoParams(ModelParams):
    """A coarse model has no knobs."""


class PhaseModel(ModelBase, ABC):
    """A closed-form model of a PS step seen as phases: a subclass gives ``name``,
    ``description`` and ``throughput``; the checks, the run and the link ceiling are here."""

    name: str
    description: str
    Params: type[ModelParams] = NoParams
    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})
    anchored = False  # phases summed: the overlap a trace shows is not reproduced at W = 1
    # no knobs of its own: what observed throughput can correct is the link's delivered rate
    calibration: tuple[CalibrationParam, ...] = (LINK_GOODPUT,)
    calibration_note = ""

    @abstractmethod
    def throughput(self, profile: Profile, rate_bps: float, workers: int) -> float:
        """Examples/s of ``workers`` workers on links of ``rate_bps`` payload."""

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        trace_and_rate(self.name, inputs)

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, rate = trace_and_rate(self.name, inputs)
        return ExactRun(Exact(self.throughput(profile, rate, workers)))

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        profile, rate = trace_and_rate(self.name, inputs)
        return ps_link_bound(profile, rate)


def trace_and_rate(name: str, inputs: ModelInputs) -> tuple[Profile, float]:
    """The recorded profile and the payload rate of a link (nominal x goodput), or why not."""
    profile = inputs.recorded or inputs.profile
    if profile is None:
        raise ModelInputError(name, "needs a one-worker profile (a trace), and none was given")
    require_ps_profile(name, profile)
    require_asynchronous_ps(name, profile)  # workers cycle independently: no barrier to wait at
    if inputs.network is None:
        raise ModelInputError(name, "needs the link bandwidth (network.bandwidth_bps), and none was given")
    if inputs.parameter_servers not in (None, profile.job.parameter_servers):
        raise ModelInputError(name, f"parameter_servers: predicts only the traced PS count "
                                    f"({profile.job.parameter_servers}), not {inputs.parameter_servers}")
    if inputs.worker_speeds and any(s != 1.0 for s in inputs.worker_speeds):
        raise ModelInputError(name, "worker_speeds: sees every worker as the traced one (no heterogeneous workers)")
    return profile, inputs.network.bandwidth_bps * inputs.goodput
