"""The compiled engine's main loop: Algorithm 3.1 over arrays (see ``kernel.py``).

Tuples passed around (all numpy arrays unless said):
``graph = (slot, bits, instant, count, n_deps, dep_ptr, dep_idx, roots, dur, sampled,
priority, tindex, rand_keys, member_ptr, member_idx, spans, shares)`` over merged operations
(``dur`` is per profile step and *profile* operation; a merged operation runs its members
back to back; ``spans[p, g]`` is ``plan.chain_spans`` for profile step p and group g;
``shares[q]`` the sharing weights of queue q's connection, ``inputs.share_weights``);
``ipar = [W, R, n_ps, cap, keys, record, G, limit, resumable, resume, mode, sync, hetnic]``
(``keys``: 0 static stream priorities, 1 random stream keys, 2 the recorded order keying every
operation, ``rand_keys[0, sampled[w, step], tindex[g]]``; ``cap``: steps per worker the arrays hold; ``mode``: how link rates are kept, general,
uniform or proportional, see ``kernel.py``; ``sync``: replicas to aggregate, 0 for asynchronous; ``hetnic``: the
workers' NIC rates differ, ``links[NIC]``);
``fpar = [link_bps, nic_bps, win_bits, request_queue_s, multi_flow_goodput, window_gain, two_way_efficiency]``;
``ws = (pending, finished, kstep, served, step_ends, start_s, pause_t, round, fifo, sync,
updates)``: per worker, then the synchronous PS's state (``reference.py`` states the rules):
each worker's round, the workers waiting for the update in order (then, once it is applied,
the ones to start), ``sync = [global step, fresh gradients, waiting, updates, to start]`` and
the update times;
``ch = (busy, cop, clast, cseq, cstart)`` per queue ``q = w * R + slot``;
``ctr = [seq, events, timeline length, paused, stalled]``; ``tl`` = timeline columns
(w, step, g, start, end).

The event heap holds computation and zero-byte completions (queue -1), pulls whose request
is still on its way (queue -3, with the seq drawn at release; ``reference.py`` states the
rule) and every worker's first start (queue -2, seq ``w - W``, so starts come before anything
else at the same instant, in worker order), all ordered by ``(time, seq)`` exactly as the
reference orders them.

Two ways to end. Plain (``resumable = 0``): a worker stops after ``cap`` steps and the run
goes on until all have stopped, as ``simulate`` promises. Resumable (``resumable = 1``):
workers never stop early; the run *pauses* once the first worker has finished ``limit``
steps, at time ``pause_t``, after every event at that same instant. The state is then that of
an endless run at ``pause_t``, and ``resume = 1`` continues it (with a larger ``limit`` and
arrays grown to a larger ``cap``) exactly as if it had never paused. A worker that would need
a step beyond ``cap`` (only if whole steps take no time) stops and sets ``stalled``.

Every helper is inlined (``jit.inlined``) and each is called from one place in ``run`` where
it matters: an out-of-line call passed the whole state tuple by value (see ``kernel.py``). The on-disk cache of ``run`` is checked against every source file of the
engine, not only this one (``engine_cache.py``): an edit of ``kernel.py`` compiles it again.
"""

from __future__ import annotations

import numpy as np

from advisor.core.models.ps_des.simulator.heaps import e_pop, e_push, e_top, q_pop, q_push
from advisor.core.models.ps_des.simulator.jit import inlined, njit, quantize
from advisor.core.models.ps_des.simulator.kernel import (
    APOS,
    CONN_LAST,
    CONN_RATE,
    N,
    NQ,
    NS,
    NT,
    DIRTY,
    RATE,
    _add_flow,
    _advance,
    _next_completion,
    _rates,
    _remove_flow,
    activate,
    other_direction_may_change,
    queued_push_bits,
)

_START = -2  # event-heap queue marking a worker's first start
_DEFER = -3  # event-heap queue marking a pull whose request is on its way
SEQ, EVENTS, TL_LEN, PAUSED, STALLED = 0, 1, 2, 3, 4  # ctr
LIMIT, RESUMABLE, RESUME, UNIFORM, SYNC = 7, 8, 9, 10, 11  # ipar (UNIFORM: the rate mode, kernel.py), after [W, R, n_ps, cap, keys, record, G]
HETNIC = 12  # ipar
GSTEP, FRESH, NWAIT, NUPD, NSTART = 0, 1, 2, 3, 4  # ws[9], the synchronous PS's counters
RQ, ETA, WGAIN, TWOWAY = 3, 4, 5, 6  # fpar, after [link_bps, nic_bps, win_bits]


@inlined
def _is_link(s):  # type: ignore[no-untyped-def]
    return s >= 1 and (s - 1) % 3 < 2


