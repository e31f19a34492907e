"""Synchronous data-parallel training with ring all-reduce (Horovod, NCCL, PyTorch DDP,
TF MultiWorkerMirroredStrategy), as a sampled model of the step.

Per step, every worker computes its forward and backward pass (a recorded step of the trace,
drawn per worker with the seed, scaled by the worker's speed); its gradients fill buckets
(``trace.bucket_plan``); a bucket is all-reduced once every worker has it ready and the
previous bucket is done (one communication stream, buckets in order), overlapping the rest of
backward. A flat ring moves ``2(W-1)/W`` of a bucket's bytes over each worker's link in
``2(W-1)`` rounds, each paying the link latency:

    T_b = 2(W-1) * (latency_s + 8 bytes_b / (W * rate * two_way_share))

where ``rate`` is the slowest participating link (every round waits for its slowest hop) and
``two_way_share`` the share of its one-way goodput each direction keeps while both directions
carry data at once, as every ring link does. Both ``latency_s`` and ``two_way_share`` default to
the figures of the framework the profile was recorded from (``FRAMEWORKS``, by ``job.kind``):
TensorFlow's ring collectives move every chunk with a gRPC call, PyTorch's gloo over plain TCP.
Besides the gradients' buckets a framework may run further small all-reduces every step (Keras
reduces each logged metric as a sum and a count): each is a ring pass of its own, 2(W-1) rounds
of latency whatever its size, run after the last bucket, alongside the optimizer update. The
hierarchical variant reduce-scatters inside each node of ``G`` GPUs, all-reduces across the
``N = ceil(W / G)`` nodes (the G shards in parallel, sharing the node's link) and all-gathers
inside the node:

    T_b = 2(G'-1) * (intra_latency + 8 bytes_b / (G' * intra_rate))
          + 2(N-1) * (latency_s + 8 bytes_b / (N * rate * two_way_share))

with ``G' = min(G, W)``. A worker's step ends when its compute and the last bucket are done,
followed by the optimizer update (and any other work that waited for the gradients), which
all-reduce frameworks run locally, or when the step's other collectives are done, if later.
There are no parameter pulls: the updated model is already on every worker.

Workers that share a host's cores (``host_cores`` stated; ``workers_per_host`` of them on each
host, ``n = min(W, workers_per_host)``, all W on one when unset) pay for it on every step, twice
over. A framework's collectives and step loop need CPU on the step's critical path, and once more
workers than cores share a host they wait for it: each step is longer by

    (host_cpu_s + host_cpu_s_per_mb * MB) * max(0, n - host_cores)

with ``MB`` the megabytes all-reduced per step (W > 1). And the host's cores can only do so much:
a step is never shorter than the CPU its workers need together over what the cores deliver,

    n * (cpu_s_per_step + transfer_cpu_s_per_call * buckets + collective_cpu_s * others
         + transfer_cpu_s_per_mb * MB) / (host_cores * host_utilization)

with ``cpu_s_per_step`` a worker's own CPU per step (the profile's, measured untraced by the hook),
``buckets`` the gradients' all-reduces a step runs, ``others`` its other (small) collectives
and the rest the framework's figures (``FRAMEWORKS``), on every worker (the step ends at a
barrier, so the busiest host sets it). Near that bound a step is slower than both it and the
step without it, t: every round's hop waits for a core as well as for the link. With more
workers than cores, and ``host_bound_exponent`` k set, the step is (t^k + bound^k)^(1/k); else
the larger of the two. Unset ``host_cores``: every worker has cores of its own, as
pods on their own nodes or with whole-core CPU limits have. Because the
all-reduce is a barrier, the W-worker step is set by the slowest of W sampled compute times plus
the exposed communication, which is why this is a sampled ``Run`` (``Samples`` of per-worker step
ends) rather than a closed form. See docs/models-ring.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from advisor.core.models.protocol import (
    LINK_GOODPUT, CalibrationParam, ModelBase, ModelInputs, ModelParams, Need, Outlook, Samples,
)
from advisor.core.models.ring_allreduce.trace import (
    MIB, BucketPlan, StepCosts, bucket_plan, recorded_bucket_plan, step_costs,
)
from advisor.core.profile import Profile, ProgramKind
from advisor.errors import ModelInputError

# Default per-round latency of an inter-node ring step when the framework is not known (a
# parameter-server trace replayed as an all-reduce job). NCCL's own cost model
# (src/graph/tuning.cc, hwLat[NET][Ring][Simple]) charges 9.6 us per step, times 1.9 for large
# multi-node all-reduces (its "plateau effect"), about 18 us, for InfiniBand/RoCE. Over TCP
# sockets (NCCL's socket transport, Gloo, MPI on Ethernet) a round also crosses the kernel
# stack on both ends, a few tens of microseconds; 50 us is a round figure for that case.
DEFAULT_LATENCY_S = 50e-6
# Inside a node: NCCL's PCIe ring step latency (tuning.cc, hwLat[PCI][Ring][Simple] = 5.7 us)
# and NCCL's nominal PCIe Gen3 x16 bandwidth (topo.h, PCI_BW = 12 GB/s = 96 Gbit/s).
DEFAULT_INTRA_LATENCY_S = 5.7e-6
DEFAULT_INTRA_BANDWIDTH_BPS = 96e9
STEP_BLOCK = 64  # compute steps are drawn in blocks of this many, so chunked runs draw the same
DEFAULT_BUCKET_MB = 25.0  # PyTorch DDP's default bucket_cap_mb
RECORDED = "recorded"  # BucketLayout.source: the framework's own layout, as the profile recorded it
BY_CAP = "bucket_mb"  # BucketLayout.source: gradients grouped by the model at a cap of bucket_mb MiB


@dataclass(frozen=True)
class Framework:
    """How a framework's ring moves data over TCP links: what ``RingParams`` leaves unset defaults
    to, by the profile's ``job.kind`` (docs/models-ring.md, "Per framework")."""

    latency_s: float  # per ring round, beyond the bytes' time on the link
    two_way_share: float  # of the one-way goodput, each direction, while both directions carry data
    collectives: tuple[int, ...]  # bytes of the per-step all-reduces besides the gradients', when not recorded
    basis: str  # where the figures come from, for people
    host_cpu_s: float = 0.0  # a step's extra time per co-located worker beyond the host's cores
    host_cpu_s_per_mb: float = 0.0  # and per MB all-reduced a step
    transfer_cpu_s_per_mb: float = 0.0  # CPU a worker spends per MB all-reduced (the host's CPU bound)
    transfer_cpu_s_per_call: float = 0.0  # and per all-reduce, whatever its size
    host_utilization: float = 1.0  # the most of a host's cores the workers get together
    host_bound_exponent: float | None = None  # k of the turn to the CPU bound beyond the cores; None: a sharp max
    collective_cpu_s: float | None = None  # CPU per small per-step collective; None: as any all-reduce


