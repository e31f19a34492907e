"""What a profiling run finds already there, and when its token stops being valid.

The profiling TFJob has a deterministic name (``<job>-prof-g<generation>``) and its token is
derived from the controller's key, the job's uid and the generation, so a new run can meet
objects left by an earlier one: after the store was lost (the same token, derived again), or
from an earlier job of the same name that was deleted and recreated before the cluster's
garbage collector removed its dependents (another uid: another token). And a run superseded by
a new generation of the job's templates must stop accepting uploads. A run nobody needs any more
(superseded, or its job stopped opting in) is deleted at once; the sweep is the safety net.
"""

from __future__ import annotations

import time
from typing import Any

from advisor.controller.jobs.tfjob import OPT_IN, PREFIX
from advisor.controller.kube.leader import micro_time
from advisor.controller.pipeline.gc import collect_garbage
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
        # deleted at once, not at the next sweep (gc_period_s is an hour here): no sweep has run
        assert not emu.get("tfjobs", NS, "evolving-prof-g1")
        (deleted,) = [c for c in emu.calls(verb="delete", resource="tfjobs")]
        assert deleted.name == "evolving-prof-g1" and deleted.code == 200
        controller.collect_garbage()
        assert emu.get("tfjobs", NS, "evolving-prof-g2") is not None  # the live run is kept
        result = upload_as_profiling_pod(emu, new_run, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "evolving") == "Predicted")
        assert annotations(emu, "evolving")[PREFIX + "profiled-generation"] == "2"
    finally:
        controller.stop()


def hold_lease(emu: KubeEmulator, holder: str) -> None:
    """The Lease as a live replica leaves it: held, renewed just now, for longer than the test."""
    now = micro_time(time.time())
    emu.seed({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "advisor-leader",
                                                                                  "namespace": NS},
              "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300, "acquireTime": now, "renewTime": now,
                       "leaseTransitions": 0}})


def opt_out(emu: KubeEmulator, name: str) -> None:
    emu.patch("tfjobs", NS, name, {"metadata": {"annotations": {OPT_IN: None}}})


def test_a_job_that_stops_opting_in_loses_its_profiling_run_at_once(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        uid = create_tfjob(emu, tfjob("fickle"))["metadata"]["uid"]
        first = wait_for("the profiling run", lambda: emu.get("tfjobs", NS, "fickle-prof-g1"))
        wait_for("Profiling", lambda: phase(emu, "fickle") == "Profiling")
        opt_out(emu, "fickle")
        # no sweep runs (gc_period_s is an hour): the reconcile of the opted-out job deleted it
        wait_for("the run deleted", lambda: emu.get("tfjobs", NS, "fickle-prof-g1") is None)
        notes = annotations(emu, "fickle")
        assert (notes[PREFIX + "phase"], notes[PREFIX + "reason"].split(":")[0]) == ("Pending", "OptedOut")
        assert PREFIX + "profiling-run" not in notes and PREFIX + "profiled-generation" not in notes
        assert controller.store.run(uid, 1) is None  # forgotten: nothing live, no token accepted
        assert upload_as_profiling_pod(emu, first, body).status in (403, 404)
        assert controller.metrics.profiling_runs.labels("opted_out")._value.get() == 1
        # opting in again starts a fresh run (try 1, a new start time) that goes to the end
        emu.patch("tfjobs", NS, "fickle", {"metadata": {"annotations": {OPT_IN: "true"}}})
        again = wait_for("a fresh profiling run", lambda: emu.get("tfjobs", NS, "fickle-prof-g1"))
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert upload_as_profiling_pod(emu, again, body).status == 202
        wait_for("Predicted", lambda: phase(emu, "fickle") == "Predicted")
    finally:
        controller.stop()


def test_the_sweep_deletes_the_run_of_a_job_that_opted_out_when_no_reconcile_did(emu, tmp_path) -> None:
    """The safety net: a replica that is not leading (the lease is another's) reconciles nothing,
    and its sweep alone finds the run of a job that no longer opts in."""
    first = start_controller(emu, settings_for(tmp_path / "a", leader_election=False))
    try:
        create_tfjob(emu, tfjob("quitter"))
        create_tfjob(emu, tfjob("stayer"))
        wait_for("two profiling runs", lambda: len(profiling_jobs(emu)) == 2)
        wait_for("Profiling", lambda: phase(emu, "quitter") == phase(emu, "stayer") == "Profiling")
    finally:
        first.stop()
    opt_out(emu, "quitter")
    hold_lease(emu, "someone-else")
    standby = start_controller(emu, settings_for(tmp_path / "b", identity="standby"))
    try:
        wait_for("the cache", standby.jobs.has_synced)
        assert not standby.leading
        deleted = collect_garbage(standby.kube, standby.jobs, standby.store, standby.metrics, now=time.time(),
                                  max_age_s=3600, namespaces=[NS], opt_in="annotation")
        assert deleted == 1
        assert emu.get("tfjobs", NS, "quitter-prof-g1") is None
        assert emu.get("tfjobs", NS, "stayer-prof-g1") is not None  # its job still opts in
    finally:
        standby.stop()
