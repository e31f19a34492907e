"""The profile: what one traced 1-PS/1-worker training job tells the predictor.

A profile holds the operation graph of one SGD step once (names, resource, bytes,
dependencies: the same in every step, since every step runs the same TensorFlow graph)
and, per recorded step, the start and duration of every operation (which vary step to
step). This split keeps a 100-step profile small and makes "dependencies identical across
steps" true by construction rather than by a check.

This is also the project's own file format (``format: advisor-profile``, ``version: 1``);
see ``docs/profile-format.md``. Times are microseconds, bytes are bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from functools import cached_property
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from advisor.errors import ProfileError

FORMAT_NAME: Final = "advisor-profile"
FORMAT_VERSION: Final = 1


class Resource(StrEnum):
    """Where an operation runs (Li et al. 2020, section 2)."""

    DOWNLINK = "downlink"  # parameter server -> worker link (parameter pulls)
    WORKER = "worker"  # the worker's compute (CPU/GPU)
    UPLINK = "uplink"  # worker -> parameter server link (gradient pushes)
    PS = "ps"  # the parameter server's compute (applying updates)

    @property
    def is_transfer(self) -> bool:
        return self in (Resource.DOWNLINK, Resource.UPLINK)


class ProgramKind(StrEnum):
    """What kind of training program was traced: it decides which models can predict it and which
    job kinds may upload it. PS traces hold parameter pulls and gradient pushes (DOWNLINK/UPLINK
    with a ps index); all-reduce traces hold compute and, per gradient, one UPLINK transfer of its
    bytes (ps index 0, unused) that becomes ready when backward produces it (docs/profile-format.md)."""

    TF_PS = "tf-ps"  # TensorFlow with parameter servers (a tf.compat.v1 session, AdvisorProfilingHook)
    TF_MWMS = "tf-mwms"  # TensorFlow 2 Keras with MultiWorkerMirroredStrategy (collective all-reduce)
    PYTORCH_DDP = "pytorch-ddp"  # PyTorch DistributedDataParallel

    @property
    def allreduce(self) -> bool:
        """Synchronous data parallelism with all-reduce (no parameter servers)."""
        return self is not ProgramKind.TF_PS

    @property
    def transfers_timed(self) -> bool:
        """Whether the trace's transfers carry the times the network gave them, so that the link
        rate can be measured from them: a PS trace's pulls and pushes do; the one worker of an
        all-reduce trace reduces with nobody, so its gradients take no time on any link."""
        return not self.allreduce


# The ops of an all-reduce profile as the bundle importer (advisor.importers.allreduce_upload)
# names them, so that a summary can read its phases back (docs/profile-format.md).
FORWARD_OP: Final = "forward"
BACKWARD_PREFIX: Final = "backward/"  # backward/NNNN segments cut where gradients become ready, backward/tail
GRADIENT_PREFIX: Final = "gradient/"  # one uplink transfer per gradient, gradient/<parameter>
OPTIMIZER_OP: Final = "optimizer"
OTHER_OP: Final = "other"  # the rest of the loop's step, e.g. data loading


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Operation(_Frozen):
    """One node of the step graph."""

    name: str = Field(min_length=1)
    resource: Resource
    ps: int | None = Field(default=None, ge=0, description="parameter server index, None on the worker")
    bytes: int = Field(default=0, ge=0, description="payload of a transfer; 0 for computation")
    deps: tuple[str, ...] = ()
    op_type: str | None = Field(default=None, description="TensorFlow op type (the op database keys on it)")
    input_shapes: tuple[tuple[int, ...], ...] | None = Field(
        default=None,
        description="shape of each data input of a computation (control inputs excluded), if the trace recorded it",
    )

    @model_validator(mode="after")
    def _check_placement(self) -> Operation:
        if self.resource is Resource.WORKER and self.ps is not None:
            raise ValueError(f"operation {self.name!r} runs on the worker but names ps={self.ps}")
        if self.resource is not Resource.WORKER and self.ps is None:
            raise ValueError(f"operation {self.name!r} on {self.resource.value} needs a ps index")
        if not self.resource.is_transfer and self.bytes:
            raise ValueError(f"computation {self.name!r} carries bytes={self.bytes}; only transfers do")
        if self.input_shapes is not None and self.resource.is_transfer:
            raise ValueError(f"transfer {self.name!r} carries input_shapes; only computations do")
        if self.input_shapes is not None and any(d < 0 for shape in self.input_shapes for d in shape):
            raise ValueError(f"operation {self.name!r} has a negative dimension in input_shapes {self.input_shapes}")
        if self.name in self.deps:
            raise ValueError(f"operation {self.name!r} depends on itself")
        if len(set(self.deps)) != len(self.deps):
            raise ValueError(f"operation {self.name!r} lists a dependency twice")
        return self


class StepTiming(_Frozen):
    """When each operation of one recorded step ran, aligned with ``Profile.ops``."""

    index: int = Field(ge=0, description="step number in the recorded run")
    start_us: tuple[float, ...] = Field(description="start of each op, relative to the step's start")
    duration_us: tuple[float, ...]
    wall_us: float | None = Field(default=None, description="step time seen by the client, if known")

    @model_validator(mode="after")
    def _check_times(self) -> StepTiming:
        if len(self.start_us) != len(self.duration_us):
            raise ValueError(
                f"step {self.index}: {len(self.start_us)} start times but "
                f"{len(self.duration_us)} durations"
            )
        for kind, values in (("start", self.start_us), ("duration", self.duration_us)):
            for i, v in enumerate(values):
                if not math.isfinite(v) or v < 0:
                    raise ValueError(f"step {self.index}: op #{i} has {kind} {v!r} us (must be finite and >= 0)")
        if self.wall_us is not None and (not math.isfinite(self.wall_us) or self.wall_us <= 0):
            raise ValueError(f"step {self.index}: wall_us {self.wall_us!r} must be finite and > 0")
        return self

    @property
    def end_us(self) -> float:
        """When the last operation of the step finished, relative to the step's start."""
        return max((s + d for s, d in zip(self.start_us, self.duration_us)), default=0.0)