# PyTorch DDP over gloo: a lone gloo all-reduce of 1 and 8 MiB at W = 2, 3, 4 over the project's
# shaped 200 Mbit/s links (scripts/record_allreduce_ddp.py probe: 45, 65, 69 and 359, 479, 541 ms),
# fitted by least squares to 2(W-1) (lat + 8 bytes / (W rate 0.95 share)): 0.3 ms per round and
# 0.985 of the one-way goodput each way. DDP runs nothing else per step (buffers aside).
# No host terms: three DDP configurations at W = 2..4, every worker on one 2-core host, lose
# nothing to sharing it (host_cpu_s fitted on them, benchmarks/allreduce_accuracy.py fit: 0), and
# a fourth, predicted first, is within 5 % at W = 1..8 on that host at the scheduler's normal
# priority (ddp-slow-calm; at real-time priority its W = 8 ran 12 % slower, an artifact of the
# testbed's scheduling). Nor a CPU bound: lone gloo all-reduces at W = 2..8 on that host keep
# their link time with the cores 90 % or more busy (tests/data/allreduce/gloo-ring-probe): the CPU
# gloo's threads take while waiting is not needed.
GLOO = Framework(latency_s=3.0e-4, two_way_share=0.985, collectives=(),
                 basis="a lone gloo all-reduce of 1 and 8 MiB timed at W = 2..4 over shaped 200 Mbit/s links")
