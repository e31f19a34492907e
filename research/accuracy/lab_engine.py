"""Lab engine: the reference engine (advisor/core/simulator/reference.py) plus candidate rules.

Every rule is off by default, so LabSimulation(profile, inputs, Rules()) equals the
reference engine (checked in check_lab.py). Rules:

rq_delay_s (d), rq_dirs, rq_mode -- request-path queueing applied at RELEASE:
    When a transfer op of worker w on direction D (0 = downlink/pull, 1 = uplink/push) is
    released at time t, and at t another worker has an active flow on the opposite
    direction of the same PS, the op only joins w's queue for D at quantize(t + wait).
    Ops released while others wait wait their own wait from their own release (so requests
    sent together overlap: a step pays the delay once, not once per stream).
    rq_mode 'const': wait = d.  'drain': wait = min(d, bits in service on the opposite
    direction by other workers / link rate): the request sits behind what is queued, at
    most the queue depth.
incumbent_weight (0 < a <= 1), incumbent_hold_s -- unfair sharing (loss-based CC, deep queue):
    In one direction a flow that becomes active while another worker already has an active
    flow there is a newcomer: it gets weight a (others 1) in weighted max-min sharing until
    incumbent_hold_s after its activation (or until it is alone); then weight 1.
cpu_cores, cpu_bits_cost, cpu_op_types -- a shared host CPU (testbed: PS and all workers on
    2 cores): every active flow of rate r (bit/s) needs cpu_bits_cost * r cores, every
    in-service compute op whose op_type is in cpu_op_types needs 1 core; when the demand
    exceeds cpu_cores everything using the CPU is slowed by the same factor (flows: rate x
    factor; compute ops progress at factor).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from advisor.core.profile import Profile
from advisor.core.simulator.inputs import SimInputs
from advisor.core.simulator.jit import quantize
from advisor.core.simulator.reference import ReferenceSimulation, _Chunk
from advisor.core.simulator.sharing import water_fill


@dataclass(frozen=True)
class Rules:
    rq_delay_s: float = 0.0
    rq_dirs: tuple[int, ...] = (0,)
    rq_mode: str = "const"
    incumbent_weight: float = 1.0
    incumbent_hold_s: float = 0.0
    cpu_cores: float = 0.0  # 0 = off
    cpu_bits_cost: float = 0.0  # cores per bit/s of an active flow
    cpu_op_types: frozenset = frozenset()
    cpu_fixed: dict = field(default_factory=dict)  # unused placeholder
    cpu_worker_frac: float = 0.0  # fraction of a core a worker compute op uses while running
    share_sigma: float = 0.0  # lognormal sigma of a connection's random sharing weight, redrawn per activation
    speed: tuple = ()  # per-worker factor on the worker's compute durations (heterogeneous workers)
    link_eff_multi: float = 1.0  # capacity factor of a direction while >= 2 workers' flows share it


def weighted_fill(weights: list[float], cap_total: float, cap_each: float) -> list[float]:
    """Weighted max-min share of one link of cap_total, each flow at most cap_each."""
    n = len(weights)
    rates = [0.0] * n
    left = list(range(n))
    rem = cap_total
    while left:
        wsum = sum(weights[j] for j in left)
        unit = rem / wsum
        capped = [j for j in left if weights[j] * unit >= cap_each]
        if not capped:
            for j in left:
                rates[j] = weights[j] * unit
            break
        for j in capped:
            rates[j] = cap_each
            rem -= cap_each
        left = [j for j in left if j not in capped]
    return rates


class LabSimulation(ReferenceSimulation):
    def __init__(self, profile: Profile, inputs: SimInputs, rules: Rules, record_timeline: bool = False) -> None:
        super().__init__(profile, inputs, record_timeline)
        self.rules = rules
        self.deferred: list[tuple[float, int, int, int]] = []  # (wake, seq, worker, op)
        self.op_type = [op.op_type or "" for op in profile.ops]
        self.cpu_op = [(op.op_type or "") in rules.cpu_op_types and not op.resource.is_transfer for op in profile.ops]
        self.rq_waits = 0
        self.conn_last_end: dict = {}
        self.conn_newcomer: dict = {}
        self.conn_rand: dict = {}
        import numpy as _np
        self.rng = _np.random.default_rng(12345 + inputs.workers)
        self.rq_wait_total = 0.0

    # -- event loop with deferred releases ------------------------------------------------
    def run(self):
        for start in [s for s in self.starts if s[0] == 0.0]:
            self.starts.remove(start)
            self._start_step(start[2], 0)
        while self.in_service or self.starts or self.deferred:
            self._next_event()
        from advisor.core.sim_types import SimulationResult

        return SimulationResult(
            workers=self.inp.workers,
            batch_size=self.profile.job.batch_size,
            step_ends_s=tuple(tuple(wk.ends) for wk in self.workers),
            events=self.events,
            timeline=None if self.timeline is None else tuple(self.timeline),
        )

    def _next_event(self) -> None:
        rates = self._rates()
        events = [(self._end(c, r), c.seq, j) for j, (c, r) in enumerate(zip(self.in_service, rates))]
        events += [(t, seq, -1 - k) for k, (t, seq, _) in enumerate(self.starts)]
        if self.deferred:
            t_d, seq_d, _, _ = self.deferred[0]
            events.append((t_d, seq_d, None))
        if self.rules.incumbent_weight < 1.0:
            ends = [getattr(c, "newcomer_until", -1.0) for c in self.in_service if self._is_flow(c)]
            ends = [e for e in ends if e > self.now]
            if ends:
                events.append((quantize(min(ends)), -10**9, "tick"))
        t, _, j = min(events, key=lambda e: (e[0], e[1]))
        dt = t - self.now
        cpu_on = self.rules.cpu_cores > 0
        for c, r in zip(self.in_service, rates):
            c.remaining -= r * dt
            if cpu_on and c.slot == 0:
                c.work_left -= self._op_speed() * dt
        self.now = t
        if j == "tick":
            return
        if j is None:
            _, _, w, op = heapq.heappop(self.deferred)
            self._enqueue(w, op)
            self._dispatch(w)
        elif j < 0:
            _, _, w = self.starts.pop(-1 - j)
            self._start_step(w, 0)
        elif self.in_service[j].waiting:
            self.in_service[j].waiting = False
        else:
            self._complete(self.in_service.pop(j))

    # -- request-path delay at release ------------------------------------------------------
    def _release(self, w: int, op: int) -> None:
        r = self.rules
        if r.rq_delay_s > 0 and not self.inp.instant[op]:
            slot = int(self.inp.slot[op])
            if self.inp.is_link_slot(slot) and self.inp.direction(slot) in r.rq_dirs:
                wait = self._request_wait(w, slot)
                if wait > 0:
                    self.rq_waits += 1
                    self.rq_wait_total += wait
                    heapq.heappush(self.deferred, (quantize(self.now + wait), self._next_seq(), w, op))
                    return
        super()._release(w, op)

    def _enqueue(self, w: int, op: int) -> None:
        ReferenceSimulation._release(self, w, op)

    def _request_wait(self, w: int, slot: int) -> float:
        ps, direction = self.inp.ps_of(slot), self.inp.direction(slot)
        others = [
            c for c in self.in_service
            if c.worker != w and self._is_flow(c) and self.inp.ps_of(c.slot) == ps and self.inp.direction(c.slot) != direction
        ]
        if not others:
            return 0.0
        d = self.rules.rq_delay_s
        if self.rules.rq_mode == "const":
            return d
        queued = sum(c.remaining for c in others) / self.inp.link_bps
        return min(d, queued)

    # -- sharing --------------------------------------------------------------------------
    _cpu_factor = 1.0

    def _rates(self) -> list[float]:
        r = self.rules
        rates = [1.0] * len(self.in_service)
        for direction in (0, 1):
            idx = [j for j, c in enumerate(self.in_service) if self._is_flow(c) and self._dir(c.slot) == direction]
            if not idx:
                continue
            if r.incumbent_weight < 1.0 or r.share_sigma > 0:
                weights = []
                for j in idx:
                    c = self.in_service[j]
                    newcomer = getattr(c, "newcomer_until", -1.0)
                    weights.append((r.incumbent_weight if self.now < newcomer else 1.0) * getattr(c, "rand_w", 1.0))
                cap = self.inp.link_bps
                if r.link_eff_multi != 1.0 and len({self.in_service[j].worker for j in idx}) >= 2:
                    cap *= r.link_eff_multi
                link_rates = weighted_fill(weights, cap, self.inp.nic_bps)
            else:
                flows = [(self.in_service[j].worker, self.inp.ps_of(self.in_service[j].slot)) for j in idx]
                cap = self.inp.link_bps
                if r.link_eff_multi != 1.0 and len({f[0] for f in flows}) >= 2:
                    cap *= r.link_eff_multi
                link_rates = water_fill(flows, cap, self.inp.nic_bps)
            for j, rate in zip(idx, link_rates):
                rates[j] = rate
        for j, c in enumerate(self.in_service):
            if c.waiting:
                rates[j] = 0.0
        self._cpu_factor = 1.0
        if r.cpu_cores > 0:
            demand = 0.0
            for j, c in enumerate(self.in_service):
                if self._is_flow(c):
                    demand += r.cpu_bits_cost * rates[j]
                elif c.slot == 0:
                    demand += r.cpu_worker_frac
            if demand > r.cpu_cores:
                f = r.cpu_cores / demand
                self._cpu_factor = f
                for j, c in enumerate(self.in_service):
                    if self._is_flow(c):
                        rates[j] *= f
        return rates

    def _op_speed(self) -> float:
        fw = self.rules.cpu_worker_frac
        return 1.0 / ((1.0 - fw) + fw / self._cpu_factor)

    def _end(self, c: _Chunk, rate: float) -> float:
        if c.waiting:
            return c.wake
        if c.slot >= 0 and not self.inp.is_link_slot(c.slot):
            if c.slot == 0 and self.rules.cpu_cores > 0:
                if c.work_left <= 0:
                    return self.now
                return quantize(self.now + c.work_left / self._op_speed())
            return c.end
        return quantize(self.now + c.remaining / rate) if c.remaining > 0 else self.now

    def _make_chunk(self, w: int, slot: int, op: int) -> _Chunk:
        c = super()._make_chunk(w, slot, op)
        if not self.inp.is_link_slot(slot):
            if slot == 0 and self.rules.speed:
                c.end = quantize(self.now + (c.end - self.now) * self.rules.speed[w])
            c.work_left = c.end - self.now  # seconds of one core (used only for CPU ops)
        if self.inp.is_link_slot(slot) and self.rules.share_sigma > 0:
            key = (w, self.inp.direction(slot))
            if self.conn_last_end.get(key, -1.0) < self.now or key not in self.conn_rand:
                self.conn_rand[key] = float(self.rng.lognormal(0.0, self.rules.share_sigma))
            c.rand_w = self.conn_rand[key]
        if self.inp.is_link_slot(slot) and self.rules.incumbent_weight < 1.0:
            # newcomer status belongs to the worker's connection in this direction: it starts
            # when the connection becomes active after being idle while another worker is
            # active in the same direction, and lasts incumbent_hold_s
            key = (w, self.inp.direction(slot))
            last_end = self.conn_last_end.get(key, -1.0)
            if last_end < self.now:  # connection was idle (not a back-to-back stream)
                direction = self.inp.direction(slot)
                busy = any(x.worker != w and self._is_flow(x) and self._dir(x.slot) == direction for x in self.in_service)
                self.conn_newcomer[key] = quantize(self.now + self.rules.incumbent_hold_s) if busy else -1.0
            c.newcomer_until = self.conn_newcomer.get(key, -1.0)
        return c

    def _complete(self, c: _Chunk) -> None:
        if c.slot > 0 and self.inp.is_link_slot(c.slot):
            self.conn_last_end[(c.worker, self.inp.direction(c.slot))] = self.now
        super()._complete(c)


def simulate_lab(profile, network, settings, rules: Rules, record_timeline=False):
    from advisor.core.simulator.inputs import prepare

    return LabSimulation(profile, prepare(profile, network, settings), rules, record_timeline).run()
