"""Model "huang-replay": Huang et al.'s op database and dataflow replay as a throughput model.

Compute ops are timed by an op database (``advisor.core.huang.opdb``): the one a user built
with ``advisor opdb build`` for another device (``ModelInputs.extras["device_db"]``, an
``OpDatabase`` the CLI loads from ``--device-db FILE``: a path is I/O, so the core takes the
loaded object), else one built from the profile itself (the trace is its own offline
profile). Transfers take bytes / (bandwidth x goodput) on FIFO-served PS links that the W
workers share; the replay (``advisor.core.huang.replay``) is deterministic, so ``advance``
returns the step ends of replayed steps, with no sampling error beyond the steady state.
``batch_size`` asks "what if each worker ran another batch size": batch dimensions are
rescaled, compute re-timed by the per-type linear fits, throughput reported at that batch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Literal

import numpy as np
from pydantic import Field

from advisor.core.huang.opdb import OpDatabase, OpEstimateError, build_database
from advisor.core.huang.replay import Replay, ReplayGraph
from advisor.core.huang.timing import timed_graph
from advisor.core.models.protocol import (DEVICE_DB, LINK_GOODPUT, CalibrationParam, ModelBase, ModelInputs,
                                          ModelParams, Need, Samples, require_asynchronous_ps, require_ps_profile)
from advisor.core.profile import Profile
from advisor.errors import ModelInputError

NAME = "huang-replay"
# DEVICE_DB (protocol.py) is the ModelInputs.extras key of an OpDatabase


class HuangParams(ModelParams):
    batch_size: int | None = Field(default=None, gt=0, description="what-if batch size per worker")
    order: Literal["recorded", "fifo"] = Field(
        default="recorded", description="device service order: as the trace recorded it, or FIFO by release"
    )
    worker_threads: int = Field(default=1, ge=1, description="ops a worker runs at once")
    ps_threads: int = Field(default=1, ge=1, description="ops a PS runs at once")
    opaque: Literal["fixed", "linear"] = Field(
        default="fixed", description="under batch_size, ops timed per node (PyFunc...) keep their time or scale"
    )
    fallback: Literal["error", "trace"] = Field(
        default="error", description="an op the database cannot time: an error, or its own recorded mean"
    )


class _Run:
    """A replay continued on demand; every ``advance`` extends the same deterministic run."""

    def __init__(self, replay: Replay, batch_size: int) -> None:
        self.replay = replay
        self.batch_size = batch_size

    def advance(self, steps: int) -> Samples:
        until = self.replay.run_until(steps)
        ends = tuple(np.array([t for t in e if t <= until]) for e in self.replay.ends)
        return Samples(ends, until, steps, self.replay.processed, self.batch_size)


class HuangReplay(ModelBase):
    name = NAME
    description = "Huang et al.: op database (op type, shapes, device) + dataflow replay over FIFO device queues"
    Params = HuangParams
    needs = frozenset({Need.PROFILE, Need.BANDWIDTH})
    anchored = True  # its W = 1 replay reproduces the trace's step (docs/models-huang.md)
    capacity_bound = True  # a FIFO link never carries more than link_bound
    # its other knobs are counts and choices; the link's delivered rate is what observation corrects
    calibration: tuple[CalibrationParam, ...] = (LINK_GOODPUT,)
    calibration_note = ""

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        self._graph(inputs, self._params(params))

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> _Run:
        p = self._params(params)
        graph, profile = self._graph(inputs, p)
        replay = Replay(
            graph, workers, self._link_bps(inputs), worker_threads=p.worker_threads, ps_threads=p.ps_threads,
            worker_speeds=inputs.worker_speeds, recorded_order=p.order == "recorded",
        )
        return _Run(replay, p.batch_size or profile.job.batch_size)

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        """FIFO links carry at most link_bps / (8 x bytes per step) steps/s, whatever W."""
        p = self._params(params)
        profile = self._profile(inputs)
        per_link: dict[tuple[str, int | None], int] = defaultdict(int)
        for op in profile.ops:
            if op.resource.is_transfer:
                per_link[(op.resource.value, op.ps)] += op.bytes
        busiest = max(per_link.values(), default=0)
        if busiest == 0:
            return math.inf
        return (p.batch_size or profile.job.batch_size) * self._link_bps(inputs) / (8.0 * busiest)

    # -- inputs -----------------------------------------------------------------------------
    def _params(self, params: ModelParams) -> HuangParams:
        if not isinstance(params, HuangParams):
            raise ModelInputError(NAME, f"expected its own parameters, got {type(params).__name__}")
        return params

    def _profile(self, inputs: ModelInputs) -> Profile:
        if inputs.profile is None:
            raise ModelInputError(NAME, "needs a profile (a one-worker trace)")
        # each worker starts its next step when its own ends: no barrier, so no synchronous trace
        return require_asynchronous_ps(NAME, require_ps_profile(NAME, inputs.profile))

    def _link_bps(self, inputs: ModelInputs) -> float:
        if inputs.network is None:
            raise ModelInputError(NAME, "needs the link bandwidth (network)")
        return inputs.network.bandwidth_bps * inputs.goodput

    def _graph(self, inputs: ModelInputs, p: HuangParams) -> tuple[ReplayGraph, Profile]:
        profile = self._profile(inputs)
        self._link_bps(inputs)
        if any(not speed > 0 for speed in inputs.worker_speeds):
            raise ModelInputError(NAME, f"worker speeds must be > 0, got {list(inputs.worker_speeds)}")
        if inputs.parameter_servers not in (None, profile.job.parameter_servers):
            raise ModelInputError(NAME, "replays the traced graph, so it cannot change the number of parameter servers")
        db = inputs.extras.get(DEVICE_DB)
        if db is None:
            db = build_database([profile])
        elif not isinstance(db, OpDatabase):
            raise ModelInputError(NAME, f"extras[{DEVICE_DB!r}] must be an OpDatabase, got {type(db).__name__}")
        try:
            graph = timed_graph(
                profile, db, batch_size=p.batch_size, order=p.order, opaque=p.opaque, fallback=p.fallback
            )
        except OpEstimateError as exc:
            raise ModelInputError(NAME, str(exc)) from None
        return graph, profile


MODELS = (HuangReplay(),)
