"""A keyed work queue with client-go's guarantees, for level-triggered reconciles.

A key added many times before a worker takes it is processed once; a key is never processed by
two workers at once (re-adding it while it is processed queues it again for afterwards); delayed
adds wait on a heap. Workers ``get`` keys and must call ``done`` after each.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
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
