"""A prediction whose W = 1 the profiling run's own rate contradicts (core/profile_check.py), in the
controller: the prediction anchors itself on the profile, and over the API emulator the job gets
one Warning event for it, not one per reconcile, and is never failed for it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from advisor.controller.pipeline.predictions import prediction_params, run_prediction
from advisor.core.cost import Prices
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json
from tests.conftest import ps_async_data
from tests.controller.harness import (
    NS, canned_prediction, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.test_end_to_end import events, reconciles
from tests.controller.tfjobs import tfjob

COMMON = dict(max_workers=3, target=0.05, seed=0, saturation_threshold=0.05)
ANCHORED = "anchored on the profiling run's own 102.9 ex/s at W = 1 (its 100 traced steps, relative noise 5%)"


def test_a_link_stated_twice_too_fast_is_anchored_on_the_profile() -> None:
    """The MLP traced on 100 Mbit/s (its own 102.9 ex/s) with the controller's bandwidth setting at
    200 Mbit/s: W = 1 would be about 190 ex/s; anchored, the curve comes down to the profile."""
    profile = load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))
    stated = prediction_params(None, Prices(), bandwidth_bps=200e6, **COMMON)
    doc = json.loads(run_prediction(profile_to_json(profile), stated.as_dict()))
    check = doc["profile_check"]
    assert check["contradicts"] is True and check["predicted"] > 1.5 * check["profile_throughput"]
    assert abs(doc["curve"][0]["throughput"] / 102.9 - 1) < 0.1
    assert any(n.startswith(ANCHORED) for n in doc["notes"])
    right = json.loads(run_prediction(profile_to_json(profile),
                                      prediction_params(None, Prices(), bandwidth_bps=100e6, **COMMON).as_dict()))
    assert right["profile_check"]["contradicts"] is False and not any("anchored" in n for n in right["notes"])


def contradicted_prediction(profile_doc: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """The harness's canned curve, told anchored on a contradicting profile (module-level: the
    process pool runs it)."""
    doc = json.loads(canned_prediction(profile_doc, params))
    doc["profile_check"] = {"profile_throughput": 50.0, "profile_steps": 100, "untraced": False, "predicted": 100.0,
                            "gap": 1.0, "limit": 0.16, "contradicts": True}
    doc["notes"] = [ANCHORED + ": the prediction's W = 1 had been +100% from it"]
    return json.dumps(doc)


def test_over_the_emulator_a_contradicted_profile_is_one_warning(emu, body, tmp_path) -> None:  # type: ignore[no-untyped-def]
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False), runner=contradicted_prediction)
    try:
        create_tfjob(emu, tfjob("stated-fast", workers=2))
        (run,) = wait_for("the profiling run", lambda: profiling_jobs(emu))
        assert upload_as_profiling_pod(emu, run, body).ok
        wait_for("Predicted", lambda: phase(emu, "stated-fast") == "Predicted")
        wait_for("the Warning", lambda: ("Warning", "ProfileContradicts") in events(emu, "stated-fast"))
        warning = next(e for e in emu.list("events", NS) if e["reason"] == "ProfileContradicts")
        assert warning["message"].startswith(ANCHORED)
        for _ in range(2):  # resyncs reconcile the job again: the warning is not repeated
            before = reconciles(controller)
            controller.resync()
            wait_for("a resync's reconcile", lambda: reconciles(controller) >= before + 1)
        assert events(emu, "stated-fast").count(("Warning", "ProfileContradicts")) == 1
        assert phase(emu, "stated-fast") == "Predicted"
    finally:
        controller.stop()
