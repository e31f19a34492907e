"""The ``--spec`` file model: what a prediction knows about a job that is not in a trace.

A spec describes the network layer by layer (Pei et al. 2019, Table 4), the GPU (a name from the
bundled table ``advisor.core.gpus`` or the figures themselves) and the links between the GPUs and
their host (mode ``ps`` or ``nccl``). The ``cluster`` section belongs to the DTS model, which
validates it. Every section is optional here; a model says which ones it needs.

Validation is strict (``extra="forbid"``): zero, negative and non-finite numbers are refused, and
each problem is reported with its path in the file (``layers.3.stride``). ``parse_spec`` turns a
mapping (a loaded YAML or JSON document) into a ``Spec`` or raises ``SpecError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from advisor.core import gpus
from advisor.errors import SpecError


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


Pair = PositiveInt | tuple[PositiveInt, PositiveInt]
LayerType = Literal["conv", "fc", "pool", "bn", "relu", "add"]


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


class Layer(_Strict):
    """One layer, in the terms of Pei et al. Table 4 (input feature maps in, output maps out).

    ``fc`` flattens its input: it has ``in_channels * height * width`` input features. ``pool``,
    ``bn``, ``relu`` and ``add`` (a residual sum) keep the channel count. ``padding`` is the
    paper's mode (``valid``/``same``) or an explicit number of pixels on each side.
    """

    name: str | None = None
    type: LayerType
    in_channels: PositiveInt
    out_channels: PositiveInt | None = None
    height: PositiveInt = 1
    width: PositiveInt = 1
    filter: Pair = 1
    stride: Pair = 1
    padding: Literal["valid", "same"] | NonNegativeInt = "valid"
    batch: PositiveInt | None = Field(default=None, description="if given, must equal the spec's batch")
    data_width: PositiveInt | None = Field(default=None, description="bits per value; the spec's default if absent")

    @model_validator(mode="after")
    def _check_shape(self) -> Layer:
        if self.type in ("conv", "fc") and self.out_channels is None:
            raise ValueError(f"a {self.type} layer needs out_channels")
        if self.type not in ("conv", "fc") and self.out_channels not in (None, self.in_channels):
            raise ValueError(f"a {self.type} layer keeps its channels: out_channels must equal in_channels")
        if self.type in ("conv", "pool"):
            out_h, out_w = self.output_hw
            if out_h < 1 or out_w < 1:
                raise ValueError(f"the filter {self.filter_hw} does not fit the {self.height}x{self.width} input")
        return self

    @property
    def filter_hw(self) -> tuple[int, int]:
        return _pair(self.filter) if self.type in ("conv", "pool") else (1, 1)

    @property
    def stride_hw(self) -> tuple[int, int]:
        return _pair(self.stride) if self.type in ("conv", "pool") else (1, 1)

    @property
    def pad_hw(self) -> tuple[int, int]:
        """Pixels of padding added on each side (``same``: what keeps ceil(H / stride) outputs)."""
        if self.type not in ("conv", "pool"):
            return (0, 0)
        if isinstance(self.padding, int):
            return (self.padding, self.padding)
        if self.padding == "valid":
            return (0, 0)
        (fh, fw), (sh, sw) = self.filter_hw, self.stride_hw
        pads = []
        for size, f, s in ((self.height, fh, sh), (self.width, fw, sw)):
            out = math.ceil(size / s)
            pads.append(max(0, ((out - 1) * s + f - size + 1) // 2))
        return (pads[0], pads[1])

    @property
    def output_hw(self) -> tuple[int, int]:
        if self.type == "fc":
            return (1, 1)
        if self.type not in ("conv", "pool"):
            return (self.height, self.width)
        (fh, fw), (sh, sw) = self.filter_hw, self.stride_hw
        if self.padding == "same":
            return (math.ceil(self.height / sh), math.ceil(self.width / sw))
        ph, pw = self.pad_hw
        return ((self.height + 2 * ph - fh) // sh + 1, (self.width + 2 * pw - fw) // sw + 1)

    @property
    def outputs(self) -> int:
        """Output channels (feature maps, or fc outputs)."""
        return self.out_channels if self.out_channels is not None else self.in_channels

    @property
    def parameters(self) -> int:
        """Trainable values: conv/fc weights and biases, batch-norm scale and offset."""
        fh, fw = self.filter_hw
        if self.type == "conv":
            return self.in_channels * fh * fw * self.outputs + self.outputs
        if self.type == "fc":
            return self.in_channels * self.height * self.width * self.outputs + self.outputs
        if self.type == "bn":
            return 2 * self.in_channels
        return 0


class GpuSpec(_Strict):
    """The figures of one GPU; ``name`` alone fills them from the bundled table (``advisor.core.gpus``),
    and any figure given beside a name replaces the table's."""

    name: str | None = None
    sm_count: PositiveInt
    sp_per_sm: PositiveInt = Field(description="FP32 cores (SPs) per SM")
    ldst_per_sm: PositiveInt = Field(description="load/store units per SM")
    clock_mhz: PositiveFloat = Field(description="the clock the model uses (sustained under load)")
    memory_bandwidth_gbps: PositiveFloat = Field(description="device memory bandwidth, GB/s")
    shared_load_latency: PositiveFloat = Field(description="cycles (Pei's L_S)")
    global_load_latency: PositiveFloat = Field(description="cycles")
    global_store_latency: PositiveFloat = Field(description="cycles (Pei's L_GS)")

    @model_validator(mode="before")
    @classmethod
    def _from_table(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if isinstance(data, Mapping) and data.get("name") is not None:
            name = data["name"]
            found = gpus.lookup(str(name))
            if found is None:
                raise ValueError(f"unknown GPU {name!r}; the known GPUs are {', '.join(gpus.known_names())}"
                                 " (or give sm_count, sp_per_sm, ldst_per_sm, clock_mhz, memory_bandwidth_gbps"
                                 " and the latencies without a name)")
            data = {**found, **data}
        return data


class Sigmoid(_Strict):
    """Pei's throughput curve y = k / (a + exp(-w x)): y in GB/s, x = ln(message size in MB)."""

    k: PositiveFloat
    a: PositiveFloat
    w: PositiveFloat


class LinksSpec(_Strict):
    """How gradients move (Pei et al. section III-E).

    ``count`` independent host links (e.g. 4 separate PCIe x16 buses) carry the GPUs' traffic;
    W GPUs on ``count`` links share each one ``ceil(W / count)`` ways (the paper's ``link_num``).
    Without ``sigmoid`` the curve is the latency-bandwidth line t = latency + bytes / bandwidth,
    which is itself a sigmoid with w = 1 (see ``advisor.core.pei.transmission``), unless the
    model fits one to a profile's transfers.
    """

    mode: Literal["ps", "nccl"]
    bandwidth_gbps: PositiveFloat = Field(description="payload rate of one link, GB/s")
    count: PositiveInt = Field(default=1, description="independent host links the GPUs spread over")
    latency_us: PositiveFloat = Field(default=10.0, description="fixed cost of one transfer, microseconds")
    host_reduce_gbps: PositiveFloat = Field(
        default=10.0, description="PS mode: rate at which the host averages gradients, GB/s of gradient read"
    )
    sigmoid: Sigmoid | None = None


class Spec(_Strict):
    """A whole spec file. ``batch`` is the per-GPU batch; ``data_width`` the default bits per value."""

    name: str | None = None
    batch: PositiveInt | None = None
    data_width: PositiveInt = 32
    layers: tuple[Layer, ...] = ()
    gpu: GpuSpec | None = None
    links: LinksSpec | None = None
    cluster: dict[str, Any] | None = Field(default=None, description="validated by the DTS model")

    @model_validator(mode="after")
    def _check_batch(self) -> Spec:
        given = {layer.batch for layer in self.layers if layer.batch is not None}
        if self.batch is not None:
            given.add(self.batch)
        if len(given) > 1:
            raise ValueError(f"layers give different batch sizes {sorted(given)}; a spec has one batch per GPU")
        if self.layers and not given:
            raise ValueError("batch is missing: give the per-GPU batch size at the top of the spec")
        if self.batch is None and given:
            object.__setattr__(self, "batch", next(iter(given)))
        return self


def describe(exc: ValidationError) -> list[str]:
    """One line per problem, each with its path in the file."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union"))]
        where = ".".join(loc) or "<spec>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] in ("greater_than", "finite_number") and "input" in err:
            msg += f" (got {err['input']!r})"
        lines.append(f"{where}: {msg}")
    return lines


def parse_spec(data: Any, source: str | None = None) -> Spec:
    """``data`` (a loaded YAML/JSON mapping) as a ``Spec``; every problem is a ``SpecError`` that names
    ``source`` (the file, when known) and the path of each bad field."""
    where = f"spec {source}" if source else "spec"
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a mapping at the top, got {type(data).__name__}")
    try:
        return Spec(**data)
    except ValidationError as exc:
        lines = describe(exc)
        shown = lines[:10] + ([f"... and {len(lines) - 10} more"] if len(lines) > 10 else [])
        raise SpecError(f"invalid {where}:\n  " + "\n  ".join(shown)) from None
    except TypeError as exc:
        raise SpecError(f"invalid {where}: {exc}") from None
