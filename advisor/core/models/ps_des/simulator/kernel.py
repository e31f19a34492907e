"""The compiled engine's link state: active flows per direction, rates, next completion.

A direction (0 downlinks, 1 uplinks) keeps its active flows *densely*, in positions
``0..n-1`` of ``ACT[d]`` (queue index), ``REM[d]`` (bits left), ``RATE[d]``, ``FSEQ[d]`` (the
chunk's seq) and ``WGT[d]`` (its sharing weight), so advancing time and finding the next
completion are straight loops over contiguous memory. A flow leaves by moving the last one
into its position.

The arithmetic is the reference's, operation for operation (``rem -= rate * dt``,
completion ``quantize(last + rem / rate)``, ``sharing.water_fill``), done only when a
direction's set of flows changes: rates depend only on that set (weights are drawn when a
flow starts, the multi-flow goodput on how many flows share a link). With one PS and equal
weights (``uniform``) every flow of a direction has the same rate ``min(cap/n, NIC)``
(``URATE``); completion time is then monotone in ``rem``, so the next completion is found by
a minimum over ``rem`` and exact times are computed only for flows within a few grid ticks of
it (the candidates for an exact tie, broken by seq as always).

With one PS, NICs no slower than the link and unequal weights (the contention rules' shares,
``PROPORTIONAL``) no NIC can bind, so every flow's rate is its weight times the direction's
*level* ``cap / total weight``: all flows drain ``rem / weight`` at the same pace. The engine
then keeps a virtual time ``VT`` (the integral of the level) and, in ``REM``, each flow's
virtual finish ``VT at its start + bits / weight`` (as in weighted fair queueing): a change
of the flow set costs O(1) (the total weight, exact in any order on its 2**-20 grid) instead
of updating every flow's ``rem`` and rate, and the next completion is the smallest virtual
finish (the same candidate rule as above). A flow's bits left are ``(finish - VT) x weight``.
``VT`` is re-based to 0 when it exceeds a second of the current level and restarts when the
direction goes idle, so its float error stays far below a grid tick; the results equal the
reference's within the equivalence tests' tolerance (on the Inception-scale step, W = 1..32,
they were bit-identical to the per-flow arithmetic's).

``links`` is a tuple of arrays indexed by the constants below: per direction the flows and
their count, each queue's position and activity, the time the direction was last advanced,
its next completion (time, seq, queue) with a flag saying it must be recomputed; per queue
(= per worker connection for a link slot) when its last chunk completed, how many times it
became active, its current weight, and for the window caps (``window_gain``, always the general
mode) the cap of its activation and the rate its last chunk completed at; scratch for the water-filling; each worker's NIC rate
(``NIC``, read when the workers' rates differ, ``hetnic``; else ``nic_bps`` is every one's).

Every function here is inlined into the loop (``jit.inlined``, by LLVM; the small ones called
with constant arguments ``jit.inlined_ir``, by numba): numba passes each array of a tuple
argument as seven or more machine words, so an out-of-line call with the engine's state cost
some 3.7 kB of argument copying, and calls were half of the engine's time.
"""

from __future__ import annotations

import numpy as np

from advisor.core.models.ps_des.simulator.jit import TIME_GRID, inlined, inlined_ir, quantize

_BIG = np.iinfo(np.int64).max
# A flow whose rem is this many grid ticks (of its rate) above the minimum cannot complete
# at the same quantized time; see _next_completion.
_TIE_TICKS = 16.0 / TIME_GRID

# Indices into ``links``.
ACT, N, APOS, LAST, REM, RATE, FSEQ, NT, DIRTY, NS, NQ = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
WGT, ISACT, URATE, CONN_LAST, CONN_K, CONN_W = 11, 12, 13, 14, 15, 16
REM_LINK, REM_NIC, FROZEN, NIC = 17, 18, 19, 20
VT, LEVEL, TOTW = 21, 22, 23  # proportional mode, per direction (module docstring)
CAP, CONN_RATE = 24, 25  # per queue: the window cap of its activation, the rate its last chunk completed at
FCAP = 26  # scratch for the water-filling: each active flow's cap as it stands (np.inf: none)

# ``mode`` (ipar[UNIFORM] in loop.py): how a direction's rates are kept
GENERAL, UNIFORM, PROPORTIONAL = 0, 1, 2
# Proportional mode re-bases its virtual time once it has run this many seconds at the current
# level (module docstring): the float error of a completion time stays below 1e-13 s.
_REBASE_S = 1.0


