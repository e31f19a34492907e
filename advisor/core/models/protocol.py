"""The one contract every throughput model keeps, so that the curve, the advice, the CLI and the
controller never ask which model runs.

A model is a small object with a ``name``, a one-line ``description``, a pydantic ``Params``
class (its knobs, ``extra="forbid"``), ``needs`` (which parts of ``ModelInputs`` it reads),
``check`` (raises ``ModelInputError`` naming the missing or invalid field) and ``start``, which
begins one prediction for W workers. What ``start`` returns is a ``Run``: ``advance(steps)``
continues it until the first worker has finished ``steps`` steps and returns the ``Samples``
seen so far (step end times per worker), from which ``core/curve.py`` computes the mean and
the batch-means interval and decides whether to look further. A closed-form model returns an
``ExactRun``: its one answer, with no interval to narrow.

``link_bound`` is the examples/s that the model's own traffic pattern lets the links carry at W
workers (math.inf when nothing is transferred): the contract tests check every model against it,
as an invariant that needs no second implementation.

``calibration`` names the parameters a running job's observed throughput may correct (the
closed loop, ``core/online_calibration.py``): each a field of the model's ``Params`` or the
link's ``goodput`` (``ModelInputs.goodput``), with the values a calibration may give it. A model
with none says why in ``calibration_note``. A parameter whose default depends on the inputs (the
ring's per-round latency depends on the profile's framework) is left unset in ``Params`` and
filled in by ``resolved``, which a calibration calls first. The controller and ``advisor models`` read only these
declarations, never a model's own package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

from advisor.errors import ModelInputError, ModelRegimeError

if TYPE_CHECKING:
    from advisor.core.profile import Profile
    from advisor.core.sim_types import NetworkModel


DEVICE_DB = "device_db"  # ModelInputs.extras key: an op database (advisor.core.huang.opdb) that re-times compute


class Need(StrEnum):
    """An input a model reads; ``advisor models`` lists them, ``compare`` skips a model that lacks one."""

    PROFILE = "profile"  # a one-worker trace (advisor.core.profile.Profile)
    BANDWIDTH = "bandwidth"  # the link rate (ModelInputs.network)
    GRADIENTS = "gradients"  # gradient sizes and when each is ready (from a profile's pushes, or a spec)
    LAYER_SPEC = "layer-spec"  # layer shapes and a GPU (ModelInputs.spec)
    CLUSTER_SPEC = "cluster-spec"  # processors and links (ModelInputs.spec)


GOODPUT = "goodput"  # the calibration parameter that is an input (ModelInputs.goodput), not a field of Params


@dataclass(frozen=True)
class CalibrationParam:
    """A parameter that a job's observed throughput may correct: a field of the model's
    ``Params`` (or ``GOODPUT``), the values a calibration tries (``grid``, increasing: its ends
    are the range) and what it stands for. ``log``: the parameter varies over orders of
    magnitude, so distances (the prior around the stated value) are taken on a log scale."""

    name: str
    grid: tuple[float, ...]
    description: str
    log: bool = False

    def __post_init__(self) -> None:
        if len(self.grid) < 2 or list(self.grid) != sorted(set(self.grid)):
            raise ValueError(f"calibration parameter {self.name}: the grid needs two or more increasing values")
        if self.log and self.grid[0] <= 0:
            raise ValueError(f"calibration parameter {self.name}: a log-scale grid must be > 0")

    @property
    def low(self) -> float:
        return self.grid[0]

    @property
    def high(self) -> float:
        return self.grid[-1]


# The share of the stated link rate that the job's links deliver as payload: every model that
# reads a bandwidth can calibrate it. It absorbs a bandwidth stated too high (0.475 for 2x),
# another job on the links, a slower path than the nominal one; 1.0 is its upper end, so a
# bandwidth stated too low cannot be corrected here (the notes say so).
LINK_GOODPUT = CalibrationParam(
    GOODPUT, (0.25, 0.3, 0.36, 0.43, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
    "share of the stated link rate the job's links deliver as payload (a wrong bandwidth, another job on the links)",
    log=True)


class ModelParams(BaseModel):
    """Base of every model's ``Params``: frozen, and unknown fields are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class ModelInputs:
    """What a prediction knows about the job, whichever model makes it.

    ``profile`` is the trace as the replaying models see it (parsing overhead split out, the
    client's time between steps added: ``advice.prepare_profile``); ``recorded`` is the trace as
    it was imported. ``network`` is the link as the user stated it, at its nominal rate;
    ``goodput`` is the share of that rate TCP delivers as payload. ``worker_speeds`` are compute
    multipliers per worker (1.0 = as traced; 0.5 = half as fast), ``()`` for all as traced.
    ``parameter_servers`` asks a PS model for another PS count than the trace's (what-if).
    ``spec`` carries inputs that are not a trace (a layer or cluster description).
    """

    profile: Profile | None = None
    recorded: Profile | None = None
    network: NetworkModel | None = None
    goodput: float = 1.0
    worker_speeds: tuple[float, ...] = ()
    worker_bandwidths_bps: tuple[float, ...] = ()
    parameter_servers: int | None = None
    spec: Any = None
    extras: Mapping[str, Any] = field(default_factory=dict)

    def speed(self, worker: int) -> float:
        """Compute multiplier of ``worker`` (workers beyond the list run as traced)."""
        return self.worker_speeds[worker] if worker < len(self.worker_speeds) else 1.0


