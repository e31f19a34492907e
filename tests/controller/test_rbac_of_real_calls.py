"""The chart's RBAC grants every Kubernetes API call the controller really makes.

The controller runs a whole job (profiling run, token Secret, events, annotations, lease,
garbage collection) against the API emulator, which logs each request as RBAC sees it; the
chart is rendered with the real Helm engine for the same settings, and every logged call must be
granted to the controller's ServiceAccount (``tests/deploy/rbac_check.py``). The other half,
"nothing more", is checked against the declared list in ``tests/deploy/test_rbac.py``; here a
declared call the controller never made is reported too, for the calls this flow must make.
"""

from __future__ import annotations

import pytest

from tests.controller.harness import NS, create_tfjob, phase, profiling_jobs, settings_for, start_controller, \
    trace_body, upload_as_profiling_pod, wait_for
from tests.controller.tfjobs import tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator


@pytest.mark.parametrize("namespaces", [[NS], []], ids=["namespaced", "cluster-wide"])
def test_every_call_of_a_whole_flow_is_granted(namespaces: list[str], tmp_path) -> None:
    with KubeEmulator(namespaces=[NS]) as emu:
        controller = start_controller(emu, settings_for(tmp_path, namespaces=namespaces))
        try:
            create_tfjob(emu, tfjob("rbac"))  # the one call not the controller's: also a verb it needs
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
            assert upload_as_profiling_pod(emu, pj, trace_body()).ok
            wait_for("Predicted", lambda: phase(emu, "rbac") == "Predicted")
            controller.collect_garbage()
            calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls()
                     if c.resource]  # discovery requests need no RBAC
        finally:
            controller.stop()
    objects = render_objects({"config": {"namespaces": namespaces}}, namespace=NS)
    assert_rbac_covers(calls, objects)
    made = {(v, r) for v, _, r, _, _ in calls}
    # The flow must have exercised the rules that matter, or this test would prove little.
    assert {("watch", "tfjobs"), ("create", "tfjobs"), ("patch", "tfjobs"), ("create", "secrets"),
            ("list", "secrets"), ("create", "events"), ("create", "leases"), ("update", "leases")} <= made