@inlined
def _advance(links, d, t, mode):  # type: ignore[no-untyped-def]
    n, last, rem, rate = links[N], links[LAST], links[REM], links[RATE]
    dt = t - last[d]
    if dt > 0.0:
        if mode == PROPORTIONAL:
            links[VT][d] += links[LEVEL][d] * dt
        elif mode == UNIFORM:
            step = links[URATE][d] * dt
            for j in range(n[d]):
                rem[d, j] -= step
        else:
            for j in range(n[d]):
                rem[d, j] -= rate[d, j] * dt
    last[d] = t


@inlined
def _link_cap(links, d, i, n_ps, R, W, link_bps, eta, twoway, count):  # type: ignore[no-untyped-def]
    """What PS link ``i`` carries in direction ``d`` with ``count`` flows on it: with the two-way
    loss (``twoway`` > 0) ``twoway x link_bps`` while the link's other direction carries a flow and
    all of it otherwise; without, ``eta x link_bps`` once two or more flows share it
    (``sharing.link_capacity``)."""
    if twoway > 0.0:
        busy = False
        if n_ps == 1:
            busy = links[N][1 - d] > 0
        else:
            isact = links[ISACT]
            for w in range(W):
                if isact[w * R + 2 + 3 * i - d]:  # slot 1 + 3i + (1 - d): the link's other direction
                    busy = True
        return link_bps * twoway if busy else link_bps
    return link_bps * eta if count >= 2 else link_bps


