"""Synchronous job kinds end to end: a PyTorchJob and a PS-less TFJob (MultiWorkerMirroredStrategy)
through the real controller, the API emulator and the real ring-allreduce prediction; and the bad
input of issue 17 (a trace of the wrong kind, an absent CRD, a job shape the advisor cannot handle).

The all-reduce trace comes from ``harness.allreduce_trace_body`` (one place to swap in a recorded one).
"""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    NS, allreduce_trace_body, annotations, create_job, phase, profiled_replica, profiling_jobs, settings_for,
    start_controller, upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import mwms_tfjob, pytorchjob, tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator

# 100 Mbit/s: the recorded traces all-reduce 8 MiB per ~31 ms step (DDP) and 4.2 MB per ~70 ms step
# (Keras MWMS), which takes 0.3-0.7 s at W = 2..4, so every added worker costs more per example than
# it adds: within limits 2..4 the cheapest is 2
AUTO = dict(leader_election=False, mode="auto", bandwidth="100Mbit", max_workers=4)


def events(emu: KubeEmulator, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in emu.list("events", NS)
            if e.get("involvedObject", {}).get("name") == name]


def traced_rate(body: bytes) -> float:
    """Examples/s of the uploaded one-worker trace itself: batch / mean step wall time."""
    bundle = json.loads(gzip.decompress(body))
    walls = [step["wall_us"] for step in bundle["steps"]]
    return bundle["meta"]["batch_size"] / (sum(walls) / len(walls) / 1e6)


def check_ring_curve(notes: dict[str, str], body: bytes) -> None:
    """The annotations of a prediction by the ring model, checked by invariants (not copied numbers)."""
    assert notes[PREFIX + "model"] == "ring-allreduce"
    curve = json.loads(notes[PREFIX + "curve"])
    assert [p[0] for p in curve] == [1, 2, 3, 4]
    one = curve[0][1]
    # W = 1: no communication, so the trace's own rate (steps drawn at random: within 3 %)
    assert one == pytest.approx(traced_rate(body), rel=0.03)
    for w, thr, low, high in curve:
        assert low <= thr <= high and thr <= w * one * 1.001  # never better than linear


@pytest.mark.parametrize("kind", ["pytorchjobs", "tfjobs"], ids=["pytorchjob", "tfjob-without-ps"])
def test_a_synchronous_job_is_profiled_predicted_by_the_ring_and_resized_in_auto_mode(emu, tmp_path, kind) -> None:
    controller = start_controller(emu, settings_for(tmp_path, **AUTO), canned=False)
    try:
        if kind == "pytorchjobs":
            # 1 Master + 3 Worker = 4 workers; the elastic policy allows 1..3 Worker, so 2..4 workers
            job = pytorchjob("ddp", workers=3, elastic={"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"},
                             annotations={PREFIX + "min-workers": "2"})
            program, field = "pytorch-ddp", "pytorchReplicaSpecs"
        else:
            job = mwms_tfjob("ddp", workers=4, dynamic=True, annotations={PREFIX + "min-workers": "2"})
            program, field = "tf-mwms", "tfReplicaSpecs"
        create_job(emu, job, kind)
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu, kind))[0]
        assert pj["metadata"]["name"] == "ddp-prof-g1" and pj["kind"] == job["kind"]
        assert list(pj["spec"][field]) == (["Master"] if kind == "pytorchjobs" else ["Worker"])
        assert profiled_replica(pj)["replicas"] == 1
        if kind == "pytorchjobs":
            assert pj["spec"]["nprocPerNode"] == "1" and "elasticPolicy" not in pj["spec"]
        body = allreduce_trace_body(program)
        result = upload_as_profiling_pod(emu, pj, body)
        assert result.status == 202, result.message
        wait_for("Predicted", lambda: phase(emu, "ddp", kind) == "Predicted", timeout_s=180)
        notes = annotations(emu, "ddp", kind)
        check_ring_curve(notes, body)
        assert json.loads(notes[PREFIX + "recommendation"])["target"] == 2
        # auto mode: resized to the recommendation, within the policy (min-workers 2)
        resized = wait_for("the resize", lambda: (emu.get(kind, NS, "ddp")["spec"][field]["Worker"]["replicas"] != 3
                                                  if kind == "pytorchjobs" else
                                                  emu.get(kind, NS, "ddp")["spec"][field]["Worker"]["replicas"] != 4)
                           and emu.get(kind, NS, "ddp"))
        # 2 workers: a PyTorchJob's Master counts, so Worker 1; a PS-less TFJob without Chief: Worker 2
        assert resized["spec"][field]["Worker"]["replicas"] == (1 if kind == "pytorchjobs" else 2)
        wait_for("the Resized event", lambda: any(r == "Resized" for _, r, _ in events(emu, "ddp")))
    finally:
        controller.stop()


