"""The whole answer for one job: curve, baselines, saturation point and cost-optimal W.

This is the predictor's public API: the CLI and the Kubernetes controller both call
``advise`` with a profile and an ``AdviceRequest`` and render the ``Advice`` it returns.
Preprocessing (parsing-overhead split, section 3.2.1 of Li et al.) happens here, once, so
every caller predicts the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from advisor.core.baselines import cynthia, phase_queueing, phases
from advisor.core.models.ps_des.contention import BIMODAL_RATIO, Contention, alternating_bound, bimodal_note
from advisor.core.cost import Choice, Constraints, Prices, cost_optimal, cost_per_example, saturation_point
from advisor.core.curve import CurvePoint, CurveSettings, Progress, Simulate, predict_curve
from advisor.core.models.ps_des.preprocess import add_client_gap, split_parsing_overhead
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError

MODEL_NAME = "li2020-des"  # Li et al.'s simulation with equal sharing (AdviceRequest.contention = None)
CONTENTION_MODEL_NAME = "li2020-des+contention"  # with the contention rules (core/models/ps_des/contention.py), the default
DEFAULT_GOODPUT = 0.95  # TCP payload per wire byte with 1500-byte frames: 1448 / 1538


@dataclass(frozen=True, slots=True)
class Overhead:
    """Parsing overhead per received tensor, alpha x bytes + beta (microseconds)."""

    alpha_us_per_byte: float = 0.0
    beta_us: float = 0.0


@dataclass(frozen=True, slots=True)
class AdviceRequest:
    network: NetworkModel
    curve: CurveSettings
    overhead: Overhead = Overhead()
    prices: Prices = Prices()
    constraints: Constraints = Constraints()
    saturation_threshold: float = 0.05
    goodput: float = DEFAULT_GOODPUT  # fraction of the nominal link rate that TCP delivers as payload
    client_gap: bool = True  # replay the client's time between steps (preprocess.add_client_gap)
    contention: Contention | None = Contention()  # None: Li et al.'s equal sharing

    @property
    def model(self) -> str:
        """The model's name, as reported (``Advice.model``) and keyed (controller cache)."""
        return MODEL_NAME if self.contention is None else CONTENTION_MODEL_NAME

    def __post_init__(self) -> None:
        if not 0 < self.goodput <= 1:
            raise SimulationSettingsError(f"goodput must be in (0, 1], got {self.goodput}")
        if not 0 < self.saturation_threshold < 1:
            raise SimulationSettingsError(f"saturation threshold must be in (0, 1), got {self.saturation_threshold}")


@dataclass(frozen=True, slots=True)
class AdvicePoint:
    workers: int
    throughput: float
    low: float
    high: float
    steps: int
    events: int
    cost_per_example: float
    cynthia: float
    phase_queueing: float
    # W = 2 only, when much higher: throughput if the two workers alternate pulls and pushes
    # (core/models/ps_des/contention.py); the decision uses ``throughput``
    alternating: float | None = None


@dataclass(frozen=True, slots=True)
class Advice:
    model: str
    points: tuple[AdvicePoint, ...]
    saturation_workers: int
    recommended: Choice
    parameter_servers: int
    batch_size: int
    notes: tuple[str, ...] = field(default=())

    def point(self, workers: int) -> AdvicePoint:
        """The curve's point for ``workers``; ``KeyError`` if it was not predicted."""
        for p in self.points:
            if p.workers == workers:
                return p
        raise KeyError(workers)


def advise(
    profile: Profile, request: AdviceRequest, simulate: Simulate, progress: Progress | None = None
) -> Advice:
    """Predict the curve for ``profile`` and derive the saturation point and the cheapest W."""
    prepared = prepare_profile(profile, request)
    curve = predict_curve(prepared, effective_network(request), request.curve, simulate, progress)
    return _assemble(profile, request, curve)


def prepare_profile(profile: Profile, request: AdviceRequest) -> Profile:
    """The profile as the simulation replays it: overhead split out, client gap added."""
    prepared = profile
    if request.overhead.alpha_us_per_byte or request.overhead.beta_us:
        prepared = split_parsing_overhead(prepared, request.overhead.alpha_us_per_byte, request.overhead.beta_us)
    if request.client_gap:
        prepared = add_client_gap(prepared)
    return prepared


def effective_network(request: AdviceRequest) -> NetworkModel:
    """The network the simulation sees: nominal capacities scaled by the TCP goodput fraction,
    and the contention rules, if any."""
    net = request.network
    if request.goodput != 1.0:
        worker = net.worker_bandwidth_bps * request.goodput if net.worker_bandwidth_bps else None
        net = replace(net, bandwidth_bps=net.bandwidth_bps * request.goodput, worker_bandwidth_bps=worker)
    return net if request.contention is None else request.contention.apply(net)


def _assemble(profile: Profile, request: AdviceRequest, curve: tuple[CurvePoint, ...]) -> Advice:
    workers = [p.workers for p in curve]
    thr = [p.throughput for p in curve]
    ps = profile.job.parameter_servers
    coarse = phases(profile, request.network.bandwidth_bps, request.goodput)
    alternating, notes = _alternating(profile, request, curve)
    points = tuple(
        AdvicePoint(
            workers=p.workers, throughput=p.throughput, low=p.low, high=p.high, steps=p.steps, events=p.events,
            cost_per_example=cost_per_example(request.prices, p.workers, ps, p.throughput),
            cynthia=cynthia(coarse, p.workers), phase_queueing=phase_queueing(coarse, p.workers),
            alternating=alternating if p.workers == 2 else None,
        )
        for p in curve
    )
    if request.contention is not None:
        notes = request.contention.notes() + notes
    return Advice(
        model=request.model,
        points=points,
        saturation_workers=saturation_point(workers, thr, request.saturation_threshold),
        recommended=cost_optimal(workers, thr, request.prices, parameter_servers=ps, constraints=request.constraints),
        parameter_servers=ps,
        batch_size=profile.job.batch_size,
        notes=notes,
    )


def _alternating(profile: Profile, request: AdviceRequest, curve: tuple[CurvePoint, ...]) -> tuple[float | None, tuple[str, ...]]:
    """The W = 2 alternating outcome and its note, when it is far above the prediction.

    Only with the contention rules (which predict the drifting regime) and only for W = 2: from
    W = 3 on the testbed's workers show random phases, never stable alternation.
    """
    by_w = {p.workers: p.throughput for p in curve}
    if request.contention is None or 1 not in by_w or 2 not in by_w:
        return None, ()
    bound = alternating_bound(profile, by_w[1], effective_network(request).bandwidth_bps)
    if bound <= BIMODAL_RATIO * by_w[2]:
        return None, ()
    return bound, (bimodal_note(by_w[2], bound),)
