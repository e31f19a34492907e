"""The chart's RBAC grants every Kubernetes API call the controller really makes.

The controller runs a whole job (profiling run, profile record, events, annotations, lease,
garbage collection; with the job backend also the prediction Job, its token Secret and the
looks at its status and pods) against the API emulator, which logs each request as RBAC sees it;
the chart is rendered with the real Helm engine for the same settings, and every logged call must
be granted to the controller's ServiceAccount (``tests/deploy/rbac_check.py``). The other half,
"nothing more", is checked against the declared list in ``tests/deploy/test_rbac.py``; here the
flow must also have made the calls that matter, or it would prove little.
"""

from __future__ import annotations

import pytest

from tests.controller.harness import NS, create_tfjob, job_settings_for, phase, profiling_jobs, settings_for, \
    start_controller, trace_body, upload_as_profiling_pod, wait_for
from tests.controller.tfjobs import tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator
from tests.kube_emulator.job_runner import JobRunner

ORPHAN_JOB = {  # a prediction Job of a lost store, for garbage collection to delete
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "advisor-predict-0123456789abcdef01234567-1", "namespace": NS,
                 "creationTimestamp": "2020-01-01T00:00:00Z", "labels": {"training-advisor.io/role": "prediction"}},
    "spec": {"template": {"spec": {"containers": [{"name": "predict", "image": "x"}], "restartPolicy": "Never"}}},
}


@pytest.mark.parametrize(("namespaces", "backend"), [([NS], "process"), ([], "process"), ([NS], "job"), ([], "job")],
                         ids=["namespaced", "cluster-wide", "namespaced-job-backend", "cluster-wide-job-backend"])
def test_every_call_of_a_whole_flow_is_granted(namespaces: list[str], backend: str, tmp_path) -> None:
    with KubeEmulator(namespaces=[NS]) as emu, JobRunner(emu, NS):
        if backend == "job":
            settings = job_settings_for(tmp_path, namespaces=namespaces, leader_election=True, gc_period_s=60)
            emu.seed(ORPHAN_JOB)
        else:
            settings = settings_for(tmp_path, namespaces=namespaces)
        controller = start_controller(emu, settings)
        try:
            create_tfjob(emu, tfjob("rbac"))  # the one call not the controller's: also a verb it needs
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
            assert upload_as_profiling_pod(emu, pj, trace_body()).ok
            wait_for("Predicted", lambda: phase(emu, "rbac") == "Predicted", timeout_s=90)
            controller.collect_garbage()
            calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls()
                     if c.resource]  # discovery requests need no RBAC
        finally:
            controller.stop()
    objects = render_objects({"config": {"namespaces": namespaces, "prediction_backend": backend}}, namespace=NS)
    assert_rbac_covers(calls, objects)
    made = {(v, r) for v, _, r, _, _ in calls}
    assert {("watch", "tfjobs"), ("create", "tfjobs"), ("patch", "tfjobs"), ("create", "configmaps"),
            ("create", "events"), ("create", "leases"), ("update", "leases")} <= made
    # no Secret in a user's namespace: the profiling run's token is derived, not stored
    assert not [c for c in calls if c[2] == "secrets" and c[4] == NS and backend == "process"]
    if backend == "job":  # adopting a Job (get) is in test_job_backend's restart test
        assert {("create", "jobs"), ("list", "jobs"), ("delete", "jobs"), ("list", "pods")} <= made
        assert ("create", "", "secrets", "", NS) in calls
