"""Stream priorities: which pending transfer a worker's link serves next.

A lower value is served first; ties (and every computation) fall back to release order.

- FIFO: all 0, so streams go in the order they were released.
- CRITICAL_PATH (TicTac-like): a stream's priority is the earliest time any of its
  consumers could start, ``min over consumers c of est(c)``, where ``est`` is the earliest
  start in the step graph with unlimited resources, computation taking its mean recorded
  duration and transfers taking no time. Parameters needed by the first layers therefore go
  first; a stream nobody consumes goes last (+inf).
- REVERSE: the negation of CRITICAL_PATH.
- RANDOM: 0 here; the engines use per-(worker, step) random keys drawn from the seed.
- RECORDED: 0 here; the engines key every operation of a simulated step by the recorded step it
  replays (``inputs.recorded_keys``): a stream by when it finished there, so streams ready
  together are served in the order that step received them, and a computation by when it
  started there, so computations ready together run in the order that step ran them (TensorFlow
  orders both differently from step to step).
- CUSTOM: the position in ``NetworkModel.custom_order``; transfers it does not name follow
  all named ones, in release order. An unknown or non-transfer name is an error.
"""

from __future__ import annotations

import math

import numpy as np

from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettingsError, StreamOrder


def stream_priorities(profile: Profile, network: NetworkModel) -> np.ndarray:
    """Static priority of each operation (0 for computation), see module docstring."""
    n = len(profile.ops)
    if network.order is StreamOrder.CUSTOM:
        return _custom(profile, network.custom_order)
    if network.order in (StreamOrder.CRITICAL_PATH, StreamOrder.REVERSE):
        need = _need_times(profile)
        return need if network.order is StreamOrder.CRITICAL_PATH else -need
    return np.zeros(n, dtype=np.float64)


def _need_times(profile: Profile) -> np.ndarray:
    ops = profile.ops
    durations = np.array([s.duration_us for s in profile.steps], dtype=np.float64).mean(axis=0)
    est = np.zeros(len(ops), dtype=np.float64)
    deps = profile.dep_indices
    for i in profile.topological_order:
        est[i] = max((est[d] + (0.0 if ops[d].resource.is_transfer else durations[d]) for d in deps[i]), default=0.0)
    need = np.zeros(len(ops), dtype=np.float64)
    consumers: list[list[int]] = [[] for _ in ops]
    for i, ds in enumerate(deps):
        for d in ds:
            consumers[d].append(i)
    for i, op in enumerate(ops):
        if op.resource.is_transfer:
            need[i] = min((est[c] for c in consumers[i]), default=math.inf)
    return need


def _custom(profile: Profile, names: tuple[str, ...]) -> np.ndarray:
    index = profile.index
    unknown = [name for name in names if name not in index]
    if unknown:
        raise SimulationSettingsError(f"custom_order names unknown operation(s): {unknown}")
    not_transfers = [name for name in names if not profile.ops[index[name]].resource.is_transfer]
    if not_transfers:
        raise SimulationSettingsError(f"custom_order names operation(s) that are not transfers: {not_transfers}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SimulationSettingsError(f"custom_order names transfer(s) more than once: {repeated}")
    priority = np.zeros(len(profile.ops), dtype=np.float64)
    for i, op in enumerate(profile.ops):
        if op.resource.is_transfer:
            priority[i] = len(names)
    for pos, name in enumerate(names):
        priority[index[name]] = pos
    return priority