# TF2 Keras MWMS, CommunicationImplementation.RING: every chunk of every round is a gRPC RecvBuf
# call (receiver-initiated), so a round costs milliseconds on TCP, not NCCL's microseconds. The
# link figures come from lone ring all-reduces of 4 bytes, 1 and 8 MiB between two workers over
# shaped 25, 50 and 100 Mbit/s links (scripts/record_allreduce_mwms.py probe,
# tests/data/allreduce/grpc-ring-probe): 1.45 ms a round, 0.935 of the one-way goodput each way.
# Two workers on the testbed's two cores share none, so nothing of the host is in them. The host's
# figures but one come from the same all-reduces at W = 2..8, all on that 2-core host, with every
# worker's CPU time (probe-host.json, benchmarks/allreduce_accuracy.py host_probe_fit): a worker
# spends 17.9 ms of CPU per all-reduce of 1 or 8 MiB and 50.8 ms per MB, 4.7 ms per 4-byte one
# (Keras's metric sums and counts), the cores got at most 87.5 % busy, and
# beyond the cores each worker adds 0.5 ms per MB to the wait. Near the CPU bound the ring is
# slower than both the wait and the bound (every round's hop waits for a core), so there the step
# turns smoothly from one to the other, (t^5 + bound^5)^(1/5): the exponent is the probe's too,
# fitted with the wait's per MB. The wait a step, 9 ms, is fitted on
# the calm Keras MWMS runs of three programs on that host (benchmarks/allreduce_accuracy.py fit).
# Keras's fit logs the loss at least, reduced as a float32 sum and an int64 count.
GRPC_RING = Framework(latency_s=1.45e-3, two_way_share=0.935, collectives=(4, 8),
                      basis="a lone TensorFlow ring all-reduce timed at W = 2 over shaped 25, 50 and 100 Mbit/s "
                            "links, and at W = 2..8 on one 2-core host with its CPU time; host_cpu_s fitted on "
                            "Keras MWMS runs of three programs on that host",
                      host_cpu_s=9e-3, host_cpu_s_per_mb=5e-4, transfer_cpu_s_per_mb=0.0508,
                      transfer_cpu_s_per_call=0.0179, host_utilization=0.875, host_bound_exponent=5.0,
                      collective_cpu_s=4.7e-3)
GENERIC = Framework(latency_s=DEFAULT_LATENCY_S, two_way_share=1.0, collectives=(),
                    basis="no framework known: NCCL-style figures for Ethernet")
# A TensorFlow parameter-server trace replayed as an all-reduce what-if is a TensorFlow program:
# its all-reduce is MultiWorkerMirroredStrategy, whose ring over TCP is the gRPC one (what
# CommunicationImplementation.AUTO picks without NCCL; with GPUs it picks NCCL: framework_of).
# Measured: MWMS runs of the PS testbed's MLP and CNN predicted from their PS traces, W >= 2
# within 2.5 % with these figures, 1-12 % high with GENERIC's (benchmarks/allreduce_accuracy.py,
# "from the PS trace").
FRAMEWORKS: Mapping[ProgramKind, Framework] = {ProgramKind.PYTORCH_DDP: GLOO, ProgramKind.TF_MWMS: GRPC_RING,
                                                ProgramKind.TF_PS: GRPC_RING}


def framework_of(profile: Profile | None) -> Framework:
    """The ``Framework`` figures of the program ``profile`` was recorded from; a PS program whose
    worker ran on a GPU would all-reduce with NCCL (MWMS's choice with GPUs): the NCCL-style ones."""
    if profile is None:
        return GENERIC
    if profile.job.kind is ProgramKind.TF_PS and profile.job.worker_on_gpu:
        return GENERIC
    return FRAMEWORKS.get(profile.job.kind, GENERIC)


# A ring round's latency spans three orders of magnitude between RDMA (microseconds) and TCP
# through a kernel and a virtual network or gRPC (milliseconds): a running job tells which it has.
LATENCY_CAL = CalibrationParam("latency_s", (5e-6, 1.5e-5, 5e-5, 1.5e-4, 5e-4, 1.5e-3, 5e-3),
                               "latency of one ring round on a worker link (s)", log=True)


def turned(seconds: np.ndarray, floor: np.ndarray | float, k: float | None) -> np.ndarray:
    """Steps of ``seconds`` against a bound ``floor`` > 0 (either may be arrays):
    (seconds^k + floor^k)^(1/k), computed as max x (1 + (min / max)^k)^(1/k) so that any k >= 1
    stays finite; the larger of the two when ``k`` is None."""
    high = np.maximum(seconds, floor)
    if k is None:
        return high
    return high * (1.0 + (np.minimum(np.maximum(seconds, 0.0), floor) / high) ** k) ** (1.0 / k)


