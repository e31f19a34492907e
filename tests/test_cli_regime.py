"""The command line picks the model by the trace's regime: a trace recorded from a
SyncReplicasOptimizer program (tests/data/ps-sync) is predicted with the synchronous default and
says so; a model that cannot predict it is refused naming both regimes; an asynchronous trace
keeps the asynchronous default."""

from __future__ import annotations

import json

import pytest

from advisor.cli import main
from advisor.core.models import registry
from tests.conftest import REPO, ps_async_data

SYNC_TRACE = str(REPO / "tests" / "data" / "ps-sync" / "mlp_bw100.trace.json.gz")
FAST = ["--workers", "1-2", "--steps", "40", "--warmup", "5", "--jobs", "1"]
REGIME_NOTE = "the trace is of a synchronous program (SyncReplicasOptimizer"


def test_predict_a_synchronous_trace_with_the_synchronous_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", SYNC_TRACE, *FAST]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"mlp: model {registry.DEFAULT_SYNC_MODEL}, batch 32, 1 PS, link 100 Mbit/s each way"
    assert f"{REGIME_NOTE}: its token queue and gradient accumulators are in the trace): predicting with " \
           f"{registry.DEFAULT_SYNC_MODEL}; --model chooses another" in err
    assert "note: cynthia and phase-mva left out beside the prediction: they predict asynchronous PS" in out

    assert main(["predict", SYNC_TRACE, *FAST, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == registry.DEFAULT_SYNC_MODEL and doc["job"]["synchronous"] is True
    assert [p["workers"] for p in doc["curve"]] == [1, 2]
    assert any(n.startswith(REGIME_NOTE) for n in doc["notes"])
    assert all(p["models"] == {} and p["baselines"] == {"cynthia": None, "phase_queueing": None}
               for p in doc["curve"])


def test_an_asynchronous_model_named_for_a_synchronous_trace_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", SYNC_TRACE, *FAST, "--model", registry.DEFAULT_MODEL]) == 2
    err = capsys.readouterr().err
    assert (f"model '{registry.DEFAULT_MODEL}': predicts asynchronous PS; this trace is of a synchronous program "
            f"(SyncReplicasOptimizer): use {registry.DEFAULT_SYNC_MODEL}") in err


def test_equal_shares_follows_the_regime(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", SYNC_TRACE, *FAST, "--json", "--equal-shares"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "li2020-des-sync"


def test_an_asynchronous_trace_keeps_the_asynchronous_default(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))
    assert main(["predict", trace, *FAST, "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["model"] == registry.DEFAULT_MODEL and doc["job"]["synchronous"] is False
    assert REGIME_NOTE not in err and not any(n.startswith(REGIME_NOTE) for n in doc["notes"])
    assert doc["curve"][0]["models"].keys() == {"cynthia", "phase-mva"}  # the side models apply here


def test_inspect_and_models_say_the_regime(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect", SYNC_TRACE]) == 0
    assert "training     synchronous PS (SyncReplicasOptimizer" in capsys.readouterr().out
    assert main(["models", "--json"]) == 0
    defaults = json.loads(capsys.readouterr().out)["defaults"]
    assert defaults == {"asynchronous PS": registry.DEFAULT_MODEL, "synchronous PS": registry.DEFAULT_SYNC_MODEL,
                        "all-reduce": registry.DEFAULT_ALLREDUCE_MODEL}
    assert main(["models"]) == 0
    assert f"{registry.DEFAULT_SYNC_MODEL} (default for synchronous PS traces)" in capsys.readouterr().out
