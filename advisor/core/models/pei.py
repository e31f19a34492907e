"""Pei et al. 2019 as a throughput model: examples/s of W GPUs from a layer spec, no trace needed.

The iteration time comes from ``advisor.core.pei`` (instruction-queue compute per layer, PS or
NCCL transmission); the answer is closed-form: ``ExactRun(Exact(W * batch / t_iteration))``.
The throughput curve of the links is, in order of preference: the spec's ``links.sigmoid``; one
fitted to the profile's own transfers when a profile is given (``curve=profile`` insists on it,
``curve=links`` ignores the profile); the latency-bandwidth line of ``links``. ``fit_report``
gives the fitted curve and its error for the CLI and the docs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field

from advisor.core.models.protocol import (
    CalibrationParam, Exact, ExactRun, ModelBase, ModelInputs, ModelParams, Need, Outlook, Run,
)
from advisor.core.pei import transmission
from advisor.core.pei.iteration import Iteration, predict_iteration
from advisor.core.profile import Profile
from advisor.core.spec import Sigmoid, Spec, parse_spec
from advisor.errors import ModelInputError, SpecError

NAME = "pei2019"


class PeiParams(ModelParams):
    mode: Literal["ps", "nccl"] | None = Field(default=None, description="transmission mode; default: the spec's links.mode")
    dop: float = Field(default=1.0, gt=0, le=1, description="degree of parallelism of the block partition (1 = ideal)")
    batch: int | None = Field(default=None, gt=0, description="per-GPU batch; default: the spec's batch")
    memory_floor: bool = Field(default=True, description="no kernel beats device-memory bandwidth (False: the paper's queue alone)")
    curve: Literal["auto", "links", "profile"] = Field(default="auto", description="where the link throughput curve comes from")


def profile_transfers(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, seconds) of every transfer of every recorded step of ``profile``."""
    sizes: list[float] = []
    durations: list[float] = []
    for index, op in enumerate(profile.ops):
        if op.resource.is_transfer and op.bytes > 0:
            for step in profile.steps:
                sizes.append(float(op.bytes))
                durations.append(step.duration_us[index] * 1e-6)
    return np.asarray(sizes), np.asarray(durations)


def fit_report(profile: Profile) -> transmission.SigmoidFit:
    """k, a, w fitted to ``profile``'s transfers, with the fit's RMS relative error of the times."""
    sizes, durations = profile_transfers(profile)
    try:
        return transmission.fit_sigmoid(sizes, durations)
    except transmission.FitError as exc:
        raise ModelInputError(NAME, f"cannot fit the link curve to the profile's transfers: {exc}") from None


class PeiModel(ModelBase):
    name = NAME
    description = ("Pei et al. 2019: per-layer GPU kernels (instruction-queue model, im2col GEMM or FFT) "
                   "plus PS or NCCL ring transmission, from a layer spec; no trace needed")
    Params = PeiParams
    needs = frozenset({Need.LAYER_SPEC})
    # its links come from the spec (not ModelInputs.goodput); what the spec cannot say is how well
    # the GPU's blocks run in parallel, the one continuous knob observed throughput can correct
    calibration: tuple[CalibrationParam, ...] = (CalibrationParam(
        "dop", (0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 1.0), "degree of parallelism of the GPU's block partition (1 = ideal)"),)
    calibration_note = ""

    def _spec(self, inputs: ModelInputs) -> Spec:
        spec = inputs.spec
        if isinstance(spec, Mapping) and any(k in spec for k in ("layers", "gpu")):
            try:
                spec = parse_spec({k: v for k, v in spec.items() if k in Spec.model_fields})
            except SpecError as exc:
                raise ModelInputError(NAME, str(exc)) from None
        if not isinstance(spec, Spec):
            raise ModelInputError(NAME, "needs a layer spec (--spec FILE.yaml with layers, batch and gpu)")
        missing = [field for field, present in (("layers", bool(spec.layers)), ("gpu", spec.gpu is not None))
                   if not present]
        if missing:
            raise ModelInputError(NAME, f"the spec lacks {' and '.join(missing)}")
        return spec

    def _curve(self, inputs: ModelInputs, params: PeiParams, spec: Spec) -> Sigmoid | None:
        if spec.links is not None and spec.links.sigmoid is not None and params.curve != "profile":
            return spec.links.sigmoid
        profile = inputs.profile or inputs.recorded
        if params.curve == "profile" or (params.curve == "auto" and profile is not None):
            if profile is None:
                raise ModelInputError(NAME, "curve=profile needs a profile whose transfers the curve is fitted to")
            return fit_report(profile).curve
        return None  # the links' latency-bandwidth line

    @staticmethod
    def _params(params: ModelParams) -> PeiParams:
        if not isinstance(params, PeiParams):
            raise ModelInputError(NAME, f"expected its own parameters, got {type(params).__name__}")
        return params

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        """The spec has layers and a GPU, and the curve can be had (links are checked per W in ``start``)."""
        self._curve(inputs, self._params(params), self._spec(inputs))

    def iteration(self, inputs: ModelInputs, params: ModelParams, workers: int) -> Iteration:
        """The predicted iteration at ``workers`` GPUs, with its breakdown."""
        spec = self._spec(inputs)
        params = self._params(params)
        if workers < 1:
            raise ModelInputError(NAME, f"workers must be at least 1, got {workers}")
        if workers > 1 and spec.links is None:
            raise ModelInputError(NAME, f"{workers} GPUs need the spec's links section (mode, bandwidth_gbps, count)")
        return predict_iteration(spec, workers, params.mode, params.dop, params.batch,
                                 self._curve(inputs, params, spec), params.memory_floor)

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        return ExactRun(Exact(self.iteration(inputs, params, workers).examples_per_second))

    def explain(self, inputs: ModelInputs, params: ModelParams, workers: int) -> dict[str, object]:
        """The iteration's parts and where the link curve came from (with the fit's error), for reports."""
        spec = self._spec(inputs)
        checked = self._params(params)
        it = self.iteration(inputs, checked, workers)
        source = "links (latency-bandwidth line)"
        fit: dict[str, float] | None = None
        profile = inputs.profile or inputs.recorded
        if spec.links is not None and spec.links.sigmoid is not None and checked.curve != "profile":
            source = "spec links.sigmoid"
        elif profile is not None and checked.curve != "links":
            report = fit_report(profile)
            source = "fitted to the profile's transfers"
            fit = {"k": report.curve.k, "a": report.curve.a, "w": report.curve.w,
                   "rms_relative_error": report.rms_relative_error, "points": report.points}
        return {"workers": workers, "mode": it.mode, "batch_per_gpu": it.batch, "t_read_s": it.t_read,
                "t_forward_s": it.t_forward, "t_backward_s": it.t_backward, "t_update_s": it.t_update,
                "t_total_s": it.total, "examples_per_s": it.examples_per_second, "curve": source, "fit": fit}

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """The batch per GPU (for costs and reports) and the one-GPU iteration's parts."""
        explained = self.explain(inputs, params, 1)
        return Outlook(details={"batch_size": explained["batch_per_gpu"], "iteration_1_gpu": explained})

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        it = self.iteration(inputs, params, workers)
        return math.inf if it.link_seconds <= 0 else workers * it.batch / it.link_seconds


MODELS = (PeiModel(),)
