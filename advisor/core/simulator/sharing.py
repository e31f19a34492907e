"""Bandwidth sharing between workers: max-min fair rates over PS links and worker NICs.

Li et al. (2020) share a PS link equally among the n workers active on it (section 3.1:
rate B/n each). With M parameter servers (section 5) a worker may talk to several of them at
once, so its own network interface becomes a second constraint: the paper's rule for M = 2
is "1/n on the PS shared with n-1 others, and up to 1 - 1/n on the PS it has alone".

We generalise that rule as max-min fairness (progressive filling, "water-filling"). In one
direction (downlinks or uplinks), every active flow (worker w, server i) crosses two
constraints: the PS link i (capacity ``link_bps``) and the NIC of worker w (capacity
``nic_bps``). Repeatedly take the constraint with the smallest fair share
``remaining capacity / unfrozen flows through it`` (ties: PS links before NICs, lower index
first), give that share to every unfrozen flow crossing it, freeze them and subtract their
rates from the other constraint they cross. With one PS and ``nic_bps >= link_bps`` this is
exactly B/n per flow; with 2 PS it is the paper's rule (tests show both).

The compiled engine mirrors this arithmetic step for step, so both engines get bit-identical
rates.
"""

from __future__ import annotations

from collections.abc import Sequence


def water_fill(flows: Sequence[tuple[int, int]], link_bps: float, nic_bps: float) -> list[float]:
    """Max-min fair rate of each flow ``(worker, ps)`` in one direction, in bits/s."""
    n = len(flows)
    rates = [0.0] * n
    if n == 0:
        return rates
    links = sorted({ps for _, ps in flows})
    nics = sorted({w for w, _ in flows})
    rem_link = {i: link_bps for i in links}
    rem_nic = {w: nic_bps for w in nics}
    cnt_link = {i: sum(1 for _, p in flows if p == i) for i in links}
    cnt_nic = {w: sum(1 for x, _ in flows if x == w) for w in nics}
    frozen = [False] * n
    left = n
    while left:
        best, kind, which = _bottleneck(links, nics, rem_link, rem_nic, cnt_link, cnt_nic)
        for j, (w, ps) in enumerate(flows):
            if frozen[j] or (ps if kind == 0 else w) != which:
                continue
            rates[j] = best
            frozen[j] = True
            left -= 1
            cnt_link[ps] -= 1
            cnt_nic[w] -= 1
            rem_link[ps] = max(rem_link[ps] - best, 0.0)
            rem_nic[w] = max(rem_nic[w] - best, 0.0)
    return rates


def _bottleneck(
    links: list[int],
    nics: list[int],
    rem_link: dict[int, float],
    rem_nic: dict[int, float],
    cnt_link: dict[int, int],
    cnt_nic: dict[int, int],
) -> tuple[float, int, int]:
    """The constraint with the smallest fair share: (share, 0 link / 1 NIC, its index)."""
    best, kind, which = float("inf"), -1, -1
    for i in links:
        if cnt_link[i] > 0 and rem_link[i] / cnt_link[i] < best:
            best, kind, which = rem_link[i] / cnt_link[i], 0, i
    for w in nics:
        if cnt_nic[w] > 0 and rem_nic[w] / cnt_nic[w] < best:
            best, kind, which = rem_nic[w] / cnt_nic[w], 1, w
    return best, kind, which
