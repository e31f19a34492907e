"""The roles of each DTS architecture and the terms of its equation, for one role assignment.

Between the spec and the equations: this module knows which roles an architecture has (PL
workers; FL, SL, PSL clients and a server; FSL clients, edge servers and a server), what each
role must hold in memory and how much work and traffic it carries, and turns an assignment of
processors to roles into the term arrays that ``equations`` adds up. The allocation search
(``allocation``) only asks it for demands and for evaluations.

Modelling choices the paper leaves open (docs/models-dts.md lists them): a transfer between two
processors runs at the lower of their two link rates, uncontended; backward = ``backward_to_forward``
x forward FLOPs; a client fetches its batch over its own link; PL layers are equal in FLOPs and
memory, and each boundary between stages carries the activations forward and their gradients
back (2 x batch x intermediate_gb); an averaging server holds the running sum and the model
being added (2 x the averaged weights) and does one addition per weight and model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from advisor.core.dts import equations
from advisor.core.dts.equations import Array
from advisor.core.dts.spec import Architecture, DtsSpec

WORKER = "worker"
CLIENT = "client"
SERVER = "server"
EDGE = "edge server"


@dataclass(frozen=True)
class RoleDemand:
    """A kind of role: how many processors take it and what one of them needs and carries per batch."""

    kind: str
    count: int
    memory_gb: float
    gflop: float  # computed per batch (forward + backward)
    traffic_gb: float  # sent or received per batch


@dataclass(frozen=True)
class Assignment:
    """Processors (indexes into the cluster) per role kind, in order: clients in chain order (SL),
    client j paired with edge server j (FSL), pipeline stages in order with ``layers`` each (PL)."""

    roles: tuple[tuple[str, tuple[int, ...]], ...]
    layers: tuple[int, ...] = ()

    def of(self, kind: str) -> tuple[int, ...]:
        for k, procs in self.roles:
            if k == kind:
                return procs
        return ()

    def pairs(self) -> list[tuple[str, int]]:
        return [(k, p) for k, procs in self.roles for p in procs]


@dataclass(frozen=True)
class Evaluation:
    """The per-batch time of an assignment (one per sample row) and, from the first row, each
    processor's own share of it: what the allocation retries first."""

    per_batch: Array
    delay: dict[int, float]


def role_demands(arch: Architecture, spec: DtsSpec) -> list[RoleDemand]:
    """What one processor of each role kind needs (memory) and carries (work, traffic) per batch."""
    d, t = spec.dnn, spec.training
    n, bsz, grow = t.clients, t.batch_size, 1.0 + d.backward_to_forward
    cut = 2.0 * bsz * d.intermediate_gb
    fetch = bsz * t.sample_gb
    if arch is Architecture.PL:
        return [RoleDemand(WORKER, 0, pl_layer_memory_gb(spec), bsz * d.gflop_per_sample * grow, fetch + cut)]
    if arch is Architecture.FL:
        exchange = d.upload_gb + d.weights_gb
        return [RoleDemand(CLIENT, n, d.memory_gb, bsz * d.gflop_per_sample * grow, exchange),
                RoleDemand(SERVER, 1, 2.0 * d.weights_gb, _average_gflop(n, d.weights_gb, d.bytes_per_weight),
                           n * exchange)]
    client_work = bsz * d.client_gflop_per_sample * grow
    server_work = bsz * d.server_gflop_per_sample * grow
    if arch in (Architecture.SL, Architecture.PSL):
        passing = 2.0 * d.client_side_weights_gb if arch is Architecture.SL else 0.0
        return [RoleDemand(SERVER, 1, d.server_memory_gb, n * server_work, n * cut),
                RoleDemand(CLIENT, n, d.client_memory_gb, client_work, fetch + cut + passing)]
    sw = d.server_side_weights_gb  # FSL
    return [RoleDemand(CLIENT, n, d.client_memory_gb, client_work, fetch + cut),
            RoleDemand(EDGE, n, d.server_memory_gb, server_work, cut + sw),
            RoleDemand(SERVER, 1, 2.0 * sw, _average_gflop(n, sw, d.bytes_per_weight), n * sw)]


def pl_layer_memory_gb(spec: DtsSpec) -> float:
    """Memory one PL layer needs: the DNN's memory spread evenly over its layers."""
    return spec.dnn.memory_gb / spec.dnn.layers


def layers_that_fit(memory_gb: float, layer_gb: float) -> int:
    """How many equal layers fit in ``memory_gb`` (a hair of slack for decimal sizes)."""
    return math.floor(memory_gb / layer_gb * (1.0 + 1e-12))


