"""The compiled engine's main loop: Algorithm 3.1 over arrays (see ``kernel.py``).

Tuples passed around (all numpy arrays unless said):
``graph = (slot, bits, instant, count, n_deps, dep_ptr, dep_idx, roots, dur, sampled,
priority, tindex, rand_keys, member_ptr, member_idx)`` over merged operations (``dur`` is
per profile step and *profile* operation; a merged operation runs its members back to back); ``ipar = [W, R, n_ps, steps,
use_random, record, G]``;
``fpar = [link_bps, nic_bps, win_bits, queue_delay_s]``;
``ws = (pending, finished, kstep, served, step_ends, start_s)`` per worker;
``ch = (busy, cop, clast, cseq, cstart)`` per queue ``q = w * R + slot``;
``ctr = [seq, events, timeline length]``; ``tl`` = timeline columns (w, step, g, start, end).

The event heap holds, besides computation and zero-byte completions (queue -1), the
request-path activations of waiting transfer chunks (their link queue, with the chunk's
seq; the chunk's size waits in ``links[6]``) and staggered first starts (queue -2, seq
``w - W``), all ordered by ``(time, seq)`` exactly as the reference orders them.
"""

from __future__ import annotations

import numpy as np

from advisor.core.simulator.heaps import e_pop, e_push, q_pop, q_push
from advisor.core.simulator.jit import njit, quantize
from advisor.core.simulator.kernel import _add_flow, _advance, _next_completion, _rates, _remove_flow, opposite_busy

_START = -2  # event-heap queue marking a worker's staggered first start


@njit(cache=True, _nrt=False)
def _is_link(s):  # type: ignore[no-untyped-def]
    return s >= 1 and (s - 1) % 3 < 2


@njit(cache=True, _nrt=False)
def _release(g, w, now, graph, ipar, ws, qs, ev, ctr):  # type: ignore[no-untyped-def]
    slot, instant, priority, tindex, rand_keys = graph[0], graph[2], graph[10], graph[11], graph[12]
    ctr[0] += 1
    if instant[g]:
        e_push(ev, now, ctr[0], -1, w, g)
        return
    s = slot[g]
    key = 0.0
    if _is_link(s):
        key = rand_keys[w, ws[2][w], tindex[g]] if ipar[4] else priority[g]
    q_push(qs, w * ipar[1] + s, 0, key, ctr[0], g)


@njit(cache=True, _nrt=False)
def _compute_end(g, w, now, graph, ws):  # type: ignore[no-untyped-def]
    dur, p, mptr, midx = graph[8], graph[9][w, ws[2][w]], graph[13], graph[14]
    t = now
    for j in range(mptr[g], mptr[g + 1]):
        t = quantize(t + dur[p, midx[j]])
    return t


