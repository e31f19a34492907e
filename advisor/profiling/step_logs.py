"""Measured throughput of a synchronous run from its workers' step logs, as the recorders take
ground truth (scripts/record_allreduce_*.py) and the accuracy benchmarks compare against it.

Why not the window where all workers run (from the last worker's end of warm-up to the first
worker's last step end, counting the steps that end inside it)? In a synchronous job the
workers end each step together, a millisecond apart, so the window closes just before the
other W - 1 workers' last steps end and drops them: it reads low by (W - 1) / (W x timed
steps), 0.7 % at W = 4 and 100 timed steps. Here each worker's rate is its own timed steps over
its own span (from the end of its warm-up to the end of its last step) and the job's is their
sum: W workers in lockstep at step time t give exactly W x batch / t, however far apart in time
the workers end a step. For asynchronous workers the sum of their own rates is the job's rate
as well.

Standard library only, like the rest of the package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def synchronous_throughput(step_ends_s: Sequence[Sequence[float]], batch_size: int, warmup_steps: int) -> float:
    """Examples/s of the job: the sum over workers of ``batch_size`` x its steps after the first
    ``warmup_steps`` over its own time from the end of its warm-up (its ``warmup_steps``-th step
    end, or its first step end when ``warmup_steps`` is 0 and that step is not counted) to the end
    of its last step. ``step_ends_s``: per worker, its step end times in increasing order."""
    if batch_size < 1 or warmup_steps < 0:
        raise ValueError(f"batch_size must be >= 1 and warmup_steps >= 0, got {batch_size} and {warmup_steps}")
    if not step_ends_s:
        raise ValueError("no worker's steps to measure")
    total = 0.0
    for worker, ends in enumerate(step_ends_s):
        first = max(warmup_steps, 1) - 1  # the end the span starts at
        timed = len(ends) - 1 - first
        if timed < 1:
            raise ValueError(f"worker {worker} logged {len(ends)} step(s): none after its {warmup_steps} warm-up "
                             "steps to time; train more steps")
        span = float(ends[-1]) - float(ends[first])
        if not (math.isfinite(span) and span > 0) or any(b < a for a, b in zip(ends, ends[1:])):
            raise ValueError(f"worker {worker}: its step ends must increase, got a span of {span!r} s")
        total += timed * batch_size / span
    return total
