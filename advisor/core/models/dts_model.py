"""DTS (Robinson et al.) behind the ThroughputModel seam: W workers are W clients of one training
architecture (PL, FL, SL, PSL or FSL) on the cluster of a DTS spec; the answer is the examples/s
of the best role allocation DTS finds, a closed form (``ExactRun``).

Only for what a DTS spec describes (``Need.CLUSTER_SPEC``; ``ModelInputs.spec`` is a ``DtsSpec``
or the mapping of one): it reads no trace. The spec's ``training.clients`` is replaced by W;
examples per epoch are W x batches_per_client x batch_size whatever the architecture, so the
throughput is that over the epoch time. ``advisor dts`` is the full report (roles, intervals).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from pydantic import Field

from advisor.core.dts import Allocation, Architecture, DtsSpec, allocate, parse_spec
from advisor.core.dts.allocation import nominal_rates
from advisor.core.dts.architectures import evaluate
from advisor.core.dts.simulate import batches_per_epoch
from advisor.core.dts.spec import MODEL
from advisor.core.models.protocol import Exact, ExactRun, ModelBase, ModelInputs, ModelParams, Need, Outlook, Run
from advisor.errors import ModelInputError


class DtsParams(ModelParams):
    architecture: Architecture = Architecture.FL
    max_paths: int | None = Field(default=None, gt=0)  # default: the spec's


class DtsModel(ModelBase):
    name = MODEL
    description = "DTS (Robinson et al.): PL/FL/SL/PSL/FSL per-batch equations on a cluster spec, role allocation"
    Params = DtsParams
    needs = frozenset({Need.CLUSTER_SPEC})
    calibration_note = ("its rates are the cluster spec's processor speeds and link bandwidths, not model parameters, "
                        "and its parameters are choices (architecture, paths): correct the spec itself")

    def check(self, inputs: ModelInputs, params: ModelParams) -> None:
        self._spec(inputs)

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        spec, arch, alloc = self._allocate(inputs, params, workers)
        examples = workers * spec.training.batches_per_client * spec.training.batch_size
        return ExactRun(Exact(examples / (batches_per_epoch(arch, spec) * alloc.seconds_per_batch)))

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """Examples per client batch, for costs and reports."""
        return Outlook(details={"batch_size": self._spec(inputs).training.batch_size})

    def link_bound(self, inputs: ModelInputs, params: ModelParams, workers: int) -> float:
        """The same roles with infinitely fast processors: only the transfers take time."""
        spec, arch, alloc = self._allocate(inputs, params, workers)
        _, bandwidth = nominal_rates(spec)
        links_only = float(evaluate(arch, spec, alloc.assignment, np.full_like(bandwidth, np.inf), bandwidth)
                           .per_batch[0])
        if links_only <= 0.0:
            return math.inf
        examples = workers * spec.training.batches_per_client * spec.training.batch_size
        return examples / (batches_per_epoch(arch, spec) * links_only)

    def _allocate(self, inputs: ModelInputs, params: ModelParams, workers: int) -> tuple[DtsSpec, Architecture, Allocation]:
        if not isinstance(params, DtsParams):
            raise ModelInputError(self.name, f"expected DtsParams, got {type(params).__name__}")
        if workers < 1:
            raise ModelInputError(self.name, f"workers must be >= 1, got {workers}")
        base = self._spec(inputs)
        spec = base.model_copy(update={"training": base.training.model_copy(update={"clients": workers})})
        return spec, params.architecture, allocate(params.architecture, spec, params.max_paths)

    def _spec(self, inputs: ModelInputs) -> DtsSpec:
        if isinstance(inputs.spec, DtsSpec):
            return inputs.spec
        if isinstance(inputs.spec, Mapping) and "cluster" in inputs.spec:
            return parse_spec({k: v for k, v in inputs.spec.items() if k in DtsSpec.model_fields})
        if inputs.spec is None or isinstance(inputs.spec, Mapping):
            raise ModelInputError(self.name, "needs a cluster spec (--spec FILE.yaml with cluster, dnn and training; "
                                             "see advisor/data/dts-example.yaml)")
        raise ModelInputError(self.name, f"the spec is a {type(inputs.spec).__name__}, not a DTS cluster spec")


MODELS = (DtsModel(),)
