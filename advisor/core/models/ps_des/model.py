"""The parameter-server simulation of Li et al. (2020) behind the model protocol.

Two registered models share this class: ``li2020-des`` is the paper's model (equal shares of a
link, full capacity), ``li2020-des+contention`` (the product's default) adds the contention rules
measured on the testbed (``contention.py``). What they read: the prepared profile
(``ModelInputs.profile``), the link (``ModelInputs.network``: rate, HTTP/2 window, stream order) at
``ModelInputs.goodput`` of its nominal rate. Parameters: the contention rules' four values,
``engine``: the compiled engine (default) or the plain reference engine that states the rules
(slow; for checks), and ``ps_placement`` for a PS-count what-if.

Regimes (docs/models-ps-regimes.md): ``ModelInputs.worker_speeds`` and ``worker_bandwidths_bps``
make workers heterogeneous (all 1.0 is the homogeneous run, bit for bit); a
``ModelInputs.parameter_servers`` other than the trace's places a one-PS profile's variables on
that many PS (``placement.py``; the placement is in ``outlook().details``). The synchronous
models (``sync.py``) are this class with a barrier.

The compiled graph is built once per curve (one profile and network) and each W's run is continued, not restarted, when the curve asks for more steps (``simulator.fast``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from advisor.core.advice import ModelChoice
from advisor.core.model_error import SEVERAL_PS
from advisor.core.models.protocol import (
    LINK_GOODPUT, Alternative, CalibrationParam, ModelBase, ModelInputs, ModelParams, Need, Outlook, Run, Samples,
    require_asynchronous_ps, require_ps_profile,
)
from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, alternation_chance
from advisor.core.models.ps_des.contention import (
    BIMODAL_RATIO, MULTI_FLOW_GOODPUT, MULTI_PS_FLOW_GOODPUT, SHARE_SIGMA, CongestionControl, Contention,
    alone_at_speed, alternating_bound, bimodal_note,
)
from advisor.core.models.ps_des.two_way import alternating_rate, two_way
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
    ps_placement: Literal["round-robin", "greedy-bytes"] = Field(
        default="round-robin", description="how variables go to PS in a PS-count what-if (TF's default: round-robin)")


class ContentionParams(DesParams):
    """The simulation with the testbed's contention rules (core/models/ps_des/contention.py)."""

    congestion_control: CongestionControl = Field(default=CongestionControl.UNKNOWN,
                                                  description="the pods' TCP congestion control")
    queue_s: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                  description="bottleneck queue depth in seconds (with cubic or reno)")
    share_sigma: float = Field(default=SHARE_SIGMA, ge=0, allow_inf_nan=False,
                               description="spread of TCP shares (lognormal sigma)")
    multi_flow_goodput: float = Field(default=MULTI_FLOW_GOODPUT, gt=0, le=1,
                                      description="capacity of a link direction several workers share (one PS)")
    multi_ps_flow_goodput: float = Field(default=MULTI_PS_FLOW_GOODPUT, gt=0, le=1,
                                         description="the same for a job with several PS")
    window_gain: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                               description="a connection starting while another worker uses its PS link's other "
                                           "direction moves at most this x the rate its last transfer ended at (0: off)")
    two_way_loss: bool = Field(default=False,
                               description="experimental: a PS link direction loses the probed two-way efficiency "
                                           "while its other direction carries data, and nothing to several flows "
                                           "(multi_flow_goodput unused); off: docs/contention-model.md, section 6")

    def contention(self) -> Contention:
        return Contention(self.congestion_control, self.queue_s, self.share_sigma, self.multi_flow_goodput,
                          self.multi_ps_flow_goodput, self.window_gain)


# The contention rules' two measured constants (contention.py): what a running job's observed
# throughput corrects first. The grids span the bounds the offline refit keeps them in.
SHARE_SIGMA_CAL = CalibrationParam("share_sigma", (0.0, 0.5, 1.0, 1.5, 2.0),
                                   "how unevenly TCP connections share a contended link (lognormal sigma)")
