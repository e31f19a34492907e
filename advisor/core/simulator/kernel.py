"""The compiled event loop of the fast engine (same semantics as ``reference.py``).

Differences from the reference are only in how time is kept, not in what happens:

- a computation chunk's end is known when it starts, so it goes on an event heap keyed
  ``(end, seq)``; nothing is rescanned for it;
- transfer chunks live in one flow set per direction (downlinks, uplinks). A direction's
  remaining bits are advanced, rates recomputed (water-filling; with one PS simply
  ``min(B/n, NIC)``) and its next completion found only when that direction's set of flows
  changes, i.e. O(active flows) per transfer event and O(log n) per computation event;
- chains of computation are merged (``plan.py``).

``g`` below is a merged operation ("group"); a queue/slot index is ``q = w * R + slot``.
State travels in tuples of arrays; ``links`` is
``(act, act_n, apos, d_last, rem, rate, size, d_nt, dirty, d_ns, d_nq, *scratch)``: per
direction the active queue indices, their count, each flow's position in ``act``, the time
the direction was last advanced, per flow remaining bits / rate / chunk size, and the
direction's next completion (time, seq, queue) with a flag saying it must be recomputed;
then scratch arrays for water-filling (``rem_link, rem_nic, cnt_link, cnt_nic, frozen``);
then ``pcnt`` (active flows per direction and PS) and ``isact`` (per queue: 1 while its
chunk is an active flow), which answer the request-path queueing test in O(1).
Compiled without numba's reference counting (``_nrt=False``): the loop allocates nothing,
and refcount updates on every array access made it ~10x slower.
"""

from __future__ import annotations

import numpy as np

from advisor.core.simulator.jit import njit, quantize

_BIG = np.iinfo(np.int64).max


@njit(cache=True, _nrt=False)
def _advance(links, d, t):  # type: ignore[no-untyped-def]
    act, act_n, d_last, rem, rate = links[0], links[1], links[3], links[4], links[5]
    dt = t - d_last[d]
    if dt > 0.0:
        for j in range(act_n[d]):
            q = act[d, j]
            rem[q] -= rate[q] * dt
    d_last[d] = t


@njit(cache=True, _nrt=False)
def _rates(links, d, n_ps, R, W, link_bps, nic_bps):  # type: ignore[no-untyped-def]
    act, act_n, rate = links[0], links[1], links[5]
    n = act_n[d]
    if n_ps == 1:
        r = link_bps / n
        if nic_bps < r:
            r = nic_bps
        for j in range(n):
            rate[act[d, j]] = r
        return
    rem_link, rem_nic, cnt_link, cnt_nic, frozen = links[11], links[12], links[13], links[14], links[15]
    rem_link[:] = link_bps
    rem_nic[:] = nic_bps
    cnt_link[:] = 0
    cnt_nic[:] = 0
    frozen[:n] = False
    for j in range(n):
        q = act[d, j]
        cnt_link[(q % R - 1) // 3] += 1
        cnt_nic[q // R] += 1
    left = n
    while left > 0:
        best, kind, which = np.inf, -1, -1
        for i in range(n_ps):
            if cnt_link[i] > 0 and rem_link[i] / cnt_link[i] < best:
                best, kind, which = rem_link[i] / cnt_link[i], 0, i
        for w in range(W):
            if cnt_nic[w] > 0 and rem_nic[w] / cnt_nic[w] < best:
                best, kind, which = rem_nic[w] / cnt_nic[w], 1, w
        for j in range(n):
            q = act[d, j]
            ps, w = (q % R - 1) // 3, q // R
            if frozen[j] or (ps if kind == 0 else w) != which:
                continue
            rate[q] = best
            frozen[j] = True
            left -= 1
            cnt_link[ps] -= 1
            cnt_nic[w] -= 1
            rem_link[ps] = max(rem_link[ps] - best, 0.0)
            rem_nic[w] = max(rem_nic[w] - best, 0.0)


@njit(cache=True, _nrt=False)
def _next_completion(links, cseq, d):  # type: ignore[no-untyped-def]
    act, act_n, d_last, rem, rate = links[0], links[1], links[3], links[4], links[5]
    d_nt, d_ns, d_nq = links[7], links[9], links[10]
    best_t, best_s, best_q = np.inf, _BIG, -1
    for j in range(act_n[d]):
        q = act[d, j]
        t = quantize(d_last[d] + rem[q] / rate[q]) if rem[q] > 0.0 else d_last[d]
        if t < best_t or (t == best_t and cseq[q] < best_s):
            best_t, best_s, best_q = t, cseq[q], q
    d_nt[d], d_ns[d], d_nq[d] = best_t, best_s, best_q


@njit(cache=True, _nrt=False)
def _add_flow(links, d, q, now, bits, R):  # type: ignore[no-untyped-def]
    act, act_n, apos, rem, size, dirty = links[0], links[1], links[2], links[4], links[6], links[8]
    _advance(links, d, now)
    act[d, act_n[d]] = q
    apos[q] = act_n[d]
    act_n[d] += 1
    links[16][d, (q % R - 1) // 3] += 1
    links[17][q] = 1
    rem[q] = bits
    size[q] = bits
    dirty[d] = 1


@njit(cache=True, _nrt=False)
def _remove_flow(links, d, q, R):  # type: ignore[no-untyped-def]
    act, act_n, apos, dirty = links[0], links[1], links[2], links[8]
    links[16][d, (q % R - 1) // 3] -= 1
    links[17][q] = 0
    last = act[d, act_n[d] - 1]
    act[d, apos[q]] = last
    apos[last] = apos[q]
    act_n[d] -= 1
    dirty[d] = 1


@njit(cache=True, _nrt=False)
def opposite_busy(links, q, R):  # type: ignore[no-untyped-def]
    """Is another worker's active flow on the other direction of queue ``q``'s PS link?

    One flow per (worker, PS, direction) at most, so: the opposite direction's flow count
    on that PS, minus this worker's own flow there.
    """
    s = q % R
    d, ps = (s - 1) % 3, (s - 1) // 3
    own = links[17][q - s + 1 + 3 * ps + (1 - d)]
    return links[16][1 - d, ps] - own > 0