def _average_gflop(models: int, weights_gb: float, bytes_per_weight: float) -> float:
    """A federated average of ``models`` models: one addition per weight and model."""
    return models * weights_gb / bytes_per_weight  # (weights_gb * 1e9 / bytes) FLOP = this many GFLOP


def evaluate(arch: Architecture, spec: DtsSpec, a: Assignment, gflops: Array, bandwidth: Array) -> Evaluation:
    """The per-batch time of ``arch`` with roles ``a``; ``gflops`` and ``bandwidth`` are (samples, processors)."""
    d, t = spec.dnn, spec.training
    bsz, ratio = t.batch_size, d.backward_to_forward

    def compute(gflop: float, procs: tuple[int, ...]) -> Array:
        return gflop / gflops[:, list(procs)]

    def link(a_: tuple[int, ...], b_: tuple[int, ...]) -> Array:
        return np.minimum(bandwidth[:, list(a_)], bandwidth[:, list(b_)])

    def delays(*columns: tuple[tuple[int, ...], Array]) -> dict[int, float]:
        out: dict[int, float] = {}
        for procs, values in columns:  # values: (samples, len(procs)); the first row is nominal
            for p, v in zip(procs, values[0], strict=True):
                out[p] = out.get(p, 0.0) + float(v)
        return out

    if arch is Architecture.PL:
        stages = a.of(WORKER)
        per_layer = d.gflop_per_sample / d.layers
        forward = np.stack([bsz * per_layer * n_l / gflops[:, p] for p, n_l in zip(stages, a.layers, strict=True)],
                           axis=-1)
        backward = ratio * forward
        fetch = np.zeros_like(forward)
        fetch[:, 0] = bsz * t.sample_gb / bandwidth[:, stages[0]]
        write = np.zeros_like(forward)
        if len(stages) > 1:
            write[:, :-1] = 2.0 * bsz * d.intermediate_gb / link(stages[:-1], stages[1:])
        own = fetch + forward + backward + write
        return Evaluation(equations.pl(fetch, forward, backward, write), delays((stages, own)))

    clients, server = a.of(CLIENT), a.of(SERVER)
    n = len(clients)
    if arch is Architecture.FL:
        forward = compute(bsz * d.gflop_per_sample, clients)
        backward = ratio * forward
        exchange = d.upload_gb / link(clients, server) + d.weights_gb / link(clients, server)
        average = _average_gflop(n, d.weights_gb, d.bytes_per_weight) / gflops[:, server[0]]
        return Evaluation(equations.fl(forward, backward, exchange, average),
                          delays((clients, forward + backward + exchange), (server, average[:, None])))

    fetch = bsz * t.sample_gb / bandwidth[:, list(clients)]
    forward = compute(bsz * d.client_gflop_per_sample, clients)
    backward = ratio * forward
    if arch is Architecture.FSL:
        edges = a.of(EDGE)
        cut = 2.0 * bsz * d.intermediate_gb / link(clients, edges)
        edge_forward = compute(bsz * d.server_gflop_per_sample, edges)
        edge_backward = ratio * edge_forward
        upload = d.server_side_weights_gb / link(edges, server * n)
        average = _average_gflop(n, d.server_side_weights_gb, d.bytes_per_weight) / gflops[:, server[0]]
        return Evaluation(
            equations.fsl(fetch, forward, backward, cut, edge_forward, edge_backward, upload, average),
            delays((clients, fetch + forward + backward + cut), (edges, edge_forward + edge_backward + upload),
                   (server, average[:, None])))

    cut = 2.0 * bsz * d.intermediate_gb / link(clients, server * n)
    server_forward = np.repeat(compute(bsz * d.server_gflop_per_sample, server), n, axis=-1)
    server_backward = ratio * server_forward
    server_total = (server_forward + server_backward).sum(axis=-1, keepdims=True)
    if arch is Architecture.PSL:
        return Evaluation(equations.psl(fetch, forward, backward, cut, server_forward, server_backward),
                          delays((clients, fetch + forward + backward + cut), (server, server_total)))
    passing = d.client_side_weights_gb / link(clients[:-1], clients[1:])  # SL: client j -> j+1
    handed = np.concatenate([passing, np.zeros((passing.shape[0], 1))], axis=-1)
    return Evaluation(
        equations.sl(fetch, forward, backward, cut, server_forward, server_backward, passing),
        delays((clients, fetch + forward + backward + cut + handed), (server, server_total)))
