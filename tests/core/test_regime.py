"""Which models predict which training regime, and the default by the trace's regime.

A model of asynchronous PS training (workers never wait for each other) cannot represent
SyncReplicasOptimizer's barrier, so given a trace of a synchronous program it refuses, naming
both regimes; a synchronous model reads both kinds of trace (an asynchronous trace with a
what-if to synchronous is a documented use). Independent truths: the recordings
(tests/data/ps-sync: SyncReplicasOptimizer; tests/data/ps-async: plain asynchronous SGD) and what
each model is (its paper or module: the closed forms and the replay cycle each worker on its
own; the sync simulation adds the barrier).
"""

from __future__ import annotations

import pickle

import pytest

from advisor.core.advice import AdviceRequest, ModelChoice, advise, model_inputs
from advisor.core.curve import CurveSettings
from advisor.core.models import registry
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from advisor.errors import ModelInputError, ModelRegimeError
from advisor.importers.loader import load_profile
from tests.conftest import REPO, ps_async_data

SYNC_TRACE = REPO / "tests" / "data" / "ps-sync" / "mlp_bw100.trace.json.gz"
# the models of asynchronous PS: Li et al.'s simulation without a barrier, the closed forms and
# queueing networks of independent workers, Huang et al.'s replay (a worker starts its next step
# when its own ends)
ASYNCHRONOUS = {"li2020-des", "li2020-des+contention", "cynthia", "cynthia-half-tc", "phase-mva", "lin2018-mva",
                "huang-replay"}
SYNCHRONOUS = {"li2020-des-sync", "li2020-des-sync+contention"}
CFG = CurveSettings(workers=(1, 2), steps=30, warmup_steps=5, seed=1)


@pytest.fixture(scope="module")
def sync() -> Profile:
    return load_profile(SYNC_TRACE)


@pytest.fixture(scope="module")
def asynchronous() -> Profile:
    return load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))


def _request(**kw) -> AdviceRequest:
    return AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=CFG, **kw)


def _check(name: str, profile: Profile) -> None:
    model = registry.get(name)
    model.check(model_inputs(profile, _request()), registry.params_for(model))


def test_the_default_follows_the_regime() -> None:
    assert registry.default_model_for(False) == registry.DEFAULT_MODEL
    assert registry.default_model_for(False, synchronous=True) == registry.DEFAULT_SYNC_MODEL
    assert registry.default_model_for(True, synchronous=False) == registry.DEFAULT_ALLREDUCE_MODEL
    # the synchronous default is one of the synchronous models, the asynchronous one is not
    assert registry.DEFAULT_SYNC_MODEL in SYNCHRONOUS and registry.DEFAULT_MODEL in ASYNCHRONOUS
    assert registry.equal_shares_model(False) == "li2020-des" and registry.equal_shares_model(True) == "li2020-des-sync"


@pytest.mark.parametrize("name", sorted(ASYNCHRONOUS))
def test_an_asynchronous_model_refuses_a_synchronous_trace_naming_both_regimes(name: str, sync: Profile) -> None:
    with pytest.raises(ModelRegimeError) as caught:
        _check(name, sync)
    message = str(caught.value)
    assert message == (f"model {name!r}: predicts asynchronous PS; this trace is of a synchronous program "
                       f"(SyncReplicasOptimizer): use {registry.DEFAULT_SYNC_MODEL}")
    assert isinstance(caught.value, ModelInputError)  # every caller that handles refusals handles this one


@pytest.mark.parametrize("name", sorted(ASYNCHRONOUS | SYNCHRONOUS))
def test_every_ps_model_reads_an_asynchronous_trace(name: str, asynchronous: Profile) -> None:
    _check(name, asynchronous)  # the synchronous ones as a what-if: the same job with a barrier


@pytest.mark.parametrize("name", sorted(SYNCHRONOUS))
def test_the_synchronous_models_read_a_synchronous_trace(name: str, sync: Profile) -> None:
    _check(name, sync)


def test_every_registered_model_is_sorted_into_a_regime_or_reads_no_ps_trace_as_such(sync: Profile) -> None:
    """A model added later is held to the rule: it either reads a synchronous trace or refuses it
    for its regime (``ModelRegimeError``), never with another error that hides why."""
    for model in registry.all_models():
        try:
            _check(model.name, sync)
        except ModelRegimeError:
            assert model.name in ASYNCHRONOUS, f"{model.name} refuses a synchronous trace: list it as asynchronous"
        except ModelInputError as exc:  # a spec model, or the ring's own inputs: not about the regime
            assert model.name not in ASYNCHRONOUS | SYNCHRONOUS, str(exc)
        else:
            assert model.name not in ASYNCHRONOUS


def test_a_prediction_of_a_synchronous_trace_leaves_the_asynchronous_side_models_out_with_a_note(
        sync: Profile) -> None:
    advice = advise(sync, _request(model=ModelChoice(registry.DEFAULT_SYNC_MODEL)))
    assert advice.model == registry.DEFAULT_SYNC_MODEL and [p.workers for p in advice.points] == [1, 2]
    assert all(p.models == {} for p in advice.points)  # cynthia and phase-mva predict asynchronous PS
    assert ("cynthia and phase-mva left out beside the prediction: they predict asynchronous PS, and this trace is "
            "of a synchronous program (SyncReplicasOptimizer)") in advice.notes


def test_the_asynchronous_default_refuses_the_whole_prediction(sync: Profile) -> None:
    with pytest.raises(ModelRegimeError, match="asynchronous PS; this trace is of a synchronous program"):
        advise(sync, _request(model=ModelChoice(registry.DEFAULT_MODEL)))


def test_a_regime_refusal_survives_the_trip_back_from_a_worker_process() -> None:
    # the controller predicts in worker processes, which send a prediction's error back pickled
    error = ModelRegimeError("cynthia", "asynchronous PS", "a synchronous program (SyncReplicasOptimizer)",
                             "li2020-des-sync")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ModelRegimeError and str(back) == str(error) and back.model == "cynthia"
    plain = pickle.loads(pickle.dumps(ModelInputError("dts", "needs a cluster spec")))
    assert str(plain) == "model 'dts': needs a cluster spec" and plain.model == "dts"
