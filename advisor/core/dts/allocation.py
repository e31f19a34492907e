"""The DTS role-allocation heuristic: which processor takes which role, searched path by path.

DTS section II-C: rank the processors by processing power, memory and bandwidth; give each role,
most demanding first, the best-ranked processor that has the memory for it (re-ranking the ones
left after every assignment); a complete assignment is a "path"; then retry the role that causes
the largest delay with the next processor, and so on until ``max_paths`` paths, keeping the
fastest. How we make that precise:

* Roles are taken in order of their time on an average processor of the cluster (work / mean
  GFLOP/s + traffic / mean GB/s), so the role with the most to do is placed first. A role whose
  work dominates ranks processors by (GFLOP/s, GB/s, memory), one whose traffic dominates by
  (GB/s, GFLOP/s, memory) -- the paper's guidelines 1 and 3; guideline 2 is the memory check.
* A retry forbids one (role kind, processor) pair and runs the greedy pass again. After a path,
  its pairs are forbidden one at a time, the processor with the largest own delay first; after a
  pass that gets stuck (a role finds no processor with the memory), each pair placed so far is
  forbidden in turn. Retries run breadth-first over these sets of forbidden pairs. Since every
  assignment differs from any path in some forbidden-able pair, an unbounded ``max_paths``
  reaches every choice of which processors take which role kind, so the optimum over them
  (tests check this against brute force on small clusters). The order within a kind is not
  searched: SL's chain and PL's stages run in rank order (a PL stage holds as many layers as its
  memory takes), and FSL pairs clients with edge servers by ``_pair``.
* Whether any assignment fits in memory is decided before the search (each role kind needs
  processors with at least its memory; these sets are nested, so counting suffices): when none
  does, a ``ModelInputError`` names the role and the processor that came closest. The greedy pass
  keeps it so: a role does not take a processor whose memory a later role needs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from advisor.core.dts.architectures import (
    CLIENT, EDGE, WORKER, Assignment, Evaluation, RoleDemand, evaluate, layers_that_fit, pl_layer_memory_gb, role_demands,
)
from advisor.core.dts.spec import MODEL, Architecture, DtsSpec, Processor, expand_processors
from advisor.errors import ModelInputError

# greedy passes per path the search may spend on retries that get stuck, before it stops anyway
_RUNS_PER_PATH = 64


@dataclass(frozen=True)
class Allocation:
    """The fastest assignment found for one architecture, its nominal per-batch time and how
    many paths (distinct complete assignments) the search evaluated."""

    architecture: Architecture
    assignment: Assignment
    seconds_per_batch: float
    paths: int
    passes: int  # greedy passes run, counting those that got stuck


@dataclass(frozen=True)
class _Slot:
    kind: str
    memory_gb: float
    by_compute: bool


@dataclass(frozen=True)
class _Stuck:
    """A greedy pass found no processor for ``kind`` after placing ``placed``."""

    kind: str
    placed: tuple[tuple[str, int], ...]


def nominal_rates(spec: DtsSpec) -> tuple[np.ndarray, np.ndarray]:
    """Each processor's GFLOP/s and GB/s as stated, as (1, processors) arrays."""
    procs = [p for _, p in expand_processors(spec.cluster)]
    return (np.array([[p.gflop_per_s for p in procs]], dtype=float),
            np.array([[p.bandwidth_gb_per_s for p in procs]], dtype=float))


