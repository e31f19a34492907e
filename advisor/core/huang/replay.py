"""The dataflow replay of Huang et al. (section 2, "Dataflow based simulation").

Every device executes in parallel and keeps a job queue. A global ready list holds every op
whose dependencies are fulfilled. The loop: (1) start all ops of the ready list by putting them
on their device's queue; a device with a free server starts the head of its queue; (2) when an
op finishes, decrement the dependency counter of each successor; a counter that reaches zero
puts the successor on the ready list. A step ends when all its ops have finished (its time is the last
finish); the worker then starts its next step.

Queue order: FIFO (``recorded_order=False``): release order, ops released at the same instant
in ``rank`` order, then by worker. With ``recorded_order=True`` a queue is FIFO between steps
(an op of a step that started earlier goes first, so workers are served in turn) and, within
one step, serves in ``rank`` order: the order the trace recorded, so that a link delivers the
tensors of one step in the order TensorFlow's multiplexed streams delivered them.

Devices for W workers and P parameter servers: each worker's compute (``worker_threads``
servers), and per PS its compute (``ps_threads`` servers), its downlink (PS -> workers) and
its uplink (workers -> PS), each one server shared by all workers: the W workers share the PS
links through FIFO queues, a transfer holding its link alone for ``bits / link_bps`` seconds, as
the PS simulator times a transfer alone on a link. A zero-byte transfer (a control edge)
finishes when it is released, without using the link, as in the PS simulator.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

KIND_WORKER, KIND_PS, KIND_DOWNLINK, KIND_UPLINK = 0, 1, 2, 3


@dataclass(frozen=True)
class ReplayGraph:
    """One step's graph, timed: arrays indexed by op position."""

    names: tuple[str, ...]
    kind: tuple[int, ...]  # KIND_* per op
    ps: tuple[int, ...]  # parameter server of a PS op or transfer (0 for worker ops)
    duration_s: tuple[float, ...]  # computation time (0 for transfers)
    bits: tuple[float, ...]  # transfer payload in bits (0 for computation)
    deps: tuple[tuple[int, ...], ...]
    # order of service when a device has a choice (lower first): one row per recorded step,
    # replayed steps cycle through the rows (worker w's k-th step uses row (k + w) mod rows)
    rank: tuple[tuple[int, ...], ...]
    parameter_servers: int = 1

    def __post_init__(self) -> None:
        n = len(self.names)
        for name, values in (("kind", self.kind), ("ps", self.ps), ("duration_s", self.duration_s),
                             ("bits", self.bits), ("deps", self.deps)):
            if len(values) != n:
                raise ValueError(f"ReplayGraph.{name} has {len(values)} entries for {n} ops")
        if not self.rank or any(len(row) != n for row in self.rank):
            raise ValueError(f"ReplayGraph.rank needs at least one row of {n} entries")


@dataclass(frozen=True)
class ReplayResult:
    step_ends_s: tuple[tuple[float, ...], ...]  # per worker
    events: int