class RingParams(ModelParams):
    """Knobs of the flat ring."""

    bucket_mb: float | None = Field(
        None, gt=0, description="gradient bucket cap in MiB (PyTorch DDP's bucket_cap_mb); unset: the layout the "
        f"profile recorded, else {DEFAULT_BUCKET_MB:g}")
    latency_s: float | None = Field(
        None, ge=0, description="latency of one ring round on a worker link (s); unset: the profile's framework's "
        f"(pytorch-ddp {GLOO.latency_s * 1e3:g} ms, tf-mwms and tf-ps {GRPC_RING.latency_s * 1e3:g} ms, "
        f"else {DEFAULT_LATENCY_S * 1e6:g} us)")
    two_way_share: float | None = Field(
        None, gt=0, le=1, description="share of the one-way goodput each direction of a ring link keeps while both "
        f"carry data at once; unset: the profile's framework's (pytorch-ddp {GLOO.two_way_share:g}, "
        f"tf-mwms and tf-ps {GRPC_RING.two_way_share:g}, else 1)")

    host_cores: int | None = Field(
        None, ge=1, description="CPU cores of the host the workers share (the busiest, if several); unset: every "
        "worker has cores of its own")
    workers_per_host: int | None = Field(
        None, ge=1, description="workers on each host of host_cores cores; unset: all of them on one host (the "
        "hierarchical ring: gpus_per_node)")
    host_cpu_s: float | None = Field(
        None, ge=0, description="a step's extra time per worker on a host beyond its host_cores (s); unset: the "
        f"profile's framework's (tf-mwms and tf-ps {GRPC_RING.host_cpu_s * 1e3:g} ms, pytorch-ddp "
        f"{GLOO.host_cpu_s * 1e3:g} ms as measured, else 0: unmeasured)")

    host_cpu_s_per_mb: float | None = Field(
        None, ge=0, description="and per MB all-reduced a step (s/MB); unset: the profile's framework's")
    transfer_cpu_s_per_mb: float | None = Field(
        None, ge=0, description="CPU seconds a worker spends per MB all-reduced, for the host's CPU bound; unset: "
        "the profile's framework's")
    transfer_cpu_s_per_call: float | None = Field(
        None, ge=0, description="and per all-reduce of the gradients it runs, whatever its size (s); unset: the "
        "profile's framework's")
    collective_cpu_s: float | None = Field(
        None, ge=0, description="and per small collective it runs besides the gradients' (Keras's metric sums and "
        "counts), for the host's CPU bound (s); unset: the profile's framework's, else transfer_cpu_s_per_call")
    host_utilization: float | None = Field(
        None, gt=0, le=1, description="the most of host_cores the workers get together, for the host's CPU bound; "
        "unset: the profile's framework's")
    cpu_s_per_step: float | None = Field(
        None, ge=0, description="CPU seconds a worker spends per step besides the all-reduce, for the host's CPU "
        "bound; unset: the profile's (measured by the profiling hook), else 0")
    host_bound_exponent: float | None = Field(
        None, ge=1, description="how sharply a step turns from its time t without the host's CPU bound to the bound "
        "f once more workers than cores share the host: the step is (t^k + f^k)^(1/k); unset: the profile's "
        "framework's (tf-mwms and tf-ps 5, from its probe), else the larger of the two")

    def on_host(self, workers: int) -> int:
        """Workers on the busiest host at ``workers`` in all."""
        return workers if self.workers_per_host is None else min(workers, self.workers_per_host)

    def host_seconds(self, workers: int, megabytes: float = 0.0) -> float:
        """How much longer every step is at ``workers`` for the workers sharing a host's cores, a
        step all-reducing ``megabytes`` (module docstring); 0 when ``host_cores`` is unset."""
        if self.host_cores is None:
            return 0.0
        per_worker = (self.host_cpu_s or 0.0) + (self.host_cpu_s_per_mb or 0.0) * megabytes
        return per_worker * max(0, self.on_host(workers) - self.host_cores)

    def host_floor(self, workers: int, megabytes: float = 0.0, calls: int = 0, collectives: int = 0) -> float:
        """The shortest step the host's cores allow at ``workers``, a step running ``calls``
        all-reduces of ``megabytes`` in all, ``collectives`` of them the step's small other ones:
        the CPU its workers need together over what the cores deliver (module docstring); 0 when
        ``host_cores`` is unset."""
        if self.host_cores is None:
            return 0.0
        need = self.cpu_s_per_step or 0.0
        if workers > 1:  # alone, a worker all-reduces nothing
            per_call = self.transfer_cpu_s_per_call or 0.0
            small = per_call if self.collective_cpu_s is None else self.collective_cpu_s
            need += (per_call * (calls - collectives) + small * collectives
                     + (self.transfer_cpu_s_per_mb or 0.0) * megabytes)
        return self.on_host(workers) * need / (self.host_cores * (self.host_utilization or 1.0))

    def bounded(self, seconds: np.ndarray, workers: int, floor: float) -> np.ndarray:
        """Steps of ``seconds`` (without the host's CPU bound) at ``workers`` against the bound
        ``floor`` (``host_floor``): the larger of the two, or, with more workers than cores on the
        host and ``host_bound_exponent`` k set, (seconds^k + floor^k)^(1/k): near the bound every ring
        round's hop also waits for a core, so the step is longer than either (module docstring)."""
        seconds = np.asarray(seconds, dtype=np.float64)
        if floor <= 0:
            return seconds
        return turned(seconds, floor, self.turn_exponent(workers))

    def turn_exponent(self, workers: int) -> float | None:
        """The k a step at ``workers`` turns into the host's CPU bound with (``bounded``): the
        ``host_bound_exponent`` once more workers than cores share the host, else None (the max)."""
        beyond = self.host_cores is not None and self.on_host(workers) > self.host_cores
        return self.host_bound_exponent if beyond else None


    def latency(self) -> float:
        """``latency_s``, or the generic default when unset (``RingAllReduce.resolved`` fills it per framework)."""
        return DEFAULT_LATENCY_S if self.latency_s is None else self.latency_s

    def share(self) -> float:
        """``two_way_share``, or 1 when unset."""
        return 1.0 if self.two_way_share is None else self.two_way_share


