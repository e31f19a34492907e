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
DEFAULT_MODEL = "li2020-des+contention"
DEFAULT_ALLREDUCE_MODEL = "ring-allreduce"  # for a profile traced from an all-reduce program


def default_model_for(allreduce: bool) -> str:
    """The model a prediction uses when none is named: the PS simulation for a parameter-server
    trace, the ring for a trace of an all-reduce program (DDP, MultiWorkerMirroredStrategy)."""
    return DEFAULT_ALLREDUCE_MODEL if allreduce else DEFAULT_MODEL


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
