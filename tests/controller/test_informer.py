"""The TFJob informer against the emulator over HTTP: list-then-watch, relist on 410 without losing
anything, backoff on errors, resumption after timeouts and bookmarks, bad objects and bad callbacks
survived. Sleeps are injected (recorded, not slept) so no test waits on a backoff."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from advisor.controller.kube.informer import Backoff, Informer
from advisor.controller.kube.client import Kube
from tests.kube_emulator import KubeEmulator

TFJOB = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}


def tfjob(name: str, namespace: str = "ml", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {**TFJOB, "metadata": meta, "spec": {}}


def wait_for(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


class Recorder:
    """on_event that keeps (type, namespace/name) pairs; optionally raises for one name."""

    def __init__(self, explode_on: str | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.explode_on = explode_on

    def __call__(self, type_: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self.lock:
            self.seen.append((type_, f"{meta['namespace']}/{meta['name']}"))
        if meta["name"] == self.explode_on:
            raise RuntimeError("a consumer bug")

    def events(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.seen)


class Sleeps:
    """Injected sleep: records each delay; blocks while ``gate`` is closed (a disconnection)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.gate.wait(5)
        time.sleep(0.001)


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=["ml", "team", "other"], bookmark_interval_s=0.1) as server:
        yield server


@pytest.fixture
def kube(emu: KubeEmulator) -> Kube:
    return Kube(client.ApiClient(emu.configuration()), request_timeout_s=5)


@contextmanager
def running(informer: Informer) -> Iterator[Informer]:
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(informer.has_synced)
        yield informer
    finally:
        stop.set()
        thread.join(3)
        assert not thread.is_alive(), "run() must return promptly after stop"