class HierarchicalParams(RingParams):
    """Knobs of the two-level ring (intra-node reduce-scatter / all-gather around an inter-node ring)."""

    gpus_per_node: int = Field(8, ge=1, description="GPUs (workers) per node sharing the node's link")
    intra_node_bandwidth_bps: float = Field(
        DEFAULT_INTRA_BANDWIDTH_BPS, gt=0, description="rate of the links between GPUs of one node (bit/s)"
    )
    intra_node_latency_s: float = Field(DEFAULT_INTRA_LATENCY_S, ge=0, description="latency of one intra-node round (s)")

    def on_host(self, workers: int) -> int:
        """As the flat ring's, with a node's ``gpus_per_node`` workers on each host unless
        ``workers_per_host`` says otherwise."""
        return min(workers, self.gpus_per_node if self.workers_per_host is None else self.workers_per_host)


def allreduce_seconds(bucket_bytes: np.ndarray, workers: int, rate_bps: float, params: RingParams) -> np.ndarray:
    """Duration of each all-reduce of ``bucket_bytes`` at ``workers``, one ring pass each (module
    docstring equations); ``rate_bps`` is the link's one-way goodput, ``params.two_way_share`` of it
    moves each way."""
    bits = np.asarray(bucket_bytes, dtype=np.float64) * 8.0
    rate = rate_bps * params.share()
    if isinstance(params, HierarchicalParams):
        local = min(params.gpus_per_node, workers)
        nodes = math.ceil(workers / params.gpus_per_node)
        intra = 2 * (local - 1) * (params.intra_node_latency_s + bits / (local * params.intra_node_bandwidth_bps))
        inter = 2 * (nodes - 1) * (params.latency() + bits / (nodes * rate))
        return intra + inter
    return 2 * (workers - 1) * (params.latency() + bits / (workers * rate))


def link_seconds_per_bit(workers: int, rate_bps: float, params: RingParams) -> float:
    """Seconds the links need per bit all-reduced in a step, latency aside (for ``link_bound``)."""
    rate = rate_bps * params.share()
    if isinstance(params, HierarchicalParams):
        local = min(params.gpus_per_node, workers)
        nodes = math.ceil(workers / params.gpus_per_node)
        return 2 * (local - 1) / local / params.intra_node_bandwidth_bps + 2 * (nodes - 1) / nodes / rate
    return 2 * (workers - 1) / workers / rate


@dataclass(frozen=True)
class BucketLayout:
    """Which bucket layout a prediction replays: the framework's own, as recorded with the profile
    (``source`` RECORDED), or the model's grouping at ``bucket_mb`` MiB (BY_CAP: the parameter
    as given, else DEFAULT_BUCKET_MB when the profile recorded no layout)."""

    source: str
    bucket_mb: float | None  # the cap used (BY_CAP), None for a recorded layout
    bytes: tuple[int, ...]  # per bucket, in reduce order

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "bucket_mb": self.bucket_mb, "count": len(self.bytes),
                "bytes": list(self.bytes)}


def bucket_layout(profile: Profile, params: RingParams) -> tuple[tuple[tuple[str, ...], ...] | None, float | None]:
    """(the recorded buckets to replay, or None; the cap in MiB to group by, or None): the
    framework's own layout when the profile recorded one and ``bucket_mb`` is unset, else
    ``bucket_mb`` (DEFAULT_BUCKET_MB when unset)."""
    if params.bucket_mb is None and profile.job.buckets is not None:
        return profile.job.buckets, None
    return None, DEFAULT_BUCKET_MB if params.bucket_mb is None else params.bucket_mb


@dataclass(frozen=True)
class _Setup:
    profile: Profile
    costs: StepCosts
    plan: BucketPlan
    base_rate_bps: float  # (network.worker_bandwidth_bps or bandwidth_bps) x goodput
    layout: BucketLayout
    collectives: tuple[int, ...]  # bytes of the step's other all-reduces, run after the last bucket
    collectives_recorded: bool  # from the profile (job.collectives), else the framework's own

    @property
    def megabytes(self) -> float:
        """What a step all-reduces, its buckets and other collectives, in MB (1e6 bytes)."""
        return (float(self.plan.bytes.sum()) + float(sum(self.collectives))) / 1e6

    @property
    def calls(self) -> int:
        """The all-reduces a step runs: its buckets and other collectives."""
        return len(self.plan.bytes) + len(self.collectives)