@inlined
def _release(g, w, now, graph, ipar, fpar, ws, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Queue ``g`` for ``w`` (or complete it, if a zero-byte transfer; or defer a pull whose
    request queues behind others' pushes: ``reference.py``)."""
    ctr[SEQ] += 1
    if graph[2][g]:
        e_push(ev, now, ctr[SEQ], -1, w, g)
        return
    s = graph[0][g]
    if fpar[RQ] > 0.0 and _is_link(s) and (s - 1) % 3 == 0:
        wait = min(fpar[RQ], queued_push_bits(links, w, (s - 1) // 3, now, ipar[1], ipar[0], ipar[UNIFORM]) / fpar[0])
        if wait > 0.0:
            e_push(ev, quantize(now + wait), ctr[SEQ], _DEFER, w, g)
            return
    _enqueue(g, w, ctr[SEQ], graph, ipar, ws, qs)


@inlined
def _enqueue(g, w, seq, graph, ipar, ws, qs):  # type: ignore[no-untyped-def]
    s = graph[0][g]
    key = 0.0
    if ipar[4] == 2:  # the recorded order: every group keyed by the recorded step it replays
        key = graph[12][0, graph[9][w, ws[2][w]], graph[11][g]]
    elif _is_link(s):
        key = graph[12][w, ws[2][w], graph[11][g]] if ipar[4] else graph[10][g]
    q_push(qs, w * ipar[1] + s, 0, key, seq, g)


@inlined
def _compute_end(g, w, now, graph, ws):  # type: ignore[no-untyped-def]
    """``g``'s members back to back, each end rounded to the grid (``plan.chain_spans``)."""
    dur, p, mptr, midx = graph[8], graph[9][w, ws[2][w]], graph[13], graph[14]
    end = now + graph[15][p, g, 0]
    if end < graph[15][p, g, 1]:
        return end
    t = now
    for j in range(mptr[g], mptr[g + 1]):
        t = quantize(t + dur[p, midx[j]])
    return t


@inlined
def _start_chunk(q, w, s, g, now, graph, ipar, fpar, ws, ch, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Start ``g`` on queue ``q``: a computation (heap event at its end), a link flow, or a
    first transfer chunk whose request must queue (heap event at its activation)."""
    busy, cop, clast, cseq, cstart = ch
    ctr[SEQ] += 1
    busy[q], cop[q], cseq[q], cstart[q] = 1, g, ctr[SEQ], now
    if not _is_link(s):
        clast[q] = 1
        e_push(ev, _compute_end(g, w, now, graph, ws), ctr[SEQ], q, w, g)
        return
    bits, win, served = graph[1][g], fpar[2], ws[3]
    first = served[w, g] == 0
    if not first:
        size, clast[q] = bits - win, 1
    elif bits <= win:
        size, clast[q] = bits, 1
    else:
        size, clast[q] = win, 0
        served[w, g] = 1
    d = (s - 1) % 3
    _add_flow(links, d, q, now, size, ctr[SEQ], activate(links, q, now, graph[16], fpar[WGAIN]), ipar[UNIFORM])
    other_direction_may_change(links, d, now, ipar[UNIFORM], fpar[WGAIN], fpar[TWOWAY])


@inlined
def _dispatch(w, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Start queued work on every free slot of ``w``, slot 0 first."""
    R = ipar[1]
    busy, qn = ch[0], qs[4]
    for s in range(R):
        q = w * R + s
        if busy[q] == 0 and qn[q] > 0:
            g = q_pop(qs, q)
            _start_chunk(q, w, s, g, now, graph, ipar, fpar, ws, ch, ev, links, ctr)


@inlined
def _start_step(w, k, now, graph, ipar, fpar, ws, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Reset ``w``'s step state and release the roots (the caller dispatches)."""
    pending, finished, kstep, served = ws[0], ws[1], ws[2], ws[3]
    n_deps, roots = graph[4], graph[7]
    kstep[w], finished[w] = k, 0
    ws[7][w] = ws[9][GSTEP]  # the round of this step (synchronous PS)
    for g in range(ipar[6]):
        pending[w, g] = n_deps[g]
        served[w, g] = 0
    for j in range(roots.shape[0]):
        _release(roots[j], w, now, graph, ipar, fpar, ws, qs, ev, links, ctr)


@inlined
def _step_done(w, now, ipar, ws, ctr):  # type: ignore[no-untyped-def]
    """Record ``w``'s step end; the next step to start, or -1 if ``w`` stops."""
    k = ws[2][w]
    ws[4][w, k] = now
    if ipar[RESUMABLE] and k + 1 == ipar[LIMIT] and ctr[PAUSED] == 0:
        ctr[PAUSED] = 1
        ws[6][0] = now
    nxt = k + 1
    if k + 1 >= ipar[3]:
        nxt = -1
        if ipar[RESUMABLE]:
            ctr[STALLED] = 1
    if ipar[SYNC] == 0:
        return nxt
    return _sync_done(w, nxt, now, ipar, ws)


@inlined
def _sync_done(w, nxt, now, ipar, ws):  # type: ignore[no-untyped-def]
    """Synchronous PS at ``w``'s step end: ``nxt`` if its stale gradient is dropped, else -1;
    an update leaves the workers to start in ``fifo[:NSTART]``, ``w`` last (``reference.py``)."""
    fifo, sc = ws[8], ws[9]
    if ws[7][w] < sc[GSTEP]:
        return nxt
    sc[FRESH] += 1
    if nxt >= 0:
        fifo[sc[NWAIT]] = w
        sc[NWAIT] += 1
    if sc[FRESH] < ipar[SYNC]:
        return -1
    sc[GSTEP] += 1
    sc[FRESH] = 0
    ws[10][sc[NUPD]] = now
    sc[NUPD] += 1
    sc[NSTART] = sc[NWAIT]
    sc[NWAIT] = 0
    return -1


@inlined
def _complete(w, q, g, last, start, now, graph, ipar, fpar, ws, qs, ev, links, ctr, tl):  # type: ignore[no-untyped-def]
    """Finish a chunk of ``g``; the next step ``w`` must start, or -1."""
    pending, finished = ws[0], ws[1]
    count, dep_ptr, dep_idx = graph[3], graph[5], graph[6]
    ctr[EVENTS] += count[g]
    if ipar[5]:
        i = ctr[TL_LEN]
        tl[0][i], tl[1][i], tl[2][i], tl[3][i], tl[4][i] = w, ws[2][w], g, start, now
        ctr[TL_LEN] = i + 1
    if not last:
        ctr[SEQ] += 1
        q_push(qs, q, 1, 0.0, ctr[SEQ], g)
        return -1
    finished[w] += 1
    for j in range(dep_ptr[g], dep_ptr[g + 1]):
        d = dep_idx[j]
        pending[w, d] -= 1
        if pending[w, d] == 0:
            _release(d, w, now, graph, ipar, fpar, ws, qs, ev, links, ctr)
    if finished[w] == ipar[6]:
        return _step_done(w, now, ipar, ws, ctr)
    return -1


@njit(cache=True, _nrt=False)
def run(graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl):  # type: ignore[no-untyped-def]
    """Simulate until every worker has run all its steps, or until the pause (module docstring)."""
    W, R, n_ps, uni = ipar[0], ipar[1], ipar[2], ipar[UNIFORM]
    d_nt, dirty, d_ns, d_nq, act_n = links[NT], links[DIRTY], links[NS], links[NQ], links[N]
    busy, cop, clast, cstart = ch[0], ch[1], ch[2], ch[4]
    et, es, en = ev[0], ev[1], ev[3]
    if ipar[RESUME] == 0:
        for w in range(W):
            e_push(ev, ws[5][w], w - W, _START, w, 0)
    while True:
        for d in range(2):
            if dirty[d]:
                dirty[d] = 0
                if act_n[d] > 0:
                    _rates(links, d, uni, n_ps, R, W, fpar[0], fpar[1], fpar[ETA], ipar[HETNIC], fpar[WGAIN],
                           fpar[TWOWAY])
                    _next_completion(links, d, uni)
        src, best_t, best_s = -1, np.inf, 0
        if en[0] > 0:
            src, best_t, best_s = 2, et[0], es[0]
        for d in range(2):
            if act_n[d] > 0 and (src < 0 or d_nt[d] < best_t or (d_nt[d] == best_t and d_ns[d] < best_s)):
                src, best_t, best_s = d, d_nt[d], d_ns[d]
        if src < 0 or (ctr[PAUSED] and best_t > ws[6][0]):
            break
        now = best_t
        nxt = -1
        # what completes (a heap event's operation, or a link's chunk): one call of _complete
        completes, last, start = True, True, now
        if src == 2:
            q, w, g = e_top(ev)
            e_pop(ev)
            if q == _START:
                nxt = 0
                completes = False
            elif q == _DEFER:  # the pull's request has arrived: queue it (w dispatches below)
                ctr[SEQ] += 1
                _enqueue(g, w, ctr[SEQ], graph, ipar, ws, qs)
                completes = False
            elif q >= 0:
                busy[q] = 0
                start = cstart[q]
        else:
            q = d_nq[src]
            w = q // R
            g = cop[q]
            _advance(links, src, now, uni)
            links[CONN_RATE][q] = links[RATE][src, links[APOS][q]]  # the window a next activation keeps
            _remove_flow(links, src, q, uni)
            links[CONN_LAST][q] = now
            other_direction_may_change(links, src, now, uni, fpar[WGAIN], fpar[TWOWAY])
            busy[q] = 0
            last, start = clast[q] == 1, cstart[q]
        if completes:
            nxt = _complete(w, q, g, last, start, now, graph, ipar, fpar, ws, qs, ev, links, ctr, tl)
        # Workers released by a synchronous update (w last, if it goes on), then w itself (a
        # no-op dispatch if it was released). One call site each: a second inlined copy of
        # these helpers would grow the loop.
        n_start = ws[9][NSTART]
        ws[9][NSTART] = 0
        for i in range(n_start + 1):
            x, k = w, nxt
            if i < n_start:
                x = ws[8][i]
                k = ws[2][x] + 1
            if k >= 0:
                _start_step(x, k, now, graph, ipar, fpar, ws, qs, ev, links, ctr)
            _dispatch(x, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)
