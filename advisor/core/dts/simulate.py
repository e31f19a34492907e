"""DTS end to end: per architecture, the best allocation, its batch and epoch time, the role graph,
and a seeded Monte-Carlo interval over the cluster's stated fluctuations.

What the ``advisor dts`` command prints. Batches per epoch: every architecture but PL runs the
clients' batches side by side or in turn within one "batch" of its equation (eq. 2-5 sum or take
the maximum over the n clients), so an epoch is ``batches_per_client`` of them; PL trains one batch
of the whole dataset at a time, so its epoch is ``clients x batches_per_client`` batches.

Fluctuation (Table I "power fluctuation", "bandwidth fluctuation", +-%): for every batch each
processor's GFLOP/s and link rate are drawn uniformly within +-% of the stated value,
independently; the interval is the 2.5-97.5 percentile of ``samples`` per-batch draws with the
roles fixed at the nominal best. An epoch sums independent batches, so its interval is
B x mean +- 1.96 sqrt(B) x sd of the per-batch draws (central limit; B = batches per epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from advisor.core.dts.allocation import Allocation, allocate
from advisor.core.dts.architectures import CLIENT, EDGE, SERVER, WORKER, evaluate
from advisor.core.dts.spec import MODEL, Architecture, DtsSpec, expand_processors
from advisor.errors import ModelInputError

LEVEL = 0.95
DEFAULT_SAMPLES = 1000


@dataclass(frozen=True)
class Role:
    """One processor's place in the role graph."""

    processor: str
    role: str
    layers: int | None = None  # PL: how many layers this stage holds


@dataclass(frozen=True)
class Interval:
    """95 % interval of the per-batch and epoch times under the spec's fluctuations."""

    batch_low_s: float
    batch_high_s: float
    epoch_low_s: float
    epoch_high_s: float
    batch_mean_s: float  # mean of the draws: above the nominal time, as the slowest client sets a max()
    samples: int
    level: float = LEVEL


@dataclass(frozen=True)
class ArchitectureResult:
    architecture: Architecture
    seconds_per_batch: float
    batches_per_epoch: int
    seconds_per_epoch: float
    seconds_total: float  # all epochs
    roles: tuple[Role, ...]
    links: tuple[tuple[str, str], ...]  # edges of the role graph (who sends to whom)
    paths: int  # allocation paths evaluated
    interval: Interval


@dataclass(frozen=True)
class DtsResult:
    results: tuple[ArchitectureResult, ...]

    @property
    def best(self) -> ArchitectureResult:
        """The architecture with the shortest epoch."""
        return min(self.results, key=lambda r: r.seconds_per_epoch)


def batches_per_epoch(arch: Architecture, spec: DtsSpec) -> int:
    t = spec.training
    return t.batches_per_client * (t.clients if arch is Architecture.PL else 1)


def simulate(spec: DtsSpec, samples: int = DEFAULT_SAMPLES, seed: int = 0,
             max_paths: int | None = None) -> DtsResult:
    """Every architecture the spec lists; ``ModelInputError`` when one cannot run (memory, processors)."""
    if samples < 2:
        raise ModelInputError(MODEL, f"samples must be at least 2 for an interval, got {samples}")
    if seed < 0:
        raise ModelInputError(MODEL, f"seed must be >= 0, got {seed}")
    return DtsResult(tuple(_one(arch, spec, samples, seed, max_paths) for arch in spec.architectures))


def _one(arch: Architecture, spec: DtsSpec, samples: int, seed: int, max_paths: int | None) -> ArchitectureResult:
    alloc = allocate(arch, spec, max_paths)
    per_batch = alloc.seconds_per_batch
    b = batches_per_epoch(arch, spec)
    epoch = b * per_batch
    names = [n for n, _ in expand_processors(spec.cluster)]
    return ArchitectureResult(
        architecture=arch, seconds_per_batch=per_batch, batches_per_epoch=b, seconds_per_epoch=epoch,
        seconds_total=spec.training.epochs * epoch, roles=_roles(alloc, names), links=_links(alloc, names),
        paths=alloc.paths, interval=fluctuation_interval(arch, spec, alloc, samples, seed))


def fluctuation_interval(arch: Architecture, spec: DtsSpec, alloc: Allocation, samples: int, seed: int) -> Interval:
    """The Monte-Carlo interval (module docstring); the same seed gives the same interval."""
    procs = [p for _, p in expand_processors(spec.cluster)]
    g0 = np.array([p.gflop_per_s for p in procs])
    b0 = np.array([p.bandwidth_gb_per_s for p in procs])
    rng = np.random.default_rng(seed)
    pf, bf = spec.cluster.power_fluctuation_pct / 100.0, spec.cluster.bandwidth_fluctuation_pct / 100.0
    gflops = g0 * rng.uniform(1.0 - pf, 1.0 + pf, size=(samples, len(procs)))
    bandwidth = b0 * rng.uniform(1.0 - bf, 1.0 + bf, size=(samples, len(procs)))
    draws = evaluate(arch, spec, alloc.assignment, gflops, bandwidth).per_batch
    low, high = np.percentile(draws, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
    b = batches_per_epoch(arch, spec)
    half = 1.959963984540054 * math.sqrt(b) * float(np.std(draws, ddof=1))
    mean = b * float(np.mean(draws))
    return Interval(float(low), float(high), max(mean - half, 0.0), mean + half, float(np.mean(draws)), samples)


def _roles(alloc: Allocation, names: list[str]) -> tuple[Role, ...]:
    a = alloc.assignment
    if alloc.architecture is Architecture.PL:
        return tuple(Role(names[p], f"{WORKER} {j + 1}", n) for j, (p, n) in enumerate(zip(a.of(WORKER), a.layers,
                                                                                                 strict=True)))
    out = []
    for kind, procs in a.roles:
        numbered = len(procs) > 1 or kind in (CLIENT, EDGE)
        out += [Role(names[p], f"{kind} {j + 1}" if numbered else kind) for j, p in enumerate(procs)]
    order = {SERVER: 0, EDGE: 1, CLIENT: 2}
    return tuple(sorted(out, key=lambda r: (order.get(r.role.rsplit(" ", 1)[0], 3), _num(r.role))))


def _num(role: str) -> int:
    tail = role.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _links(alloc: Allocation, names: list[str]) -> tuple[tuple[str, str], ...]:
    """Who exchanges data with whom: stage to stage (PL), client to server (FL, PSL), client to
    server and client to the next client (SL), client to edge server and edge server to server (FSL)."""
    a, arch = alloc.assignment, alloc.architecture
    if arch is Architecture.PL:
        stages = [names[p] for p in a.of(WORKER)]
        return tuple(zip(stages[:-1], stages[1:], strict=True))
    clients, server = [names[p] for p in a.of(CLIENT)], names[a.of(SERVER)[0]]
    if arch is Architecture.FSL:
        edges = [names[p] for p in a.of(EDGE)]
        return tuple(zip(clients, edges, strict=True)) + tuple((e, server) for e in edges)
    links = tuple((c, server) for c in clients)
    if arch is Architecture.SL:
        links += tuple(zip(clients[:-1], clients[1:], strict=True))
    return links