def test_a_trace_of_the_wrong_kind_is_refused_with_a_warning_naming_both(emu, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        create_job(emu, tfjob("ps-job"), "tfjobs")
        create_job(emu, mwms_tfjob("mwms-job"), "tfjobs")
        create_job(emu, pytorchjob("ddp-job"), "pytorchjobs")
        runs = wait_for("three profiling runs", lambda: {o["metadata"]["labels"][PREFIX + "profiling-for"]: o
                                                          for o in profiling_jobs(emu) + profiling_jobs(emu, "pytorchjobs")}
                        if len(profiling_jobs(emu)) + len(profiling_jobs(emu, "pytorchjobs")) == 3 else None)
        cases = [("ps-job", "pytorch-ddp", "tf-ps"),  # a DDP trace for a TFJob with PS
                 ("mwms-job", "pytorch-ddp", "tf-mwms"),  # ... for a PS-less TFJob
                 ("ddp-job", "tf-mwms", "pytorch-ddp")]  # a Keras trace for a PyTorchJob
        for job, traced, expected in cases:
            refused = upload_as_profiling_pod(emu, runs[job], allreduce_trace_body(traced))
            assert refused.status == 400, (job, refused.status)
            assert traced in refused.message and expected in refused.message, refused.message
            warning = wait_for(f"{job}'s warning", lambda: [m for t, r, m in events(emu, job)
                                                            if (t, r) == ("Warning", "TraceKindMismatch")])
            assert traced in warning[0] and expected in warning[0]
        kinds = {"ps-job": "tfjobs", "mwms-job": "tfjobs", "ddp-job": "pytorchjobs"}
        assert all(phase(emu, job, kinds[job]) == "Profiling" for job in kinds)  # nothing was taken
        # the right kind is still accepted afterwards
        assert upload_as_profiling_pod(emu, runs["mwms-job"], allreduce_trace_body("tf-mwms")).status == 202
    finally:
        controller.stop()


def test_a_ps_trace_for_a_tfjob_without_ps_is_refused(emu, body, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        create_job(emu, mwms_tfjob("mirrored"), "tfjobs")
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        refused = upload_as_profiling_pod(emu, pj, body)  # a real tf.compat.v1 PS trace
        assert refused.status == 400 and "tf-ps" in refused.message and "tf-mwms" in refused.message
    finally:
        controller.stop()


def test_a_job_shape_the_advisor_cannot_handle_gets_a_warning_and_nothing_stops(emu, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        create_job(emu, pytorchjob("multi", nproc_per_node="8"), "pytorchjobs")  # 8 processes per pod
        create_job(emu, pytorchjob("fine"), "pytorchjobs")
        wait_for("Failed", lambda: phase(emu, "multi", "pytorchjobs") == "Failed")
        assert annotations(emu, "multi", "pytorchjobs")[PREFIX + "reason"].startswith("UnsupportedJob: ")
        wait_for("the Warning", lambda: [r for t, r, _ in events(emu, "multi") if (t, r) == ("Warning", "UnsupportedJob")])
        pj = wait_for("the good job's profiling run", lambda: profiling_jobs(emu, "pytorchjobs"))[0]
        assert pj["metadata"]["labels"][PREFIX + "profiling-for"] == "fine"
        assert controller.healthy()[0]
    finally:
        controller.stop()


def test_without_the_pytorchjob_crd_it_is_not_watched_and_said_once(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="advisor.controller.jobs.cluster")
    with KubeEmulator(namespaces=[NS], bookmark_interval_s=0.5, absent=("pytorchjobs.kubeflow.org",)) as emu:
        controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
        try:
            create_job(emu, tfjob("tf"), "tfjobs")
            wait_for("the TFJob's profiling run", lambda: profiling_jobs(emu))
            wait_for("ready", lambda: controller.ready()[0])
            controller.resync()
            assert not [c for c in emu.calls() if c.resource == "pytorchjobs"]
        finally:
            controller.stop()
    said = [r.getMessage() for r in caplog.records if "PyTorchJobs are not watched" in r.getMessage()]
    assert len(said) == 1 and "CRD is not installed" in said[0]


def test_the_setting_switches_pytorchjobs_off(emu, tmp_path) -> None:
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, watch_pytorchjobs=False))
    try:
        create_job(emu, pytorchjob("ignored"), "pytorchjobs")
        create_job(emu, tfjob("tf"), "tfjobs")
        wait_for("the TFJob's profiling run", lambda: profiling_jobs(emu))
        assert annotations(emu, "ignored", "pytorchjobs") == {PREFIX + "enabled": "true"}
        assert not [c for c in emu.calls() if c.resource == "pytorchjobs" and c.verb != "create"]
    finally:
        controller.stop()


def test_every_call_of_a_pytorchjob_flow_is_granted(emu, tmp_path) -> None:
    """As tests/controller/test_rbac_of_real_calls.py for TFJobs: the chart grants each call."""
    controller = start_controller(emu, settings_for(tmp_path, namespaces=[NS]))
    try:
        create_job(emu, pytorchjob("rbac"), "pytorchjobs")
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu, "pytorchjobs"))[0]
        assert upload_as_profiling_pod(emu, pj, allreduce_trace_body("pytorch-ddp")).ok
        wait_for("Predicted", lambda: phase(emu, "rbac", "pytorchjobs") == "Predicted", timeout_s=90)
        calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls()
                 if c.resource]  # discovery requests need no RBAC
    finally:
        controller.stop()
    assert_rbac_covers(calls, render_objects({"config": {"namespaces": [NS]}}, namespace=NS))
    made = {(v, r) for v, _, r, _, _ in calls}
    assert {("list", "pytorchjobs"), ("watch", "pytorchjobs"), ("create", "pytorchjobs"),
            ("patch", "pytorchjobs")} <= made


