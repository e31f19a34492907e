"""How workers contend for the parameter server's links: the product's default model.

Li et al. (2020) share a link equally among the workers on it. Against the testbed in
``tests/data/ps-async`` that model erred by a median 11 % and up to 43 % (W = 1..8, two models, three
network regimes), mostly because it lets simulated workers settle into arrangements the real
ones never hold: compute-bound workers spread evenly and never collide, transfer-bound ones
stay in lockstep. Three rules on top of it (``NetworkModel``; ``simulator/reference.py``
states them) bring the simulated phases to what the testbed shows and the median error to
about 5 %:

- **request-path queueing** (``request_queue_s``): a pull's request waits behind the other
  workers' queued push data, at most the bottleneck's queue. Loss-based congestion control
  (cubic, reno) fills the queue, so the bound is the queue depth the user states; BBR keeps
  it short (5 ms is an assumption: with 0 the worst BBR point becomes +23 %, with 20 ms +1 %);
- **uneven shares** (``share_sigma`` = 1.0): a connection's share of a contended link is
  LogNormal(0, 1)-weighted, redrawn each time it becomes active (the testbed's workers differ
  by 6-23 % a step);
- **multi-flow goodput** (``multi_flow_goodput`` = 0.85): a link direction that several
  workers share delivers 85 % of what one flow gets (the testbed saturates at 71-77 % of the
  nominal rate, one flow gets about 95 %). Measured on jobs with one PS only, and it applies to
  them only: a job with several PS uses ``multi_ps_flow_goodput`` (1.0, no loss). On the 2-PS
  runs (``tests/data/ps-traces``) the busiest PS link carried 78-97 % of one flow's goodput at
  W = 3-8, up to 97 % when the workers took turns on it, where one-PS links saturate at
  71-77 %; the value fitted on either placement alone is 1.0 and predicts the other
  (``benchmarks/multi_ps_accuracy.py``). It calibrates the simulation to the runs' average: the
  simulation does not take turns, and why the 2-PS runs do and the one-PS runs do not is not
  known (docs/contention-model.md, section 7). The synchronous models keep 0.85 with several PS
  (``sync.SYNC_MULTI_PS_FLOW_GOODPUT``): a barrier leaves their workers no turns to take.

sigma and eta were fitted on one model and predicted the other (and fitted on one congestion
control and predicted another) with a median error of 5 % and a maximum of 13-16 %; they are
this testbed's, and a cluster can recalibrate them. The README's accuracy section has the
numbers and what the rules do not explain.

At W = 2 real workers sometimes settle into *alternating* pulls and pushes instead (one
pulls while the other pushes), each then nearly as fast as alone: 197 ex/s against 126-136 for
the same job under a deeper queue. A 1-worker trace cannot tell which will happen, so when the
upper bound of that outcome (``alternating_bound``: each worker as fast as alone) is far above
the prediction, the alternating outcome (the bound less the two-way loss of overlapped transfers,
``two_way.py``) is reported beside it as a second outcome, with the probability the testbed
gives it for the stated network (``arrangements.py``); decisions weigh both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from advisor.core.phases import phases, ps_link_bound
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError

SHARE_SIGMA = 1.0

MULTI_FLOW_GOODPUT = 0.85  # jobs with one PS
MULTI_PS_FLOW_GOODPUT = 1.0  # jobs with several PS: the 2-PS runs show no multi-flow loss (module docstring)
SHORT_QUEUE_S = 0.005  # BBR, unknown congestion control, or a loss-based one without a stated queue
BIMODAL_RATIO = 1.3  # report the alternating outcome when it exceeds the prediction by more than this


class CongestionControl(StrEnum):
    """The TCP congestion control of the training pods (``sysctl net.ipv4.tcp_congestion_control``)."""

    CUBIC = "cubic"
    RENO = "reno"
    BBR = "bbr"
    UNKNOWN = "unknown"

    @property
    def loss_based(self) -> bool:
        """Fills the bottleneck queue before it backs off (so requests wait behind it)."""
        return self in (CongestionControl.CUBIC, CongestionControl.RENO)


@dataclass(frozen=True, slots=True)
class Contention:
    """The contention rules and their parameters; ``AdviceRequest.contention = None`` turns
    them off (Li et al.'s equal sharing)."""

    congestion_control: CongestionControl = CongestionControl.UNKNOWN
    queue_s: float | None = None  # the bottleneck queue depth in seconds (tc qdisc latency / limit)
    share_sigma: float = SHARE_SIGMA
    multi_flow_goodput: float = MULTI_FLOW_GOODPUT  # a one-PS job's links
    multi_ps_flow_goodput: float = MULTI_PS_FLOW_GOODPUT  # the links of a job with several PS
    window_gain: float = 0.0  # NetworkModel.window_gain; the synchronous models' default is sync.SYNC_WINDOW_GAIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "congestion_control", CongestionControl(self.congestion_control))
        if self.queue_s is not None and not (math.isfinite(self.queue_s) and self.queue_s >= 0):
            raise SimulationSettingsError(f"queue must be a finite time >= 0, got {self.queue_s!r}")
        # the other two are checked by NetworkModel, with its messages
        NetworkModel(bandwidth_bps=1.0, share_sigma=self.share_sigma, multi_flow_goodput=self.multi_flow_goodput,
                     window_gain=self.window_gain)
        if not (isinstance(self.multi_ps_flow_goodput, (int, float)) and 0 < self.multi_ps_flow_goodput <= 1):
            raise SimulationSettingsError(f"multi_ps_flow_goodput must be in (0, 1], got {self.multi_ps_flow_goodput!r}")

    @property
    def request_queue_s(self) -> float:
        """How long a pull's request can wait: the stated queue for loss-based control, else short."""
        if self.congestion_control.loss_based and self.queue_s is not None:
            return self.queue_s
        return SHORT_QUEUE_S

    def notes(self) -> tuple[str, ...]:
        """What the user should know about these settings."""
        if self.congestion_control.loss_based and self.queue_s is None:
            return (f"{self.congestion_control.value} fills the bottleneck queue: state its depth (--queue) for a better "
                    f"prediction; assumed {SHORT_QUEUE_S * 1e3:g} ms",)
        return ()

    def flow_goodput(self, parameter_servers: int) -> float:
        """The multi-flow goodput of a job with ``parameter_servers`` PS: the one-PS value that was
        measured for one PS, ``multi_ps_flow_goodput`` for several (module docstring)."""
        return self.multi_flow_goodput if parameter_servers <= 1 else self.multi_ps_flow_goodput

    def apply(self, network: NetworkModel, parameter_servers: int = 1) -> NetworkModel:
        """``network`` with these rules switched on, for a job with ``parameter_servers`` PS."""
        return replace(network, request_queue_s=self.request_queue_s, share_sigma=self.share_sigma,
                       multi_flow_goodput=self.flow_goodput(parameter_servers), window_gain=self.window_gain)


def alternating_bound(profile: Profile, one_worker: float, link_bps: float, other_worker: float | None = None) -> float:
    """Throughput of 2 workers in perfect alternation: each as fast as alone (``one_worker``; the
    second ``other_worker`` when it runs at another speed), unless the busiest PS link direction
    cannot carry both workers' bytes (examples/s; ``link_bps`` is the rate one flow gets)."""
    return min(one_worker + (one_worker if other_worker is None else other_worker), ps_link_bound(profile, link_bps))


def alone_at_speed(profile: Profile, one_worker: float, speed: float, other_speed: float, link_bps: float) -> float:
    """A worker's throughput alone at ``other_speed``, from ``one_worker``, that of a worker alone
    at ``speed``: its step is longer (or shorter) by the step's worker compute times the change of
    1 / speed (``phases.compute_s``: every worker op's recorded time, as the simulation scales it).
    A faster worker's step shrinks at most in proportion to its speed: overlapped compute makes
    that sum larger than what the step spends on it."""
    compute_s = phases(profile, link_bps).compute_s
    step_s = profile.job.batch_size / one_worker
    faster = step_s * min(1.0, speed / other_speed)
    return profile.job.batch_size / max(step_s + compute_s * (1 / other_speed - 1 / speed), faster)


def bimodal_note(throughput_2: float, alternating: float, probability: float, basis: str, efficiency: float,
                 efficiency_basis: str) -> str:
    """The W = 2 message when the alternating outcome is far above the prediction (``efficiency``:
    what the overlapped transfers keep, and why: ``two_way.two_way``)."""
    return (f"W=2: two outcomes. {throughput_2:.0f} ex/s if the workers drift or run in step, about {alternating:.0f} "
            f"ex/s if they settle into alternating pulls and pushes (each transfer keeping {efficiency:.0%} of "
            f"its speed where it overlaps the other's: {efficiency_basis}), with probability {probability:.0%} ({basis}). "
            "Runs whose phases settle part way apart land between the two. A 1-worker profile cannot tell which; "
            "decisions weigh both by these probabilities")
