"""The W points of a curve over a pool of processes, as many as the CPU quota gives this process.

Kept out of the core (which must start no process): the core's ``predict_curve`` takes a
``map``-like callable (``core/curve.py`` ``Mapper``), and ``PointPool`` is one. Each W point is
seeded on its own, so the curve is the same for any pool size (tests/test_parallel.py checks
jobs = 1 against jobs = 2). The pool's size is ``--jobs N``; 0 means the CPUs this process may
use: its CPU affinity, capped by the cgroup's CPU quota (``cpu.max`` in cgroup v2,
``cpu.cfs_quota_us / cpu.cfs_period_us`` in v1), rounded up (a quota of 1.5 CPUs gets 2
processes, which then share it). The points are handed out largest W first (the longest
simulations), so that the pool does not wait for one long point at the end. A worker process
that dies (killed, out of memory) loses no point: the points it had not returned are run once
more in a new pool; if that fails too, ``ParallelError`` names them.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

from advisor.errors import AdvisorError

T = TypeVar("T")
R = TypeVar("R")
CGROUP = Path("/sys/fs/cgroup")


class ParallelError(AdvisorError, ValueError):
    """A pool size that cannot work, or points that a worker process could not compute twice."""


def cpu_quota(root: Path = CGROUP) -> float | None:
    """CPUs the cgroup's quota allows (e.g. 1.5), or None when there is no limit or no cgroup."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # cgroup v2: "max 100000" or "150000 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def available_cpus(root: Path = CGROUP, affinity: int | None = None) -> int:
    """The CPUs this process may use: its affinity, capped by the cgroup quota rounded up (>= 1)."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(root)
    cpus = affinity if quota is None else min(affinity, math.ceil(quota - 1e-9))
    return max(1, cpus)


def resolve_jobs(jobs: int, root: Path = CGROUP, affinity: int | None = None) -> int:
    """``jobs`` processes, 0 meaning ``available_cpus``; a negative count is a ``ParallelError``."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise ParallelError(f"--jobs must be a whole number >= 0 (0: as many as the CPU quota allows), got {jobs!r}")
    return jobs or available_cpus(root, affinity)


# (fn, tasks) of the ``_run`` whose fresh pool is forked: its processes read them from the memory
# they inherit instead of unpickling each task (a W point carries the whole profile, about 1 MB
# for a 2,600-op step: pickling and unpickling it for every point cost more CPU than the W = 1 point)
_INHERITED: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def _call_inherited(i: int) -> Any:
    """The ``i``-th task of the inherited ``_run`` (in a forked pool process)."""
    if _INHERITED is None:
        raise ParallelError("a pool process found no inherited tasks (was it forked by this run?)")
    fn, tasks = _INHERITED
    return fn(tasks[i])


class PointPool:
    """A ``map`` over ``jobs`` processes (``with PointPool(n) as pool: pool(fn, tasks)``); one
    process computes in place. ``fn`` and the tasks must be picklable; results keep the tasks'
    order. ``cost`` orders the hand-out (largest first; default the task's ``workers``). With
    ``fork`` (Linux), the cheapest task runs here first: it loads the compiled engine (from
    numba's cache, or compiles it when cold), and the pool's processes, forked after it,
    inherit it instead of each loading or compiling it again; they also inherit the tasks, and
    receive only their index (``_INHERITED``)."""

    def __init__(self, jobs: int, start_method: str | None = None,
                 cost: Callable[[Any], float] | None = None) -> None:
        self.jobs = resolve_jobs(jobs)
        self._method = start_method or ("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        self._cost = cost or (lambda task: float(getattr(task, "workers", 0)))
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> PointPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __call__(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        if self.jobs == 1 or len(tasks) <= 1:
            return (fn(task) for task in tasks)
        return iter(self._run(fn, list(tasks)))

    def _pool(self, size: int) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(size, mp_context=multiprocessing.get_context(self._method))
        return self._executor

    def _run(self, fn: Callable[[T], R], tasks: list[T]) -> list[R]:
        global _INHERITED
        results: dict[int, R] = {}
        order = sorted(range(len(tasks)), key=lambda i: -self._cost(tasks[i]))
        inherit = self._method == "fork" and self._executor is None  # this run forks its pool's processes
        if inherit:
            results[order[-1]] = fn(tasks[order[-1]])
            _INHERITED = (fn, tasks)
        try:
            return self._attempts(fn, tasks, order, results, inherit)
        finally:
            if inherit:
                _INHERITED = None

    def _attempts(self, fn: Callable[[T], R], tasks: list[T], order: list[int], results: dict[int, R],
                  inherit: bool) -> list[R]:
        """Submit the tasks not in ``results``; once more in a new pool if a process died."""
        for attempt in (1, 2):
            pending = [i for i in order if i not in results]
            if not pending:
                break
            pool = self._pool(min(self.jobs, len(pending)))
            futures: dict[int, Future[R]] = {
                i: pool.submit(_call_inherited, i) if inherit else pool.submit(fn, tasks[i]) for i in pending}
            broken: BrokenProcessPool | None = None
            for i, future in futures.items():
                try:
                    results[i] = future.result()
                except BrokenProcessPool as exc:
                    broken = exc
            if broken is None:
                break
            self.close()  # a broken pool takes no more work: the next attempt starts a new one
            if attempt == 2:
                lost = [getattr(tasks[i], "workers", i) for i in order if i not in results]
                raise ParallelError(f"a worker process died twice while computing the points {lost} "
                                    f"(killed, or out of memory?): {broken}")
        return [results[i] for i in range(len(tasks))]
