"""What both engines read: the profile, network and settings turned into plain arrays.

Both the reference and the fast engine start from the same ``SimInputs`` so that they see
the same sampled steps, random stream keys and scheduling priorities; any difference in
their results is then a difference in the simulation itself.

Resources ("slots") of one worker: slot 0 is the worker's compute; parameter server i has
slots ``1 + 3i`` (downlink_i), ``2 + 3i`` (uplink_i) and ``3 + 3i`` (ps_i compute).

Scheduler keys are compared as tuples ``(round, priority, seq)``: ``round`` is 0 for a stream
waiting for its first service and 1 for one waiting for its second (HTTP/2 model, section
3.2.2), ``priority`` comes from the stream order (0 for computation, which is served in release
order, unless the recorded order keys it: ``order.py``) and ``seq`` is a global counter bumped on every release, re-queue and
chunk start, which also breaks ties between chunks that complete at the same instant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from advisor.core.profile import Profile, Resource
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError, StreamOrder
from advisor.core.models.ps_des.simulator.jit import quantize
from advisor.core.models.ps_des.simulator.order import stream_priorities

SLOTS_PER_PS = 3
_SLOT_OFFSET = {Resource.DOWNLINK: 1, Resource.UPLINK: 2, Resource.PS: 3}


@dataclass(frozen=True)
class SimInputs:
    """Arrays indexed by operation position in ``profile.ops`` (see module docstring)."""

    n_ps: int
    workers: int
    steps: int
    slot: np.ndarray  # int64 per op
    bits: np.ndarray  # float64 per op, bytes * 8 (0 for computation)
    instant: np.ndarray  # bool per op: zero-byte transfers complete when released
    durations_s: np.ndarray  # (profile steps, ops) float64, seconds
    sampled: np.ndarray  # (workers, steps) int64: profile step used by each simulated step
    priority: np.ndarray  # float64 per op: static stream priority (0 for computation)
    transfer_index: np.ndarray  # int64 per op: position among transfers, -1 for computation
    random_keys: np.ndarray | None  # (workers, steps, transfers) float32 for StreamOrder.RANDOM
    link_bps: float
    nic_bps: float
    win_bits: float  # math.inf when flow control is off
    start_s: np.ndarray | None = None  # float64 per worker: first step's start, on the time grid
    request_queue_s: float = 0.0  # NetworkModel.request_queue_s
    multi_flow_goodput: float = 1.0  # NetworkModel.multi_flow_goodput
    share_sigma: float = 0.0  # NetworkModel.share_sigma
    window_gain: float = 0.0  # NetworkModel.window_gain
    two_way_efficiency: float = 0.0  # NetworkModel.two_way_efficiency
    # (workers, n_ps, 2 directions, SHARE_DRAWS) float64: the k-th activation of worker w's
    # connection to PS i in direction d gets weight [w, i, d, k % SHARE_DRAWS]; all 1 (and last
    # axis 1) when share_sigma is 0. See share_weights.
    share_weights: np.ndarray | None = None
    speed_blocks: int = 1  # blocks of recorded steps in durations_s, one per distinct speed
    worker_block: tuple[int, ...] = ()  # the block of each listed worker (later workers: 0)
    worker_nic_bps: tuple[float, ...] = ()  # each listed worker's NIC rate (later ones: nic_bps)
    sync_replicas: int = 0  # R > 0: synchronous PS, an update per R fresh gradients; 0: asynchronous
    # StreamOrder.RECORDED: (recorded steps, ops) float32, each op's key in each recorded step
    # (``recorded_keys``); a simulated step reads the row of the recorded step it replays
    recorded_keys: np.ndarray | None = None

    def start_of(self, worker: int) -> float:
        """When ``worker``'s first step starts (0 unless staggered)."""
        return 0.0 if self.start_s is None else float(self.start_s[worker])

    def block_of(self, worker: int) -> int:
        """The block of ``durations_s`` that ``worker``'s speed reads (0: as traced)."""
        return self.worker_block[worker] if worker < len(self.worker_block) else 0

    def nic_of(self, worker: int) -> float:
        """The rate of ``worker``'s own link (its NIC) in bits/s."""
        return self.worker_nic_bps[worker] if worker < len(self.worker_nic_bps) else self.nic_bps

    def nics(self) -> np.ndarray:
        """Every worker's NIC rate (bits/s), float64 per worker."""
        return np.array([self.nic_of(w) for w in range(self.workers)], dtype=np.float64)

    @property
    def recorded_steps(self) -> int:
        return self.durations_s.shape[0] // self.speed_blocks

    @property
    def slots_per_worker(self) -> int:
        return 1 + SLOTS_PER_PS * self.n_ps

    def is_link_slot(self, slot: int) -> bool:
        return slot >= 1 and (slot - 1) % SLOTS_PER_PS < 2

    def direction(self, slot: int) -> int:
        """0 for a downlink slot, 1 for an uplink slot."""
        return (slot - 1) % SLOTS_PER_PS

    def ps_of(self, slot: int) -> int:
        return (slot - 1) // SLOTS_PER_PS

    def stream_key(self, op: int, worker: int, step: int) -> float:
        """The order priority of a stream released in ``step`` of ``worker``."""
        if self.recorded_keys is not None:
            return float(self.recorded_keys[self.sampled[worker, step], op])
        if self.random_keys is not None and self.transfer_index[op] >= 0:
            return float(self.random_keys[worker, step, self.transfer_index[op]])
        return float(self.priority[op])


