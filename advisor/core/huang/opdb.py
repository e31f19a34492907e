"""The op database: (op type, input shapes, device kind) -> time statistics, and the
per-op-type linear fit that estimates shapes never profiled.

Huang et al. profile each computation op offline and observe that its time "has a strong
linear relationship to the input shape" (section 3, Figure 2). Here the database is built from
the op records of traced profiles (the trace is the offline profiler's run), one entry per
distinct (op type, input shapes, device kind) with the count, mean, standard deviation, minimum
and maximum of its recorded durations. An op is estimated by

1. its exact entry (the mean), else
2. the fit of its op type on its device kind: t = a + b x n, n the op's input elements (sum over
   its data inputs of the product of the dimensions), least squares over the op type's entries
   (each entry's mean, one point per distinct shape); with one distinct n the fit is
   proportional, t = (mean / n) x n; a negative slope falls back to the constant mean of the
   entries, a negative intercept to the fit through the origin;
3. otherwise it is an ``OpEstimateError`` naming the op.

Ops whose time is not a function of their shapes (``OPAQUE_OP_TYPES``: user Python code, the
parsing overhead and client gap that preprocessing adds) and ops recorded without shapes are
kept per node name instead: they match only the same node (the paper's "online profiling" of
ops outside its database), and no fit covers them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from advisor.core.profile import Operation, Profile
from advisor.errors import AdvisorError

OPAQUE_OP_TYPES = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "ParseOverhead", "ClientGap"})
Shapes = tuple[tuple[int, ...], ...]


class OpEstimateError(AdvisorError, ValueError):
    """The database cannot time an operation (no entry, no fit for its type); names the op."""


class OpEntry(BaseModel):
    """Time statistics of one (op type, device kind, input shapes[, node]) in microseconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op_type: str = Field(min_length=1)
    device: str = Field(min_length=1, description="device kind: 'worker' or 'ps'")
    input_shapes: Shapes | None = None
    node: str | None = Field(default=None, description="set for ops kept per node (opaque or shapeless)")
    count: int = Field(ge=1)
    mean_us: float = Field(ge=0, allow_inf_nan=False)
    std_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    min_us: float = Field(ge=0, allow_inf_nan=False)
    max_us: float = Field(ge=0, allow_inf_nan=False)

    @property
    def key(self) -> tuple[str, str, Shapes | None, str | None]:
        return (self.op_type, self.device, self.input_shapes, self.node)


@dataclass(frozen=True, slots=True)
class LinearFit:
    """t = intercept_us + slope_us_per_element x input elements, for one op type on one device kind."""

    op_type: str
    device: str
    intercept_us: float
    slope_us_per_element: float
    points: int  # distinct shapes the fit was made from

    def __call__(self, elements: int) -> float:
        return max(self.intercept_us + self.slope_us_per_element * elements, 0.0)


def elements(shapes: Shapes) -> int:
    """Input elements of an op: the sum over its inputs of the product of the dimensions."""
    return sum(math.prod(s) for s in shapes)


def is_keyed_by_node(op_type: str | None, shapes: Shapes | None) -> bool:
    """Whether an op is kept per node: opaque to shapes, or recorded without them."""
    return op_type is None or op_type in OPAQUE_OP_TYPES or shapes is None


def op_key(op: Operation, shapes: Shapes | None = None) -> tuple[str, str, Shapes | None, str | None]:
    """The database key of a computation (``shapes`` overrides the recorded ones, for what-ifs)."""
    shapes = op.input_shapes if shapes is None else shapes
    op_type = op.op_type or "?"
    if is_keyed_by_node(op.op_type, shapes):
        return (op_type, op.resource.value, None, op.name)
    return (op_type, op.resource.value, shapes, None)