def test_lists_then_watches(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a"))
    emu.seed(tfjob("b", "team"))
    rec = Recorder()
    with running(Informer(kube, None, rec, sleep=Sleeps())) as inf:
        assert rec.events() == [("ADDED", "ml/a"), ("ADDED", "team/b")]
        assert inf.keys() == [("ml", "a"), ("team", "b")]
        wait_for(lambda: emu.open_watches("tfjobs") == 1)
        emu.patch("tfjobs", "ml", "a", {"spec": {"x": 1}})
        emu.delete("tfjobs", "team", "b")
        wait_for(lambda: len(rec.events()) == 4)
        assert rec.events()[2:] == [("MODIFIED", "ml/a"), ("DELETED", "team/b")]
        cached = inf.get("ml", "a")
        assert cached is not None and cached["spec"] == {"x": 1} and inf.get("team", "b") is None


def test_relists_on_410_and_synthesizes_deletions(emu: KubeEmulator, kube: Kube) -> None:
    for name in ("a", "b"):
        emu.seed(tfjob(name))
    rec, sleeps, restarts = Recorder(), Sleeps(), []
    with running(Informer(kube, ["ml"], rec, sleep=sleeps, on_restart=restarts.append)) as inf:
        wait_for(lambda: emu.open_watches("tfjobs") == 1)
        sleeps.gate.clear()  # the informer will be stuck in its backoff: "disconnected"
        emu.close_watches()  # apiserver restart
        wait_for(lambda: len(sleeps.delays) == 1)
        emu.delete("tfjobs", "ml", "b")
        emu.patch("tfjobs", "ml", "a", {"spec": {"x": 1}})
        emu.seed(tfjob("c"))
        emu.expire_history()  # the restart lost the history the informer would resume from
        sleeps.gate.set()
        wait_for(lambda: inf.stats.relists_after_gone == 1 and len(rec.events()) >= 5)
        # relist: ADDED for what exists now, DELETED (last known state) for what vanished meanwhile
        assert sorted(rec.events()[2:]) == [("ADDED", "ml/a"), ("ADDED", "ml/c"), ("DELETED", "ml/b")]
        assert inf.keys() == [("ml", "a"), ("ml", "c")]
        cached, live = inf.get("ml", "a"), emu.get("tfjobs", "ml", "a")
        assert cached is not None and live is not None
        assert cached["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]  # nothing lost
        emu.seed(tfjob("d"))  # and it watches again afterwards
        wait_for(lambda: ("ADDED", "ml/d") in rec.events())
        assert inf.stats.lists == 2
        # the dropped connection (an error), then the 410 on resuming: each reported once, in order
        assert restarts == ["error", "expired"]


def test_backoff_grows_with_jitter_and_resets_after_success(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a"))
    emu.fail_next(verb="list", status=500, times=3)
    sleeps, restarts = Sleeps(), []
    backoff = Backoff(initial_s=0.8, max_s=30.0, factor=2.0, jitter=1.0)
    with running(Informer(kube, ["ml"], Recorder(), backoff=backoff, sleep=sleeps, rng=random.Random(1),
                          on_restart=restarts.append)) as inf:
        first = list(sleeps.delays)
        # retry n waits 0.8 * 2**(n-1) * (1 + U[0,1)): inside [base, 2 base), so each longer than the last
        assert len(first) == 3
        for n, delay in enumerate(first):
            assert 0.8 * 2**n <= delay < 1.6 * 2**n
        wait_for(lambda: emu.open_watches("tfjobs") == 1)
        emu.fail_next(verb="watch", status=503, times=1)
        emu.close_watches()  # the drop is failure 1 after a success, the 503 failure 2
        wait_for(lambda: len(sleeps.delays) == 5 and emu.open_watches("tfjobs") == 1)
        again = sleeps.delays[3:]
        assert 0.8 <= again[0] < 1.6 and 1.6 <= again[1] < 3.2  # started over from 0.8 s
        assert inf.stats.errors == 5 and inf.stats.lists == 1  # watch errors re-watch, no relist
        assert restarts == ["error"] * 5  # three failed lists, the dropped stream, the 503


def test_backoff_is_capped_and_honours_retry_after(emu: KubeEmulator, kube: Kube) -> None:
    assert Backoff(initial_s=1, max_s=5, jitter=0).delay(10, random.Random(0)) == 5  # 1 * 2**9 capped at 5
    emu.fail_next(verb="list", status=429, retry_after_s=7)
    sleeps = Sleeps()
    with running(Informer(kube, ["ml"], Recorder(), sleep=sleeps)):
        assert sleeps.delays[0] == 7.0  # the server's Retry-After beats a 0.8-1.6 s backoff


def test_survives_malformed_objects_and_raising_callbacks(emu: KubeEmulator, kube: Kube) -> None:
    rec = Recorder(explode_on="boom")
    with running(Informer(kube, ["ml"], rec, sleep=Sleeps())) as inf:
        wait_for(lambda: emu.open_watches("tfjobs") == 1)
        emu.inject_raw_event("tfjobs", {"type": "ADDED", "object": {"metadata": "not a dict"}})
        emu.inject_raw_event("tfjobs", "not json at all")
        emu.inject_raw_event("tfjobs", {"type": "MODIFIED", "object": {"metadata": {"name": "no-namespace",
                                                                                     "resourceVersion": "1"}}})
        emu.seed(tfjob("boom"))
        emu.seed(tfjob("after"))
        wait_for(lambda: ("ADDED", "ml/after") in rec.events())
        assert inf.stats.malformed == 3 and inf.stats.callback_errors == 1
        assert inf.keys() == [("ml", "after"), ("ml", "boom")]  # the cache holds boom even though its handler failed
        assert inf.stats.lists == 1 and inf.stats.errors == 0  # no relist, no reconnect: the watch went on


def test_malformed_list_items_are_skipped() -> None:
    class Source:
        def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[Any], str]:
            return [{"metadata": {}}, "junk", tfjob("ok")], "5"

        def watch_tfjobs(self, *args: Any, **kwargs: Any) -> Any:
            class Empty:
                def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
                    return iter(())

                def close(self) -> None:
                    pass
            return Empty()

    rec = Recorder()
    with running(Informer(Source(), None, rec, sleep=Sleeps())) as inf:
        assert rec.events() == [("ADDED", "ml/ok")] and inf.stats.malformed == 2


def test_resumes_from_last_resource_version_after_watch_timeout(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a"))
    rec, restarts = Recorder(), []
    with running(Informer(kube, ["ml"], rec, watch_timeout_s=1, sleep=Sleeps(), on_restart=restarts.append)) as inf:
        wait_for(lambda: inf.stats.watches >= 2, timeout=4)  # the server closed the first after 1 s
        assert restarts and set(restarts) == {"timeout"}
        emu.seed(tfjob("b"))
        wait_for(lambda: ("ADDED", "ml/b") in rec.events())
        # one list; a re-watch from "0" would have replayed "a" as ADDED again
        assert rec.events() == [("ADDED", "ml/a"), ("ADDED", "ml/b")] and inf.stats.lists == 1


def test_bookmarks_keep_the_resource_version_fresh(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a"))
    with running(Informer(kube, ["ml"], Recorder(), sleep=Sleeps())) as inf:
        for i in range(5):  # changes elsewhere move the RV past everything the informer saw in "ml"
            emu.seed(tfjob(f"x{i}", "team"))
        time.sleep(0.35)  # > 3 bookmark intervals (0.1 s): a bookmark at the current RV has arrived
        emu.expire_history()
        emu.close_watches()
        wait_for(lambda: inf.stats.watches >= 2 and emu.open_watches("tfjobs") == 1)
        # resumed from the bookmark's RV, which the compaction kept: no 410, no relist
        assert inf.stats.relists_after_gone == 0 and inf.stats.lists == 1


def test_one_thread_per_namespace(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a", "ml"))
    emu.seed(tfjob("b", "team"))
    emu.seed(tfjob("c", "other"))
    rec = Recorder()
    inf = Informer(kube, ["ml", "team"], rec, sleep=Sleeps())
    assert not inf.has_synced()
    with running(inf):
        names = {t.name for t in threading.enumerate()}
        assert {"informer-ml", "informer-team"} <= names
        assert sorted(rec.events()) == [("ADDED", "ml/a"), ("ADDED", "team/b")]  # "other" is not watched
        wait_for(lambda: emu.open_watches("tfjobs") == 2)


def test_label_selector_applies_to_list_and_watch(emu: KubeEmulator, kube: Kube) -> None:
    emu.seed(tfjob("a", advisor="on"))
    emu.seed(tfjob("b"))
    rec = Recorder()
    with running(Informer(kube, ["ml"], rec, label_selector="advisor=on", sleep=Sleeps())):
        wait_for(lambda: emu.open_watches("tfjobs") == 1)
        emu.patch("tfjobs", "ml", "a", {"metadata": {"labels": {"advisor": "off"}}})
        wait_for(lambda: len(rec.events()) == 2)
        assert rec.events() == [("ADDED", "ml/a"), ("DELETED", "ml/a")]  # leaving the selector reads as a delete


def test_stop_is_prompt_even_with_a_long_watch(emu: KubeEmulator, kube: Kube) -> None:
    inf = Informer(kube, None, Recorder(), watch_timeout_s=300)
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    thread.start()
    wait_for(lambda: emu.open_watches("tfjobs") == 1)
    started = time.monotonic()
    stop.set()
    thread.join(3)
    assert not thread.is_alive() and time.monotonic() - started < 1.0


def test_a_bug_in_the_informer_is_not_swallowed() -> None:
    class Broken:
        def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[Any], str]:
            raise ZeroDivisionError("a bug, not a KubeError")

        def watch_tfjobs(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("never reached")

    with pytest.raises(ZeroDivisionError):
        Informer(Broken(), None, Recorder()).run(threading.Event())