def slot_of(resource: Resource, ps: int | None) -> int:
    """The slot of an operation on ``resource`` of parameter server ``ps``."""
    if resource is Resource.WORKER:
        return 0
    return _SLOT_OFFSET[resource] + SLOTS_PER_PS * int(ps or 0)


def prepare(
    profile: Profile,
    network: NetworkModel,
    settings: SimulationSettings,
    worker_speeds: tuple[float, ...] = (),
    worker_bandwidths_bps: tuple[float, ...] = (),
    sync_replicas: int = 0,
) -> SimInputs:
    """Validate the combination and build the shared arrays (regimes: module docstring)."""
    graph = prepare_graph(profile, network, worker_speeds, worker_bandwidths_bps)
    return replace(for_settings(graph, settings), sync_replicas=check_replicas(sync_replicas, settings.workers))


def check_replicas(replicas: int, workers: int) -> int:
    """``replicas`` if it is a valid ``sync_replicas`` for ``workers`` workers (0: asynchronous)."""
    if not 0 <= replicas <= workers:
        raise SimulationSettingsError(f"replicas_to_aggregate {replicas} must be between 1 and the {workers} worker(s)")
    return replicas


def prepare_graph(
    profile: Profile,
    network: NetworkModel,
    worker_speeds: tuple[float, ...] = (),
    worker_bandwidths_bps: tuple[float, ...] = (),
) -> SimInputs:
    """The part of the inputs that does not depend on the workers, steps or seed (no
    workers yet: ``for_settings`` adds them), so that a curve builds it once for every W.
    ``worker_speeds`` and ``worker_bandwidths_bps`` describe workers 0, 1, ... (later ones
    run as traced, on ``network``'s worker link)."""
    ops = profile.ops
    is_transfer = np.array([op.resource.is_transfer for op in ops], dtype=bool)
    transfer_index = np.full(len(ops), -1, dtype=np.int64)
    transfer_index[is_transfer] = np.arange(int(is_transfer.sum()))
    bits = np.array([8.0 * op.bytes for op in ops], dtype=np.float64)
    durations = np.array([s.duration_us for s in profile.steps], dtype=np.float64) * 1e-6
    durations, blocks, worker_block = speed_blocks(profile, durations, worker_speeds)
    for w, rate in enumerate(worker_bandwidths_bps):
        if not (math.isfinite(rate) and rate > 0):
            raise SimulationSettingsError(f"worker {w}'s link rate {rate!r} bit/s must be finite and > 0")
    return SimInputs(
        n_ps=profile.job.parameter_servers,
        workers=0,
        steps=0,
        slot=np.array([slot_of(op.resource, op.ps) for op in ops], dtype=np.int64),
        bits=bits,
        instant=is_transfer & (bits == 0),
        durations_s=durations,
        sampled=np.zeros((0, 0), dtype=np.int64),
        priority=stream_priorities(profile, network),
        transfer_index=transfer_index,
        random_keys=np.zeros((0, 0, int(is_transfer.sum())), np.float32) if network.order is StreamOrder.RANDOM else None,
        recorded_keys=recorded_keys(profile, is_transfer, blocks) if network.order is StreamOrder.RECORDED else None,
        link_bps=float(network.bandwidth_bps),
        nic_bps=float(network.worker_bandwidth_bps or network.bandwidth_bps),
        win_bits=math.inf if network.win_bytes is None else 8.0 * float(network.win_bytes),
        request_queue_s=float(network.request_queue_s),
        multi_flow_goodput=float(network.multi_flow_goodput),
        share_sigma=float(network.share_sigma),
        window_gain=float(network.window_gain),
        two_way_efficiency=float(network.two_way_efficiency),
        speed_blocks=blocks,
        worker_block=worker_block,
        worker_nic_bps=tuple(float(r) for r in worker_bandwidths_bps),
    )


def recorded_keys(profile: Profile, is_transfer: np.ndarray, blocks: int = 1) -> np.ndarray:
    """StreamOrder.RECORDED's key of every op in every recorded step (ms from the step's start),
    repeated for each speed block: a transfer's recorded end, so that a replayed step serves its
    streams in the order the recorded step received them, and a computation's recorded start,
    so that ops ready together run in the order the recorded step ran them."""
    start = np.array([s.start_us for s in profile.steps], dtype=np.float64)
    end = start + np.array([s.duration_us for s in profile.steps], dtype=np.float64)
    keys = np.where(is_transfer[None, :], end, start) * 1e-3
    return np.tile(keys, (blocks, 1)).astype(np.float32)


