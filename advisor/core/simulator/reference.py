"""The reference engine: a plain transcription of Algorithm 3.1, the oracle for tests.

Slow on purpose: at every event it recomputes every in-service transfer chunk's rate
(water-filling over all active flows, ``sharing.water_fill``) and completion time
``now + remaining / rate``, finds the chunk that completes first (ties: smallest ``seq``),
advances every transfer chunk's remaining bits by the elapsed time and processes that
completion. A computation chunk has share 1, so its end is simply its start plus its
duration. Completion times are rounded to a 2**-32 s grid (``jit.quantize``) so that
simultaneous completions are exact ties in both engines.

Processing a completion of worker w (the fast engine does exactly the same):
1. free the chunk's slot;
2. a first HTTP/2 chunk that did not finish its stream re-queues the stream for its
   second service (key ``(1, 0, seq)``); a last chunk finishes the operation and releases
   every dependent whose dependencies are now all done, in dependent order;
3. if all operations of the step are done, the step ends and the next one starts (its
   root operations are released in index order); otherwise
4. dispatch: for slot 0, 1, ..., every free slot of w with queued work starts its
   smallest-key operation.
Releasing puts an operation on its slot's queue, except a zero-byte transfer, which
completes at the instant it is released without using a link.

Staggered starts (``SimulationSettings.start_offsets_s``): worker w's first step starts at
``quantize(offset_w)``; a worker whose start is 0 starts before anything happens (in
worker order, as without offsets); a later start is an event that comes before every
chunk completion or activation at the same instant, workers with equal starts in index
order (it uses the negative seq ``w - W``).

Request-path queueing (``NetworkModel.queue_delay_s`` = d > 0): TensorFlow's gRPC receiver
requests each tensor, so the request of a pull (downlink data) travels on the uplink and
that of a push (uplink data) on the downlink. When a link-slot chunk of worker w on
direction D of PS p is dispatched and it is the *first* chunk of its stream (a whole
stream, or the first HTTP/2 service), and at that instant an *active* transfer chunk of
another worker is in service on the opposite direction of the same PS p, the chunk first
waits d: it holds w's slot on D (nothing else of w starts there) but takes no bandwidth
and is not counted in the sharing. At ``quantize(dispatch + d)`` (an activation event,
ordered with completions by ``(time, seq)`` using the chunk's own seq; not counted in
``events``) it becomes an ordinary active flow. Chunks waiting their d are not "active"
for this test, the worker's own flows never delay it, and second HTTP/2 chunks and
zero-byte transfers are never delayed. A delayed chunk's timeline start is its dispatch
time (the slot is held from then).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationResult, TimelineEvent
from advisor.core.simulator.inputs import SimInputs
from advisor.core.simulator.jit import quantize
from advisor.core.simulator.sharing import water_fill

@dataclass
class _Chunk:
    worker: int
    slot: int  # -1 for a zero-byte transfer
    op: int
    remaining: float  # bits still to send (transfers)
    is_last: bool
    seq: int
    start: float
    step: int
    end: float = 0.0  # computation: start + duration, on the time grid
    waiting: bool = False  # a first transfer chunk still waiting its request-path delay
    wake: float = 0.0  # when a waiting chunk becomes an active flow


@dataclass
class _Worker:
    step: int = 0
    pending: list[int] = field(default_factory=list)
    finished: int = 0
    served: set[int] = field(default_factory=set)
    queues: dict[int, list[tuple[int, float, int, int]]] = field(default_factory=dict)
    busy: dict[int, _Chunk] = field(default_factory=dict)
    ends: list[float] = field(default_factory=list)


class ReferenceSimulation:
    """One run of the reference engine; call ``run()`` once."""

    def __init__(self, profile: Profile, inputs: SimInputs, record_timeline: bool) -> None:
        self.profile = profile
        self.inp = inputs
        self.deps = profile.dep_indices
        self.dependents: list[list[int]] = [[] for _ in profile.ops]
        for i, ds in enumerate(self.deps):
            for d in ds:
                self.dependents[d].append(i)
        self.roots = [i for i, ds in enumerate(self.deps) if not ds]
        self.workers = [_Worker() for _ in range(inputs.workers)]
        self.in_service: list[_Chunk] = []
        # Workers not started yet: (start time, seq w - W, worker).
        self.starts = [(inputs.start_of(w), w - inputs.workers, w) for w in range(inputs.workers)]
        self.now = 0.0
        self.seq = 0
        self.events = 0
        self.timeline: list[TimelineEvent] | None = [] if record_timeline else None

    def run(self) -> SimulationResult:
        for start in [s for s in self.starts if s[0] == 0.0]:
            self.starts.remove(start)
            self._start_step(start[2], 0)
        while self.in_service or self.starts:
            self._next_event()
        return SimulationResult(
            workers=self.inp.workers,
            batch_size=self.profile.job.batch_size,
            step_ends_s=tuple(tuple(wk.ends) for wk in self.workers),
            events=self.events,
            timeline=None if self.timeline is None else tuple(self.timeline),
        )

    # -- time -------------------------------------------------------------------------
    def _rates(self) -> list[float]:
        """Rate of each in-service chunk: bits/s on a link (0 while waiting), 1 (s/s) for computation."""
        rates = [1.0] * len(self.in_service)
        for direction in (0, 1):
            idx = [j for j, c in enumerate(self.in_service) if self._is_flow(c) and self._dir(c.slot) == direction]
            flows = [(self.in_service[j].worker, self.inp.ps_of(self.in_service[j].slot)) for j in idx]
            for j, r in zip(idx, water_fill(flows, self.inp.link_bps, self.inp.nic_bps)):
                rates[j] = r
        for j, c in enumerate(self.in_service):
            if c.waiting:
                rates[j] = 0.0
        return rates

    def _is_flow(self, c: _Chunk) -> bool:
        """An active transfer chunk: on a link and not waiting its request-path delay."""
        return c.slot > 0 and self.inp.is_link_slot(c.slot) and not c.waiting

    def _dir(self, slot: int) -> int:
        return self.inp.direction(slot) if self.inp.is_link_slot(slot) else -1

    def _end(self, c: _Chunk, rate: float) -> float:
        """When the chunk's next event happens: completion, or activation if waiting."""
        if c.waiting:
            return c.wake
        if c.slot >= 0 and not self.inp.is_link_slot(c.slot):
            return c.end
        return quantize(self.now + c.remaining / rate) if c.remaining > 0 else self.now

    def _next_event(self) -> None:
        """Advance to the earliest event by ``(time, seq)`` and process it."""
        rates = self._rates()
        events = [(self._end(c, r), c.seq, j) for j, (c, r) in enumerate(zip(self.in_service, rates))]
        events += [(t, seq, -1 - k) for k, (t, seq, _) in enumerate(self.starts)]
        t, _, j = min(events)
        dt = t - self.now
        for c, r in zip(self.in_service, rates):
            c.remaining -= r * dt
        self.now = t
        if j < 0:
            _, _, w = self.starts.pop(-1 - j)
            self._start_step(w, 0)
        elif self.in_service[j].waiting:
            self.in_service[j].waiting = False
        else:
            self._complete(self.in_service.pop(j))

    # -- Algorithm 3.1 ------------------------------------------------------------------
    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _start_step(self, w: int, k: int) -> None:
        wk = self.workers[w]
        wk.step, wk.finished = k, 0
        wk.pending = [len(ds) for ds in self.deps]
        wk.served = set()
        for op in self.roots:
            self._release(w, op)
        self._dispatch(w)

    def _release(self, w: int, op: int) -> None:
        wk = self.workers[w]
        if self.inp.instant[op]:
            self.in_service.append(_Chunk(w, -1, op, 0.0, True, self._next_seq(), self.now, wk.step))
            return
        slot = int(self.inp.slot[op])
        key = self.inp.stream_key(op, w, wk.step) if self.inp.is_link_slot(slot) else 0.0
        heapq.heappush(wk.queues.setdefault(slot, []), (0, key, self._next_seq(), op))

    def _dispatch(self, w: int) -> None:
        wk = self.workers[w]
        for slot in range(self.inp.slots_per_worker):
            queue = wk.queues.get(slot)
            if slot in wk.busy or not queue:
                continue
            _, _, _, op = heapq.heappop(queue)
            chunk = self._make_chunk(w, slot, op)
            wk.busy[slot] = chunk
            self.in_service.append(chunk)

    def _make_chunk(self, w: int, slot: int, op: int) -> _Chunk:
        wk = self.workers[w]
        if not self.inp.is_link_slot(slot):
            duration = float(self.inp.durations_s[self.inp.sampled[w, wk.step], op])
            end = quantize(self.now + duration)
            return _Chunk(w, slot, op, 0.0, True, self._next_seq(), self.now, wk.step, end)
        bits = float(self.inp.bits[op])
        first = op not in wk.served
        if not first or bits <= self.inp.win_bits:
            size, last = (bits if first else bits - self.inp.win_bits), True
        else:
            size, last = self.inp.win_bits, False
            wk.served.add(op)
        chunk = _Chunk(w, slot, op, size, last, self._next_seq(), self.now, wk.step)
        if first and self.inp.queue_delay_s > 0 and self._opposite_busy(w, slot):
            chunk.waiting, chunk.wake = True, quantize(self.now + self.inp.queue_delay_s)
        return chunk

    def _opposite_busy(self, w: int, slot: int) -> bool:
        """Does another worker's active flow use the other direction of this slot's PS link?"""
        ps, direction = self.inp.ps_of(slot), self.inp.direction(slot)
        return any(
            c.worker != w and self._is_flow(c) and self.inp.ps_of(c.slot) == ps and self.inp.direction(c.slot) != direction
            for c in self.in_service
        )

    def _complete(self, c: _Chunk) -> None:
        w, wk = c.worker, self.workers[c.worker]
        self.events += 1
        self._record(c)
        if c.slot >= 0:
            del wk.busy[c.slot]
        if not c.is_last:
            heapq.heappush(wk.queues[c.slot], (1, 0.0, self._next_seq(), c.op))
        else:
            wk.finished += 1
            for d in self.dependents[c.op]:
                wk.pending[d] -= 1
                if wk.pending[d] == 0:
                    self._release(w, d)
        if wk.finished == len(self.deps):
            wk.ends.append(self.now)
            if wk.step + 1 < self.inp.steps:
                self._start_step(w, wk.step + 1)
        else:
            self._dispatch(w)

    def _record(self, c: _Chunk) -> None:
        if self.timeline is None:
            return
        op = self.profile.ops[c.op]
        self.timeline.append(
            TimelineEvent(c.worker, c.step, op.name, op.resource.value, op.ps, c.start, self.now)
        )


def simulate_reference(profile: Profile, inputs: SimInputs, record_timeline: bool = False) -> SimulationResult:
    """Run the reference engine on prepared inputs."""
    return ReferenceSimulation(profile, inputs, record_timeline).run()