@njit(cache=True, _nrt=False)
def _start_chunk(q, w, s, g, now, graph, ipar, fpar, ws, ch, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Start ``g`` on queue ``q``: a computation (heap event at its end), a link flow, or a
    first transfer chunk whose request must queue (heap event at its activation)."""
    busy, cop, clast, cseq, cstart = ch
    ctr[0] += 1
    busy[q], cop[q], cseq[q], cstart[q] = 1, g, ctr[0], now
    if not _is_link(s):
        clast[q] = 1
        e_push(ev, _compute_end(g, w, now, graph, ws), ctr[0], q, w, g)
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
    if first and fpar[3] > 0.0 and opposite_busy(links, q, ipar[1]):
        links[6][q] = size  # activated by _activate at the end of the wait
        e_push(ev, quantize(now + fpar[3]), ctr[0], q, w, g)
        return
    _add_flow(links, (s - 1) % 3, q, now, size, ipar[1])


@njit(cache=True, _nrt=False, inline="always")
def _dispatch(w, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Start queued work on every free slot of ``w``.

    Inlined by numba itself (``inline="always"``): when LLVM's own inliner left it out of
    line (it did once the request-path branch made ``_start_chunk`` larger), every call
    passed the big array tuples by value and the engine ran ~35% slower.
    """
    R = ipar[1]
    busy, qn = ch[0], qs[4]
    for s in range(R):
        q = w * R + s
        if busy[q] == 0 and qn[q] > 0:
            g = q_pop(qs, q)
            _start_chunk(q, w, s, g, now, graph, ipar, fpar, ws, ch, ev, links, ctr)


@njit(cache=True, _nrt=False)
def _start_step(w, k, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    pending, finished, kstep, served = ws[0], ws[1], ws[2], ws[3]
    n_deps, roots = graph[4], graph[7]
    kstep[w], finished[w] = k, 0
    for g in range(ipar[6]):
        pending[w, g] = n_deps[g]
        served[w, g] = 0
    for j in range(roots.shape[0]):
        _release(roots[j], w, now, graph, ipar, ws, qs, ev, ctr)
    _dispatch(w, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)


@njit(cache=True, _nrt=False)
def _complete(w, q, g, last, start, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl):  # type: ignore[no-untyped-def]
    pending, finished, kstep, step_ends = ws[0], ws[1], ws[2], ws[4]
    count, dep_ptr, dep_idx = graph[3], graph[5], graph[6]
    ctr[1] += count[g]
    if ipar[5]:
        i = ctr[2]
        tl[0][i], tl[1][i], tl[2][i], tl[3][i], tl[4][i] = w, kstep[w], g, start, now
        ctr[2] = i + 1
    if not last:
        ctr[0] += 1
        q_push(qs, q, 1, 0.0, ctr[0], g)
    else:
        finished[w] += 1
        for j in range(dep_ptr[g], dep_ptr[g + 1]):
            d = dep_idx[j]
            pending[w, d] -= 1
            if pending[w, d] == 0:
                _release(d, w, now, graph, ipar, ws, qs, ev, ctr)
    if finished[w] == ipar[6]:
        step_ends[w, kstep[w]] = now
        if kstep[w] + 1 < ipar[3]:
            _start_step(w, kstep[w] + 1, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)
    else:
        _dispatch(w, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)


@njit(cache=True, _nrt=False)
def _activate(q, now, ipar, links):  # type: ignore[no-untyped-def]
    """A waiting first chunk's request has arrived: it becomes an active flow."""
    _add_flow(links, (q % ipar[1] - 1) % 3, q, now, links[6][q], ipar[1])


@njit(cache=True, _nrt=False)
def _start_workers(graph, ipar, fpar, ws, ch, qs, ev, links, ctr):  # type: ignore[no-untyped-def]
    """Workers starting at 0 start now, in order; later starts become heap events."""
    W, start_s = ipar[0], ws[5]
    for w in range(W):
        if start_s[w] == 0.0:
            _start_step(w, 0, 0.0, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)
        else:
            e_push(ev, start_s[w], w - W, _START, w, 0)


@njit(cache=True, _nrt=False)
def run(graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl):  # type: ignore[no-untyped-def]
    """Simulate until every worker has run all its steps; results land in ``ws`` and ``ctr``."""
    W, R, n_ps = ipar[0], ipar[1], ipar[2]
    d_nt, dirty, d_ns, d_nq, act_n = links[7], links[8], links[9], links[10], links[1]
    busy, cop, clast, cstart = ch[0], ch[1], ch[2], ch[4]
    et, es, eq, ew, eo, en = ev
    _start_workers(graph, ipar, fpar, ws, ch, qs, ev, links, ctr)
    while True:
        for d in range(2):
            if dirty[d]:
                dirty[d] = 0
                if act_n[d] > 0:
                    _rates(links, d, n_ps, R, W, fpar[0], fpar[1])
                    _next_completion(links, ch[3], d)
        src, best_t, best_s = -1, np.inf, 0
        if en[0] > 0:
            src, best_t, best_s = 2, et[0], es[0]
        for d in range(2):
            if act_n[d] > 0 and (src < 0 or d_nt[d] < best_t or (d_nt[d] == best_t and d_ns[d] < best_s)):
                src, best_t, best_s = d, d_nt[d], d_ns[d]
        if src < 0:
            break
        now = best_t
        if src == 2:
            q, w, g = eq[0], ew[0], eo[0]
            e_pop(ev)
            if q == _START:
                _start_step(w, 0, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr)
                continue
            if q >= 0 and _is_link(q % R):
                _activate(q, now, ipar, links)
                continue
            start = now
            if q >= 0:
                busy[q] = 0
                start = cstart[q]
            _complete(w, q, g, True, start, now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl)
        else:
            q = d_nq[src]
            _advance(links, src, now)
            _remove_flow(links, src, q, R)
            busy[q] = 0
            _complete(q // R, q, cop[q], clast[q] == 1, cstart[q], now, graph, ipar, fpar, ws, ch, qs, ev, links, ctr, tl)
