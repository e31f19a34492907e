"""What a profiling run finds already there, and when its token stops being valid.

The profiling TFJob and its token Secret have deterministic names (``<job>-prof-g<generation>``,
``...-token``), so a new run can meet objects left by an earlier one: after the store was lost
(a new token for the same run), or from an earlier job of the same name that was deleted and
recreated before the cluster's garbage collector removed its dependents. And a run superseded by
a new generation of the job's templates must stop accepting uploads.
"""

from __future__ import annotations

import base64
from typing import Any


from advisor.controller.tfjob import PREFIX
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator




def token_in(emu: KubeEmulator, secret: str) -> str | None:
    obj = emu.get("secrets", NS, secret)
    return base64.b64decode(obj["data"]["token"]).decode() if obj else None


def profiling_run_for(emu: KubeEmulator, name: str, uid: str) -> dict[str, Any] | None:
    """The profiling TFJob ``name`` once it is the one made for the job ``uid``."""
    pj = emu.get("tfjobs", NS, name)
    return pj if pj and pj["metadata"]["annotations"].get(PREFIX + "profiling-for-uid") == uid else None


def test_a_lost_store_replaces_the_token_secret_so_the_upload_is_accepted(emu, body, tmp_path) -> None:
    first = start_controller(emu, settings_for(tmp_path / "a", leader_election=False))
    try:
        create_tfjob(emu, tfjob("amnesia"))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        old = wait_for("the token", lambda: token_in(emu, "amnesia-prof-g1-token"))
    finally:
        first.stop()
    # a new store (persistence off, or the volume lost): the run is recorded again with a new token
    second = start_controller(emu, settings_for(tmp_path / "b", leader_election=False))
    try:
        wait_for("the Secret to hold the new run's token",
                 lambda: token_in(emu, "amnesia-prof-g1-token") not in (None, old), timeout_s=30)
        # the pod reads its token from the mounted Secret; the Service routes to the new controller
        result = upload_as_profiling_pod(emu, pj, body, port=second.http.port)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "amnesia") == "Predicted")
        assert len(profiling_jobs(emu)) == 1  # the run itself was ours (same job uid): kept
        assert [c.verb for c in emu.calls(resource="secrets") if c.verb in ("create", "delete")] == \
            ["create", "create", "delete", "create"]  # first start; second start: refused, replaced
    finally:
        second.stop()


def test_a_recreated_job_does_not_reuse_the_profiling_run_of_its_predecessor(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        before = create_tfjob(emu, tfjob("phoenix"))
        wait_for("the first job's profiling run",
                 lambda: profiling_run_for(emu, "phoenix-prof-g1", before["metadata"]["uid"]))
        old_token = wait_for("its token", lambda: token_in(emu, "phoenix-prof-g1-token"))
        # deleted and created again before the cluster's garbage collector removed the dependents
        emu.delete("tfjobs", NS, "phoenix", propagation="Orphan")
        after = create_tfjob(emu, tfjob("phoenix"))
        uid = after["metadata"]["uid"]
        pj = wait_for("a profiling run made for the new job", lambda: profiling_run_for(emu, "phoenix-prof-g1", uid),
                      timeout_s=30)
        assert [o["uid"] for o in pj["metadata"]["ownerReferences"]] == [uid]
        secret = wait_for("its own token Secret", lambda: (s := emu.get("secrets", NS, "phoenix-prof-g1-token"))
                          and s["metadata"].get("ownerReferences") and s)
        assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [uid]
        assert token_in(emu, "phoenix-prof-g1-token") != old_token
        # the old job's run is still live in the store, but its token is not for the job of that name now
        assert upload_as_profiling_pod(emu, pj, body, token=old_token).status == 403
        result = upload_as_profiling_pod(emu, pj, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "phoenix") == "Predicted")
        assert len(profiling_jobs(emu)) == 1
    finally:
        controller.stop()


def test_a_new_generation_ends_the_old_run_so_its_token_is_refused_and_collected(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        uid = create_tfjob(emu, tfjob("evolving"))["metadata"]["uid"]
        old_run = wait_for("the first profiling run", lambda: emu.get("tfjobs", NS, "evolving-prof-g1"))
        old_token = wait_for("its token", lambda: token_in(emu, "evolving-prof-g1-token"))
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
        assert emu.get("secrets", NS, "evolving-prof-g1-token") is None
        assert emu.get("secrets", NS, "evolving-prof-g2-token") is not None  # the live run keeps its own
        result = upload_as_profiling_pod(emu, new_run, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "evolving") == "Predicted")
        assert annotations(emu, "evolving")[PREFIX + "profiled-generation"] == "2"
    finally:
        controller.stop()
