"""The controller chooses the model before the profile arrives; a profile of a SyncReplicasOptimizer
program then switches a job that named no model from the asynchronous default to the synchronous
one, and the prediction says why. A job that names a model keeps it (and an asynchronous one is
refused by the prediction, naming both regimes).

Independent truth: tests/data/ps-sync holds one-worker traces of SyncReplicasOptimizer programs,
each file exactly the body the profiling hook uploads.
"""

from __future__ import annotations

import base64
import gzip
import json

from advisor.controller.jobs.tfjob import PREFIX, parse_tfjob
from advisor.controller.pipeline.policy import PREDICT_MODEL, job_model, model_note
from advisor.controller.pipeline.predictions import prediction_params, run_prediction
from advisor.controller.settings import load_settings
from advisor.core.advice import ModelChoice
from advisor.core.cost import Prices
from advisor.core.models import registry
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json
from tests.conftest import REPO
from tests.controller.harness import (
    NS,
    annotations,
    create_tfjob,
    phase,
    profiling_jobs,
    settings_for,
    start_controller,
    upload_as_profiling_pod,
    wait_for,
)
from tests.controller.tfjobs import tfjob, with_uid
from tests.kube_emulator import KubeEmulator

SYNC_TRACE = REPO / "tests" / "data" / "ps-sync" / "mlp_bw100.trace.json.gz"
CONTENTION = {"congestion_control": "unknown", "multi_flow_goodput": 0.85}  # the contention settings' defaults


def _fields(name: str) -> set[str]:
    return set(registry.get(name).Params.model_fields)


def test_a_job_without_a_model_gets_the_synchronous_default_for_a_synchronous_profile() -> None:
    settings = load_settings(model_params={"share_sigma": 0.5})
    plain = parse_tfjob(with_uid(tfjob()))
    before = job_model(settings, plain)  # before the profile (and for an asynchronous one)
    assert before == ModelChoice(registry.DEFAULT_MODEL, {**CONTENTION, "share_sigma": 0.5})
    after = job_model(settings, plain, synchronous=True)
    # the settings' parameters go with it where the synchronous model has them
    wanted = {k: v for k, v in {**CONTENTION, "share_sigma": 0.5}.items() if k in _fields(registry.DEFAULT_SYNC_MODEL)}
    assert after == ModelChoice(registry.DEFAULT_SYNC_MODEL, wanted)
    note = model_note(settings, plain, after)
    assert note.startswith("the profile is of a synchronous program (SyncReplicasOptimizer")
    assert f"predicted with {registry.DEFAULT_SYNC_MODEL}" in note and f"in place of {registry.DEFAULT_MODEL}" in note
    assert model_note(settings, plain, before) == ""
    # equal_shares asks for Li et al.'s equal shares: its synchronous form
    assert job_model(load_settings(equal_shares=True), plain, synchronous=True).name == "li2020-des-sync"


def test_a_named_model_is_kept_whatever_the_profile() -> None:
    settings = load_settings()
    named = parse_tfjob(with_uid(tfjob(annotations={PREDICT_MODEL: registry.DEFAULT_MODEL})))
    assert job_model(settings, named, synchronous=True) == job_model(settings, named)
    assert job_model(settings, named, synchronous=True).name == registry.DEFAULT_MODEL
    # so is a model the operator chose in the settings (only the asynchronous default is replaced)
    chosen = load_settings(model="lin2018-mva")
    assert job_model(chosen, parse_tfjob(with_uid(tfjob())), synchronous=True) == ModelChoice("lin2018-mva", {})


def test_the_note_joins_the_key_only_when_there_is_one() -> None:
    params = prediction_params(1e8, Prices(), bandwidth_bps=None, max_workers=2, target=0.05, seed=0,
                               saturation_threshold=0.05)
    assert "model_note" not in params.as_dict()  # the keys of every prediction from before stay the same


def test_the_prediction_says_why_it_used_the_synchronous_model() -> None:
    settings = load_settings()
    view = parse_tfjob(with_uid(tfjob()))
    choice = job_model(settings, view, synchronous=True)
    params = prediction_params(1e8, Prices(), bandwidth_bps=None, max_workers=2, target=0.05, seed=0,
                               saturation_threshold=0.05, model=choice)
    note = model_note(settings, view, choice)
    doc = json.loads(run_prediction(profile_to_json(load_profile(SYNC_TRACE)),
                                    {**params.as_dict(), "model_note": note}))
    assert doc["model"] == registry.DEFAULT_SYNC_MODEL and doc["job"]["synchronous"] is True
    assert note in doc["notes"]


def _recorded_prediction(emu: KubeEmulator, job: str) -> dict | None:
    record = emu.get("configmaps", NS, f"{job}-advisor-g1") or {}
    packed = (record.get("binaryData") or {}).get("prediction.json.gz")
    return json.loads(gzip.decompress(base64.b64decode(packed))) if packed else None


def test_end_to_end_a_synchronous_upload_is_predicted_with_the_synchronous_model(emu: KubeEmulator,
                                                                                  tmp_path) -> None:
    body = SYNC_TRACE.read_bytes()  # exactly what the hook uploaded from the SyncReplicasOptimizer program
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, max_workers=2), canned=False)
    try:
        create_tfjob(emu, tfjob("plain", workers=2))
        create_tfjob(emu, tfjob("named", workers=2, annotations={PREDICT_MODEL: registry.DEFAULT_MODEL}))
        for job in ("plain", "named"):
            run = wait_for(f"{job}'s profiling run", lambda job=job: [
                p for p in profiling_jobs(emu) if p["metadata"]["name"].startswith(f"{job}-")])[0]
            assert upload_as_profiling_pod(emu, run, body).ok
        wait_for("Predicted", lambda: phase(emu, "plain") == "Predicted", timeout_s=180)
        assert annotations(emu, "plain")[PREFIX + "model"] == registry.DEFAULT_SYNC_MODEL
        recorded = wait_for("the recorded prediction", lambda: _recorded_prediction(emu, "plain"))
        assert recorded["model"] == registry.DEFAULT_SYNC_MODEL and recorded["job"]["synchronous"] is True
        assert any(n.startswith("the profile is of a synchronous program") for n in recorded["notes"])
        # the job that named the asynchronous model keeps it, and its prediction is refused with the reason
        wait_for("Failed", lambda: phase(emu, "named") == "Failed", timeout_s=180)
        reason = annotations(emu, "named")[PREFIX + "reason"]
        assert reason.startswith("PredictionFailed") and (
            f"model '{registry.DEFAULT_MODEL}': predicts asynchronous PS; this trace is of a synchronous program "
            f"(SyncReplicasOptimizer): use {registry.DEFAULT_SYNC_MODEL}") in reason
    finally:
        controller.stop()