def _setup(model: str, inputs: ModelInputs, params: ModelParams) -> _Setup:
    """Validate the inputs and read the trace; every problem is a ``ModelInputError`` naming the field."""
    if not isinstance(params, RingParams):
        raise ModelInputError(model, f"parameters must be {RingParams.__name__}, got {type(params).__name__}")
    profile = inputs.profile if inputs.profile is not None else inputs.recorded
    if profile is None:
        raise ModelInputError(model, "needs a one-worker trace (inputs.profile) for compute times and gradients")
    if inputs.network is None:
        raise ModelInputError(model, "needs the link rate (inputs.network.bandwidth_bps)")
    # a ring has no PS: every link is a worker's, so a common worker link stated apart is the ring's link
    nominal = inputs.network.worker_bandwidth_bps or inputs.network.bandwidth_bps
    rate = nominal * inputs.goodput
    if not (math.isfinite(rate) and rate > 0):
        raise ModelInputError(
            model, f"link rate network.{'worker_' if inputs.network.worker_bandwidth_bps else ''}bandwidth_bps "
            f"x goodput must be > 0, got {nominal!r} x {inputs.goodput!r}"
        )
    for i, bw in enumerate(inputs.worker_bandwidths_bps):
        if not (math.isfinite(bw) and bw > 0):
            raise ModelInputError(model, f"worker_bandwidths_bps[{i}] must be > 0, got {bw!r}")
    for i, speed in enumerate(inputs.worker_speeds):
        if not (math.isfinite(speed) and speed > 0):
            raise ModelInputError(model, f"worker_speeds[{i}] must be > 0, got {speed!r}")
    recorded, cap_mb = bucket_layout(profile, params)
    costs, plan = _read_trace(profile, cap_mb, recorded)
    if len(costs.grad_bytes) == 0:
        raise ModelInputError(
            model, "profile.ops has no gradients: no UPLINK transfer with bytes > 0 (a trace's pushes are its gradients)"
        )
    layout = BucketLayout(source=RECORDED if recorded is not None else BY_CAP, bucket_mb=cap_mb,
                          bytes=tuple(int(b) for b in plan.bytes))
    recorded_extra = profile.job.collectives
    extra = recorded_extra if recorded_extra is not None else framework_of(profile).collectives
    return _Setup(profile=profile, costs=costs, plan=plan, base_rate_bps=rate, layout=layout,
                  collectives=tuple(extra), collectives_recorded=recorded_extra is not None)


def resolve_params(profile: Profile | None, params: RingParams) -> RingParams:
    """``params`` with ``latency_s``, ``two_way_share`` and the host's figures filled in from the
    profile's framework where unset (``FRAMEWORKS``), and ``cpu_s_per_step`` from the profile."""
    fw = framework_of(profile)
    update: dict[str, float] = {}
    if params.latency_s is None:
        update["latency_s"] = fw.latency_s
    if params.two_way_share is None:
        update["two_way_share"] = fw.two_way_share
    for name in ("host_cpu_s", "host_cpu_s_per_mb", "transfer_cpu_s_per_mb", "transfer_cpu_s_per_call",
                 "host_utilization", "host_bound_exponent", "collective_cpu_s"):
        if getattr(params, name) is None:
            update[name] = getattr(fw, name)
    if params.cpu_s_per_step is None and profile is not None and profile.job.cpu_s_per_step is not None:
        update["cpu_s_per_step"] = profile.job.cpu_s_per_step
    return params.model_copy(update=update) if update else params


_last_read: tuple[Profile, object, StepCosts, BucketPlan] | None = None


def _read_trace(profile: Profile, cap_mb: float | None,
                recorded: tuple[tuple[str, ...], ...] | None = None) -> tuple[StepCosts, BucketPlan]:
    """``step_costs`` and the bucket plan (the ``recorded`` buckets, else grouped at ``cap_mb``
    MiB), remembered for the last profile: a curve starts one run per W from the same profile,
    and reading a 2,600-op trace costs about as much as a whole point. The profile itself is
    kept (compared by identity), so its id cannot be reused."""
    global _last_read
    last = _last_read
    key = RECORDED if recorded is not None else cap_mb
    if last is not None and last[0] is profile and last[1] == key:
        return last[2], last[3]
    costs = step_costs(profile)
    if recorded is not None:
        plan = recorded_bucket_plan(costs, recorded)
    else:
        plan = bucket_plan(costs, float(cap_mb or DEFAULT_BUCKET_MB) * MIB)
    _last_read = (profile, key, costs, plan)
    return costs, plan


