"""A keyed work queue with client-go's guarantees, for level-triggered reconciles.

A key added many times before a worker takes it is processed once; a key is never processed by
two workers at once (re-adding it while it is processed queues it again for afterwards); delayed
adds wait on a heap. Workers ``get`` keys and must call ``done`` after each.

Retries go through ``add_rate_limited``, client-go's default controller rate limiter: the longer
of a per-key exponential backoff (5 ms doubling to 1000 s, reset by ``forget`` after a success)
and an overall token bucket (10 per second, bursts of 100), so one failing key backs off on its
own and a failing API server is not hammered by all keys at once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass
class RateLimiter:
    """client-go's ``DefaultControllerRateLimiter``: max(per-item exponential, token bucket)."""

    base_s: float = 0.005
    max_s: float = 1000.0
    qps: float = 10.0
    burst: int = 100
    clock: Callable[[], float] = time.monotonic
    _failures: dict[Hashable, int] = field(default_factory=dict)
    _tokens: float | None = None  # None: full (the first reservation fills the bucket)
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def when(self, key: Hashable) -> float:
        """The delay before ``key`` is retried; each call counts one more failure of it."""
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
            backoff = min(self.max_s, self.base_s * 2.0 ** n)
            return max(backoff, self._reserve())

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def _reserve(self) -> float:
        """Take a token (golang.org/x/time/rate's Reserve): the wait until it is there."""
        now = self.clock()
        if self._tokens is None:
            self._tokens, self._last = float(self.burst), now
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic, rate_limiter: RateLimiter | None = None) -> None:
        self._clock = clock
        self.rate_limiter = rate_limiter or RateLimiter(clock=clock)
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._closed = False

    def add(self, key: Hashable) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: Hashable, delay_s: float) -> None:
        if delay_s <= 0:
            self.add(key)
            return
        with self._cond:
            heapq.heappush(self._delayed, (self._clock() + delay_s, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> None:
        """Add ``key`` after the rate limiter's delay (a retry after an error)."""
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: Hashable) -> None:
        """``key`` succeeded: its next failure backs off from the shortest delay again."""
        self.rate_limiter.forget(key)

    def get(self, timeout_s: float | None = None) -> Hashable | None:
        """The next key, or None when closed or after ``timeout_s`` with nothing to do."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._cond:
            while True:
                self._release_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._closed:
                    return None
                now = self._clock()
                waits = [t - now for t in ([self._delayed[0][0]] if self._delayed else [])]
                if deadline is not None:
                    if now >= deadline:
                        return None
                    waits.append(deadline - now)
                self._cond.wait(min(waits) if waits else None)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._delayed)

    def _add_locked(self, key: Hashable) -> None:
        if self._closed or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def _release_due_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._add_locked(key)
