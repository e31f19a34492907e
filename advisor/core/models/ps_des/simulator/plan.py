"""The fast engine's graph: the step graph with exact compute chains merged into one op.

Why: most operations of a real step are computation in long chains, and every one costs an
event. Merging ``a -> b`` (same compute slot, ``b`` depends only on ``a``, ``a`` feeds only
``b``) into one operation of duration ``d_a + d_b`` is exact when no other operation on
that slot is *incomparable* with ``a`` (neither an ancestor nor a descendant of it):

- every ancestor of ``a`` has finished before ``a`` starts, and every descendant of ``a``
  other than ``b`` descends from ``b`` (``a`` feeds only ``b``), so when ``a`` completes
  the slot's queue is empty and ``b`` (released at that instant) starts at once: it runs
  exactly over ``[end_a, end_a + d_b]``, as the merged operation does;
- ``a``'s completion releases nothing else and frees nothing another operation waits for.

So the merged graph gives the same times; the engine even adds the members' durations one
by one, rounding to the time grid after each as the unmerged run does, so they are
bit-identical. The only observable difference is the ``seq`` used to order chunks that
complete at exactly the same instant (``b``'s chunk would get a later one), which matters
only when two completions tie exactly.
Incomparability is computed with ancestor/descendant bitsets (Python ints).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.profile import Profile
from advisor.core.models.ps_des.simulator.inputs import SimInputs
from advisor.core.models.ps_des.simulator.jit import TIME_GRID


@dataclass(frozen=True)
class FastPlan:
    """Arrays over merged operations ("groups"); ``members`` maps back to profile ops."""

    members: tuple[tuple[int, ...], ...]  # profile op positions of each group, in run order
    slot: np.ndarray  # int64 per group
    bits: np.ndarray  # float64 per group
    instant: np.ndarray  # int8 per group
    count: np.ndarray  # int64 per group: profile operations it stands for
    n_deps: np.ndarray  # int64 per group
    dep_ptr: np.ndarray  # int64, CSR of dependents
    dep_idx: np.ndarray  # int64
    roots: np.ndarray  # int64, groups without dependencies, ascending
    member_ptr: np.ndarray  # int64, CSR of members (profile op positions) per group
    member_idx: np.ndarray  # int64
    priority: np.ndarray  # float64 per group
    transfer_index: np.ndarray  # int64 per group
    spans: np.ndarray  # (profile steps, groups, 2) float64: chain_spans, side by side


def mergeable(profile: Profile, inputs: SimInputs) -> list[bool]:
    """Per op: True when no other op on its compute slot is incomparable with it."""
    n = len(profile.ops)
    deps = profile.dep_indices
    order = profile.topological_order
    anc = [0] * n
    for i in order:
        for d in deps[i]:
            anc[i] |= anc[d] | (1 << d)
    desc = [0] * n
    for i in reversed(order):
        for d in deps[i]:
            desc[d] |= desc[i] | (1 << i)
    by_slot: dict[int, int] = {}
    for i in range(n):
        if not inputs.is_link_slot(int(inputs.slot[i])) and not inputs.instant[i]:
            by_slot[int(inputs.slot[i])] = by_slot.get(int(inputs.slot[i]), 0) | (1 << i)
    ok = [False] * n
    for i in range(n):
        same = by_slot.get(int(inputs.slot[i]), 0)
        if inputs.is_link_slot(int(inputs.slot[i])) or inputs.instant[i]:
            continue
        ok[i] = (same & ~anc[i] & ~desc[i] & ~(1 << i)) == 0
    return ok


def build_plan(profile: Profile, inputs: SimInputs, compress: bool = True) -> FastPlan:
    """Merge exact compute chains (if ``compress``) and lay the graph out as arrays."""
    n = len(profile.ops)
    deps = profile.dep_indices
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    ok = mergeable(profile, inputs) if compress else [False] * n
    absorbed_into = [-1] * n  # op -> the op it is merged after
    for a in range(n):
        if ok[a] and len(dependents[a]) == 1:
            b = dependents[a][0]
            if deps[b] == (a,) and inputs.slot[b] == inputs.slot[a] and not inputs.is_link_slot(int(inputs.slot[b])):
                absorbed_into[b] = a
    groups: list[tuple[int, ...]] = []
    group_of = [-1] * n
    for head in profile.topological_order:
        if absorbed_into[head] >= 0:
            continue
        chain = [head]
        while len(dependents[chain[-1]]) == 1 and absorbed_into[dependents[chain[-1]][0]] == chain[-1]:
            chain.append(dependents[chain[-1]][0])
        for op in chain:
            group_of[op] = len(groups)
        groups.append(tuple(chain))
    groups_sorted = sorted(range(len(groups)), key=lambda g: groups[g][0])
    renumber = {g: k for k, g in enumerate(groups_sorted)}
    members = tuple(groups[g] for g in groups_sorted)
    group_of = [renumber[g] for g in group_of]
    return _arrays(members, group_of, deps, dependents, inputs)


def _arrays(
    members: tuple[tuple[int, ...], ...],
    group_of: list[int],
    deps: tuple[tuple[int, ...], ...],
    dependents: list[list[int]],
    inputs: SimInputs,
) -> FastPlan:
    heads = np.array([m[0] for m in members], dtype=np.int64)
    tails = [m[-1] for m in members]
    ptr: list[int] = [0]
    idx: list[int] = []
    for t in tails:
        idx.extend(group_of[d] for d in dependents[t])
        ptr.append(len(idx))
    member_ptr = np.cumsum([0] + [len(m) for m in members]).astype(np.int64)
    member_idx = np.array([op for m in members for op in m], dtype=np.int64)
    return FastPlan(
        members=members,
        slot=inputs.slot[heads].copy(),
        bits=inputs.bits[heads].copy(),
        instant=inputs.instant[heads].astype(np.int8),
        count=np.array([len(m) for m in members], dtype=np.int64),
        n_deps=np.array([len(deps[h]) for h in heads], dtype=np.int64),
        dep_ptr=np.array(ptr, dtype=np.int64),
        dep_idx=np.array(idx, dtype=np.int64),
        roots=np.array([g for g, h in enumerate(heads) if not deps[h]], dtype=np.int64),
        member_ptr=member_ptr,
        member_idx=member_idx,
        priority=inputs.priority[heads].copy(),
        transfer_index=inputs.transfer_index[heads].copy(),
        spans=np.stack(chain_spans(inputs.durations_s, member_ptr, member_idx), axis=-1),
    )


def chain_spans(durations_s: np.ndarray, member_ptr: np.ndarray, member_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per recorded step and group: the group's length on the time grid, and a time before
    which ``now + span`` is *exactly* the engine's member-by-member ``quantize(t + d)``.

    Why: that chain of roundings is serial (about 8 ns per member) and ran on every
    computation. With ``t = k`` ticks on the grid and ``d' = d * 2**32``, each rounding gives
    ``k + floor(d' + 0.5)`` unless the float error of ``t + d`` (at most about one ulp of the
    result, ``t * 2**-20`` ticks) reaches across a rounding boundary, i.e. unless ``d'`` lies
    within that error of ``n + 0.5``. With ``dist`` the distance of ``d' + 0.5`` to the nearest
    integer, every member is exact while the chain ends before ``dist * 2**18`` s (a factor of
    2 to spare), so the shortcut holds until the smallest such bound of the members. Beyond
    it (or for a negative or huge duration) the engine runs the chain as before.
    """
    dur = durations_s[:, member_idx]
    ticks = dur * TIME_GRID
    rounded = np.floor(ticks + 0.5)
    frac = ticks + 0.5 - rounded
    safe = np.where((dur >= 0) & (ticks < 2.0**51), np.minimum(frac, 1.0 - frac) * 2.0**18, -np.inf)
    starts = member_ptr[:-1]
    return np.add.reduceat(rounded, starts, axis=1) / TIME_GRID, np.minimum.reduceat(safe, starts, axis=1)
