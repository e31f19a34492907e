"""The parameter-server simulation of Li et al. (2020) behind the model protocol.

Two registered models share this class: ``li2020-des`` is the paper's model (equal shares of a
link, full capacity), ``li2020-des+contention`` (the product's default) adds the contention rules
measured on the testbed (``contention.py``). What they read: the prepared profile
(``ModelInputs.profile``), the link (``ModelInputs.network``: rate, HTTP/2 window, stream order) at
``ModelInputs.goodput`` of its nominal rate. Parameters: the contention rules' four values, and
``engine``: the compiled engine (default) or the plain reference engine that states the rules
(slow; for checks). The compiled graph is built once per curve (one profile and network) and
each W's run is continued, not restarted, when the curve asks for more steps (``simulator.fast``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from advisor.core.models.protocol import (
    ModelBase, ModelInputs, ModelParams, Need, Outlook, Run, Samples,
)
from advisor.core.models.ps_des.contention import (
    BIMODAL_RATIO, MULTI_FLOW_GOODPUT, SHARE_SIGMA, CongestionControl, Contention, alternating_bound, bimodal_note,
)
from advisor.core.models.ps_des.worker_link import with_traced_worker_link, worker_link_note
from advisor.core.phases import ps_link_bound
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError
from advisor.errors import ModelInputError

if TYPE_CHECKING:
    from advisor.core.models.ps_des.simulator.fast import Compiled

EQUAL_SHARES = "li2020-des"
CONTENTION = "li2020-des+contention"


class DesParams(ModelParams):
    """Li et al.'s simulation, as the paper states it."""

    engine: Literal["compiled", "reference"] = Field(
        default="compiled", description="compiled (fast) or reference (the plain statement of the rules; slow)")


class ContentionParams(DesParams):
    """The simulation with the testbed's contention rules (core/models/ps_des/contention.py)."""

    congestion_control: CongestionControl = Field(default=CongestionControl.UNKNOWN,
                                                  description="the pods' TCP congestion control")
    queue_s: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                  description="bottleneck queue depth in seconds (with cubic or reno)")
    share_sigma: float = Field(default=SHARE_SIGMA, ge=0, allow_inf_nan=False,
                               description="spread of TCP shares (lognormal sigma)")
    multi_flow_goodput: float = Field(default=MULTI_FLOW_GOODPUT, gt=0, le=1,
                                      description="capacity of a link direction several workers share")

    def contention(self) -> Contention:
        return Contention(self.congestion_control, self.queue_s, self.share_sigma, self.multi_flow_goodput)


