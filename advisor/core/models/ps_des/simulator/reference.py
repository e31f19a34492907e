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

Contention rules beyond the paper (``NetworkModel``; all off by default, ``contention.py``
gives the product's defaults and the evidence for them):

- **Request-path queueing at release** (``request_queue_s`` = q > 0). TensorFlow's gRPC
  receiver requests each tensor, so the request of a pull (PS -> worker, direction 0) travels
  on the uplink, behind whatever the other workers' pushes have queued at that bottleneck.
  When a non-empty pull of worker w from PS p is released and the other workers' active
  uplink flows to p still have B bits to send, the pull joins w's queue only at
  ``quantize(now + min(q, B / link_bps))``: its request waits behind the queued data, at most
  a full queue. Until then it is simply not queued (the slot may serve other pulls); at that
  instant (an event ordered with completions by ``(time, seq)`` using the seq drawn at
  release; not counted in ``events``) it is queued with a fresh seq and w dispatches. Pushes,
  second HTTP/2 chunks and zero-byte transfers are never delayed.
- **Uneven shares** (``share_sigma``). Each (worker, PS, direction) connection has a weight,
  drawn anew (the next of ``inputs.share_weights``) whenever a chunk starts on it after it was
  idle for a positive time (its last chunk completed before ``now``, or never); back-to-back
  chunks keep it. Rates are weighted max-min fair (``sharing.water_fill``).
- **Multi-flow goodput** (``multi_flow_goodput``): a PS link direction with two or more flows
  (necessarily of different workers) has capacity ``eta x link_bps``.
- **A window per connection** (``window_gain`` = g > 0). Each (worker, PS, direction) connection
  remembers the rate its last chunk was moving at when it completed. When a chunk starts on it
  after it was idle (a new activation, as for the weights), the connection is capped at g times
  that rate for this activation (no cap if it never moved before). The cap binds only while
  another worker's flow uses the reverse direction of the same PS link: TCP moves at most a
  window per round trip, the window is what the connection kept from its last transfer, and the
  round trip is long only while its acknowledgements wait in the other direction's queue behind
  that flow's data (docs/contention-model.md, section 8, measured it). Caps are a third kind of
  constraint in the water-filling (``sharing.water_fill``).
- **The two-way loss** (``two_way_efficiency`` = e > 0, experimental: no model's default). A PS
  link direction has capacity ``e x link_bps`` while any flow uses the other direction of the same
  link, and ``link_bps`` otherwise, however many flows share it; the multi-flow goodput is not
  used. A direction's rates are recomputed whenever the other direction's flows change.

Heterogeneous workers (``inputs.py``): a worker's speed only selects which durations it reads;
its NIC rate (``SimInputs.nic_of``) is its own constraint in the water-filling.

Synchronous PS (``sync_replicas`` = R > 0; TF's ``SyncReplicasOptimizer`` with
``replicas_to_aggregate`` = R). A worker's step (pulls, compute, pushes and the PS ops that
take its gradient) is unchanged; what changes is what happens when it ends. The PS keeps a
global step G (updates applied, 0 at the start) and a count of fresh gradients; a worker's
step is *of round* G as G was when that step started. When worker w's step ends (step 3
above, after recording its end):

- if its round is below G, its gradient is stale: dropped (not counted), and w starts its
  next step at once (TF's accumulator drops a gradient older than the global step; the worker
  takes a token and goes on);
- otherwise the count grows by one. If it reaches R, the update is applied at this instant
  (its time is recorded in ``updates_s``; the traced PS ops of the R-th gradient stand for the
  apply of the aggregate), G grows by one, the count is reset, and every worker waiting for
  this update starts its next step, in the order they began waiting, w last. If not, w waits
  (no next step, nothing dispatched) for the update of its round.

So every pull of step k+1 waits for the update that step k fed; with R = W every worker
waits for all; with R < W the R first gradients of a round make the update and the W - R
late ones are dropped. A worker that has run all its steps (plain runs) still feeds its
last gradient but does not wait; if fewer than R workers are left, the others may wait for
ever and the run ends with them (both engines alike). With R = W = 1 the update is the one
worker's step end and nothing waits: the run is the asynchronous one, bit for bit.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationResult, TimelineEvent
from advisor.core.models.ps_des.simulator.inputs import SimInputs
from advisor.core.models.ps_des.simulator.jit import quantize
from advisor.core.models.ps_des.simulator.sharing import water_fill


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
    weight: float = 1.0  # sharing weight of a link chunk (its connection's current weight)
    rate: float = 0.0  # a link chunk's rate since the last event (window_gain: its connection's rate at completion)


