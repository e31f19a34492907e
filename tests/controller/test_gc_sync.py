"""Garbage collection and reconcile wait for the TFJob cache to sync.

A job missing from a cache that is not filled yet (its list is still failing) is not a gone job:
a sweep then must delete nothing, or the live job's run goes and the job gets a second profiling
run for the same generation.
"""

from __future__ import annotations

import time

from advisor.controller.pipeline.gc import collect_garbage
from advisor.controller.jobs.tfjob import PREFIX
from tests.controller.harness import (
    NS, create_tfjob, phase, profiling_jobs, settings_for, start_controller, trace_body, upload_as_profiling_pod,
    reconciles, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator

YEAR_S = 365 * 86400.0


def test_a_sweep_before_the_tfjob_list_succeeds_deletes_nothing(tmp_path) -> None:
    settings = settings_for(tmp_path, leader_election=False)
    with KubeEmulator(namespaces=[NS], bookmark_interval_s=0.5) as emu:
        first = start_controller(emu, settings)
        try:
            job = create_tfjob(emu, tfjob("live"))
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
            wait_for("Profiling", lambda: phase(emu, "live") == "Profiling")
        finally:
            first.stop()
        uid = job["metadata"]["uid"]
        # The restarted controller cannot list TFJobs at first (the informer backs off >= 0.8 s,
        # then >= 1.6 s, then >= 3.2 s: several seconds unsynced).
        emu.fail_next(verb="list", resource="tfjobs", status=500, times=3)
        second = start_controller(emu, settings)
        try:
            wait_for("a failed TFJob list", lambda: second.informer.stats.errors >= 1)
            second.queue.add((NS, "live"))  # e.g. an upload's wake-up: it waits for the cache
            # a sweep a year on, when every run is old enough to go if its job were gone
            deleted = collect_garbage(second.kube, second.informer, second.store, second.metrics,
                                      now=time.time() + YEAR_S, max_age_s=1, namespaces=[NS])
            second.collect_garbage()
            assert not second.informer.has_synced(), "the list succeeded too early: the sweep proved nothing"
            assert deleted == 0
            assert second.store.run(uid, 1) is not None  # the live job's run is kept
            assert emu.get("tfjobs", NS, pj["metadata"]["name"]) is not None
            assert emu.list("tfjobs", NS, label_selector=f"{PREFIX}role=profiling")
            assert reconciles(second) == 0
            wait_for("the cache to sync", second.jobs.has_synced, timeout_s=60)
            # the job goes on with its one profiling run: the first controller's token still works
            assert upload_as_profiling_pod(emu, pj, trace_body()).ok
            wait_for("Predicted", lambda: phase(emu, "live") == "Predicted", timeout_s=60)
            assert len(emu.calls(verb="create", resource="tfjobs")) == 2  # the user's job and one profiling run
        finally:
            second.stop()
