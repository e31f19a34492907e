"""Cluster mode's state without a cluster (pipeline/allocation.py): the debounce, the shares it
keeps, what a queue that cannot be read does, and a new leader keeping the allocation in force.

The jobs are predicted with the canned curve of ``harness.canned_prediction`` (100, 190, 260, 300
examples/s at W = 1..4; a worker and a PS at 1 per hour): in one-worker units its goodput is 1,
1.9, 2.6, 3.0, and a job alone is cheapest at W = 3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from advisor.controller.jobs.kinds import parse_job
from advisor.controller.pipeline.allocation import ALLOCATION_KEY, RETRY_S, ClusterAllocator, Share
from advisor.controller.pipeline.policy import Limits
from advisor.controller.settings import ControllerSettings, Mode, load_settings
from advisor.controller.web.metrics import Metrics
from advisor.core.cost import Prices
from advisor.errors import KubeForbidden, KubeNotFound, KubeUnavailable
from tests.controller.harness import canned_prediction
from tests.controller.tfjobs import tfjob, with_uid

PREDICTION = json.loads(canned_prediction({}, {}))
PRICES = Prices(1.0, 1.0)
LIMITS = Limits(1, 4, Mode.ADVISE)
ALLOCATED = "training-advisor.io/allocated-workers"


class FakeKube:
    """The two Kueue reads and events; ``fail`` makes every read raise that error."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.events: list[tuple[str, str, str]] = []
        self.reads = 0

    def get_localqueue(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        if self.fail is not None:
            raise self.fail
        if name != "q":
            raise KubeNotFound(f"get LocalQueue {namespace}/{name}: not found (404 NotFound)", status=404)
        return {"metadata": {"name": "q", "namespace": namespace}, "spec": {"clusterQueue": "cq"}}

    def get_clusterqueue(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"resourceGroups": [
            {"flavors": [{"name": "f", "resources": [{"name": "pods", "nominalQuota": 6}]}]}]}}

    def emit_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


class Rig:
    def __init__(self, kube: FakeKube | None = None, **settings: Any) -> None:
        self.settings: ControllerSettings = load_settings(**{"cluster_mode": True, **settings})
        self.kube = kube or FakeKube()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.enqueued: list[tuple[tuple[str, str], float]] = []
        self.allocator = ClusterAllocator(settings=lambda: self.settings, kube=self.kube,
                                          cache=lambda ns, name: self.objects.get((ns, name)), metrics=Metrics(),
                                          enqueue_after=lambda key, delay: self.enqueued.append((key, delay)))

    def observe(self, obj: dict[str, Any]) -> Share:
        obj = with_uid(obj, uid=f"uid-{obj['metadata']['name']}")
        self.objects[("ml", obj["metadata"]["name"])] = obj
        return self.allocator.observe(parse_job(obj), PREDICTION, PRICES, LIMITS)

    def runs_asked(self) -> int:
        return sum(1 for key, _ in self.enqueued if key == ALLOCATION_KEY)

    def share(self, name: str) -> Share:
        return self.observe(self.objects[("ml", name)])


def queued(obj: dict[str, Any], queue: str = "q") -> dict[str, Any]:
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return obj


def test_changes_before_the_reallocation_ask_for_one_and_an_unchanged_job_for_none() -> None:
    rig = Rig(cluster_capacity={"workers": 4}, cluster_debounce_s=7)
    assert rig.observe(tfjob("a")).status == "pending"
    rig.observe(tfjob("b"))
    rig.observe(tfjob("c", annotations={"training-advisor.io/priority": "3"}))
    assert rig.enqueued == [(ALLOCATION_KEY, 7.0)]  # three arrivals, one reallocation after the debounce
    rig.allocator.run()
    assert rig.runs_asked() == 1
    # the run woke each job to write its share; their next reconcile changes nothing: no new run
    assert sorted(k for k, _ in rig.enqueued if k != ALLOCATION_KEY) == [("ml", "a"), ("ml", "b"), ("ml", "c")]
    for name in ("a", "b", "c"):
        rig.share(name)
    assert rig.runs_asked() == 1
    # c (priority 3) gains 3, 2.7, 2.1 per worker: its 3 first; then a 0->1 (1, before b by name)
    assert {n: rig.share(n).workers for n in "abc"} == {"a": 1, "b": 0, "c": 3}
    assert rig.share("b").status == "waiting"
    rig.allocator.forget(("ml", "c"))  # c finished: a reallocation
    assert rig.runs_asked() == 2


def test_a_new_leader_keeps_the_allocation_in_force_unless_a_move_gains_enough() -> None:
    # Capacity 4 for two jobs of the canned curve: fresh, a = b = 2 (goodput 1.9 + 1.9 = 3.8).
    # In force (their annotations): a = 3, b = 1, goodput 2.6 + 1 = 3.6. 3.8 > 1.05 x 3.6 = 3.78
    # moves them; 3.8 <= 1.1 x 3.6 = 3.96 keeps them.
    for stability, expected in ((0.05, (2, 2)), (0.1, (3, 1))):
        rig = Rig(cluster_capacity={"workers": 4}, cluster_stability=stability)
        rig.observe(tfjob("a", annotations={ALLOCATED: "3"}))
        rig.observe(tfjob("b", annotations={ALLOCATED: "1"}))
        rig.allocator.run()
        assert (rig.share("a").workers, rig.share("b").workers) == expected
    assert rig.share("a").reason.endswith("previous allocation kept (a move would gain too little)")


def test_a_queue_rbac_refuses_leaves_its_jobs_sized_alone_with_one_warning_each() -> None:
    rig = Rig(FakeKube(fail=KubeForbidden("get LocalQueue ml/q: forbidden (403 Forbidden)", status=403)))
    rig.observe(queued(tfjob("a")))
    for _ in range(2):
        rig.allocator.run()
    share = rig.share("a")
    assert share.status == "per-job" and share.per_job and share.workers is None
    assert "forbidden" in share.reason and "needs get on localqueues and clusterqueues" in share.reason
    assert share.annotations()[ALLOCATED] is None
    assert [(n, r) for n, r, _ in rig.kube.events] == [("a", "QuotaUnavailable")]


def test_an_api_server_that_does_not_answer_keeps_the_shares_in_force_and_tries_again() -> None:
    rig = Rig(cluster_debounce_s=0)
    rig.observe(queued(tfjob("a")))
    rig.allocator.run()
    assert rig.share("a").workers == 3  # 6 pods: a PS and 3 workers fit (its own optimum)
    rig.kube.fail = KubeUnavailable("get LocalQueue ml/q: connection refused")
    asked = rig.runs_asked()
    rig.allocator.run()
    assert rig.share("a").workers == 3 and rig.share("a").status == "placed"
    assert rig.runs_asked() == asked + 1 and not rig.kube.events
    assert rig.enqueued[-1] == (ALLOCATION_KEY, RETRY_S)  # not at once, even with no debounce


def test_without_a_capacity_a_job_without_a_queue_is_sized_alone_and_no_event_is_sent() -> None:
    rig = Rig()  # no cluster_capacity
    rig.observe(tfjob("a"))
    rig.allocator.run()
    share = rig.share("a")
    assert share.status == "per-job" and "cluster_capacity is empty" in share.reason
    assert not rig.kube.events and rig.kube.reads == 0


def test_cluster_mode_off_removes_what_it_wrote() -> None:
    rig = Rig(cluster_mode=False)
    share = rig.observe(tfjob("a"))
    assert share.per_job and share.annotations() == {"training-advisor.io/allocation": None, ALLOCATED: None}
    assert rig.enqueued == []
