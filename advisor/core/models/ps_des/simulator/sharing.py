"""Bandwidth sharing between workers: weighted max-min fair rates over PS links and worker NICs.

Li et al. (2020) share a PS link equally among the n workers active on it (section 3.1:
rate B/n each). With M parameter servers (section 5) a worker may talk to several of them at
once, so its own network interface becomes a second constraint: the paper's rule for M = 2
is "1/n on the PS shared with n-1 others, and up to 1 - 1/n on the PS it has alone".

We generalise that rule as weighted max-min fairness (progressive filling). In one direction
(downlinks or uplinks), every active flow j (worker w, server i, weight a_j) crosses two
constraints: the PS link i and the NIC of worker w (capacity ``nic_bps``). Repeatedly take the
constraint with the smallest level ``remaining capacity / sum of its unfrozen flows' weights``
(ties: PS links before NICs, lower index first), give every unfrozen flow crossing it
``a_j x level``, freeze them and subtract their rates from the other constraint they cross.
With equal weights, one PS and ``nic_bps >= link_bps`` this is exactly B/n per flow; with 2 PS
it is the paper's rule (tests show both).

Four departures from equal sharing, all off by default (``NetworkModel``):

- **weights** (``share_sigma``): TCP connections that share a bottleneck do not get equal
  shares over the few hundred milliseconds of a transfer; the testbed's workers differ by up
  to 17 % a step at W = 2 and 6-23 % at W >= 4. A connection gets a LogNormal(0, sigma) weight
  each time it becomes active (``inputs.share_weights``);
- **multi-flow goodput** (``multi_flow_goodput`` = eta): a link direction carrying flows of two
  or more workers delivers only ``eta x link_bps`` (the testbed saturates at 71-77 % of the
  nominal rate where one flow gets about 95 %);
- **caps** (``window_gain``): a flow may carry a cap of its own (its connection's window over
  the round trip, ``reference.py`` says when), a third kind of constraint with that flow alone
  on it, taken after the links and NICs at an equal level, flows in order;
- **the two-way loss** (``two_way``, experimental, no model's default): in place of the
  multi-flow goodput, a PS link direction carries ``efficiency x link_bps`` while the link's other
  direction carries data and its whole rate otherwise, however many flows (``link_capacity``).

The weights lie on a 2**-20 grid (``inputs.draw_share_weights``), so their sums are exact in
any order, and the compiled engine, which mirrors this arithmetic step for step (with a
shortcut for one PS when no NIC binds), gets bit-identical rates.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def water_fill(
    flows: Sequence[tuple[int, int]],
    link_bps: float,
    nic_bps: float | Sequence[float],
    weights: Sequence[float] | None = None,
    multi_flow_goodput: float = 1.0,
    caps: Sequence[float] | None = None,
    two_way: tuple[float, Collection[int]] | None = None,
) -> list[float]:
    """Weighted max-min fair rate of each flow ``(worker, ps)`` in one direction, in bits/s.

    At most one flow per (worker, ps): a worker has one connection to each server.
    ``nic_bps`` is every worker's NIC rate, or a sequence of them indexed by worker.
    ``caps``: each flow's own cap (``math.inf`` for none). ``two_way``: (efficiency, the PS whose
    link carries data in the other direction), the two-way loss (``link_capacity``).
    """
    n = len(flows)
    rates = [0.0] * n
    if n == 0:
        return rates
    weight = list(weights) if weights is not None else [1.0] * n
    links = sorted({ps for _, ps in flows})
    nics = sorted({w for w, _ in flows})
    on_link = {i: sorted((w, j) for j, (w, p) in enumerate(flows) if p == i) for i in links}
    on_nic = {w: sorted((p, j) for j, (x, p) in enumerate(flows) if x == w) for w in nics}
    rem_link = {i: link_capacity(link_bps, len(on_link[i]), multi_flow_goodput, two_way, i) for i in links}
    rem_nic = {w: float(nic_bps) if isinstance(nic_bps, (int, float)) else float(nic_bps[w]) for w in nics}
    frozen = [False] * n
    left = n
    while left:
        best, members = float("inf"), []
        for i in links:  # PS links first, then NICs: ties go to the first found
            level, js = _level(rem_link[i], on_link[i], frozen, weight)
            if js and level < best:
                best, members = level, js
        for w in nics:
            level, js = _level(rem_nic[w], on_nic[w], frozen, weight)
            if js and level < best:
                best, members = level, js
        if caps is not None:  # a flow's own cap: a constraint it alone crosses
            for j in range(n):
                if not frozen[j] and caps[j] / weight[j] < best:
                    best, members = caps[j] / weight[j], [j]
        for j in members:
            w, ps = flows[j]
            rates[j] = weight[j] * best
            frozen[j] = True
            left -= 1
            rem_link[ps] = max(rem_link[ps] - rates[j], 0.0)
            rem_nic[w] = max(rem_nic[w] - rates[j], 0.0)
    return rates


def link_capacity(link_bps: float, flows: int, multi_flow_goodput: float,
                  two_way: tuple[float, Collection[int]] | None, ps: int) -> float:
    """What PS link ``ps`` carries in one direction with ``flows`` flows on it: with the two-way loss
    ``efficiency x link_bps`` while the link's other direction carries data and all of it otherwise,
    however many flows; without, ``multi_flow_goodput x link_bps`` once two or more share it."""
    if two_way is not None:
        efficiency, reverse_busy = two_way
        return link_bps * efficiency if ps in reverse_busy else link_bps
    return link_bps * multi_flow_goodput if flows >= 2 else link_bps


def _level(rem: float, members: list[tuple[int, int]], frozen: list[bool], weight: list[float]) -> tuple[float, list[int]]:
    """A constraint's level ``rem / sum of unfrozen weights`` (summed in ``members`` order)."""
    total, js = 0.0, []
    for _, j in members:
        if not frozen[j]:
            total += weight[j]
            js.append(j)
    return (rem / total if js else float("inf")), js