@dataclass(frozen=True)
class OpDatabase:
    """Entries by key, with a label for the device they were profiled on."""

    entries: tuple[OpEntry, ...]
    device_label: str = "as profiled"
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        keys = [e.key for e in self.entries]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise OpEstimateError(f"the op database holds {dup} twice")

    @cached_property
    def by_key(self) -> dict[tuple[str, str, Shapes | None, str | None], OpEntry]:
        return {e.key: e for e in self.entries}

    @cached_property
    def fits(self) -> dict[tuple[str, str], LinearFit]:
        """The linear fit of every op type (per device kind) that has shaped entries."""
        groups: dict[tuple[str, str], list[OpEntry]] = defaultdict(list)
        for e in self.entries:
            if e.input_shapes is not None and e.node is None:
                groups[(e.op_type, e.device)].append(e)
        return {k: fit_linear(k[0], k[1], [(elements(e.input_shapes or ()), e.mean_us) for e in v]) for k, v in groups.items()}

    def estimate_us(self, op: Operation, shapes: Shapes | None = None) -> float:
        """Estimated duration of computation ``op`` (see the module docstring for the order)."""
        key = op_key(op, shapes)
        entry = self.by_key.get(key)
        if entry is not None:
            return entry.mean_us
        op_type, device, key_shapes, node = key
        if node is not None:
            why = "its type is timed per node" if op_type in OPAQUE_OP_TYPES else "it was recorded without input shapes"
            raise OpEstimateError(
                f"cannot estimate op {op.name!r} ({op_type} on {device}): {why}, and the op database "
                f"({self.device_label}) has no record of that node"
            )
        fit = self.fits.get((op_type, device))
        if fit is None:
            raise OpEstimateError(
                f"cannot estimate op {op.name!r}: the op database ({self.device_label}) has no {op_type} "
                f"on {device} (input shapes {list(map(list, key_shapes or ()))})"
            )
        return fit(elements(key_shapes or ()))


def fit_linear(op_type: str, device: str, points: list[tuple[int, float]]) -> LinearFit:
    """Least squares t = a + b n over (n, t) points, with the fallbacks of the module docstring."""
    n = np.array([p[0] for p in points], dtype=np.float64)
    t = np.array([p[1] for p in points], dtype=np.float64)
    if len(set(n.tolist())) < 2:
        total = float(n.sum())
        if total > 0:
            return LinearFit(op_type, device, 0.0, float(t.sum()) / total, len(points))
        return LinearFit(op_type, device, float(t.mean()), 0.0, len(points))
    slope, intercept = np.polyfit(n, t, 1)
    if slope < 0:
        return LinearFit(op_type, device, float(t.mean()), 0.0, len(points))
    if intercept < 0:
        return LinearFit(op_type, device, 0.0, float((n * t).sum() / (n * n).sum()), len(points))
    return LinearFit(op_type, device, float(intercept), float(slope), len(points))


def build_database(
    profiles: Iterable[Profile], *, device_label: str = "as profiled", sources: tuple[str, ...] = ()
) -> OpDatabase:
    """One entry per distinct key over every computation of every step of ``profiles``."""
    samples: dict[tuple[str, str, Shapes | None, str | None], list[float]] = defaultdict(list)
    for profile in profiles:
        for i, op in enumerate(profile.ops):
            if op.resource.is_transfer:
                continue
            samples[op_key(op)].extend(step.duration_us[i] for step in profile.steps)
    return OpDatabase(
        entries=tuple(_entry(key, values) for key, values in samples.items()),
        device_label=device_label,
        sources=sources,
    )


def merge(databases: Iterable[OpDatabase], device_label: str | None = None) -> OpDatabase:
    """Entries of several databases pooled per key (counts, means and spreads combined)."""
    dbs = list(databases)
    pooled: dict[tuple[str, str, Shapes | None, str | None], list[OpEntry]] = defaultdict(list)
    for db in dbs:
        for e in db.entries:
            pooled[e.key].append(e)
    entries = tuple(_pool(key, group) for key, group in pooled.items())
    label = device_label or (dbs[0].device_label if dbs else "as profiled")
    return OpDatabase(entries, label, tuple(s for db in dbs for s in db.sources))


def _entry(key: tuple[str, str, Shapes | None, str | None], values: list[float]) -> OpEntry:
    v = np.asarray(values, dtype=np.float64)
    op_type, device, shapes, node = key
    return OpEntry(
        op_type=op_type, device=device, input_shapes=shapes, node=node, count=len(values),
        mean_us=float(v.mean()), std_us=float(v.std()), min_us=float(v.min()), max_us=float(v.max()),
    )


def _pool(key: tuple[str, str, Shapes | None, str | None], group: list[OpEntry]) -> OpEntry:
    count = sum(e.count for e in group)
    mean = sum(e.count * e.mean_us for e in group) / count
    second = sum(e.count * (e.std_us**2 + e.mean_us**2) for e in group) / count
    op_type, device, shapes, node = key
    return OpEntry(
        op_type=op_type, device=device, input_shapes=shapes, node=node, count=count, mean_us=mean,
        std_us=math.sqrt(max(second - mean * mean, 0.0)),
        min_us=min(e.min_us for e in group), max_us=max(e.max_us for e in group),
    )


def summary(db: OpDatabase) -> Mapping[str, int]:
    """Counts for people: entries, op types, fitted types, per-node entries."""
    return {
        "entries": len(db.entries),
        "op_types": len({e.op_type for e in db.entries}),
        "fitted_types": len(db.fits),
        "per_node": sum(1 for e in db.entries if e.node is not None),
    }
