"""``initial`` mode never leaves a job held: every way the advisor gives up on a job resumes it.

The advisor suspends a job it is about to profile (``runPolicy.suspend``, marked
``suspended-by-advisor``) and resumes it with the recommendation once predicted. Any other end
(the prediction fails or is impossible, no recommendation fits the job's limits, the job's policy
or spec cannot be read, the user opts out) must resume it as the user wrote it: a Failed job
waits for a new generation of its templates, which may never come.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from advisor.controller.app import Controller
from advisor.controller.kube.client import Kube
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.reconcile import Reconciler
from advisor.controller.state.store import Store
from advisor.controller.jobs.tfjob import OPT_IN, PREFIX
from tests.controller.harness import (
    FAST_LEASE, NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator

HELD = PREFIX + "suspended-by-advisor"




class FailingPredictor:
    """Every prediction fails at once, as when the simulation refuses a profile."""

    backend = "process"

    def __init__(self, done: Callable[[str, str | None, str | None], None]) -> None:
        self.done = done

    def submit(self, key: str, profile_doc: Mapping[str, Any], params: Any) -> bool:
        self.done(key, None, "the simulator refused the profile")
        return True

    def running(self, key: str) -> bool:
        return False


def released(emu: KubeEmulator, name: str) -> dict[str, Any] | None:
    """The job once the advisor let it go: not suspended, no hold mark."""
    job = emu.get("tfjobs", NS, name) or {}
    if job.get("spec", {}).get("runPolicy", {}).get("suspend") is False \
            and HELD not in (job["metadata"].get("annotations") or {}):
        return job
    return None


def workers_of(job: Mapping[str, Any]) -> int:
    return int(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"])


def test_a_failed_prediction_resumes_the_held_job_unchanged(emu: KubeEmulator, body: bytes, tmp_path: Path) -> None:
    settings = settings_for(tmp_path, leader_election=False, mode="initial")
    controller: Controller | None = None

    def done(key: str, result: str | None, error: str | None) -> None:
        assert controller is not None
        controller.reconciler.prediction_done(key, result, error)

    controller = Controller(settings, Kube(kubernetes.client.ApiClient(emu.configuration())),
                            predictor=FailingPredictor(done), lease_timing=FAST_LEASE)
    controller.start()
    try:
        create_tfjob(emu, tfjob("doomed", workers=2))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert emu.get("tfjobs", NS, "doomed")["spec"]["runPolicy"]["suspend"] is True
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Failed", lambda: phase(emu, "doomed") == "Failed")
        assert annotations(emu, "doomed")[PREFIX + "reason"] == "PredictionFailed: the simulator refused the profile"
        job = wait_for("the release", lambda: released(emu, "doomed"))
        assert workers_of(job) == 2  # as the user wrote it
        assert controller.metrics.resizes.labels("initial")._value.get() == 0  # resumed, not resized
    finally:
        controller.stop()


def test_no_recommendation_within_the_limits_resumes_the_held_job_unchanged(emu, body, tmp_path) -> None:
    # the canned curve covers W = 1..4; the job asks for at least 5
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, mode="initial", max_workers=8))
    try:
        create_tfjob(emu, tfjob("picky", workers=6, annotations={PREFIX + "min-workers": "5"}))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert upload_as_profiling_pod(emu, pj, body).ok
        wait_for("Failed", lambda: phase(emu, "picky") == "Failed")
        assert annotations(emu, "picky")[PREFIX + "reason"].startswith("NoRecommendation: ")
        assert workers_of(wait_for("the release", lambda: released(emu, "picky"))) == 6
    finally:
        controller.stop()


def test_opting_out_while_held_resumes_the_job(emu, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, mode="initial"))
    try:
        create_tfjob(emu, tfjob("leaver", workers=3))
        wait_for("the profiling run", lambda: profiling_jobs(emu))
        wait_for("the hold", lambda: emu.get("tfjobs", NS, "leaver")["spec"]["runPolicy"].get("suspend") is True)
        emu.patch("tfjobs", NS, "leaver", {"metadata": {"annotations": {OPT_IN: None}}})  # the user's kubectl
        job = wait_for("the release", lambda: released(emu, "leaver"))
        assert workers_of(job) == 3
    finally:
        controller.stop()


@pytest.mark.parametrize(("name", "edit", "reason"), [
    ("bad-policy", lambda job: job["metadata"]["annotations"].update({PREFIX + "max-workers": "lots"}), "InvalidPolicy"),
    # a PS template without containers (a job without PS is MWMS now, which is supported)
    ("no-containers", lambda job: job["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"].update(containers=[]),
     "InvalidSpec"),
])
def test_a_job_created_held_that_the_advisor_cannot_use_is_resumed(emu, tmp_path, name, edit, reason) -> None:
    """As docs/controller.md advises, the user creates the job suspended with the hold mark."""
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, mode="initial"))
    try:
        job = tfjob(name, workers=2, suspend=True, annotations={HELD: "true"})
        edit(job)
        create_tfjob(emu, job)
        wait_for("Failed", lambda: phase(emu, name) == "Failed")
        assert annotations(emu, name)[PREFIX + "reason"].startswith(f"{reason}: ")
        assert workers_of(wait_for("the release", lambda: released(emu, name))) == 2
        assert profiling_jobs(emu) == []
    finally:
        controller.stop()


class NoPredictions:
    backend = "none"

    def submit(self, *args: Any) -> bool:
        raise AssertionError("nothing can be predicted without a trace")

    def running(self, key: str) -> bool:
        return False


def test_an_impossible_prediction_resumes_the_held_job(emu: KubeEmulator, tmp_path: Path) -> None:
    """The run says a trace was received but the store holds none (PredictionImpossible)."""
    emu.seed(tfjob("ghost", workers=2))
    store = Store(tmp_path / "advisor.db")
    reconciler = Reconciler(settings=settings_for(tmp_path, mode="initial"),
                            kube=Kube(kubernetes.client.ApiClient(emu.configuration())),
                            cache=lambda ns, name: emu.get("tfjobs", ns, name), store=store,
                            predictor=NoPredictions(), metrics=Metrics(), enqueue_after=lambda key, delay: None)
    reconciler.reconcile((NS, "ghost"))
    assert emu.get("tfjobs", NS, "ghost")["spec"]["runPolicy"]["suspend"] is True
    (run,) = store.runs()
    store.set_state(run.uid, run.generation, "received", "", now=1.0)
    reconciler.reconcile((NS, "ghost"))
    assert annotations(emu, "ghost")[PREFIX + "reason"].startswith("PredictionImpossible: ")
    job = released(emu, "ghost")
    assert job is not None and workers_of(job) == 2
    assert reconciler.metrics.reconcile_errors.labels("internal")._value.get() == 0
    store.close()