def allocate(arch: Architecture, spec: DtsSpec, max_paths: int | None = None) -> Allocation:
    """The best role assignment for ``arch`` the heuristic finds within ``max_paths`` paths
    (default: the spec's). Raises ``ModelInputError`` when no assignment fits in memory or the
    cluster has too few processors."""
    limit = spec.max_paths if max_paths is None else max_paths
    named = expand_processors(spec.cluster)
    procs = [p for _, p in named]
    gflops, bandwidth = nominal_rates(spec)
    demands = role_demands(arch, spec)
    _check_feasible(arch, spec, demands, named)
    slots = _slots(demands, procs)

    best: tuple[float, Assignment] | None = None
    retries_of: dict[Assignment, list[tuple[str, int]]] = {}  # each path evaluated once
    seen_bans: set[frozenset[tuple[str, int]]] = {frozenset()}
    queue: deque[frozenset[tuple[str, int]]] = deque([frozenset()])
    runs = 0
    while queue and len(retries_of) < limit and runs < _RUNS_PER_PATH * limit:
        bans = queue.popleft()
        runs += 1
        found = _greedy_pl(spec, procs, bans) if arch is Architecture.PL else _greedy(slots, procs, bans)
        if arch is Architecture.FSL and isinstance(found, Assignment):
            found = _pair(found, spec, procs, gflops, bandwidth)
        if isinstance(found, _Stuck):
            retries = list(reversed(found.placed))
        elif found in retries_of:
            retries = retries_of[found]
        else:
            ev: Evaluation = evaluate(arch, spec, found, gflops, bandwidth)
            time = float(ev.per_batch[0])
            if best is None or time < best[0]:
                best = (time, found)
            retries = retries_of[found] = sorted(found.pairs(), key=lambda kp: -ev.delay.get(kp[1], 0.0))
        for pair in retries:
            child = bans | {pair}
            if child not in seen_bans:
                seen_bans.add(child)
                queue.append(child)
    if best is None:  # the first pass looks ahead on memory, so only a tiny budget ends here
        raise ModelInputError(MODEL, f"{arch}: no role assignment found within max_paths={limit}")
    return Allocation(arch, best[1], best[0], len(retries_of), runs)


def _slots(demands: list[RoleDemand], procs: list[Processor]) -> list[_Slot]:
    """One slot per role to fill, most demanding kind first (time on an average processor)."""
    mean_g = float(np.mean([p.gflop_per_s for p in procs]))
    mean_b = float(np.mean([p.bandwidth_gb_per_s for p in procs]))
    order = sorted(demands, key=lambda d: -(d.gflop / mean_g + d.traffic_gb / mean_b))
    return [_Slot(d.kind, d.memory_gb, d.gflop / mean_g >= d.traffic_gb / mean_b)
            for d in order for _ in range(d.count)]


def _rank(candidates: list[int], procs: list[Processor], by_compute: bool) -> list[int]:
    def key(i: int) -> tuple[float, float, float, int]:
        p = procs[i]
        first, second = (p.gflop_per_s, p.bandwidth_gb_per_s) if by_compute else (p.bandwidth_gb_per_s, p.gflop_per_s)
        return (-first, -second, -p.memory_gb, i)

    return sorted(candidates, key=key)


def _greedy(slots: list[_Slot], procs: list[Processor], bans: frozenset[tuple[str, int]]) -> Assignment | _Stuck:
    free = list(range(len(procs)))
    placed: list[tuple[str, int]] = []
    for s, slot in enumerate(slots):
        ranked = _rank([i for i in free if (slot.kind, i) not in bans], procs, slot.by_compute)
        later = slots[s + 1:]
        pick = next((i for i in ranked if procs[i].memory_gb >= slot.memory_gb
                     and _room_for(later, [procs[j].memory_gb for j in free if j != i])), None)
        if pick is None:
            return _Stuck(slot.kind, tuple(placed))
        free.remove(pick)
        placed.append((slot.kind, pick))
    kinds: dict[str, list[int]] = {}
    for kind, i in placed:
        kinds.setdefault(kind, []).append(i)
    return Assignment(tuple((k, tuple(v)) for k, v in kinds.items()))


def _room_for(slots: list[_Slot], memories: list[float]) -> bool:
    """Whether ``slots`` can still all be placed on processors with these memories (the k-th
    largest need against the k-th largest memory: enough, as the sets that fit are nested)."""
    needs = sorted((s.memory_gb for s in slots), reverse=True)
    have = sorted(memories, reverse=True)
    return len(have) >= len(needs) and all(m >= n for m, n in zip(have, needs, strict=False))


