"""The work queue's guarantees: dedupe, one worker per key, re-queue while processing, delays."""

from __future__ import annotations

import threading

from advisor.controller.workqueue import WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_duplicate_adds_collapse_until_taken() -> None:
    q = WorkQueue()
    for _ in range(3):
        q.add("a")
    q.add("b")
    assert [q.get(0), q.get(0), q.get(0)] == ["a", "b", None]


def test_a_key_added_while_processing_comes_back_after_done_not_before() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # changed again while a worker holds it
    assert q.get(0) is None  # a second worker must not get it concurrently
    q.done("a")
    assert q.get(0) == "a"


def test_delayed_keys_wait_for_the_clock() -> None:
    clock = FakeClock()
    q = WorkQueue(clock)
    q.add_after("late", 10.0)
    q.add_after("soon", 1.0)
    assert q.get(0) is None
    clock.t = 5.0
    assert q.get(0) == "soon" and q.get(0) is None
    clock.t = 10.0
    assert q.get(0) == "late"


def test_close_wakes_blocked_workers() -> None:
    q = WorkQueue()
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.close()
    t.join(2)
    assert not t.is_alive() and got == [None]