def speed_blocks(
    profile: Profile, durations_s: np.ndarray, worker_speeds: tuple[float, ...]
) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """``durations_s`` with one block of recorded steps per distinct speed (block 0: 1.0, the
    trace itself), the number of blocks and each listed worker's block (module docstring)."""
    speeds: list[float] = [1.0]
    worker_block: list[int] = []
    for w, speed in enumerate(worker_speeds):
        if not (math.isfinite(speed) and speed > 0):
            raise SimulationSettingsError(f"worker {w}'s speed {speed!r} must be finite and > 0 (1.0 = as traced)")
        if speed not in speeds:
            speeds.append(float(speed))
        worker_block.append(speeds.index(speed))
    if len(speeds) == 1:
        return durations_s, 1, tuple(worker_block)
    compute = np.array([op.resource is Resource.WORKER for op in profile.ops], dtype=bool)
    blocks = []
    for speed in speeds:
        block = durations_s.copy()
        block[:, compute] = durations_s[:, compute] / speed
        blocks.append(block)
    return np.concatenate(blocks, axis=0), len(speeds), tuple(worker_block)


def for_settings(graph: SimInputs, settings: SimulationSettings) -> SimInputs:
    """``graph`` (from ``prepare_graph``) with the workers, steps, samples and starts."""
    return replace(
        with_steps(replace(graph, workers=settings.workers), settings.seed, settings.steps),
        start_s=_start_times(settings),
    )


def with_steps(inputs: SimInputs, seed: int, steps: int) -> SimInputs:
    """``inputs`` with ``steps`` sampled steps (and random stream keys) per worker.

    Each worker draws from its own stream of the seed, and a longer draw begins with the
    shorter one, so worker w replays the same profile steps whatever the number of workers
    or steps: a run can be extended (``fast.FastRun``) exactly, and the points of a curve
    share their random numbers (which also steadies the curve's shape).
    """
    n_profile = inputs.recorded_steps
    sampled = np.empty((inputs.workers, steps), dtype=np.int64)
    keys = None if inputs.random_keys is None else np.empty((inputs.workers, steps, inputs.random_keys.shape[2]), np.float32)
    for w in range(inputs.workers):
        sampled[w] = sample_steps(seed, w, steps, n_profile) + inputs.block_of(w) * n_profile
        if keys is not None:
            keys[w] = _stream(seed, w, 1).random((steps, keys.shape[2]), dtype=np.float32)
    weights = draw_share_weights(seed, inputs.workers, inputs.n_ps, inputs.share_sigma)
    return replace(inputs, steps=steps, sampled=sampled, random_keys=keys, share_weights=weights)


SHARE_DRAWS = 4096  # weights drawn per connection; activations beyond wrap around


def draw_share_weights(seed: int, workers: int, n_ps: int, sigma: float) -> np.ndarray:
    """Each connection's sequence of sharing weights, LogNormal(0, ``sigma``), drawn up front.

    Why up front: both engines then read the same numbers, and a continued run
    (``fast.FastRun``) reads exactly what a longer run would. A fixed number per connection
    (wrapping after ``SHARE_DRAWS`` activations, hundreds of steps) keeps the draws
    independent of the step count. Worker w's weights come from its own stream of the seed.
    """
    if sigma == 0.0:
        return np.ones((workers, n_ps, 2, 1))
    out = np.empty((workers, n_ps, 2, SHARE_DRAWS))
    for w in range(workers):
        out[w] = np.exp(sigma * _stream(seed, w, 2).standard_normal((n_ps, 2, SHARE_DRAWS)))
    # On a 2**-20 grid within [2**-16, 2**12]: then any sum of up to 2**21 weights is exact, so
    # it does not depend on the order the engines add them in (sharing.py).
    return np.clip(np.round(out * _WEIGHT_GRID) / _WEIGHT_GRID, 2.0**-16, 2.0**12)


_WEIGHT_GRID = 2.0**20


def sample_steps(seed: int, worker: int, steps: int, recorded_steps: int) -> np.ndarray:
    """The profile steps ``worker`` replays: ``steps`` draws with replacement from
    ``range(recorded_steps)`` on the worker's own PCG64 stream of ``seed``."""
    return _stream(seed, worker, 0).integers(0, recorded_steps, size=steps, dtype=np.int64)


def _stream(seed: int, worker: int, kind: int) -> np.random.Generator:
    """Worker ``worker``'s random stream ``kind`` (0: sampled steps, 1: stream keys, 2: shares)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(kind, worker))))


def _start_times(settings: SimulationSettings) -> np.ndarray:
    """Each worker's first start, rounded to the time grid like every event time."""
    offsets = settings.start_offsets_s or (0.0,) * settings.workers
    return np.array([quantize(float(t)) for t in offsets], dtype=np.float64)