@dataclass
class _Worker:
    step: int = 0
    pending: list[int] = field(default_factory=list)
    finished: int = 0
    served: set[int] = field(default_factory=set)
    queues: dict[int, list[tuple[int, float, int, int]]] = field(default_factory=dict)
    busy: dict[int, _Chunk] = field(default_factory=dict)
    ends: list[float] = field(default_factory=list)
    round: int = 0  # sync: the global step when the current step began


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
        # Pulls whose request is still on its way: (time queued, seq, worker, op).
        self.deferred: list[tuple[float, int, int, int]] = []
        # Per connection (worker, slot): when its last chunk completed, activations so far, weight.
        self.conn_last_end: dict[tuple[int, int], float] = {}
        self.conn_activations: dict[tuple[int, int], int] = {}
        self.conn_weight: dict[tuple[int, int], float] = {}
        # window_gain: per connection, the rate its last chunk completed at, and its current cap
        self.conn_rate: dict[tuple[int, int], float] = {}
        self.conn_cap: dict[tuple[int, int], float] = {}
        self.weights = inputs.share_weights  # None: every weight is 1
        self.nics = [inputs.nic_of(w) for w in range(inputs.workers)]
        self.now = 0.0
        self.seq = 0
        self.events = 0
        self.timeline: list[TimelineEvent] | None = [] if record_timeline else None
        # Synchronous PS: global step, fresh gradients of this round, workers waiting (in order).
        self.global_step = 0
        self.fresh = 0
        self.waiting: list[int] = []
        self.updates: list[float] = []

    def run(self) -> SimulationResult:
        for start in [s for s in self.starts if s[0] == 0.0]:
            self.starts.remove(start)
            self._start_step(start[2], 0)
        while self.in_service or self.starts or self.deferred:
            self._next_event()
        return SimulationResult(
            workers=self.inp.workers,
            batch_size=self.profile.job.batch_size,
            step_ends_s=tuple(tuple(wk.ends) for wk in self.workers),
            events=self.events,
            timeline=None if self.timeline is None else tuple(self.timeline),
            updates_s=tuple(self.updates) if self.inp.sync_replicas else None,
        )

    # -- time -------------------------------------------------------------------------
    def _rates(self) -> list[float]:
        """Rate of each in-service chunk: bits/s on a link, 1 (s/s) for computation."""
        rates = [1.0] * len(self.in_service)
        busy: tuple[set[int], set[int]] = (set(), set())  # per direction, the PS links carrying a flow
        for c in self.in_service:
            if self._is_flow(c):
                busy[self._dir(c.slot)].add(self.inp.ps_of(c.slot))
        for direction in (0, 1):
            idx = [j for j, c in enumerate(self.in_service) if self._is_flow(c) and self._dir(c.slot) == direction]
            flows = [(self.in_service[j].worker, self.inp.ps_of(self.in_service[j].slot)) for j in idx]
            weights = [self.in_service[j].weight for j in idx]
            caps = [self._cap(self.in_service[j]) for j in idx] if self.inp.window_gain > 0 else None
            two_way = (self.inp.two_way_efficiency, busy[1 - direction]) if self.inp.two_way_efficiency > 0 else None
            shares = water_fill(flows, self.inp.link_bps, self.nics, weights, self.inp.multi_flow_goodput, caps, two_way)
            for j, r in zip(idx, shares):
                rates[j] = r
                self.in_service[j].rate = r
        return rates

    def _cap(self, c: _Chunk) -> float:
        """A link chunk's window cap: its connection's, while another worker's flow uses the
        reverse direction of its PS link; else none (``math.inf``)."""
        cap = self.conn_cap.get((c.worker, c.slot), math.inf)
        if cap == math.inf:
            return cap
        ps, reverse = self.inp.ps_of(c.slot), 1 - self._dir(c.slot)
        for o in self.in_service:
            if o.worker != c.worker and self._is_flow(o) and self._dir(o.slot) == reverse and self.inp.ps_of(o.slot) == ps:
                return cap
        return math.inf

    def _is_flow(self, c: _Chunk) -> bool:
        """A transfer chunk on a link (not a computation, not a zero-byte transfer)."""
        return c.slot > 0 and self.inp.is_link_slot(c.slot)

    def _dir(self, slot: int) -> int:
        return self.inp.direction(slot) if self.inp.is_link_slot(slot) else -1

    def _end(self, c: _Chunk, rate: float) -> float:
        if c.slot >= 0 and not self.inp.is_link_slot(c.slot):
            return c.end
        return quantize(self.now + c.remaining / rate) if c.remaining > 0 else self.now

    def _next_event(self) -> None:
        """Advance to the earliest event by ``(time, seq)`` and process it."""
        rates = self._rates()
        events = [(self._end(c, r), c.seq, j) for j, (c, r) in enumerate(zip(self.in_service, rates))]
        events += [(t, seq, -1 - k) for k, (t, seq, _) in enumerate(self.starts)]
        if self.deferred:
            events.append((self.deferred[0][0], self.deferred[0][1], len(self.in_service)))
        t, _, j = min(events)
        dt = t - self.now
        for c, r in zip(self.in_service, rates):
            c.remaining -= r * dt
        self.now = t
        if j < 0:
            _, _, w = self.starts.pop(-1 - j)
            self._start_step(w, 0)
        elif j == len(self.in_service):
            _, _, w, op = heapq.heappop(self.deferred)
            self._enqueue(w, op, self._next_seq())
            self._dispatch(w)
        else:
            self._complete(self.in_service.pop(j))

    # -- Algorithm 3.1 ------------------------------------------------------------------
    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _start_step(self, w: int, k: int) -> None:
        wk = self.workers[w]
        wk.step, wk.finished, wk.round = k, 0, self.global_step
        wk.pending = [len(ds) for ds in self.deps]
        wk.served = set()
        for op in self.roots:
            self._release(w, op)
        self._dispatch(w)

    def _release(self, w: int, op: int) -> None:
        seq = self._next_seq()
        if self.inp.instant[op]:
            self.in_service.append(_Chunk(w, -1, op, 0.0, True, seq, self.now, self.workers[w].step))
            return
        slot = int(self.inp.slot[op])
        if self.inp.request_queue_s > 0 and self.inp.is_link_slot(slot) and self.inp.direction(slot) == 0:
            wait = min(self.inp.request_queue_s, self._queued_push_bits(w, self.inp.ps_of(slot)) / self.inp.link_bps)
            if wait > 0:
                heapq.heappush(self.deferred, (quantize(self.now + wait), seq, w, op))
                return
        self._enqueue(w, op, seq)

    def _enqueue(self, w: int, op: int, seq: int) -> None:
        wk = self.workers[w]
        slot = int(self.inp.slot[op])
        key = self.inp.stream_key(op, w, wk.step) if self.inp.is_link_slot(slot) or self.inp.recorded_keys is not None else 0.0
        heapq.heappush(wk.queues.setdefault(slot, []), (0, key, seq, op))

    def _queued_push_bits(self, w: int, ps: int) -> float:
        """Bits the other workers' active pushes to ``ps`` still have to send."""
        return sum(
            c.remaining for c in self.in_service
            if c.worker != w and self._is_flow(c) and self.inp.ps_of(c.slot) == ps and self.inp.direction(c.slot) == 1
        )

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
        conn = (w, slot)
        if self.conn_last_end.get(conn, -math.inf) < self.now:  # idle until now: a new activation
            k = self.conn_activations.get(conn, 0)
            self.conn_activations[conn] = k + 1
            self.conn_weight[conn] = 1.0
            if self.weights is not None:
                row = self.weights[w, self.inp.ps_of(slot), self.inp.direction(slot)]
                self.conn_weight[conn] = float(row[k % row.shape[0]])
            ended_at = self.conn_rate.get(conn, 0.0)
            self.conn_cap[conn] = (self.inp.window_gain * ended_at if self.inp.window_gain > 0 and ended_at > 0
                                   else math.inf)
        chunk = _Chunk(w, slot, op, size, last, self._next_seq(), self.now, wk.step)
        chunk.weight = self.conn_weight[conn]
        return chunk

    def _complete(self, c: _Chunk) -> None:
        w, wk = c.worker, self.workers[c.worker]
        self.events += 1
        self._record(c)
        if c.slot >= 0:
            del wk.busy[c.slot]
            if self.inp.is_link_slot(c.slot):
                self.conn_last_end[(w, c.slot)] = self.now
                self.conn_rate[(w, c.slot)] = c.rate
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
            go_on = wk.step + 1 < self.inp.steps
            if self.inp.sync_replicas:
                self._sync_step_done(w, go_on)
            elif go_on:
                self._start_step(w, wk.step + 1)
        else:
            self._dispatch(w)

    def _sync_step_done(self, w: int, go_on: bool) -> None:
        """Synchronous PS: count or drop ``w``'s gradient, apply the update, release (docstring)."""
        wk = self.workers[w]
        if wk.round < self.global_step:  # stale: dropped
            if go_on:
                self._start_step(w, wk.step + 1)
            return
        self.fresh += 1
        if self.fresh < self.inp.sync_replicas:
            if go_on:
                self.waiting.append(w)
            return
        self.global_step += 1
        self.fresh = 0
        self.updates.append(self.now)
        released, self.waiting = self.waiting + ([w] if go_on else []), []
        for x in released:
            self._start_step(x, self.workers[x].step + 1)

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


