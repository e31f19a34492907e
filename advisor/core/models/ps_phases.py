"""What the coarse PS models share: their inputs (a profile and a bandwidth) and their checks.

Not a model itself: ``cynthia``, ``phase_mva`` and ``lin2018`` build on it, and stay independent
of one another.
"""

from __future__ import annotations

from advisor.core.models.protocol import ModelInputs
from advisor.core.phases import ps_link_bound
from advisor.core.profile import Profile
from advisor.errors import ModelInputError


def trace_and_rate(name: str, inputs: ModelInputs) -> tuple[Profile, float]:
    """The recorded profile and the payload rate of a link (nominal x goodput), or why not."""
    profile = inputs.recorded or inputs.profile
    if profile is None:
        raise ModelInputError(name, "needs a one-worker profile (a trace), and none was given")
    if inputs.network is None:
        raise ModelInputError(name, "needs the link bandwidth (network.bandwidth_bps), and none was given")
    if inputs.parameter_servers not in (None, profile.job.parameter_servers):
        raise ModelInputError(name, f"parameter_servers: predicts only the traced PS count "
                                    f"({profile.job.parameter_servers}), not {inputs.parameter_servers}")
    if inputs.worker_speeds and any(s != 1.0 for s in inputs.worker_speeds):
        raise ModelInputError(name, "worker_speeds: sees every worker as the traced one (no heterogeneous workers)")
    return profile, inputs.network.bandwidth_bps * inputs.goodput


def link_bound(name: str, inputs: ModelInputs) -> float:
    profile, rate = trace_and_rate(name, inputs)
    return ps_link_bound(profile, rate)
