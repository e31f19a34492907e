"""Reconciles that see a lagging informer cache: the states a watch delivers late must not look new.

The informer's cache trails the API server by however long the MODIFIED event takes; a
reconcile woken by the controller's own write can see the object as it stood between two of the
controller's patches. These tests pin the cache to exactly such an intermediate state (taken from
the emulator right after each patch) and reconcile again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from advisor.controller.kube.client import Kube
from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.reconcile import Reconciler
from advisor.controller.state.store import Store
from tests.controller.harness import NS, profiling_jobs, settings_for
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=[NS]) as e:
        yield e


class SnapshotKube:
    """The real adapter; after each patch of a TFJob, the object as the server then had it."""

    def __init__(self, kube: Kube, emu: KubeEmulator) -> None:
        self._kube, self._emu = kube, emu
        self.after_patch: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)

    def patch_tfjob(self, namespace: str, name: str, patch: Mapping[str, Any], **kwargs: Any) -> Any:
        out = self._kube.patch_tfjob(namespace, name, patch, **kwargs)
        self.after_patch.append(self._emu.get("tfjobs", namespace, name))
        return out


class NoPredictions:
    backend = "none"

    def submit(self, *args: Any) -> bool:
        raise AssertionError("no trace was uploaded: nothing to predict")

    def running(self, key: str) -> bool:
        return False


def test_a_cache_between_the_suspend_and_the_annotation_patch_starts_no_second_run(
        emu: KubeEmulator, tmp_path: Path) -> None:
    """``initial`` mode, a job created unsuspended: holding it bumps its generation."""
    emu.seed(tfjob("race", workers=2))
    kube = SnapshotKube(Kube(kubernetes.client.ApiClient(emu.configuration())), emu)
    pinned: dict[str, Any] = {}

    def cache(namespace: str, name: str) -> Mapping[str, Any] | None:
        return pinned.get(name) or emu.get("tfjobs", namespace, name)

    store = Store(tmp_path / "advisor.db")
    reconciler = Reconciler(settings=settings_for(tmp_path, mode="initial"), kube=kube, cache=cache, store=store,
                            predictor=NoPredictions(), metrics=Metrics(), enqueue_after=lambda key, delay: None)
    reconciler.reconcile((NS, "race"))
    assert len(profiling_jobs(emu)) == 1 and len(kube.after_patch) >= 1
    held = kube.after_patch[0]  # right after the first patch: suspended, generation bumped
    assert held["spec"]["runPolicy"]["suspend"] is True and held["metadata"]["generation"] == 2
    for state in kube.after_patch:  # every intermediate state the watch may deliver late
        pinned["race"] = state
        reconciler.reconcile((NS, "race"))
    assert [j["metadata"]["name"] for j in profiling_jobs(emu)] == ["race-prof-g1"]
    assert reconciler.metrics.reconcile_errors.labels("internal")._value.get() == 0


def test_a_cache_behind_the_controllers_own_writes_does_not_repeat_an_event(
        emu: KubeEmulator, tmp_path: Path) -> None:
    """A failed profiling run in ``initial`` mode: the release and the phase are two patches; a
    reconcile that sees the job between them (or before both) must not announce the failure again."""
    emu.seed(tfjob("flop", workers=2))
    kube = SnapshotKube(Kube(kubernetes.client.ApiClient(emu.configuration())), emu)
    pinned: dict[str, Any] = {}

    def cache(namespace: str, name: str) -> Mapping[str, Any] | None:
        return pinned.get(name) or emu.get("tfjobs", namespace, name)

    reconciler = Reconciler(settings=settings_for(tmp_path, mode="initial", profiling_max_attempts=1), kube=kube,
                            cache=cache, store=Store(tmp_path / "advisor.db"), predictor=NoPredictions(),
                            metrics=Metrics(), enqueue_after=lambda key, delay: None)
    reconciler.reconcile((NS, "flop"))
    (run,) = profiling_jobs(emu)
    failed = {"type": "Failed", "status": "True", "reason": "TFJobFailed", "message": "worker 0 OOMKilled"}
    emu.patch("tfjobs", NS, run["metadata"]["name"], {"status": {"conditions": [failed]}}, subresource="status")
    before_failure = emu.get("tfjobs", NS, "flop")
    kube.after_patch.clear()
    reconciler.reconcile((NS, "flop"))
    assert len(kube.after_patch) == 2  # the release, then the phase
    for state in [before_failure, *kube.after_patch]:
        pinned["flop"] = state
        reconciler.reconcile((NS, "flop"))
    warnings = [e for e in emu.list("events", NS)
                if e["involvedObject"]["name"] == "flop" and e["reason"] == "ProfilingFailed"]
    assert len(warnings) == 1
    assert emu.get("tfjobs", NS, "flop")["spec"]["runPolicy"]["suspend"] is False


def test_a_cache_behind_a_new_generation_neither_revives_nor_judges_the_superseded_run(
        emu: KubeEmulator, tmp_path: Path) -> None:
    """Another leader's cache (or this one's, before its writes come back) may still show the job
    as it was before its templates changed: the older run is superseded, not a failure to report."""
    emu.seed(tfjob("moving", workers=2))
    kube = Kube(kubernetes.client.ApiClient(emu.configuration()))
    pinned: dict[str, Any] = {}

    def cache(namespace: str, name: str) -> Mapping[str, Any] | None:
        return pinned.get(name) or emu.get("tfjobs", namespace, name)

    store = Store(tmp_path / "advisor.db")
    reconciler = Reconciler(settings=settings_for(tmp_path), kube=kube, cache=cache, store=store,
                            predictor=NoPredictions(), metrics=Metrics(), enqueue_after=lambda key, delay: None)
    reconciler.reconcile((NS, "moving"))
    before = emu.get("tfjobs", NS, "moving")
    container = {"name": "tensorflow", "image": "example.org/train:2.0"}
    emu.patch("tfjobs", NS, "moving", {"spec": {"tfReplicaSpecs": {"PS": {"template": {"spec": {
        "containers": [container]}}}}}})
    reconciler.reconcile((NS, "moving"))
    assert [(r.generation, r.state) for r in store.runs()] == [(1, "superseded"), (2, "profiling")]
    pinned["moving"] = before
    reconciler.reconcile((NS, "moving"))
    assert [(r.generation, r.state) for r in store.runs()] == [(1, "superseded"), (2, "profiling")]
    notes = emu.get("tfjobs", NS, "moving")["metadata"]["annotations"]
    assert notes["training-advisor.io/phase"] == "Profiling"
    assert notes["training-advisor.io/profiling-run"] == "moving-prof-g2"
    # the superseded run was deleted when generation 2 started, and nothing made it again
    assert sorted(j["metadata"]["name"] for j in profiling_jobs(emu)) == ["moving-prof-g2"]
    assert reconciler.metrics.reconcile_errors.labels("internal")._value.get() == 0
    store.close()
