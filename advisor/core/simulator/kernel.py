"""The compiled engine's link state: active flows per direction, rates, next completion.

A direction (0 downlinks, 1 uplinks) keeps its active flows *densely*, in positions
``0..n-1`` of ``act[d]`` (queue index), ``rem[d]`` (bits left), ``rate[d]`` and ``fseq[d]``
(the chunk's seq), so advancing time and finding the next completion are straight loops
over contiguous memory. A flow leaves by moving the last one into its position.

The arithmetic is the reference's, operation for operation (``rem -= rate * dt``,
completion ``quantize(last + rem / rate)``), done only when a direction's set of flows
changes. With one PS every flow of a direction has the same rate ``min(B/n, NIC)``
(``urate``); completion time is then monotone in ``rem``, so the next completion is found
by a minimum over ``rem`` and exact times are computed only for flows within a few grid
ticks of it (the candidates for an exact tie, broken by seq as always).

``links`` is ``(act, n, apos, last, rem, rate, fseq, nt, dirty, ns, nq, wait_bits,
rem_link, rem_nic, cnt_link, cnt_nic, frozen, pcnt, isact, urate)``: per direction the flows
as above and their count, each queue's position, the time the direction was last advanced,
its next completion (time, seq, queue) with a flag saying it must be recomputed; per queue
the size of a chunk waiting its request-path delay; scratch for water-filling; ``pcnt``
(active flows per direction and PS) and ``isact`` (per queue: 1 while its chunk is an
active flow), which answer the request-path queueing test in O(1); the uniform rate.

Every function here is inlined into the loop (``inline="always"``): numba passes each array
of a tuple argument as seven or more machine words, so an out-of-line call with the engine's
state cost some 3.7 kB of argument copying, and calls were half of the engine's time.
"""

from __future__ import annotations

import numpy as np

from advisor.core.simulator.jit import TIME_GRID, njit, quantize

_BIG = np.iinfo(np.int64).max
# A flow whose rem is this many grid ticks (of its rate) above the minimum cannot complete
# at the same quantized time; see _next_uniform.
_TIE_TICKS = 16.0 / TIME_GRID


@njit(cache=True, _nrt=False, inline="always")
def _advance(links, d, t, n_ps):  # type: ignore[no-untyped-def]
    n, last, rem, rate, urate = links[1], links[3], links[4], links[5], links[19]
    dt = t - last[d]
    if dt > 0.0:
        if n_ps == 1:
            step = urate[d] * dt
            for j in range(n[d]):
                rem[d, j] -= step
        else:
            for j in range(n[d]):
                rem[d, j] -= rate[d, j] * dt
    last[d] = t


@njit(cache=True, _nrt=False, inline="always")
def _rates(links, d, n_ps, R, W, link_bps, nic_bps):  # type: ignore[no-untyped-def]
    """Water-filling as ``sharing.water_fill``; with one PS simply ``min(B/n, NIC)``."""
    act, n_arr, rate = links[0], links[1], links[5]
    n = n_arr[d]
    if n_ps == 1:
        r = link_bps / n
        if nic_bps < r:
            r = nic_bps
        links[19][d] = r
        return
    rem_link, rem_nic, cnt_link, cnt_nic, frozen = links[12], links[13], links[14], links[15], links[16]
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
            rate[d, j] = best
            frozen[j] = True
            left -= 1
            cnt_link[ps] -= 1
            cnt_nic[w] -= 1
            rem_link[ps] = max(rem_link[ps] - best, 0.0)
            rem_nic[w] = max(rem_nic[w] - best, 0.0)


@njit(cache=True, _nrt=False, inline="always")
def _flow_end(last, rem, rate):  # type: ignore[no-untyped-def]
    return quantize(last + rem / rate) if rem > 0.0 else last


@njit(cache=True, _nrt=False, inline="always")
def _next_completion(links, d, n_ps):  # type: ignore[no-untyped-def]
    """The direction's next completion by ``(time, seq)``."""
    act, n, last, rem, rate, fseq = links[0], links[1], links[3], links[4], links[5], links[6]
    best_t, best_s, best_j = np.inf, _BIG, -1
    if n_ps == 1:
        r = links[19][d]
        low = np.inf
        for j in range(n[d]):
            if rem[d, j] < low:
                low = rem[d, j]
        # Completion time is monotone in rem: only flows within a few ticks of the minimum
        # can tie with it (float error here is far below a tick, see module docstring).
        bound = max(low, 0.0) + r * _TIE_TICKS + abs(low) * 1e-15
        for j in range(n[d]):
            if rem[d, j] <= bound:
                t = _flow_end(last[d], rem[d, j], r)
                if t < best_t or (t == best_t and fseq[d, j] < best_s):
                    best_t, best_s, best_j = t, fseq[d, j], j
    else:
        for j in range(n[d]):
            t = _flow_end(last[d], rem[d, j], rate[d, j])
            if t < best_t or (t == best_t and fseq[d, j] < best_s):
                best_t, best_s, best_j = t, fseq[d, j], j
    links[7][d], links[9][d], links[10][d] = best_t, best_s, act[d, best_j]


@njit(cache=True, _nrt=False, inline="always")
def _add_flow(links, d, q, now, bits, seq, R, n_ps):  # type: ignore[no-untyped-def]
    act, n, apos, rem, fseq = links[0], links[1], links[2], links[4], links[6]
    _advance(links, d, now, n_ps)
    j = n[d]
    act[d, j], rem[d, j], fseq[d, j] = q, bits, seq
    apos[q] = j
    n[d] = j + 1
    links[17][d, (q % R - 1) // 3] += 1
    links[18][q] = 1
    links[8][d] = 1


@njit(cache=True, _nrt=False, inline="always")
def _remove_flow(links, d, q, R):  # type: ignore[no-untyped-def]
    act, n, apos, rem, rate, fseq = links[0], links[1], links[2], links[4], links[5], links[6]
    links[17][d, (q % R - 1) // 3] -= 1
    links[18][q] = 0
    j, k = apos[q], n[d] - 1
    moved = act[d, k]
    act[d, j], rem[d, j], rate[d, j], fseq[d, j] = moved, rem[d, k], rate[d, k], fseq[d, k]
    apos[moved] = j
    n[d] = k
    links[8][d] = 1


@njit(cache=True, _nrt=False, inline="always")
def opposite_busy(links, q, R):  # type: ignore[no-untyped-def]
    """Is another worker's active flow on the other direction of queue ``q``'s PS link?

    One flow per (worker, PS, direction) at most, so: the opposite direction's flow count
    on that PS, minus this worker's own flow there.
    """
    s = q % R
    d, ps = (s - 1) % 3, (s - 1) // 3
    own = links[18][q - s + 1 + 3 * ps + (1 - d)]
    return links[17][1 - d, ps] - own > 0


def new_links(W: int, R: int, n_ps: int) -> tuple:
    """Zeroed link state for ``W`` workers with ``R`` slots each (see module docstring)."""
    nflow, nq = max(W * n_ps, 1), W * R
    return (
        np.zeros((2, nflow), np.int64), np.zeros(2, np.int64), np.zeros(nq, np.int64), np.zeros(2),
        np.zeros((2, nflow)), np.zeros((2, nflow)), np.zeros((2, nflow), np.int64),
        np.zeros(2), np.zeros(2, np.int8), np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(nq),
        np.zeros(n_ps), np.zeros(W), np.zeros(n_ps, np.int64), np.zeros(W, np.int64), np.zeros(nflow, np.bool_),
        np.zeros((2, n_ps), np.int64), np.zeros(nq, np.int8), np.zeros(2),
    )  # fmt: skip