MULTI_FLOW_GOODPUT_CAL = CalibrationParam("multi_flow_goodput", (0.6, 0.7, 0.8, 0.9, 1.0),
                                          "what a link direction several workers share delivers, relative to one "
                                          "flow (a job with one PS; multi_ps_flow_goodput for several)")
MULTI_PS_FLOW_GOODPUT_CAL = CalibrationParam("multi_ps_flow_goodput", (0.6, 0.7, 0.8, 0.9, 1.0),
                                             "the same for a job with several PS (replaces multi_flow_goodput there)")


def contention_choice(contention: Contention | None) -> ModelChoice:
    """The choice that means this simulation with the rules ``contention``; None: Li et al.'s
    equal shares (``li2020-des``)."""
    if contention is None:
        return ModelChoice(EQUAL_SHARES)
    return ModelChoice(CONTENTION, {"congestion_control": contention.congestion_control.value,
                                    "queue_s": contention.queue_s, "share_sigma": contention.share_sigma,
                                    "multi_flow_goodput": contention.multi_flow_goodput,
                                    "multi_ps_flow_goodput": contention.multi_ps_flow_goodput}
                       | ({"window_gain": contention.window_gain} if contention.window_gain else {}))


class PsDes(ModelBase):
    """See the module docstring."""

    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})
    # whether it represents SyncReplicasOptimizer's barrier: the asynchronous simulation refuses a
    # trace of a synchronous program (its workers would never wait); the synchronous one reads both
    synchronous = False

    def __init__(self, contention: bool) -> None:
        self.contention = contention
        self.name = CONTENTION if contention else EQUAL_SHARES
        self.Params: type[ModelParams] = ContentionParams if contention else DesParams
        self.description = ("Li et al.'s PS simulation with the testbed's contention rules (default)" if contention
                            else "Li et al.'s PS simulation (Algorithm 3.1), equal link shares")
        self.calibration: tuple[CalibrationParam, ...] = (
            (SHARE_SIGMA_CAL, MULTI_FLOW_GOODPUT_CAL, LINK_GOODPUT) if contention else (LINK_GOODPUT,))
        self.calibration_note = ""
        self._compiled: tuple[Any, Compiled] | None = None
        self._placed: tuple[Profile, int, str, Profile] | None = None

    def calibration_for(self, inputs: ModelInputs) -> tuple[CalibrationParam, ...]:
        """``calibration`` with the multi-flow goodput of the PS count simulated (a what-if's, else
        the trace's): a job with several PS reads ``multi_ps_flow_goodput`` and never
        ``multi_flow_goodput`` (``Contention.flow_goodput``)."""
        if self.simulated_ps(inputs) < 2:
            return self.calibration
        return tuple(MULTI_PS_FLOW_GOODPUT_CAL if c is MULTI_FLOW_GOODPUT_CAL else c for c in self.calibration)

    def simulated_ps(self, inputs: ModelInputs) -> int:
        """The PS count whose links the simulation loads: the what-if's (``parameter_servers``),
        else the traced PS that carry any of the step's transfers (1 without a trace); what picks
        the multi-flow goodput. A PS that serves nothing (every variable on another) leaves a
        one-PS job: its workers contend on one link, as the testbed's runs with an idle PS did
        (tests/data/ps-traces/w3-placements)."""
        if inputs.profile is None:
            return 1
        if self._what_if(inputs):
            return int(inputs.parameter_servers or 1)
        return max(1, len({op.ps for op in inputs.profile.ops if op.resource.is_transfer}))

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        self._profile(inputs, params)
        self.network(inputs, params)
        _nics(inputs, self.name)

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
        if not isinstance(params, ContentionParams):
            return net
        contention = params.contention()
        net = contention.apply(net, self.simulated_ps(inputs))
        return replace(net, two_way_efficiency=two_way(contention).efficiency) if params.two_way_loss else net

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, net = self._profile(inputs, params), self.network(inputs, params)
        regime = worker_regime(inputs, self.name)
        if getattr(params, "engine", "compiled") == "reference":
            return _ReferenceRun(profile, net, workers, seed, regime)
        from advisor.core.models.ps_des.simulator.fast import FastRun  # loads numba: only when predicting

        return _FastRun(FastRun(self._compile(profile, net, regime), workers, seed), uneven(regime, net))

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        return ps_link_bound(self._profile(inputs, params), self.network(inputs, params).bandwidth_bps)

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """The contention notes, and at W = 2 the alternating outcome when it is far above the
        prediction, with its probability for the stated network (``arrangements.py``). Only with
        the contention rules (which predict the drifting regime) and only for W = 2: from W = 3 on
        the testbed's workers show random phases, never stable alternation. A PS-count what-if
        says so (``Outlook.what_if``)."""
        return replace(self._outlook(inputs, params, curve), what_if=self._what_if(inputs))

    def _outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        link = worker_link_note(inputs.profile, inputs.network) if inputs.profile and inputs.network else None
        ps = self.simulated_ps(inputs)
        scope = self.error_scope(ps)
        if not isinstance(params, ContentionParams):
            return Outlook((link,) if link else (), details=self._placement_details(inputs, params), error_scope=scope)
        c = params.contention()
        details: dict[str, Any] = dict(self._placement_details(inputs, params))
        details["contention"] = {"congestion_control": c.congestion_control.value, "queue_s": c.queue_s,
                                 "request_queue_s": c.request_queue_s, "share_sigma": c.share_sigma,
                                 "multi_flow_goodput": c.multi_flow_goodput,
                                 "multi_ps_flow_goodput": c.multi_ps_flow_goodput,
                                 "flow_goodput_applied": c.flow_goodput(ps), "window_gain": c.window_gain}
        notes = c.notes() + ((link,) if link else ())
        if 1 not in curve or 2 not in curve:
            return Outlook(notes, details=details, error_scope=scope)
        if inputs.worker_bandwidths_bps or self._what_if(inputs):
            # the alternation bound assumes one NIC rate and the traced PS
            return Outlook(notes, details=details, error_scope=scope)
        profile, link_bps = inputs.recorded or self._profile(inputs, params), self.network(inputs, params).bandwidth_bps
        speeds = tuple(inputs.worker_speeds) + (1.0, 1.0)  # workers beyond the list run at 1.0
        second = None if speeds[0] == speeds[1] else alone_at_speed(profile, curve[1], speeds[0], speeds[1], link_bps)
        bound = alternating_bound(profile, curve[1], link_bps, second)
        if bound <= BIMODAL_RATIO * curve[2]:
            return Outlook(notes, details=details, error_scope=scope)
        chance, loss = alternation_chance(c), two_way(c)
        alternating = alternating_rate(profile, curve[1], link_bps, loss.efficiency, second)
        if alternating <= curve[2]:  # the transfers' loss in alternation outweighs what taking turns gains
            return Outlook(notes, details=details, error_scope=scope)
        details["two_way"] = {"efficiency": loss.efficiency, "known": loss.known, "basis": loss.basis}
        other = Alternative(ALTERNATING, alternating, chance.probability, DRIFTING, chance.basis, chance.known)
        return Outlook(notes + (bimodal_note(curve[2], alternating, chance.probability, chance.basis,
                                                loss.efficiency, loss.basis),), {2: other},
                       details, error_scope=scope)

    @staticmethod
    def error_scope(simulated_ps: int) -> str | None:
        """The measured error a job's intervals take: with several PS carrying its bytes the model
        misses differently (the workers' arrangement on the busiest link, docs/accuracy.md), so
        their own widths (``SEVERAL_PS``); with one, the model's."""
        return SEVERAL_PS if simulated_ps > 1 else None

    def timeline(self, inputs: ModelInputs, params: ModelParams, workers: int, steps: int, seed: int) -> dict[str, Any]:
        """A synthetic multi-worker timeline as a Chrome trace (for Perfetto)."""
        from advisor.core.models.ps_des.simulator import simulate
        from advisor.core.models.ps_des.simulator.timeline import to_chrome_trace

        settings = SimulationSettings(workers=workers, steps=steps, warmup_steps=0, seed=seed, record_timeline=True)
        regime = worker_regime(inputs, self.name)
        return to_chrome_trace(simulate(self._profile(inputs, params), self.network(inputs, params), settings,
                                        worker_speeds=regime[0], worker_bandwidths_bps=regime[1],
                                        sync_replicas=self.sync_replicas(params, workers)))

    def sync_replicas(self, params: ModelParams, workers: int) -> int:
        """Gradients per synchronous update at ``workers`` workers; 0: asynchronous (``sync.py``)."""
        return 0

    def _profile(self, inputs: ModelInputs, params: ModelParams | None = None) -> Profile:
        """The profile to simulate: the trace, or a one-PS trace placed on ``parameter_servers`` PS
        (``placement.py``; built once per curve)."""
        if inputs.profile is None:
            raise ModelInputError(self.name, "needs a one-worker profile (a trace), and none was given")
        profile = require_ps_profile(self.name, inputs.profile)
        if not self.synchronous:
            require_asynchronous_ps(self.name, profile)
        if not self._what_if(inputs):
            return profile
        traced, ps = profile.job.parameter_servers, int(inputs.parameter_servers or 0)
        if traced != 1:
            raise ModelInputError(self.name, f"parameter_servers: the profile was recorded with {traced} parameter "
                                             f"servers; a PS-count what-if starts from a one-PS profile")
        strategy = getattr(params, "ps_placement", "round-robin")
        cached = self._placed
        if cached is not None and cached[0] is profile and cached[1:3] == (ps, strategy):
            return cached[3]
        from advisor.core.models.ps_des.placement import with_parameter_servers

        try:
            placed = with_parameter_servers(profile, ps, strategy)
        except ModelInputError as exc:
            why = str(exc).removeprefix(f"model {exc.model!r}: ")
            raise ModelInputError(self.name, f"parameter_servers: {why}") from None
        self._placed = (profile, ps, strategy, placed)
        return placed

    @staticmethod
    def _what_if(inputs: ModelInputs) -> bool:
        return (inputs.profile is not None and inputs.parameter_servers is not None
                and inputs.parameter_servers != inputs.profile.job.parameter_servers)  # fmt: skip

    def _placement_details(self, inputs: ModelInputs, params: ModelParams) -> dict[str, Any]:
        """The PS-count what-if's placement ({variable: PS}) and bytes per PS and step, to print."""
        if not self._what_if(inputs) or inputs.profile is None:
            return {}
        from advisor.core.models.ps_des.placement import place, ps_bytes

        strategy = getattr(params, "ps_placement", "round-robin")
        return {"ps_placement": {"strategy": strategy, "parameter_servers": inputs.parameter_servers,
                                 "variables": place(inputs.profile, int(inputs.parameter_servers or 1), strategy),
                                 "bytes_per_ps": ps_bytes(self._profile(inputs, params))}}  # fmt: skip

    def _compile(
        self, profile: Profile, net: NetworkModel, regime: tuple[tuple[float, ...], ...] = ((), ())
    ) -> Compiled:
        """The merged graph of ``profile`` on ``net`` (and the workers' speeds and link rates),
        built once for all the W of a curve."""
        cached = self._compiled
        key = (profile, net, regime)
        # equal, not only the same object: a pool's worker process receives each W point's
        # profile as a new copy of the same one (advisor/parallel.py)
        if cached is not None and (cached[0][0] is profile or cached[0][0] == profile) and cached[0][1:] == key[1:]:
            return cached[1]
        from advisor.core.models.ps_des.simulator.fast import compile_profile

        compiled = compile_profile(profile, net, *regime)
        self._compiled = (key, compiled)
        return compiled