@inlined
def _rates(links, d, mode, n_ps, R, W, link_bps, nic_bps, eta, hetnic, gain, twoway):  # type: ignore[no-untyped-def]
    """Weighted water-filling as ``sharing.water_fill``; when uniform simply ``min(cap/n, NIC)``;
    when proportional the level ``cap / total weight`` (and a re-base of the virtual time).
    With a window gain (``gain`` > 0, always the general mode) each flow's window cap
    (``_flow_cap``) is a constraint too, taken after the links and NICs as the reference does."""
    n = links[N][d]
    if mode == PROPORTIONAL:
        level = _link_cap(links, d, 0, 1, R, W, link_bps, eta, twoway, n) / links[TOTW][d]
        links[LEVEL][d] = level
        vt = links[VT][d]
        if vt > level * _REBASE_S:
            fin = links[REM]
            for j in range(n):
                fin[d, j] -= vt
            links[VT][d] = 0.0
        return
    if mode == UNIFORM:
        r = _link_cap(links, d, 0, 1, R, W, link_bps, eta, twoway, n) / n
        if nic_bps < r:
            r = nic_bps
        links[URATE][d] = r
        return
    apos, isact, wgt, rate = links[APOS], links[ISACT], links[WGT], links[RATE]
    if n_ps == 1 and gain == 0.0:  # one link: unless a NIC binds, every flow gets weight x cap / total weight
        total, wmax = 0.0, 0.0
        for j in range(n):
            total += wgt[d, j]  # exact in any order (inputs.draw_share_weights)
            if wgt[d, j] > wmax:
                wmax = wgt[d, j]
        level = _link_cap(links, d, 0, 1, R, W, link_bps, eta, twoway, n) / total
        nic_level = nic_bps / wmax
        if hetnic:  # each flow's own NIC, as the reference's first round compares them
            act, nic = links[ACT], links[NIC]
            nic_level = np.inf
            for j in range(n):
                nic_level = min(nic_level, nic[act[d, j] // R] / wgt[d, j])
        if nic_level >= level:  # the reference's first round picks the link: all frozen there
            for j in range(n):
                rate[d, j] = wgt[d, j] * level
            return
    rem_link, rem_nic, frozen = links[REM_LINK], links[REM_NIC], links[FROZEN]
    for i in range(n_ps):
        count = 0
        for w in range(W):
            count += isact[w * R + 1 + 3 * i + d]
        rem_link[i] = _link_cap(links, d, i, n_ps, R, W, link_bps, eta, twoway, count)
    nic = links[NIC]
    for w in range(W):
        rem_nic[w] = nic[w]
    frozen[:n] = False
    fcap = links[FCAP]
    if gain > 0.0:  # the caps do not change while the flows are frozen: found once
        act = links[ACT]
        for j in range(n):
            fcap[j] = _flow_cap(links, act[d, j], d, R, W)
    left = n
    while left > 0:
        best, kind, which = np.inf, -1, -1
        for i in range(n_ps):  # PS links first, then NICs: ties go to the first found
            total, count = _unfrozen_weight(links, d, 0, i, W, R)
            if count > 0 and rem_link[i] / total < best:
                best, kind, which = rem_link[i] / total, 0, i
        for w in range(W):
            total, count = _unfrozen_weight(links, d, 1, w, n_ps, R)
            if count > 0 and rem_nic[w] / total < best:
                best, kind, which = rem_nic[w] / total, 1, w
        if gain > 0.0:
            for j in range(n):
                if not frozen[j] and fcap[j] / wgt[d, j] < best:
                    best, kind, which = fcap[j] / wgt[d, j], 2, j
        if kind == 2:  # a flow's own cap: it alone crosses it
            j = which
            q = links[ACT][d, j]
            r = wgt[d, j] * best
            rate[d, j] = r
            frozen[j] = True
            left -= 1
            i = (q % R - 1) // 3
            rem_link[i] = max(rem_link[i] - r, 0.0)
            rem_nic[q // R] = max(rem_nic[q // R] - r, 0.0)
            continue
        for k in range(W if kind == 0 else n_ps):
            q, w, i = _member(kind, which, k, R, d)
            if not isact[q] or frozen[apos[q]]:
                continue
            j = apos[q]
            r = wgt[d, j] * best
            rate[d, j] = r
            frozen[j] = True
            left -= 1
            rem_link[i] = max(rem_link[i] - r, 0.0)
            rem_nic[w] = max(rem_nic[w] - r, 0.0)


@inlined
def other_direction_may_change(links, d, now, mode, gain, twoway):  # type: ignore[no-untyped-def]
    """After direction ``d``'s flows changed at ``now``: with window caps (``gain`` > 0) the other
    direction's caps may now bind or stop binding (``_flow_cap``), with the two-way loss
    (``twoway`` > 0) its capacity may change (``_link_cap``), so it is advanced to ``now`` and its
    rates marked for recomputing."""
    if gain > 0.0 or twoway > 0.0:
        _advance(links, 1 - d, now, mode)
        links[DIRTY][1 - d] = 1


@inlined
def _flow_cap(links, q, d, R, W):  # type: ignore[no-untyped-def]
    """Queue ``q``'s window cap while another worker's flow uses the reverse direction of its PS
    link; else none (``np.inf``): ``reference.ReferenceSimulation._cap``."""
    cap = links[CAP][q]
    if cap == np.inf:
        return cap
    isact = links[ISACT]
    w, reverse = q // R, q % R + 1 - 2 * d  # slot 1 + 3i + d: the same PS's other direction
    for x in range(W):
        if x != w and isact[x * R + reverse]:
            return cap
    return np.inf


@inlined_ir
def _member(kind, which, k, R, d):  # type: ignore[no-untyped-def]
    """(queue, worker, PS) of the k-th possible flow through a constraint: PS link ``which``
    (kind 0, k = worker) or the NIC of worker ``which`` (kind 1, k = PS)."""
    w, i = (k, which) if kind == 0 else (which, k)
    return w * R + 1 + 3 * i + d, w, i


@inlined_ir
def _unfrozen_weight(links, d, kind, which, size, R):  # type: ignore[no-untyped-def]
    """Total weight and number of the constraint's active flows not frozen yet (``size``:
    possible flows through it). The sum is exact in any order (inputs.draw_share_weights)."""
    apos, isact, wgt, frozen = links[APOS], links[ISACT], links[WGT], links[FROZEN]
    total, count = 0.0, 0
    for k in range(size):
        q = _member(kind, which, k, R, d)[0]
        if isact[q] and not frozen[apos[q]]:
            total += wgt[d, apos[q]]
            count += 1
    return total, count


@inlined
def _flow_end(last, rem, rate):  # type: ignore[no-untyped-def]
    return quantize(last + rem / rate) if rem > 0.0 else last


@inlined
def _next_completion(links, d, mode):  # type: ignore[no-untyped-def]
    """The direction's next completion by ``(time, seq)``."""
    act, n, last, rem, rate, fseq = links[ACT], links[N], links[LAST], links[REM], links[RATE], links[FSEQ]
    best_t, best_s, best_j = np.inf, _BIG, -1
    if mode == PROPORTIONAL:  # rem holds virtual finish times: the earliest ends first
        level, vt = links[LEVEL][d], links[VT][d]
        low = np.inf
        for j in range(n[d]):
            if rem[d, j] < low:
                low = rem[d, j]
        bound = max(low, vt) + level * _TIE_TICKS + (abs(low) + abs(vt)) * 1e-15
        for j in range(n[d]):
            if rem[d, j] <= bound:
                t = _flow_end(last[d], rem[d, j] - vt, level)
                if t < best_t or (t == best_t and fseq[d, j] < best_s):
                    best_t, best_s, best_j = t, fseq[d, j], j
    elif mode == UNIFORM:
        r = links[URATE][d]
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
    links[NT][d], links[NS][d], links[NQ][d] = best_t, best_s, act[d, best_j]


@inlined
def _add_flow(links, d, q, now, bits, seq, weight, mode):  # type: ignore[no-untyped-def]
    act, n = links[ACT], links[N]
    _advance(links, d, now, mode)
    j = n[d]
    if mode == PROPORTIONAL:  # its virtual finish time; the sums are exact (weights on a grid)
        fin = links[VT][d] + bits / weight
        links[TOTW][d] += weight
        bits = fin
    act[d, j], links[REM][d, j], links[FSEQ][d, j], links[WGT][d, j] = q, bits, seq, weight
    links[APOS][q] = j
    n[d] = j + 1
    links[ISACT][q] = 1
    links[DIRTY][d] = 1


@inlined
def _remove_flow(links, d, q, mode):  # type: ignore[no-untyped-def]
    act, n, apos, rem, rate, fseq, wgt = links[ACT], links[N], links[APOS], links[REM], links[RATE], links[FSEQ], links[WGT]
    links[ISACT][q] = 0
    j, k = apos[q], n[d] - 1
    if mode == PROPORTIONAL:
        if k == 0:  # idle: start the virtual time afresh
            links[VT][d], links[TOTW][d], links[LEVEL][d] = 0.0, 0.0, 0.0
        else:
            links[TOTW][d] -= wgt[d, j]
    moved = act[d, k]
    act[d, j], rem[d, j], rate[d, j], fseq[d, j], wgt[d, j] = moved, rem[d, k], rate[d, k], fseq[d, k], wgt[d, k]
    apos[moved] = j
    n[d] = k
    links[DIRTY][d] = 1


@inlined
def queued_push_bits(links, w, ps, now, R, W, mode):  # type: ignore[no-untyped-def]
    """Bits the other workers' active pushes to ``ps`` still have to send at ``now`` (the
    uplink is advanced lazily, so from ``LAST``). Added in another order than the reference's
    and from differently advanced ``rem``: the two may differ in the last bits, which the wait's
    rounding to the time grid absorbs (the equivalence tests check it)."""
    isact, apos, rem, rate = links[ISACT], links[APOS], links[REM], links[RATE]
    dt = now - links[LAST][1]
    if mode == PROPORTIONAL:  # one PS: (fin - vt) x weight over the uplink's flows but w's own
        vt = links[VT][1] + links[LEVEL][1] * dt
        act, wgt, own = links[ACT], links[WGT], w * R + 2
        total = 0.0
        for j in range(links[N][1]):
            if act[1, j] != own:
                total += (rem[1, j] - vt) * wgt[1, j]
        return total
    total = 0.0
    for x in range(W):
        q = x * R + 2 + 3 * ps
        if x != w and isact[q]:
            j = apos[q]
            total += rem[1, j] - (links[URATE][1] if mode == UNIFORM else rate[1, j]) * dt
    return total


@inlined
def activate(links, q, now, shares, gain):  # type: ignore[no-untyped-def]
    """Connection ``q``'s weight for a chunk starting at ``now``: the next draw if it was idle,
    and then (``gain`` > 0) its window cap, ``gain`` x the rate its last chunk completed at."""
    if links[CONN_LAST][q] < now:
        k = links[CONN_K][q]
        links[CONN_K][q] = k + 1
        links[CONN_W][q] = shares[q, k % shares.shape[1]]
        if gain > 0.0:
            last = links[CONN_RATE][q]
            links[CAP][q] = gain * last if last > 0.0 else np.inf
    return links[CONN_W][q]


def new_links(W: int, R: int, n_ps: int, nics: np.ndarray) -> tuple:
    """Zeroed link state for ``W`` workers with ``R`` slots each, NIC rates ``nics`` (module docstring)."""
    nflow, nq = max(W * n_ps, 1), W * R
    return (
        np.zeros((2, nflow), np.int64), np.zeros(2, np.int64), np.zeros(nq, np.int64), np.zeros(2),  # ACT N APOS LAST
        np.zeros((2, nflow)), np.zeros((2, nflow)), np.zeros((2, nflow), np.int64),  # REM RATE FSEQ
        np.zeros(2), np.zeros(2, np.int8), np.zeros(2, np.int64), np.zeros(2, np.int64),  # NT DIRTY NS NQ
        np.zeros((2, nflow)), np.zeros(nq, np.int8), np.zeros(2),  # WGT ISACT URATE
        np.full(nq, -np.inf), np.zeros(nq, np.int64), np.ones(nq),  # CONN_LAST CONN_K CONN_W
        np.zeros(n_ps), np.zeros(W), np.zeros(nflow, np.bool_), nics.astype(np.float64),  # REM_LINK REM_NIC FROZEN NIC
        np.zeros(2), np.zeros(2), np.zeros(2),  # VT LEVEL TOTW
        np.full(nq, np.inf), np.zeros(nq), np.zeros(nflow),  # CAP CONN_RATE FCAP
    )  # fmt: skip