def _greedy_pl(spec: DtsSpec, procs: list[Processor], bans: frozenset[tuple[str, int]]) -> Assignment | _Stuck:
    """PL: the best-ranked processor takes as many layers as its memory holds, then the next."""
    layer_gb, left = pl_layer_memory_gb(spec), spec.dnn.layers
    free = [i for i in range(len(procs)) if (WORKER, i) not in bans]
    stages: list[int] = []
    layers: list[int] = []
    while left > 0:
        pick = next((i for i in _rank(free, procs, True) if layers_that_fit(procs[i].memory_gb, layer_gb) > 0), None)
        if pick is None:
            return _Stuck(WORKER, tuple((WORKER, i) for i in stages))
        take = min(left, layers_that_fit(procs[pick].memory_gb, layer_gb))
        free.remove(pick)
        stages.append(pick)
        layers.append(take)
        left -= take
    return Assignment(((WORKER, tuple(stages)),), tuple(layers))


def _pair(a: Assignment, spec: DtsSpec, procs: list[Processor], gflops: np.ndarray,
          bandwidth: np.ndarray) -> Assignment:
    """FSL: which client works with which edge server. The slowest client with the fastest edge
    server (by GFLOP/s) balances the paths whose maximum eq. 5 takes -- optimal when the links are
    equal; the faster of that pairing and the rank-order one is kept."""
    clients, edges = a.of(CLIENT), a.of(EDGE)
    balanced = Assignment(tuple(
        (kind, tuple(sorted(clients, key=lambda i: (procs[i].gflop_per_s, i))) if kind == CLIENT
         else tuple(sorted(edges, key=lambda i: (-procs[i].gflop_per_s, i))) if kind == EDGE else ps)
        for kind, ps in a.roles))
    options = [a, balanced]
    times = [float(evaluate(Architecture.FSL, spec, o, gflops, bandwidth).per_batch[0]) for o in options]
    return options[int(np.argmin(times))]


def _check_feasible(arch: Architecture, spec: DtsSpec, demands: list[RoleDemand],
                    named: list[tuple[str, Processor]]) -> None:
    """Raise ``ModelInputError`` naming the role and the closest processor when no assignment fits."""
    if arch is Architecture.PL:
        layer_gb = pl_layer_memory_gb(spec)
        fits = sum(layers_that_fit(p.memory_gb, layer_gb) for _, p in named)
        if fits < spec.dnn.layers:
            name, p = max(named, key=lambda np_: np_[1].memory_gb)
            raise ModelInputError(
                MODEL, f"PL: not enough memory for the pipeline workers: each of the {spec.dnn.layers} layers "
                       f"needs {layer_gb:g} GB and all processors together hold {fits}; the largest, {name!r}, "
                       f"has {p.memory_gb:g} GB of residual memory")
        return
    needed = sum(d.count for d in demands)
    if needed > len(named):
        roles = " + ".join(f"{d.count} {d.kind}{'s' if d.count > 1 else ''}" for d in demands)
        raise ModelInputError(MODEL, f"{arch}: needs {needed} processors ({roles}) and the cluster has {len(named)}")
    # Role kinds by memory need, largest first: the processors able to take a kind include those of
    # every larger need, so an assignment exists iff each prefix has enough processors.
    wanted = 0
    for d in sorted(demands, key=lambda d: -d.memory_gb):
        wanted += d.count
        able = [n for n, p in named if p.memory_gb >= d.memory_gb]
        if len(able) < wanted:
            short = [(n, p) for n, p in named if p.memory_gb < d.memory_gb]
            name, p = max(short, key=lambda np_: np_[1].memory_gb)
            raise ModelInputError(
                MODEL, f"{arch}: processor {name!r} has {p.memory_gb:g} GB of residual memory and the role "
                       f"{d.kind!r} needs {d.memory_gb:g} GB; {len(able)} processor(s) can take roles that "
                       f"need this much and {wanted} are needed")
