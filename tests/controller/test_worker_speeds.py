"""Worker speeds from the nodes (setting ``node_speeds``): the controller reads where a job's
workers run, predicts with per-worker speeds and link rates, and says which it used.

Two node types, as a cluster labels them (``node.kubernetes.io/instance-type``): ``fast`` (speed
2, 10 Gbit/s) and ``slow`` (speed 1, 1 Gbit/s), and one node without the label. Every profiling
run traces on a fast node, so a worker on a fast node runs at 2/2 = 1.0 (as traced) and one on a
slow node at 1/2 = 0.5. The predictions are the real simulation (not canned), so the curves must
show it: with the first worker on a fast node in every job, W = 1 is the same prediction for all
of them; at W = 2 a job whose second worker is slow cannot be faster than one whose both are fast.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from advisor.controller.app import Controller
from advisor.controller.jobs.tfjob import PREFIX
from advisor.controller.kube.client import Kube
from advisor.controller.settings import SettingsError, load_settings
from tests.controller.harness import (
    FAST_LEASE, NS, annotations, create_tfjob, phase, settings_for, start_controller, upload_as_profiling_pod,
    wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.deploy.helm_render import render_objects
from tests.deploy.rbac_check import assert_rbac_covers
from tests.kube_emulator import KubeEmulator

TYPE = "node.kubernetes.io/instance-type"
NODE_SPEEDS = {TYPE: {"fast": {"speed": 2.0, "link": "10Gbit/s"}, "slow": {"speed": 1.0, "link": "1Gbit/s"}}}
NODES = {"fast-1": "fast", "fast-2": "fast", "slow-1": "slow", "plain-1": None}


def node(name: str, kind: str | None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **({TYPE: kind} if kind else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(job: str, replica: str, index: int, on: str) -> dict[str, Any]:
    """A pod as the training operator makes it (its labels), scheduled on node ``on``."""
    labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": replica,
              "training.kubeflow.org/replica-index": str(index)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-{replica}-{index}", "namespace": NS, "labels": labels},
            "spec": {"nodeName": on, "containers": [{"name": "tensorflow", "image": "example.org/train:1.0"}]},
            "status": {"phase": "Running"}}


def curve(emu: KubeEmulator, name: str) -> dict[int, float]:
    return {int(w): thr for w, thr, _, _ in json.loads(annotations(emu, name)[PREFIX + "curve"])}


def test_two_node_types_give_per_worker_speeds_and_links(emu: KubeEmulator, body: bytes, tmp_path: Path) -> None:
    for name, kind in NODES.items():
        emu.seed(node(name, kind))
    settings = settings_for(tmp_path, leader_election=False, max_workers=3, node_speeds=NODE_SPEEDS)
    controller = start_controller(emu, settings, canned=False)
    placements = {"even": ("fast-1", "fast-2"), "mixed": ("fast-1", "slow-1"), "unlabeled": ("fast-1", "plain-1")}
    try:
        for job, nodes in placements.items():
            create_tfjob(emu, tfjob(job, workers=2))
            emu.seed(pod(job, "ps", 0, "plain-1"))  # not a worker: never counted
            for index, on in enumerate(nodes):
                emu.seed(pod(job, "worker", index, on))
        for job in placements:
            run = wait_for(f"{job}'s profiling run", lambda job=job: emu.get("tfjobs", NS, f"{job}-prof-g1"))
            emu.seed(pod(run["metadata"]["name"], "worker", 0, "fast-2"))  # the traced worker, on a fast node
            assert upload_as_profiling_pod(emu, run, body).status == 202
        for job in placements:
            wait_for(f"{job} Predicted", lambda job=job: phase(emu, job) == "Predicted", timeout_s=180)

        speeds = {job: json.loads(annotations(emu, job)[PREFIX + "worker-speeds"]) for job in placements}
        traced = {"speed": 2.0, "by": f"{TYPE}=fast", "run": "even-prof-g1"}
        assert speeds["even"] == {"traced": traced, "links": True, "workers": [
            {"speed": 1.0, "link_bps": 10e9, "by": f"{TYPE}=fast"}, {"speed": 1.0, "link_bps": 10e9, "by": f"{TYPE}=fast"}]}
        assert speeds["mixed"]["workers"] == [{"speed": 1.0, "link_bps": 10e9, "by": f"{TYPE}=fast"},
                                              {"speed": 0.5, "link_bps": 1e9, "by": f"{TYPE}=slow"}]
        assert speeds["mixed"]["links"] is True
        # a node without the label counts as speed 1 (1/2 of the traced fast node), and says so;
        # its link is unknown, so no worker gets a link of its own (the job's rate for all)
        (first, second) = speeds["unlabeled"]["workers"]
        assert (second["speed"], second["link_bps"]) == (0.5, None)
        assert second["by"] == "no label of node_speeds on node plain-1: speed 1"
        assert speeds["unlabeled"]["links"] is False

        curves = {job: curve(emu, job) for job in placements}
        # W = 1: the first worker, on a fast node, everywhere; same link where links are given
        assert curves["mixed"][1] == pytest.approx(curves["even"][1], rel=1e-9)
        # W = 2: a worker at half speed on a tenth of the link cannot make the job faster
        assert curves["mixed"][2] < curves["even"][2]
        assert curves["unlabeled"][2] < curves["unlabeled"][1] * 2
        calls = [(c.verb, c.group, c.resource, c.subresource, c.namespace) for c in emu.calls() if c.resource]
    finally:
        controller.stop()
    assert {("list", "pods"), ("get", "nodes")} <= {(v, r) for v, _, r, _, _ in calls}
    # every node a worker or traced pod runs on was read, each about once (cached, not once per
    # reconcile: two reconcile threads may both miss the cache at the same moment)
    reads = [c.name for c in emu.calls(verb="get", resource="nodes")]
    assert set(reads) == set(NODES) and len(reads) <= 2 * len(NODES)
    objects = render_objects({"config": {"namespaces": [NS], "node_speeds": NODE_SPEEDS}}, namespace=NS)
    assert_rbac_covers(calls, objects)


@pytest.mark.parametrize(("entry", "complaint"), [
    ({"speed": -1.0}, "node_speeds.node.kubernetes.io/instance-type.p2.speed: Input should be greater than 0"),
    ({"speed": 0.5, "link": "10Gbps/s"}, "cannot read bandwidth '10Gbps/s'"),
    ({"speed": 0.5, "link": "1 furlong"}, "cannot read bandwidth '1 furlong'"),
])
def test_a_bad_speed_map_is_a_settings_error_naming_the_entry(entry: dict[str, Any], complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint.replace(".", r"\.").replace("(", r"\(")):
        load_settings(node_speeds={TYPE: {"p2": entry}})


def test_a_bad_speed_map_in_a_reload_keeps_the_old_settings(emu: KubeEmulator, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "advisor.yaml"
    base = settings_for(tmp_path, leader_election=False, node_speeds=NODE_SPEEDS).model_dump(mode="json")
    base["ingest_key"] = "test-ingest-key-shared-by-replicas"
    config.write_text(yaml.safe_dump(base))
    controller = Controller(load_settings(config), Kube(kubernetes.client.ApiClient(emu.configuration())),
                            settings_file=config, lease_timing=FAST_LEASE)
    try:
        bad = {TYPE: {**NODE_SPEEDS[TYPE], "slow": {"speed": -0.5, "link": "1Gbit/s"}}}
        config.write_text(yaml.safe_dump({**base, "node_speeds": bad, "profiling_steps": 250}))
        with caplog.at_level(logging.ERROR, logger="advisor.controller.app"):
            controller.reload_settings()
        assert controller.settings.node_speeds[TYPE]["slow"].speed == 1.0  # the old map, whole
        assert controller.settings.profiling_steps == base["profiling_steps"]  # nothing of the file applied
        (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert "settings not reloaded" in error and f"node_speeds.{TYPE}.slow.speed" in error
    finally:
        controller.stop()