class Replay:
    """A replay of ``workers`` workers, continued on demand with ``run_until``."""

    def __init__(
        self,
        graph: ReplayGraph,
        workers: int,
        link_bps: float,
        *,
        worker_threads: int = 1,
        ps_threads: int = 1,
        worker_speeds: tuple[float, ...] = (),
        recorded_order: bool = False,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not link_bps > 0:
            raise ValueError(f"link_bps must be > 0, got {link_bps}")
        self.g = graph
        self.W = workers
        self.link_bps = float(link_bps)
        n = len(graph.names)
        self.succ: list[list[int]] = [[] for _ in range(n)]
        for i, ds in enumerate(graph.deps):
            for d in ds:
                self.succ[d].append(i)
        self.roots = [i for i, ds in enumerate(graph.deps) if not ds]
        self.n_deps = [len(ds) for ds in graph.deps]
        # devices: workers 0..W-1, then per PS p: compute, downlink, uplink
        n_dev = workers + 3 * graph.parameter_servers
        self.servers = [worker_threads] * workers + [ps_threads, 1, 1] * graph.parameter_servers
        self.busy = [0] * n_dev
        # per device, a heap of (step start, rank, seq, worker, op); see the module docstring
        self.queues: list[list[tuple[float, int, int, int, int]]] = [[] for _ in range(n_dev)]
        self.recorded_order = recorded_order
        self.step_start = [0.0] * workers
        self.steps_started = [0] * workers
        self.rank_row = [graph.rank[0]] * workers
        speeds = [worker_speeds[w] if w < len(worker_speeds) else 1.0 for w in range(workers)]
        if not all(s > 0 for s in speeds):
            raise ValueError(f"worker speeds must be > 0, got {list(worker_speeds)}")
        self.time_of = [
            [self._service_s(i, speeds[w]) for i in range(n)] for w in range(workers)
        ]
        self.pending = [list(self.n_deps) for _ in range(workers)]
        self.finished = [0] * workers
        self.ends: list[list[float]] = [[] for _ in range(workers)]
        self.ready: list[tuple[int, int, int]] = []  # (rank, worker, op)
        self.events: list[tuple[float, int, int, int]] = []  # (time, seq, worker, op)
        self.seq = 0
        self.now = 0.0
        self.processed = 0
        for w in range(workers):
            self._release_roots(w)

    def _service_s(self, i: int, speed: float) -> float:
        kind = self.g.kind[i]
        if kind in (KIND_DOWNLINK, KIND_UPLINK):
            return self.g.bits[i] / self.link_bps
        return self.g.duration_s[i] / speed if kind == KIND_WORKER else self.g.duration_s[i]

    def _device(self, w: int, i: int) -> int:
        kind = self.g.kind[i]
        if kind == KIND_WORKER:
            return w
        return self.W + 3 * self.g.ps[i] + (kind - 1)

    def _release_roots(self, w: int) -> None:
        self.step_start[w] = self.now
        self.rank_row[w] = self.g.rank[(self.steps_started[w] + w) % len(self.g.rank)]
        self.steps_started[w] += 1
        self.pending[w] = list(self.n_deps)
        self.finished[w] = 0
        for i in self.roots:
            self.ready.append((self.rank_row[w][i], w, i))

    def _push_event(self, t: float, w: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, w, i))

    def _start_ready(self) -> None:
        """Step (1): the ready list goes to the device queues; free servers start their heads."""
        touched = set()
        for _, w, i in sorted(self.ready):
            kind = self.g.kind[i]
            if kind in (KIND_DOWNLINK, KIND_UPLINK) and self.g.bits[i] == 0:
                self._push_event(self.now, w, i)  # a control edge: done when released
                continue
            dev = self._device(w, i)
            self.seq += 1
            if self.recorded_order:
                heapq.heappush(self.queues[dev], (self.step_start[w], self.rank_row[w][i], self.seq, w, i))
            else:
                heapq.heappush(self.queues[dev], (0.0, 0, self.seq, w, i))
            touched.add(dev)
        self.ready.clear()
        for dev in sorted(touched):
            self._dispatch(dev)

    def _dispatch(self, dev: int) -> None:
        queue = self.queues[dev]
        while self.busy[dev] < self.servers[dev] and queue:
            *_, w, i = heapq.heappop(queue)
            self.busy[dev] += 1
            self._push_event(self.now + self.time_of[w][i], w, i)

    def _finish(self, w: int, i: int) -> None:
        """Step (2): free the device, release successors whose counter reaches zero."""
        self.processed += 1
        kind = self.g.kind[i]
        freed = None
        if not (kind in (KIND_DOWNLINK, KIND_UPLINK) and self.g.bits[i] == 0):
            freed = self._device(w, i)
            self.busy[freed] -= 1
        pending = self.pending[w]
        for j in self.succ[i]:
            pending[j] -= 1
            if pending[j] == 0:
                self.ready.append((self.rank_row[w][j], w, j))
        self.finished[w] += 1
        if self.finished[w] == len(self.g.names):
            self.ends[w].append(self.now)
            self._release_roots(w)
        if freed is not None:
            self._dispatch(freed)

    def run_until(self, steps: int) -> float:
        """Replay until some worker has finished ``steps`` steps; returns that instant (s)."""
        while max(len(e) for e in self.ends) < steps:
            self._start_ready()
            if not self.events:
                raise ValueError("the replay stalled: no op can start (a dependency cycle?)")
            t = self.events[0][0]
            self.now = t
            while self.events and self.events[0][0] == t:
                _, _, w, i = heapq.heappop(self.events)
                self._finish(w, i)
        return min(e[steps - 1] for e in self.ends if len(e) >= steps)

    def result(self) -> ReplayResult:
        return ReplayResult(tuple(tuple(e) for e in self.ends), self.processed)


def replay(
    graph: ReplayGraph,
    workers: int,
    link_bps: float,
    steps: int,
    *,
    worker_threads: int = 1,
    ps_threads: int = 1,
    recorded_order: bool = False,
) -> ReplayResult:
    """Replay until the first worker has finished ``steps`` steps (see ``Replay``)."""
    r = Replay(
        graph, workers, link_bps, worker_threads=worker_threads, ps_threads=ps_threads, recorded_order=recorded_order
    )
    r.run_until(steps)
    return r.result()