@dataclass(frozen=True)
class Samples:
    """A run up to ``until_s``: every step end by then, per worker, and no later one."""

    step_ends_s: tuple[np.ndarray, ...]  # per worker, the ends of its finished steps (s)
    # when the first worker finished its ``steps``-th step; a synchronous model may end the samples
    # where a step has ended on every worker (ps_des/sync.py, ring_allreduce), so that the window
    # does not cut off the others' ends of the step the first worker just finished
    until_s: float
    steps: int
    events: int  # events the model processed since the run began (0 for closed forms)
    batch_size: int  # examples one worker's step counts for


@dataclass(frozen=True)
class Exact:
    """A closed-form model's answer: the throughput itself (examples/s), no sampling error."""

    throughput: float
    events: int = 0


@dataclass(frozen=True)
class Alternative:
    """Another stable outcome at one W that can happen instead of the predicted one (e.g. two PS
    workers settling into alternating pulls and pushes), and how likely it is."""

    name: str  # what happens, e.g. "alternating"
    throughput: float  # examples/s if it does
    probability: float  # that it happens instead of the prediction, in [0, 1]
    instead_of: str = "predicted"  # the name of the predicted outcome, e.g. "drifting"
    basis: str = ""  # where the probability comes from, in words
    known: bool = True  # False: no data says which happens; ``probability`` is a stated guess (0.5)


@dataclass(frozen=True)
class Outlook:
    """What a model adds to its finished curve: notes for the user, and per W another outcome
    that can happen instead of the predicted one (``Alternative``)."""

    notes: tuple[str, ...] = ()
    others: Mapping[int, Alternative] = field(default_factory=dict)
    # derived settings worth reporting (JSON-able); "batch_size": examples per worker step, for
    # models that read no profile
    details: Mapping[str, Any] = field(default_factory=dict)
    # parameters as the model used them where the inputs decided (e.g. a cap left unset that the
    # profile's own layout replaced): reported in place of the values given (JSON-able)
    params: Mapping[str, Any] = field(default_factory=dict)
    # the scope of the model's measured error these inputs fall in (core/model_error.py, e.g.
    # SEVERAL_PS): its widths widen the intervals where measured; None: the model's own
    error_scope: str | None = None
    # a what-if: the curve is for another configuration than the traced run (another PS count, a PS
    # program replayed as all-reduce), so its W = 1 is not the profiled run and the profile cannot
    # check it (core/profile_check.py)
    what_if: bool = False


