"""What a profiling run finds already there, and when its token stops being valid.

The profiling TFJob has a deterministic name (``<job>-prof-g<generation>``) and its token is
derived from the controller's key, the job's uid and the generation, so a new run can meet
objects left by an earlier one: after the store was lost (the same token, derived again), or
from an earlier job of the same name that was deleted and recreated before the cluster's
garbage collector removed its dependents (another uid: another token). And a run superseded by
a new generation of the job's templates must stop accepting uploads.
"""

from __future__ import annotations

from typing import Any

from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, pod_token, profiling_jobs, settings_for, start_controller,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator


def profiling_run_for(emu: KubeEmulator, name: str, uid: str) -> dict[str, Any] | None:
    """The profiling TFJob ``name`` once it is the one made for the job ``uid``."""
    pj = emu.get("tfjobs", NS, name)
    return pj if pj and pj["metadata"]["annotations"].get(PREFIX + "profiling-for-uid") == uid else None


def test_a_lost_store_keeps_the_runs_token_valid_and_the_run(emu, body, tmp_path) -> None:
    first = start_controller(emu, settings_for(tmp_path / "a", leader_election=False))
    try:
        create_tfjob(emu, tfjob("amnesia"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        wait_for("Profiling", lambda: phase(emu, "amnesia") == "Profiling")
    finally:
        first.stop()
    # a new store (persistence off, the volume lost, another replica's): the run is adopted from
    # the job's annotations, and the token the pod holds is derived again from the same key
    second = start_controller(emu, settings_for(tmp_path / "b", leader_election=False))
    try:
        wait_for("adopted", lambda: second.store.runs())
        result = upload_as_profiling_pod(emu, pj, body, port=second.http.port)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "amnesia") == "Predicted")
        assert len(profiling_jobs(emu)) == 1  # the run itself was ours (same job uid): kept
        assert not emu.calls(resource="secrets")  # no Secret anywhere
    finally:
        second.stop()


def test_a_recreated_job_does_not_reuse_the_profiling_run_of_its_predecessor(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        before = create_tfjob(emu, tfjob("phoenix"))
        old = wait_for("the first job's profiling run",
                       lambda: profiling_run_for(emu, "phoenix-prof-g1", before["metadata"]["uid"]))
        old_token = pod_token(old)
        # deleted and created again before the cluster's garbage collector removed the dependents
        emu.delete("tfjobs", NS, "phoenix", propagation="Orphan")
        after = create_tfjob(emu, tfjob("phoenix"))
        uid = after["metadata"]["uid"]
        pj = wait_for("a profiling run made for the new job", lambda: profiling_run_for(emu, "phoenix-prof-g1", uid),
                      timeout_s=30)
        assert [o["uid"] for o in pj["metadata"]["ownerReferences"]] == [uid]
        assert pod_token(pj) != old_token  # another uid, another token
        # the old job's run is still live in the store, but its token is not for the job of that name now
        assert upload_as_profiling_pod(emu, pj, body, token=old_token).status == 403
        result = upload_as_profiling_pod(emu, pj, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "phoenix") == "Predicted")
        assert len(profiling_jobs(emu)) == 1
        record = emu.get("configmaps", NS, "phoenix-advisor-g1")
        assert [o["uid"] for o in record["metadata"]["ownerReferences"]] == [uid]
    finally:
        controller.stop()


def test_a_new_generation_ends_the_old_run_so_its_token_is_refused_and_collected(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        uid = create_tfjob(emu, tfjob("evolving"))["metadata"]["uid"]
        old_run = wait_for("the first profiling run", lambda: emu.get("tfjobs", NS, "evolving-prof-g1"))
        old_token = pod_token(old_run)
        container = {"name": "tensorflow", "image": "example.org/train:2.0", "command": ["python", "/app/train_ps.py"]}
        emu.patch("tfjobs", NS, "evolving",  # the user ships a new image: a new generation of the templates
                  {"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [container]}}}}}})
        new_run = wait_for("the new generation's profiling run", lambda: emu.get("tfjobs", NS, "evolving-prof-g2"))
        # the old run's pods may still be running: their upload is refused, their token is dead
        assert upload_as_profiling_pod(emu, old_run, body, token=old_token).status == 403
        assert controller.store.run(uid, 1).state == "superseded"
        assert controller.metrics.profiling_runs.labels("superseded")._value.get() == 1
        controller.collect_garbage()
        assert emu.get("tfjobs", NS, "evolving-prof-g1") is None
        assert emu.get("tfjobs", NS, "evolving-prof-g2") is not None  # the live run is kept
        result = upload_as_profiling_pod(emu, new_run, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "evolving") == "Predicted")
        assert annotations(emu, "evolving")[PREFIX + "profiled-generation"] == "2"
    finally:
        controller.stop()
