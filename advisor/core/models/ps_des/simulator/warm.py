"""Run every compiled entry of the engine once on a tiny job, so that numba compiles (or loads)
all of it: what an image build runs to ship the engine compiled (``advisor/jit_cache.py``).

Pure computation: where numba keeps what it compiled is its own business (``NUMBA_CACHE_DIR``).
The job has two parameter servers, pushes and pulls, and is run through both ways the engine is
entered (``FastRun``'s continued run, and the plain run with a timeline), with and without the
contention rules (random order keys and share weights), so that no signature is left to compile.
"""

from __future__ import annotations

from typing import Any

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings


def tiny_profile() -> Profile:
    """Two layers on two PS: pull, forward, backward, push, apply (fixed durations)."""
    ops: list[dict[str, Any]] = []
    for i in range(2):
        ops.append(dict(name=f"pull{i}", resource="downlink", ps=i, bytes=4_000_000))
        ops.append(dict(name=f"f{i}", resource="worker", deps=[f"pull{i}"] + ([f"f{i - 1}"] if i else [])))
    for i in reversed(range(2)):
        ops.append(dict(name=f"b{i}", resource="worker", deps=[f"f{i}" if i == 1 else "b1"]))
        ops.append(dict(name=f"push{i}", resource="uplink", ps=i, bytes=4_000_000, deps=[f"b{i}"]))
        ops.append(dict(name=f"apply{i}", resource="ps", ps=i, deps=[f"push{i}"]))
    durations = [0.0 if op["resource"] in ("uplink", "downlink") else 2000.0 for op in ops]
    steps = [dict(index=s, start_us=[0.0] * len(ops), duration_us=[d * (1 + 0.01 * s) for d in durations])
             for s in range(3)]
    return build_profile(job=dict(model="warm-up", batch_size=8, parameter_servers=2), ops=ops, steps=steps)


def warm() -> int:
    """Compile or load every engine function; returns the number of compiled signatures of the
    main loop (1 when everything shares one, as it should)."""
    from advisor.core.models import registry
    from advisor.core.models.protocol import ModelInputs
    from advisor.core.models.ps_des.simulator import simulate
    from advisor.core.models.ps_des.simulator.loop import run

    profile = tiny_profile()
    net = NetworkModel(bandwidth_bps=1e9)
    for name in ("li2020-des", "li2020-des+contention"):
        model = registry.get(name)
        params = registry.params_for(model)
        inputs = ModelInputs(profile=profile, recorded=profile, network=net)
        started = model.start(inputs, params, 3, 0)
        started.advance(5)
        started.advance(8)  # continued: the resume path
        netm = model.network(inputs, params)  # type: ignore[attr-defined]
        simulate(profile, netm, SimulationSettings(workers=2, steps=4, warmup_steps=0, record_timeline=True))
    return len(getattr(run, "signatures", ()))