@runtime_checkable
class Run(Protocol):
    """One prediction at a fixed W, continued on demand (see the module docstring)."""

    def advance(self, steps: int) -> Samples | Exact:
        """Continue until the first worker has finished ``steps`` steps in all."""
        ...


@dataclass
class ExactRun:
    """The ``Run`` of a closed-form model: every ``advance`` gives the same answer."""

    answer: Exact

    def advance(self, steps: int) -> Exact:
        return self.answer


class ThroughputModel(Protocol):
    """What a model module registers (``advisor.core.models.registry``)."""

    name: str
    description: str
    Params: type[ModelParams]
    needs: frozenset[Need]
    anchored: bool  # its W = 1 point reproduces the trace's own rate (contract-tested)
    capacity_bound: bool  # its throughput never exceeds link_bound (contract-tested)
    calibration: tuple[CalibrationParam, ...]  # what observed throughput may correct (contract-tested)
    calibration_note: str  # why it has no calibration parameters ("" when it has some)

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        """Raise ``ModelInputError`` naming what is missing or invalid; return None when it can predict."""
        ...

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        """Begin a prediction for ``workers`` workers (``check`` has passed)."""
        ...

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        """Examples/s the links can carry at ``workers`` under this model's traffic (math.inf if none)."""
        ...

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """Notes and other possible outcomes, given the predicted curve (W -> examples/s)."""
        ...

    def resolved(self, inputs: ModelInputs, params: ModelParams) -> ModelParams:
        """``params`` with every value left unset that the inputs decide filled in (e.g. a default
        that depends on the profile's framework): what a calibration starts from."""
        ...

    def calibration_for(self, inputs: ModelInputs) -> tuple[CalibrationParam, ...]:
        """The calibration parameters that act on this job: ``calibration``, or fewer or others
        where a parameter applies to some jobs only (the PS models' multi-flow goodput has one
        value for jobs with one PS and another for jobs with several). A calibration moves only
        these, so observed throughput never moves a value the prediction does not read."""
        ...


class ModelBase:
    """Defaults a model may inherit: nothing to add to a finished curve; its W = 1 point
    reproduces the trace's own rate (``anchored``: the contract tests check it). Coarse models
    that summarise a trace into phases set it False: overlap makes their W = 1 differ by design."""

    anchored: bool = True
    # its throughput stays within ``link_bound`` (contract-tested); False only for a published
    # formula that ignores link capacity, kept as its paper states it
    capacity_bound: bool = True
    calibration: tuple[CalibrationParam, ...] = ()
    calibration_note: str = "declares no calibration parameters"

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        return Outlook()

    def resolved(self, inputs: ModelInputs, params: ModelParams) -> ModelParams:
        return params

    def calibration_for(self, inputs: ModelInputs) -> tuple[CalibrationParam, ...]:
        return self.calibration


def require_ps_profile(model: str, profile: Profile) -> Profile:
    """``profile`` when it was traced from a parameter-server program; a model of PS traffic
    cannot read an all-reduce trace (it has no pulls and no PS), so that is a ``ModelInputError``."""
    if profile.job.kind.allreduce:
        raise ModelInputError(
            model, f"predicts parameter-server jobs, but the profile was traced from a {profile.job.kind.value} "
            "(all-reduce) program; use ring-allreduce or ring-allreduce-hierarchical"
        )
    return profile


def require_asynchronous_ps(model: str, profile: Profile) -> Profile:
    """``profile`` when its program trains asynchronously; a model of asynchronous PS training
    (workers never wait for each other) cannot represent ``SyncReplicasOptimizer``'s barrier, so a
    trace of it is a ``ModelRegimeError`` naming both regimes and the synchronous default."""
    if profile.job.synchronous:
        # imported here: the registry imports this module
        from advisor.core.models.registry import DEFAULT_SYNC_MODEL

        raise ModelRegimeError(model, "asynchronous PS", "a synchronous program (SyncReplicasOptimizer)",
                               DEFAULT_SYNC_MODEL)
    return profile