def test_a_pytorchjob_named_like_a_tfjob_is_told_it_is_not_acted_on(emu, tmp_path) -> None:
    """A TFJob and a PyTorchJob share the key (namespace, name): the TFJob is the one acted on, and
    the PyTorchJob's owner gets one Warning saying so, instead of silence."""
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        create_job(emu, tfjob("twin"), "tfjobs")
        create_job(emu, pytorchjob("twin"), "pytorchjobs")
        create_job(emu, tfjob("quiet"), "tfjobs")
        create_job(emu, pytorchjob("quiet", opted_in=False), "pytorchjobs")  # never asked the advisor anything
        shadowed = emu.get("pytorchjobs", NS, "twin")["metadata"]["uid"]
        not_opted_in = emu.get("pytorchjobs", NS, "quiet")["metadata"]["uid"]

        def warnings_on(uid: str) -> list[dict]:
            return [e for e in emu.list("events", NS) if e.get("involvedObject", {}).get("uid") == uid
                    and (e["type"], e["reason"]) == ("Warning", "NameShadowed")]

        def warnings_on_the_pytorchjob() -> list[dict]:
            return warnings_on(shadowed)

        told = wait_for("the NameShadowed warning", warnings_on_the_pytorchjob)
        assert "TFJob ml/twin" in told[0]["message"] and told[0]["involvedObject"]["kind"] == "PyTorchJob"
        wait_for("the TFJob's profiling run", lambda: profiling_jobs(emu))  # the TFJob is acted on
        create_job(emu, tfjob("other"), "tfjobs")  # more reconciles of other keys, and of "twin" as it changes
        wait_for("the other profiling runs", lambda: len(profiling_jobs(emu)) == 3)  # twin, quiet, other
        assert warnings_on(not_opted_in) == []
        assert len(warnings_on_the_pytorchjob()) == 1 and warnings_on_the_pytorchjob()[0].get("count", 1) == 1
        assert profiling_jobs(emu, "pytorchjobs") == []
        assert annotations(emu, "twin", "pytorchjobs") == pytorchjob("twin")["metadata"]["annotations"]  # untouched
    finally:
        controller.stop()


