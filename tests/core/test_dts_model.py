"""DTS as a ThroughputModel: W workers are W clients; a closed-form answer in examples/s."""

from __future__ import annotations

import math

import pytest

from advisor.core.models.dts_model import MODELS, DtsParams
from advisor.core.models.protocol import Exact, ModelInputs, Need
from advisor.errors import ModelInputError
from tests.core.test_dts_equations import proc, spec

MODEL = MODELS[0]
FL_CLUSTER = spec("FL", [proc("c1", 100, 1, 10), proc("c2", 50, 2, 10), proc("s", 20, 4, 5)])


def test_it_declares_the_cluster_spec_and_refuses_to_run_without_one() -> None:
    assert MODEL.name == "dts" and MODEL.needs == frozenset({Need.CLUSTER_SPEC})
    with pytest.raises(ModelInputError, match="needs a cluster spec"):
        MODEL.check(ModelInputs(), DtsParams())
    with pytest.raises(ModelInputError, match="not a DTS cluster spec"):
        MODEL.check(ModelInputs(spec=3), DtsParams())


def test_two_fl_clients_as_computed_by_hand() -> None:
    # test_dts_equations.test_eq2_federated: one batch round of the 2 clients takes 4.65 s and trains
    # 2 x 10 examples -> 20 / 4.65 = 4.3011 examples/s. With infinitely fast processors only the
    # exchange is left (max 4 s): 20 / 4 = 5 examples/s.
    inputs, params = ModelInputs(spec=FL_CLUSTER), DtsParams(architecture="FL")
    MODEL.check(inputs, params)
    answer = MODEL.start(inputs, params, workers=2, seed=0).advance(10)
    assert isinstance(answer, Exact) and answer.throughput == pytest.approx(20 / 4.65)
    assert MODEL.link_bound(inputs, params, 2) == pytest.approx(5.0)


def test_the_workers_replace_the_spec_clients_and_the_cluster_limits_them() -> None:
    inputs = ModelInputs(spec=FL_CLUSTER.model_dump())  # a mapping works too
    one = MODEL.start(inputs, DtsParams(architecture="FL"), workers=1, seed=0).advance(1)
    assert isinstance(one, Exact) and one.throughput > 0
    with pytest.raises(ModelInputError, match=r"FL: needs 4 processors"):
        MODEL.start(inputs, DtsParams(architecture="FL"), workers=3, seed=0)


@pytest.mark.parametrize("arch", ["PL", "FL", "SL", "PSL", "FSL"])
def test_the_link_bound_holds_for_every_architecture(arch: str) -> None:
    from tests.core.test_dts_spec import GOOD

    inputs, params = ModelInputs(spec=GOOD), DtsParams(architecture=arch)
    for w in (1, 2, 3):
        got = MODEL.start(inputs, params, workers=w, seed=0).advance(1)
        bound = MODEL.link_bound(inputs, params, w)
        assert isinstance(got, Exact) and 0 < got.throughput <= bound < math.inf
