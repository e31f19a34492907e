"""The DTS input: a cluster, a DNN and a training sequence, as in DTS Table I (Robinson et al.).

A module of its own so that the equations and the allocation read validated, typed values and
never a raw mapping. Every model is strict (``extra="forbid"``, frozen); sizes, rates and counts
must be finite and > 0 (fluctuations may be 0: "no fluctuation"), and ``parse_spec`` reports
each problem with its path in the file (``cluster.processors[2].gflop_per_s``) as a
``ModelInputError`` of the model ``dts``. Units follow Table I: GFLOP/s, GB, GB/s (1 GB = 1e9
bytes, so a size in GB over a rate in GB/s is seconds; 40 Gb/s = 5 GB/s as in the paper).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from advisor.errors import ModelInputError

MODEL = "dts"

# strict: a YAML 'yes' or '12' is refused, not read as 1.0 or 12.0
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]
Count = Annotated[int, Field(gt=0, strict=True)]
Percent = Annotated[float, Field(ge=0, lt=100, allow_inf_nan=False, strict=True)]


class Architecture(StrEnum):
    """The five training architectures of DTS section III (eq. 1-5)."""

    PL = "PL"  # pipeline learning
    FL = "FL"  # federated learning
    SL = "SL"  # split learning
    PSL = "PSL"  # parallel split learning
    FSL = "FSL"  # federated split learning


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Processor(_Strict):
    """One machine (or ``count`` identical ones, named ``name-1`` ... ``name-count``)."""

    name: str = Field(min_length=1)
    gflop_per_s: Positive  # processing power the OS gives the training (Table I)
    memory_gb: Positive  # residual memory
    bandwidth_gb_per_s: Positive  # its link; a transfer between two processors runs at the lower of theirs
    count: Count = 1


class Cluster(_Strict):
    """Cluster information (Table I): the processors and how much their power and links fluctuate."""

    processors: list[Processor] = Field(min_length=1)
    power_fluctuation_pct: Percent = 0.0  # +-% around each processor's GFLOP/s, per batch
    bandwidth_fluctuation_pct: Percent = 0.0  # +-% around each link's GB/s, per batch

    @field_validator("processors")
    @classmethod
    def _unique_names(cls, processors: list[Processor]) -> list[Processor]:
        seen: set[str] = set()
        for p in processors:
            for name in _expand_names(p):
                if name in seen:
                    raise ValueError(f"two processors are named {name!r}")
                seen.add(name)
        return processors


class Dnn(_Strict):
    """DNN information (Table I). Complexities are forward-pass GFLOPs per sample (what the paper's
    measurement tool counts); ``client_*``/``server_*`` are the two sides of the split used by SL,
    PSL and FSL; ``intermediate_gb`` is what crosses the split per sample (and, for PL, what
    crosses each boundary between processors)."""

    layers: Count
    gflop_per_sample: Positive
    memory_gb: Positive
    client_gflop_per_sample: Positive
    server_gflop_per_sample: Positive
    client_memory_gb: Positive
    server_memory_gb: Positive
    weights_gb: Positive
    gradients_gb: Positive | None = None  # what an FL client uploads; default: weights_gb
    intermediate_gb: Positive
    client_weights_gb: Positive | None = None  # client side's share; default: weights x client/total memory
    backward_to_forward: Positive = 2.0  # backward-pass FLOPs per forward-pass FLOP (assumption, not in the paper)
    bytes_per_weight: Positive = 4.0  # float32: turns weights_gb into the additions of a federated average

    @model_validator(mode="after")
    def _split_is_smaller(self) -> Dnn:
        if self.client_weights_gb is not None and self.client_weights_gb >= self.weights_gb:
            raise ValueError(f"client_weights_gb ({self.client_weights_gb:g}) must be below weights_gb "
                             f"({self.weights_gb:g}): the server side holds the rest")
        return self

    @property
    def upload_gb(self) -> float:
        return self.weights_gb if self.gradients_gb is None else self.gradients_gb

    @property
    def client_side_weights_gb(self) -> float:
        if self.client_weights_gb is not None:
            return self.client_weights_gb
        return self.weights_gb * self.client_memory_gb / (self.client_memory_gb + self.server_memory_gb)

    @property
    def server_side_weights_gb(self) -> float:
        return self.weights_gb - self.client_side_weights_gb


class Training(_Strict):
    """Training sequence information (Table I)."""

    sample_gb: Positive
    batch_size: Count
    batches_per_client: Count
    epochs: Count
    clients: Count


class DtsSpec(_Strict):
    """A whole DTS input file."""

    cluster: Cluster
    dnn: Dnn
    training: Training
    architectures: list[Architecture] = Field(default_factory=lambda: list(Architecture), min_length=1)
    max_paths: Count = 64  # allocation paths (complete role assignments) tried per architecture

    @field_validator("architectures")
    @classmethod
    def _no_repeats(cls, archs: list[Architecture]) -> list[Architecture]:
        if len(set(archs)) != len(archs):
            raise ValueError("an architecture is listed twice")
        return archs


def _expand_names(p: Processor) -> list[str]:
    return [p.name] if p.count == 1 else [f"{p.name}-{i}" for i in range(1, p.count + 1)]


def expand_processors(cluster: Cluster) -> list[tuple[str, Processor]]:
    """Every processor by its own name, ``count`` entries expanded, in file order."""
    return [(name, p) for p in cluster.processors for name in _expand_names(p)]


def parse_spec(doc: Any, source: str = "spec") -> DtsSpec:
    """``doc`` (a mapping read from YAML or JSON) as a ``DtsSpec``; every problem is named by its path."""
    if not isinstance(doc, Mapping):
        raise ModelInputError(MODEL, f"{source}: expected a mapping with cluster, dnn and training, "
                                     f"got {type(doc).__name__}")
    try:
        return DtsSpec.model_validate(doc)
    except ValidationError as exc:
        problems = [f"{_path(err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
                    for err in exc.errors(include_url=False)]
        raise ModelInputError(MODEL, f"{source}: " + "; ".join(problems)) from None


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "top level"
