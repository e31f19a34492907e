"""The simulator's public vocabulary: what a simulation is asked and what it answers.

Kept apart from the engine so that predictions, the CLI and the controller depend on these
small types rather than on how the simulation is made fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from advisor.errors import AdvisorError


class SimulationSettingsError(AdvisorError, ValueError):
    """An impossible simulation setting: zero bandwidth, W < 1, an unknown stream name..."""


class StreamOrder(StrEnum):
    """Which pending stream a link serves next (Li et al. 2020, sections 3.3 and 4.2)."""

    FIFO = "fifo"  # in the order the streams were scheduled
    CRITICAL_PATH = "critical-path"  # TicTac-like: the stream whose consumers are needed first
    REVERSE = "reverse"  # the reverse of CRITICAL_PATH
    RANDOM = "random"  # a random order, drawn per step from the seeded generator
    CUSTOM = "custom"  # NetworkModel.custom_order names the transfers in order
    RECORDED = "recorded"  # each replayed step serves its streams in the order they finished in the recorded step


@dataclass(frozen=True, slots=True)
class NetworkModel:
    """The parameter server's network as the simulation sees it."""

    bandwidth_bps: float  # capacity of each PS link, in each direction (bits/s)
    win_bytes: float | None = None  # HTTP/2 first-service window; None = flow control off
    order: StreamOrder = StreamOrder.FIFO
    custom_order: tuple[str, ...] = ()  # transfer names, for StreamOrder.CUSTOM
    worker_bandwidth_bps: float | None = None  # a worker's NIC; None = same as bandwidth_bps
    # Contention between workers beyond the paper's equal shares; all off (the defaults here)
    # is Li et al.'s model. simulator/reference.py states the rules, advisor.core.models.ps_des.contention
    # holds the product's defaults and why.
    request_queue_s: float = 0.0  # a pull's request waits behind others' queued push data, at most this long
    share_sigma: float = 0.0  # spread of TCP shares: LogNormal(0, sigma) weight per connection activation
    multi_flow_goodput: float = 1.0  # capacity factor of a PS link direction that >= 2 workers share
    # a connection that starts while another worker's flow uses the reverse direction of its PS link
    # moves at most this multiple of the rate its previous transfer ended at (its window, over a
    # round trip the other direction's queue sets); 0 = off
    window_gain: float = 0.0
    # the two-way loss: a PS link direction carries this share of its rate while the opposite
    # direction of the same link carries data, and its whole rate otherwise, however many flows
    # share it (multi_flow_goodput is then not used); 0 = off
    two_way_efficiency: float = 0.0

    def __post_init__(self) -> None:
        _positive("bandwidth_bps", self.bandwidth_bps)
        _non_negative("request_queue_s", self.request_queue_s)
        _non_negative("share_sigma", self.share_sigma)
        _non_negative("window_gain", self.window_gain)
        if not (isinstance(self.multi_flow_goodput, (int, float)) and 0 < self.multi_flow_goodput <= 1):
            raise SimulationSettingsError(f"multi_flow_goodput must be in (0, 1], got {self.multi_flow_goodput!r}")
        if not (isinstance(self.two_way_efficiency, (int, float)) and 0 <= self.two_way_efficiency <= 1):
            raise SimulationSettingsError(f"two_way_efficiency must be in [0, 1] (0: off), got {self.two_way_efficiency!r}")
        if self.worker_bandwidth_bps is not None:
            _positive("worker_bandwidth_bps", self.worker_bandwidth_bps)
        if self.win_bytes is not None:
            _positive("win_bytes", self.win_bytes)
        if self.order is StreamOrder.CUSTOM and not self.custom_order:
            raise SimulationSettingsError("order 'custom' needs custom_order: the transfer names in order")


@dataclass(frozen=True, slots=True)
class SimulationSettings:
    """How long and how to run one simulation."""

    workers: int
    steps: int = 1000  # steps simulated per worker
    warmup_steps: int = 50  # per worker, excluded from the throughput average
    seed: int = 0
    record_timeline: bool = False
    # When each worker's first step starts (s); () = all at 0. See simulator/stagger.py.
    start_offsets_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SimulationSettingsError(f"workers must be >= 1, got {self.workers}")
        _check_offsets(self.start_offsets_s, self.workers)
        if self.steps < 1:
            raise SimulationSettingsError(f"steps must be >= 1, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise SimulationSettingsError(
                f"warmup_steps must be in [0, steps), got {self.warmup_steps} with steps={self.steps}"
            )


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One operation (or chunk of a transfer) as it ran in the simulation."""

    worker: int
    step: int  # the worker's step number
    op: str
    resource: str  # Resource value, e.g. "downlink"
    ps: int | None
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What one simulation run measured."""

    workers: int
    batch_size: int
    step_ends_s: tuple[tuple[float, ...], ...]  # per worker, the end time of each step
    events: int  # operation-chunk completions processed
    timeline: tuple[TimelineEvent, ...] | None = field(default=None, repr=False)
    updates_s: tuple[float, ...] | None = None  # synchronous PS: when each update was applied

    def measurement_window(self, warmup_steps: int) -> tuple[float, float]:
        """(start, end] in which every worker is past its warm-up and still running.

        The window opens when the last worker finishes its ``warmup_steps``-th step and
        closes when the first worker finishes its last step, so every worker runs during
        the whole window (as the testbed's ``thr_window`` measures).
        """
        start = max(ends[warmup_steps - 1] if warmup_steps else 0.0 for ends in self.step_ends_s)
        end = min(ends[-1] for ends in self.step_ends_s)
        if end <= start:
            raise SimulationSettingsError("the measurement window is empty: simulate more steps")
        return start, end

    def throughput(self, warmup_steps: int) -> float:
        """Examples/s summed over workers, a time average over ``measurement_window``; steps
        that end inside it are counted, each worth ``batch_size`` examples."""
        start, end = self.measurement_window(warmup_steps)
        done = sum(sum(1 for t in ends if start < t <= end) for ends in self.step_ends_s)
        return done * self.batch_size / (end - start)


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise SimulationSettingsError(f"{name} must be a finite number > 0, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise SimulationSettingsError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_offsets(offsets: tuple[float, ...], workers: int) -> None:
    """Start offsets: empty, or one finite non-negative time per worker (a tuple, so hashable)."""
    if not isinstance(offsets, tuple):
        raise SimulationSettingsError(f"start_offsets_s must be a tuple, got {type(offsets).__name__}")
    if offsets and len(offsets) != workers:
        raise SimulationSettingsError(
            f"start_offsets_s must be empty or have one value per worker ({workers}), got {len(offsets)}"
        )
    for w, value in enumerate(offsets):
        _non_negative(f"start_offsets_s[{w}]", value)