def _nics(inputs: ModelInputs, name: str) -> tuple[float, ...]:
    """The workers' own link rates as the simulation sees them (nominal x goodput)."""
    for w, rate in enumerate(inputs.worker_bandwidths_bps):
        if not (math.isfinite(rate) and rate > 0):
            raise ModelInputError(name, f"worker_bandwidths_bps: worker {w}'s rate {rate!r} must be finite and > 0")
    return tuple(r * inputs.goodput for r in inputs.worker_bandwidths_bps)


def uneven(regime: tuple[tuple[float, ...], ...], network: NetworkModel) -> bool:
    """Do the workers differ (a speed other than 1.0, a link rate other than the common one)?"""
    common = network.worker_bandwidth_bps or network.bandwidth_bps
    return any(s != 1.0 for s in regime[0]) or any(r != common for r in regime[1])


def worker_regime(inputs: ModelInputs, name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(worker speeds, worker link rates) for the engines; checked here so the error names the model."""
    for w, speed in enumerate(inputs.worker_speeds):
        if not (math.isfinite(speed) and speed > 0):
            raise ModelInputError(name, f"worker_speeds: worker {w}'s speed {speed!r} must be finite and > 0")
    return tuple(float(s) for s in inputs.worker_speeds), _nics(inputs, name)


class _FastRun:
    """The compiled engine's continued run, seen through the protocol.

    With ``uneven`` workers (speeds or link rates that differ), ``advance(steps)`` goes on until
    *every* worker has finished ``steps`` steps, not just the first: the curve's window opens
    when the slowest has finished its warm-up, which a worker ten times slower would not have
    done when the fastest reached the curve's first look. (Identical workers keep the plain
    rule, so an all-1.0 run is today's, bit for bit.) At most ``UNEVEN_MAX`` x ``steps`` engine
    steps: a worker that barely moves leaves the window empty, which the curve reports.
    """

    UNEVEN_MAX = 64

    def __init__(self, run: Any, uneven: bool = False) -> None:
        self._run = run
        self._uneven = uneven
        self._seen: Any = None

    def advance(self, steps: int) -> Samples:
        seen = self._seen if self._seen is not None and self._run.steps >= steps else self._run.advance(steps)
        while self._uneven and self._run.steps < self.UNEVEN_MAX * steps:
            slowest = min(len(e) for e in seen.step_ends_s)
            if slowest >= steps:
                break
            grow = math.ceil(self._run.steps * steps / max(slowest, 1) * 1.1)
            seen = self._run.advance(min(max(grow, self._run.steps + 1), self.UNEVEN_MAX * steps))
        self._seen = seen
        return Samples(seen.step_ends_s, seen.until_s, steps, seen.events, seen.batch_size)


class _ReferenceRun:
    """The reference engine has no pause: each ``advance`` simulates ``steps`` from the start
    (same seed, so the same steps); the window ends when the first worker finishes its last step."""

    def __init__(self, profile: Profile, network: NetworkModel, workers: int, seed: int,
                 regime: tuple[tuple[float, ...], ...] = ((), ())) -> None:  # fmt: skip
        self._args = (profile, network, workers, seed)
        self._regime = regime

    def advance(self, steps: int) -> Samples:
        from advisor.core.models.ps_des.simulator import simulate_reference_engine

        profile, network, workers, seed = self._args
        result = simulate_reference_engine(profile, network, SimulationSettings(workers, steps, 0, seed),
                                           worker_speeds=self._regime[0], worker_bandwidths_bps=self._regime[1])
        ends = tuple(np.asarray(e, dtype=np.float64) for e in result.step_ends_s)
        until = min(float(e[-1]) if len(e) else math.inf for e in ends)
        if not math.isfinite(until):
            raise SimulationSettingsError("the measurement window is empty: simulate more steps")
        return Samples(ends, until, steps, result.events, result.batch_size)