class JobInfo(_Frozen):
    """What the profile was recorded from."""

    model: str | None = None
    batch_size: int = Field(gt=0, description="examples per step per worker")
    parameter_servers: int = Field(default=1, ge=1)
    recorded_bandwidth_bps: float | None = Field(
        default=None, gt=0, description="capacity of the worker's link each way when the trace was recorded "
        "(the PS link of a PS trace)"
    )
    recorded_bandwidth_source: str | None = Field(
        default=None, min_length=1, description="where recorded_bandwidth_bps came from, e.g. controller-setting, "
        "interface-speed (advisor.profiling.link); None: not said"
    )
    source: str | None = Field(default=None, description="where the profile came from, for people")
    skipped_steps: int = Field(default=0, ge=0, description="recorded steps dropped as incomplete")
    kind: ProgramKind = Field(default=ProgramKind.TF_PS, description="the traced program's kind (ProgramKind)")
    buckets: tuple[tuple[str, ...], ...] | None = Field(
        default=None,
        description="all-reduce only: the gradients (UPLINK op names) of each bucket, in the order the "
        "framework reduces them, as the framework laid them out (e.g. DDP's reducer); None if not recorded",
    )
    synchronous: bool = Field(
        default=False,
        description="PS traces only: gradients aggregated by SyncReplicasOptimizer (synchronous PS: the trace holds "
        "its token queue and conditional accumulators); False: asynchronous PS. An all-reduce program is synchronous "
        "by its kind and leaves it False",
    )
    worker_on_gpu: bool = Field(
        default=False,
        description="PS traces: the traced worker ran computations on a GPU (a TensorFlow trace's device names say "
        "so); False: none seen. It decides which all-reduce a PS program's what-if uses: NCCL's on GPUs, "
        "TensorFlow's gRPC ring otherwise",
    )
    variable_order: tuple[str, ...] | None = Field(
        default=None,
        description="PS traces: the program's variables in creation order (the profiling hook lists the graph's "
        "global variables), which TensorFlow's placement strategies follow; None: not recorded (the PS-count "
        "what-if then takes the trace's order)",
    )
    untraced_walls_us: tuple[float, ...] | None = Field(
        default=None,
        description="PS traces: the client wall time of each step the profiling run timed without tracing, after "
        "its traced steps (their StepTiming.wall_us), so that what tracing costs a step can be read; None: not "
        "recorded",
    )
    collectives: tuple[int, ...] | None = Field(
        default=None,
        description="all-reduce only: the bytes of each further all-reduce the framework runs every step besides "
        "the gradients', in the order they run after the last bucket (Keras reduces each logged metric as a sum "
        "and a count); () for none, None if not recorded (the ring model then assumes the framework's own)",
    )

    cpu_s_per_step: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="all-reduce only: the CPU seconds (every thread of the process) the worker spent per step "
        "while not traced; workers that share a host's cores wait for it once together they need more than the "
        "host has. None: not measured",
    )

    @model_validator(mode="after")
    def _check_untraced(self) -> JobInfo:
        for i, wall in enumerate(self.untraced_walls_us or ()):
            if not math.isfinite(wall) or wall <= 0:
                raise ValueError(f"untraced_walls_us[{i}] is {wall!r} us: a step's wall time must be finite and > 0")
        return self


