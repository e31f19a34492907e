"""Binary heaps on preallocated numpy arrays, for the compiled engine.

Two kinds, both min-heaps with lexicographic keys and no allocation after setup:

- scheduler queues, one row per (worker, slot): key ``(round, priority, seq)``, value op;
  bundled as the tuple ``(rnd, pri, seq, val, size, head, fifo)``. A queue marked ``fifo``
  only ever receives keys in increasing order (computation: always ``(0, 0, seq)``; links
  when every stream has the same priority and none is split), so its heap order *is* its
  arrival order: it is kept as a plain first-in-first-out row ``val[head:head + size]``,
  with O(1) operations instead of O(log n). (With a step's 200 pulls released at once, heap
  pops took a fifth of the engine's time.) The row is empty, and ``head`` back at 0, at
  every step's start, so it never holds more than the slot's operations of one step;
- the event heap of computation and zero-byte completions: key ``(time, seq)``, value
  ``(queue, worker, op)`` packed into one int64 (``e_top`` unpacks it); bundled as
  ``(t, seq, payload, size)`` with ``size`` an array of length 1.

Written in the subset of Python that numba compiles, and inlined into the loop by numba
(``jit.inlined_ir``: several are called with constant arguments); without numba they run as
plain (slow) Python.
"""

from __future__ import annotations

from advisor.core.models.ps_des.simulator.jit import inlined_ir


@inlined_ir
def _q_less(r1, p1, s1, r2, p2, s2):  # type: ignore[no-untyped-def]
    if r1 != r2:
        return r1 < r2
    if p1 != p2:
        return p1 < p2
    return s1 < s2


@inlined_ir
def q_push(qs, q, rnd, pri, seq, val):  # type: ignore[no-untyped-def]
    qr, qp, qq, qv, qn, qh, fifo = qs
    if fifo[q]:
        qv[q, qh[q] + qn[q]] = val
        qn[q] += 1
        return
    i = qn[q]
    qn[q] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _q_less(rnd, pri, seq, qr[q, parent], qp[q, parent], qq[q, parent]):
            break
        qr[q, i], qp[q, i], qq[q, i], qv[q, i] = qr[q, parent], qp[q, parent], qq[q, parent], qv[q, parent]
        i = parent
    qr[q, i], qp[q, i], qq[q, i], qv[q, i] = rnd, pri, seq, val


@inlined_ir
def q_pop(qs, q):  # type: ignore[no-untyped-def]
    qr, qp, qq, qv, qn, qh, fifo = qs
    if fifo[q]:
        top = qv[q, qh[q]]
        qn[q] -= 1
        qh[q] = qh[q] + 1 if qn[q] > 0 else 0
        return top
    top = qv[q, 0]
    n = qn[q] - 1
    qn[q] = n
    if n == 0:
        return top
    rnd, pri, seq, val = qr[q, n], qp[q, n], qq[q, n], qv[q, n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        right = child + 1
        if right < n and _q_less(qr[q, right], qp[q, right], qq[q, right], qr[q, child], qp[q, child], qq[q, child]):
            child = right
        if not _q_less(qr[q, child], qp[q, child], qq[q, child], rnd, pri, seq):
            break
        qr[q, i], qp[q, i], qq[q, i], qv[q, i] = qr[q, child], qp[q, child], qq[q, child], qv[q, child]
        i = child
    qr[q, i], qp[q, i], qq[q, i], qv[q, i] = rnd, pri, seq, val
    return top


# An event's (queue, worker, op), packed into one int64: fewer arrays to move per heap level.
E_OP_BITS, E_W_BITS, E_Q_BITS = 24, 20, 19
E_Q_OFFSET = 4  # queues are >= -3 (loop.py's markers)


@inlined_ir
def _e_less(t1, s1, t2, s2):  # type: ignore[no-untyped-def]
    return t1 < t2 or (t1 == t2 and s1 < s2)


@inlined_ir
def _e_sift_up(et, es, ep, i, t, seq, p):  # type: ignore[no-untyped-def]
    """Place the entry ``(t, seq, p)`` at the hole ``i`` or above it, moving larger parents down."""
    while i > 0:
        parent = (i - 1) >> 1
        if not _e_less(t, seq, et[parent], es[parent]):
            break
        et[i], es[i], ep[i] = et[parent], es[parent], ep[parent]
        i = parent
    et[i], es[i], ep[i] = t, seq, p


@inlined_ir
def e_push(ev, t, seq, q, w, op):  # type: ignore[no-untyped-def]
    et, es, ep, en = ev
    p = (((q + E_Q_OFFSET) << E_W_BITS | w) << E_OP_BITS) | op
    i = en[0]
    en[0] = i + 1
    _e_sift_up(et, es, ep, i, t, seq, p)


@inlined_ir
def e_top(ev):  # type: ignore[no-untyped-def]
    """The top entry's ``(queue, worker, op)``."""
    p = ev[2][0]
    return (p >> (E_W_BITS + E_OP_BITS)) - E_Q_OFFSET, (p >> E_OP_BITS) & ((1 << E_W_BITS) - 1), p & ((1 << E_OP_BITS) - 1)


@inlined_ir
def e_pop(ev):  # type: ignore[no-untyped-def]
    """Remove the top entry (read it first). Floyd's order: the hole at the top goes down to a
    leaf along the smaller children (chosen without a branch), then the last entry rises from
    there; it usually belongs near the bottom, so this takes fewer unpredictable comparisons.
    The keys ``(time, seq)`` are distinct, so the order of pops is the same as any heap's."""
    et, es, ep, en = ev
    n = en[0] - 1
    en[0] = n
    if n == 0:
        return
    t, seq, p = et[n], es[n], ep[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        right = child + 1
        if right < n:
            tr, tc = et[right], et[child]
            child += (tr < tc) | ((tr == tc) & (es[right] < es[child]))
        et[i], es[i], ep[i] = et[child], es[child], ep[child]
        i = child
    _e_sift_up(et, es, ep, i, t, seq, p)
