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
        self.now = 0.0
        self.seq = 0
        self.events = 0
        self.timeline: list[TimelineEvent] | None = [] if record_timeline else None

    def run(self) -> SimulationResult:
        for w in range(self.inp.workers):
            self._start_step(w, 0)
        while self.in_service:
            chunk = self._advance_to_next_completion()
            self._complete(chunk)
        return SimulationResult(
            workers=self.inp.workers,
            batch_size=self.profile.job.batch_size,
            step_ends_s=tuple(tuple(wk.ends) for wk in self.workers),
            events=self.events,
            timeline=None if self.timeline is None else tuple(self.timeline),
        )

    # -- time -------------------------------------------------------------------------
    def _rates(self) -> list[float]:
        """Rate of each in-service chunk: bits/s on a link, 1 (s/s) for computation."""
        rates = [1.0] * len(self.in_service)
        for direction in (0, 1):
            idx = [j for j, c in enumerate(self.in_service) if c.slot > 0 and self._dir(c.slot) == direction]
            flows = [(self.in_service[j].worker, self.inp.ps_of(self.in_service[j].slot)) for j in idx]
            for j, r in zip(idx, water_fill(flows, self.inp.link_bps, self.inp.nic_bps)):
                rates[j] = r
        return rates

    def _dir(self, slot: int) -> int:
        return self.inp.direction(slot) if self.inp.is_link_slot(slot) else -1

    def _end(self, c: _Chunk, rate: float) -> float:
        if c.slot >= 0 and not self.inp.is_link_slot(c.slot):
            return c.end
        return quantize(self.now + c.remaining / rate) if c.remaining > 0 else self.now

    def _advance_to_next_completion(self) -> _Chunk:
        rates = self._rates()
        ends = [self._end(c, r) for c, r in zip(self.in_service, rates)]
        j = min(range(len(ends)), key=lambda k: (ends[k], self.in_service[k].seq))
        dt = ends[j] - self.now
        for c, r in zip(self.in_service, rates):
            c.remaining -= r * dt
        self.now = ends[j]
        return self.in_service.pop(j)

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
        if op in wk.served or bits <= self.inp.win_bits:
            size, last = (bits - self.inp.win_bits if op in wk.served else bits), True
        else:
            size, last = self.inp.win_bits, False
            wk.served.add(op)
        return _Chunk(w, slot, op, size, last, self._next_seq(), self.now, wk.step)

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