@pytest.mark.parametrize("case", ["pytorchjob", "tfjob-without-ps", "tfjob-sync-ps"])
def test_a_job_observed_below_its_prediction_refits_its_models_own_values(emu, tmp_path, case) -> None:
    """The closed loop for the models a job kind gets: a PyTorchJob (1 Master + 3 Worker) and a
    PS-less TFJob (4 Worker), both predicted by the ring model, and a TFJob whose trace is of a
    SyncReplicasOptimizer program (2 Worker), predicted by the synchronous PS model; advise mode.
    Each trains 30 % below its prediction at its W, as its pods' counters show (every profiling
    entry point counts with ADVISOR_METRICS_PORT). The controller updates that model's own
    calibration values (the registry's, not another model's), annotates the refit curve, and the
    curve meets the observation; W = 1 stays inside the first curve's interval."""
    from advisor.core.models import registry
    from tests.controller.fake_prometheus import FakePrometheus, Pod
    from tests.controller.test_sync_regime import SYNC_TRACE

    kind, name = ("pytorchjobs", "ddp") if case == "pytorchjob" else ("tfjobs", "job")
    job, workers, body, model = {
        "pytorchjob": (pytorchjob(name, workers=3), 4, allreduce_trace_body("pytorch-ddp"), "ring-allreduce"),
        "tfjob-without-ps": (mwms_tfjob(name, workers=4), 4, allreduce_trace_body("tf-mwms"), "ring-allreduce"),
        "tfjob-sync-ps": (tfjob(name, workers=2), 2, SYNC_TRACE.read_bytes(), registry.DEFAULT_SYNC_MODEL),
    }[case]
    calibration = {c.name for c in registry.get(model).calibration}
    with FakePrometheus() as prom:
        settings = settings_for(tmp_path, leader_election=False, bandwidth="100Mbit", max_workers=4,
                                refit_enabled=True, refit_prometheus_url=prom.url, refit_min_observation_s=1,
                                refit_interval_s=1, refit_tolerance=0.1)
        controller = start_controller(emu, settings, canned=False)
        try:
            create_job(emu, job, kind)
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu, kind))[0]
            assert upload_as_profiling_pod(emu, pj, body).status == 202
            wait_for("Predicted", lambda: phase(emu, name, kind) == "Predicted", timeout_s=180)
            notes = annotations(emu, name, kind)
            assert notes[PREFIX + "model"] == model
            first = json.loads(notes[PREFIX + "curve"])
            observed = 0.7 * first[workers - 1][1]
            emu.patch(kind, NS, name, {"status": {"startTime": "2026-01-01T00:00:00Z", "conditions": [
                {"type": "Running", "status": "True", "reason": "Running"}]}}, subresource="status")
            prom.jobs[(NS, name)] = [Pod(f"{name}-pod-{i}", observed / workers, 12) for i in range(workers)]
            notes = wait_for("the refit curve", lambda: (
                annotations(emu, name, kind).get(PREFIX + "curve-source") == "refit"
                and annotations(emu, name, kind)), timeout_s=300)
            refit = json.loads(notes[PREFIX + "refit"])
            [point] = refit["points"]
            assert point["workers"] == workers and point["observed"] == pytest.approx(observed, abs=1e-3)
            assert set(refit["parameters"]) == calibration
            curve = json.loads(notes[PREFIX + "curve"])
            assert abs(curve[workers - 1][1] / observed - 1) < 0.1  # the first curve was 43 % above it
            assert first[0][2] <= curve[0][1] <= first[0][3]
        finally:
            controller.stop()