class Profile(_Frozen):
    """A validated single-worker profile; see the module docstring."""

    format: Literal["advisor-profile"] = FORMAT_NAME
    version: Literal[1] = FORMAT_VERSION
    job: JobInfo
    ops: tuple[Operation, ...] = Field(min_length=1)
    steps: tuple[StepTiming, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_graph(self) -> Profile:
        names = [op.name for op in self.ops]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"operation name {name!r} appears twice")
            seen.add(name)
        for op in self.ops:
            unknown = [d for d in op.deps if d not in seen]
            if unknown:
                raise ValueError(f"operation {op.name!r} depends on unknown operation(s) {unknown}")
            if op.ps is not None and op.ps >= self.job.parameter_servers:
                raise ValueError(
                    f"operation {op.name!r} names ps={op.ps} but the job has "
                    f"{self.job.parameter_servers} parameter server(s)"
                )
        if not any(op.resource.is_transfer for op in self.ops):
            raise ValueError("the profile has no transfers: nothing to share between workers")
        if self.job.recorded_bandwidth_source is not None and self.job.recorded_bandwidth_bps is None:
            raise ValueError("job.recorded_bandwidth_source says where job.recorded_bandwidth_bps came from, "
                             "but the profile records no recorded_bandwidth_bps")
        if self.job.kind.allreduce:
            self._check_allreduce()
        elif self.job.buckets is not None or self.job.collectives is not None or self.job.cpu_s_per_step is not None:
            field = ("buckets" if self.job.buckets is not None
                     else "collectives" if self.job.collectives is not None else "cpu_s_per_step")
            raise ValueError(f"job.{field} is for all-reduce programs; this profile's kind is {self.job.kind.value}")
        if self.job.synchronous and self.job.kind.allreduce:
            raise ValueError(f"job.synchronous marks a parameter-server trace of SyncReplicasOptimizer; a "
                             f"{self.job.kind.value} (all-reduce) program is synchronous by its kind")
        _topological_order(self.ops)  # raises on a cycle
        for step in self.steps:
            if len(step.duration_us) != len(self.ops):
                raise ValueError(
                    f"step {step.index} times {len(step.duration_us)} operations, the graph has {len(self.ops)}"
                )
        return self

    def _check_allreduce(self) -> None:
        kind = self.job.kind.value
        if self.job.parameter_servers != 1:
            raise ValueError(f"a {kind} profile has no parameter servers; job.parameter_servers must stay 1")
        for op in self.ops:
            if op.resource in (Resource.DOWNLINK, Resource.PS):
                raise ValueError(
                    f"operation {op.name!r} runs on {op.resource.value}, which a {kind} (all-reduce) profile "
                    "does not have: it holds worker compute and one uplink transfer per gradient"
                )
        for c, size in enumerate(self.job.collectives or ()):
            if size < 1:
                raise ValueError(f"job.collectives[{c}] is {size} bytes; a collective moves at least 1")
        if self.job.buckets is None:
            return
        by_name = {op.name: op for op in self.ops}
        placed: set[str] = set()
        for b, bucket in enumerate(self.job.buckets):
            if not bucket:
                raise ValueError(f"job.buckets[{b}] is empty")
            for name in bucket:
                found = by_name.get(name)
                if found is None or found.resource is not Resource.UPLINK or found.bytes <= 0:
                    raise ValueError(f"job.buckets[{b}] names {name!r}, which is not a gradient (uplink with bytes)")
                if name in placed:
                    raise ValueError(f"job.buckets places gradient {name!r} twice")
                placed.add(name)
        missing = [op.name for op in self.ops if op.resource is Resource.UPLINK and op.bytes > 0 and op.name not in placed]
        if missing:
            raise ValueError(f"job.buckets leaves out {len(missing)} gradient(s), e.g. {missing[0]!r}")

    @cached_property
    def index(self) -> dict[str, int]:
        """Position of each operation by name."""
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Operation positions, every operation after all it depends on."""
        return _topological_order(self.ops)

    @cached_property
    def dep_indices(self) -> tuple[tuple[int, ...], ...]:
        """Dependencies of each operation as positions into ``ops``."""
        return tuple(tuple(self.index[d] for d in op.deps) for op in self.ops)


def _topological_order(ops: tuple[Operation, ...]) -> tuple[int, ...]:
    """Kahn's algorithm; a cycle is reported with the operations that form it."""
    index = {op.name: i for i, op in enumerate(ops)}
    pending = [len(op.deps) for op in ops]
    dependents: list[list[int]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        for d in op.deps:
            dependents[index[d]].append(i)
    ready = [i for i, n in enumerate(pending) if n == 0]
    order: list[int] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in dependents[i]:
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    if len(order) != len(ops):
        stuck = sorted(ops[i].name for i, n in enumerate(pending) if n > 0)
        shown = ", ".join(stuck[:6]) + (" ..." if len(stuck) > 6 else "")
        raise ValueError(f"the dependencies form a cycle among {len(stuck)} operation(s): {shown}")
    return tuple(order)


def parse_profile(data: Mapping[str, Any]) -> Profile:
    """Validate decoded JSON as a profile, raising ``ProfileError`` that names each problem."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"a profile is a JSON object, not {type(data).__name__}")
    fmt = data.get("format")
    if fmt != FORMAT_NAME:
        raise ProfileError(f"not an advisor profile: 'format' is {fmt!r}, expected {FORMAT_NAME!r}")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise ProfileError(f"unsupported profile version {version!r}; this advisor reads version {FORMAT_VERSION}")
    return build_profile(**data)


def build_profile(**fields: Any) -> Profile:
    """Construct a profile from fields, turning validation failures into ``ProfileError``."""
    try:
        return Profile(**fields)
    except ValidationError as exc:
        raise ProfileError(describe_validation_error(exc)) from None
    except (TypeError, RecursionError) as exc:
        raise ProfileError(f"malformed profile: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, each with the JSON path where it was found."""
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "<profile>"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {msg}")
    shown = lines[:10] + ([f"... and {len(lines) - 10} more"] if len(lines) > 10 else [])
    return "invalid profile:\n  " + "\n  ".join(shown)
