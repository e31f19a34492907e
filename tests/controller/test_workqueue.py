"""The work queue's guarantees: dedupe, one worker per key, re-queue while processing, delays."""

from __future__ import annotations

import threading

from advisor.controller.kube.workqueue import WorkQueue


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


def test_rate_limited_retries_back_off_per_key_from_5_ms_to_1000_s_and_forget_resets() -> None:
    from advisor.controller.kube.workqueue import RateLimiter

    clock = FakeClock()
    limiter = RateLimiter(clock=clock)
    # client-go's ItemExponentialFailureRateLimiter(5ms, 1000s): 5 ms * 2^n for the n-th earlier failure
    delays = [limiter.when("a") for _ in range(4)]
    assert delays == [0.005, 0.010, 0.020, 0.040]
    assert limiter.when("b") == 0.005  # per key: b's first failure
    for _ in range(30):
        last = limiter.when("a")
    assert last == 1000.0  # capped (5 ms * 2^33 is far beyond)
    limiter.forget("a")
    assert limiter.when("a") == 0.005


def test_the_token_bucket_limits_all_retries_to_10_per_second_after_a_burst_of_100() -> None:
    from advisor.controller.kube.workqueue import RateLimiter

    clock = FakeClock()
    limiter = RateLimiter(clock=clock)
    # 100 different keys at one instant take the burst; each first failure waits only its 5 ms
    assert all(limiter.when(f"k{i}") == 0.005 for i in range(100))
    # the 101st and 102nd wait for tokens refilled at 10/s: 0.1 s and 0.2 s
    assert limiter.when("k100") == 0.1 and abs(limiter.when("k101") - 0.2) < 1e-9
    clock.t += 10.0  # refilled (capped at the burst)
    assert limiter.when("k102") == 0.005


def test_add_rate_limited_delays_the_key() -> None:
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_rate_limited("a")
    assert q.get(0) is None  # not before its 5 ms
    clock.t += 0.006
    assert q.get(0) == "a"
