"""``WarmupCpu``: a worker's CPU seconds per training step, timed by every all-reduce profiling
hook the same way, over the warm-up's second half: those steps are untraced (the profiler costs
CPU) and past the first ones, where frameworks trace and compile their step functions. The ring
model's host CPU bound needs it (docs/models-ring.md). Standard library only: it runs inside the
user's training image."""

from __future__ import annotations

import time
from collections.abc import Callable


class WarmupCpu:
    """Told when each step begins (``step_begins``), reads the process's CPU clock (every thread,
    ``time.process_time``) when step ``warmup // 2`` and step ``warmup`` begin; ``per_step`` is the
    CPU between them over the steps between them, or None with fewer than 2 warm-up steps or
    before the first traced step began."""

    def __init__(self, warmup: int, clock: Callable[[], float] = time.process_time) -> None:
        self._warmup = warmup
        self._clock = clock
        self._mark: tuple[float, int] | None = None  # (CPU seconds, step index) midway through warm-up
        self.per_step: float | None = None

    def step_begins(self, index: int) -> None:
        """Step ``index`` (0-based, counting warm-up steps) begins now."""
        if self._warmup >= 2 and index == self._warmup // 2:
            self._mark = (self._clock(), index)
        elif index == self._warmup and self._mark is not None:
            self.per_step = (self._clock() - self._mark[0]) / (index - self._mark[1])

    def as_meta(self) -> float | None:
        """``per_step`` as the bundle's ``meta.cpu_s_per_step`` holds it (to the microsecond)."""
        return None if self.per_step is None else round(self.per_step, 6)