def _ring_rate(setup: _Setup, inputs: ModelInputs, workers: int) -> float:
    """The slowest participating link: every ring round waits for its slowest hop."""
    rates = [setup.base_rate_bps if w >= len(inputs.worker_bandwidths_bps)
             else inputs.worker_bandwidths_bps[w] * inputs.goodput for w in range(workers)]
    return min(rates)


class RingRun:
    """One synchronous all-reduce run at W workers, continued step by step (module docstring)."""

    def __init__(self, setup: _Setup, inputs: ModelInputs, params: RingParams, workers: int, seed: int) -> None:
        self._workers = workers
        self._batch = setup.profile.job.batch_size
        self._speed = np.array([inputs.speed(w) for w in range(workers)], dtype=np.float64)
        self._compute = setup.costs.compute_s
        self._update = setup.costs.update_s
        self._ready = setup.plan.ready_s  # (K, B)
        rate = _ring_rate(setup, inputs, workers)
        duration = allreduce_seconds(setup.plan.bytes, workers, rate, params)
        # the step's other collectives: one ring pass each, one after another (they share the
        # gradients' ordering), from the last bucket's end, alongside the update
        self._extra = float(allreduce_seconds(np.array(setup.collectives, dtype=np.float64), workers, rate,
                                              params).sum())
        self._host = params.host_seconds(workers, setup.megabytes)  # after the barrier, on every worker
        self._floor = params.host_floor(workers, setup.megabytes, setup.calls, len(setup.collectives))  # CPU bound
        self._turn = params.turn_exponent(workers)  # how a step turns into it (RingParams.bounded)
        # Bucket b ends at E_b = max(M_b, E_{b-1}) + T_b (M_b: last worker ready). Unrolled with
        # P_b = T_0 + ... + T_b: E_b = P_b + max over j <= b of (M_j - P_{j-1}).
        self._cum = np.cumsum(duration)
        self._cum_before = self._cum - duration
        self._rng = np.random.default_rng(seed)
        self._draws = np.zeros((0, workers), dtype=np.int64)
        self._start = np.zeros(workers)  # when each worker's next step starts
        self._ends: list[np.ndarray] = []  # per simulated step, (W,) ends
        self._events = 0

    def _draw(self, steps: int) -> None:
        while len(self._draws) < steps:
            block = self._rng.integers(0, len(self._compute), size=(STEP_BLOCK, self._workers))
            self._draws = np.concatenate((self._draws, block))

    def _step(self, drawn: np.ndarray) -> None:
        speed = self._speed
        start = self._start
        ready = (start[:, None] + self._ready[drawn] / speed[:, None]).max(axis=0)
        comm_end = float(self._cum[-1] + np.max(ready - self._cum_before))
        compute_end = start + self._compute[drawn] / speed
        end = np.maximum(np.maximum(compute_end, comm_end) + self._update[drawn] / speed,
                         comm_end + self._extra) + self._host
        if self._floor > 0:
            base = float(start.max())
            end = base + turned(end - base, self._floor, self._turn)
        self._ends.append(end)
        self._start = end
        self._events += self._workers + len(self._cum)

    def advance(self, steps: int) -> Samples:
        """Continue until every worker has finished ``steps`` steps in all; the samples end with
        the last of them. A step is a barrier (its last bucket waits for every worker's step
        start, and takes T_B > 0), so no worker ends step s + 1 before every worker has ended
        step s, and every step end up to then is in the samples. Ending at the first worker's
        instead would cut off the W - 1 others, a millisecond later, and read the throughput
        low by (W - 1) / (W x measured steps) (advisor.profiling.step_logs)."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self._draw(steps)
        while len(self._ends) < steps:
            self._step(self._draws[len(self._ends)])
        ends = np.stack(self._ends[:steps], axis=1)  # (W, steps)
        until = float(ends[:, -1].max())
        return Samples(step_ends_s=tuple(row.copy() for row in ends), until_s=until, steps=steps,
                       events=self._events, batch_size=self._batch)


@dataclass
class RingAllReduce(ModelBase):
    """The flat or hierarchical ring all-reduce model (``ThroughputModel``). Its W = 1 point is the
    trace's compute rate, not the PS trace's measured rate: an all-reduce job has no pulls."""

    name: str
    description: str
    Params: type[ModelParams]
    needs: frozenset[Need] = frozenset({Need.PROFILE, Need.BANDWIDTH, Need.GRADIENTS})
    # against a PS trace (the contract suite's traces) its W = 1 is the compute rate, by design
    # (tests/core/test_ring_allreduce.py); against an all-reduce trace it is the trace's own rate
    # (tests/core/test_allreduce_profiles.py)
    anchored: bool = False
    # the inter-node ring's latency and the links' goodput (the hierarchical ring keeps its
    # intra-node figures, NCCL's own, as stated)
    calibration: tuple[CalibrationParam, ...] = (LATENCY_CAL, LINK_GOODPUT)
    calibration_note: str = ""

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        _setup(self.name, inputs, self._own(params))

    def resolved(self, inputs: ModelInputs, params: ModelParams) -> RingParams:
        """``latency_s``, ``two_way_share`` and ``host_cpu_s`` as the prediction uses them: the
        profile's framework's where unset (``FRAMEWORKS``)."""
        return resolve_params(inputs.profile if inputs.profile is not None else inputs.recorded, self._own(params))

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> RingRun:
        own = self.resolved(inputs, params)
        if workers < 1:
            raise ModelInputError(self.name, f"workers must be >= 1, got {workers}")
        return RingRun(_setup(self.name, inputs, own), inputs, own, workers, seed)

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        """W x batch / (link seconds per step): 2(W-1)/W of the bits all-reduced per step (the
        gradients and the step's other collectives) over the slowest link, at its two-way share."""
        own = self.resolved(inputs, params)
        setup = _setup(self.name, inputs, own)
        per_bit = link_seconds_per_bit(workers, _ring_rate(setup, inputs, workers), own)
        seconds = per_bit * (float(setup.plan.bytes.sum()) + float(sum(setup.collectives))) * 8.0
        return math.inf if seconds <= 0 else workers * setup.profile.job.batch_size / seconds

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """The bucket layout the curve replayed (``details["buckets"]``, ``BucketLayout.as_json``),
        the step's other collectives (``details["collectives"]``: their bytes, and whether the
        profile recorded them or they are the framework's own), the host the workers share when
        stated (``details["host"]``), and the parameters as used:
        ``bucket_mb`` the cap the buckets were grouped at (unset for a recorded layout),
        ``latency_s``, ``two_way_share`` and ``host_cpu_s`` the framework's where unset, and the
        stated placement on hosts (``host_cores``, ``workers_per_host``)."""
        own = self.resolved(inputs, params)
        setup = _setup(self.name, inputs, own)
        extra = {"bytes": list(setup.collectives), "source": RECORDED if setup.collectives_recorded else "framework"}
        details: dict[str, Any] = {"buckets": setup.layout.as_json(), "collectives": extra}
        if own.host_cores is not None:  # the placement stated, as the step's host terms used it
            details["host"] = {"cores": own.host_cores, "workers_per_host": own.workers_per_host,
                               "host_cpu_s": own.host_cpu_s, "host_cpu_s_per_mb": own.host_cpu_s_per_mb,
                               "transfer_cpu_s_per_mb": own.transfer_cpu_s_per_mb,
                               "transfer_cpu_s_per_call": own.transfer_cpu_s_per_call,
                               "host_utilization": own.host_utilization, "cpu_s_per_step": own.cpu_s_per_step,
                               "host_bound_exponent": own.host_bound_exponent,
                               "collective_cpu_s": own.collective_cpu_s,
                               "calls": setup.calls, "megabytes": setup.megabytes}
        what_if = inputs.profile is not None and inputs.profile.job.kind is ProgramKind.TF_PS  # a PS program's ring
        return Outlook(details=details, what_if=what_if,
                       params={"bucket_mb": setup.layout.bucket_mb, "latency_s": own.latency_s,
                               "two_way_share": own.two_way_share, "host_cores": own.host_cores,
                               "workers_per_host": own.workers_per_host, "host_cpu_s": own.host_cpu_s,
                               "host_cpu_s_per_mb": own.host_cpu_s_per_mb,
                               "transfer_cpu_s_per_mb": own.transfer_cpu_s_per_mb,
                               "transfer_cpu_s_per_call": own.transfer_cpu_s_per_call,
                               "host_utilization": own.host_utilization, "cpu_s_per_step": own.cpu_s_per_step,
                               "host_bound_exponent": own.host_bound_exponent,
                               "collective_cpu_s": own.collective_cpu_s})

    def _own(self, params: ModelParams) -> RingParams:
        if not isinstance(params, self.Params) or not isinstance(params, RingParams):
            raise ModelInputError(self.name, f"parameters must be {self.Params.__name__}, got {type(params).__name__}")
        return params


RING = RingAllReduce(
    name="ring-allreduce",
    description="synchronous data parallel with bucketed ring all-reduce (Horovod, NCCL, PyTorch DDP)",
    Params=RingParams,
)
HIERARCHICAL = RingAllReduce(
    name="ring-allreduce-hierarchical",
    description="ring all-reduce across nodes, reduce-scatter/all-gather inside nodes of gpus_per_node GPUs",
    Params=HierarchicalParams,
)
