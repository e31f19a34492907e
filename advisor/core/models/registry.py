"""Which throughput models exist: one line per model module, nothing else to touch.

Each module named in ``MODULES`` exposes ``MODELS``, a tuple of objects that keep the
``ThroughputModel`` protocol. Modules are imported when the registry is first asked, so that
importing the registry costs nothing (a compiled engine loads only when its model runs).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import ValidationError

from advisor.core.models.protocol import ModelParams, ThroughputModel
from advisor.errors import ModelInputError

MODULES: tuple[str, ...] = (
    "advisor.core.models.ps_des",
    "advisor.core.models.cynthia",
    "advisor.core.models.phase_mva",
    "advisor.core.models.lin2018",
    "advisor.core.models.dts_model",
    "advisor.core.models.ring_allreduce",
    "advisor.core.models.pei",
    "advisor.core.models.huang_replay",
)
DEFAULT_MODEL = "li2020-des+contention"  # for an asynchronous parameter-server trace (and before a trace is known)
DEFAULT_SYNC_MODEL = "li2020-des-sync+contention"  # for a trace of SyncReplicasOptimizer (JobInfo.synchronous)
DEFAULT_ALLREDUCE_MODEL = "ring-allreduce"  # for a profile traced from an all-reduce program
EQUAL_SHARES_MODEL = "li2020-des"  # Li et al.'s equal shares (--equal-shares, the setting equal_shares)
EQUAL_SHARES_SYNC_MODEL = "li2020-des-sync"  # the same with SyncReplicasOptimizer's barrier


def default_model_for(allreduce: bool, synchronous: bool = False) -> str:
    """The model a prediction uses when none is named, by the traced program's regime: the ring for
    an all-reduce program (DDP, MultiWorkerMirroredStrategy), the synchronous PS simulation for a
    trace of ``SyncReplicasOptimizer`` (an asynchronous model would predict a regime the job does
    not run), else the asynchronous PS simulation."""
    if allreduce:
        return DEFAULT_ALLREDUCE_MODEL
    return DEFAULT_SYNC_MODEL if synchronous else DEFAULT_MODEL


def equal_shares_model(synchronous: bool = False) -> str:
    """Li et al.'s equal-shares simulation for the trace's regime (``--equal-shares``)."""
    return EQUAL_SHARES_SYNC_MODEL if synchronous else EQUAL_SHARES_MODEL


@cache
def _by_name() -> dict[str, ThroughputModel]:
    found: dict[str, ThroughputModel] = {}
    for module in MODULES:
        for model in importlib.import_module(module).MODELS:
            if model.name in found:
                raise RuntimeError(f"two models are named {model.name!r} ({module})")
            found[model.name] = model
    return found


def all_models() -> tuple[ThroughputModel, ...]:
    """Every registered model, in registry order."""
    return tuple(_by_name().values())


def names() -> tuple[str, ...]:
    return tuple(_by_name())


def get(name: str) -> ThroughputModel:
    """The model called ``name``; an unknown name is a ``ModelInputError`` listing the valid ones."""
    try:
        return _by_name()[name]
    except KeyError:
        raise ModelInputError(name, f"no such model; the models are: {', '.join(names())}") from None


def params_for(model: ThroughputModel, values: Mapping[str, Any] | None = None) -> ModelParams:
    """``model.Params`` from ``values`` (strings are converted, e.g. from ``--model-param k=v``);
    every problem is a ``ModelInputError`` naming the parameter."""
    try:
        return model.Params(**dict(values or {}))
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or "<params>"
            problems.append(f"parameter {where}: {err['msg'].removeprefix('Value error, ')}")
        known = ", ".join(model.Params.model_fields) or "none"
        raise ModelInputError(model.name, "; ".join(problems) + f" (its parameters: {known})") from None