class PsDes(ModelBase):
    """See the module docstring."""

    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})

    def __init__(self, contention: bool) -> None:
        self.contention = contention
        self.name = CONTENTION if contention else EQUAL_SHARES
        self.Params: type[ModelParams] = ContentionParams if contention else DesParams
        self.description = ("Li et al.'s PS simulation with the testbed's contention rules (default)" if contention
                            else "Li et al.'s PS simulation (Algorithm 3.1), equal link shares")
        self._compiled: tuple[Profile, NetworkModel, Compiled] | None = None

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        self._profile(inputs)
        self.network(inputs, params)

    def network(self, inputs: ModelInputs, params: ModelParams) -> NetworkModel:
        """The link as the simulation sees it: nominal rates x goodput, and the contention rules."""
        if inputs.network is None:
            raise ModelInputError(self.name, "needs the link bandwidth (network.bandwidth_bps), and none was given")
        net = inputs.network
        if inputs.goodput != 1.0:
            worker = net.worker_bandwidth_bps * inputs.goodput if net.worker_bandwidth_bps else None
            net = replace(net, bandwidth_bps=net.bandwidth_bps * inputs.goodput, worker_bandwidth_bps=worker)
        if inputs.profile is not None:  # a multi-PS trace says whether the worker's own link binds
            net = with_traced_worker_link(inputs.profile, net)
        return params.contention().apply(net) if isinstance(params, ContentionParams) else net

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, net = self._profile(inputs), self.network(inputs, params)
        if getattr(params, "engine", "compiled") == "reference":
            return _ReferenceRun(profile, net, workers, seed)
        from advisor.core.models.ps_des.simulator.fast import FastRun  # loads numba: only when predicting

        return _FastRun(FastRun(self._compile(profile, net), workers, seed))

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        return ps_link_bound(self._profile(inputs), self.network(inputs, params).bandwidth_bps)

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """The contention notes, and at W = 2 the alternating outcome when it is far above the
        prediction. Only with the contention rules (which predict the drifting regime) and only
        for W = 2: from W = 3 on the testbed's workers show random phases, never stable alternation."""
        link = worker_link_note(inputs.profile, inputs.network) if inputs.profile and inputs.network else None
        if not isinstance(params, ContentionParams):
            return Outlook((link,) if link else ())
        c = params.contention()
        details = {"contention": {"congestion_control": c.congestion_control.value, "queue_s": c.queue_s,
                                  "request_queue_s": c.request_queue_s, "share_sigma": c.share_sigma,
                                  "multi_flow_goodput": c.multi_flow_goodput}}
        notes = c.notes() + ((link,) if link else ())
        if 1 not in curve or 2 not in curve:
            return Outlook(notes, details=details)
        bound = alternating_bound(inputs.recorded or self._profile(inputs), curve[1],
                                  self.network(inputs, params).bandwidth_bps)
        if bound <= BIMODAL_RATIO * curve[2]:
            return Outlook(notes, details=details)
        return Outlook(notes + (bimodal_note(curve[2], bound),), {2: bound}, details)

    def timeline(self, inputs: ModelInputs, params: ModelParams, workers: int, steps: int, seed: int) -> dict[str, Any]:
        """A synthetic multi-worker timeline as a Chrome trace (for Perfetto)."""
        from advisor.core.models.ps_des.simulator import simulate
        from advisor.core.models.ps_des.simulator.timeline import to_chrome_trace

        settings = SimulationSettings(workers=workers, steps=steps, warmup_steps=0, seed=seed, record_timeline=True)
        return to_chrome_trace(simulate(self._profile(inputs), self.network(inputs, params), settings))

    def _profile(self, inputs: ModelInputs) -> Profile:
        if inputs.profile is None:
            raise ModelInputError(self.name, "needs a one-worker profile (a trace), and none was given")
        traced = inputs.profile.job.parameter_servers
        if inputs.parameter_servers not in (None, traced):
            raise ModelInputError(self.name, f"parameter_servers: the profile was recorded with {traced} parameter "
                                             f"server(s); profile the job with the PS count you will run")
        if inputs.worker_speeds and any(s != 1.0 for s in inputs.worker_speeds):
            raise ModelInputError(self.name, "worker_speeds: heterogeneous workers are not simulated yet")
        return inputs.profile

    def _compile(self, profile: Profile, net: NetworkModel) -> Compiled:
        """The merged graph of ``profile`` on ``net``, built once for all the W of a curve."""
        cached = self._compiled
        if cached is not None and cached[0] is profile and cached[1] == net:
            return cached[2]
        from advisor.core.models.ps_des.simulator.fast import compile_profile

        compiled = compile_profile(profile, net)
        self._compiled = (profile, net, compiled)
        return compiled


class _FastRun:
    """The compiled engine's continued run, seen through the protocol."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def advance(self, steps: int) -> Samples:
        seen = self._run.advance(steps)
        return Samples(seen.step_ends_s, seen.until_s, seen.steps, seen.events, seen.batch_size)


class _ReferenceRun:
    """The reference engine has no pause: each ``advance`` simulates ``steps`` from the start
    (same seed, so the same steps); the window ends when the first worker finishes its last step."""

    def __init__(self, profile: Profile, network: NetworkModel, workers: int, seed: int) -> None:
        self._args = (profile, network, workers, seed)

    def advance(self, steps: int) -> Samples:
        from advisor.core.models.ps_des.simulator import simulate_reference_engine

        profile, network, workers, seed = self._args
        result = simulate_reference_engine(profile, network, SimulationSettings(workers, steps, 0, seed))
        ends = tuple(np.asarray(e, dtype=np.float64) for e in result.step_ends_s)
        until = min(float(e[-1]) if len(e) else math.inf for e in ends)
        if not math.isfinite(until):
            raise SimulationSettingsError("the measurement window is empty: simulate more steps")
        return Samples(ends, until, steps, result.events, result.batch_size)
