"""Small hand-made profiles whose every number is easy to check by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.core.profile import Profile, build_profile

if TYPE_CHECKING:
    from advisor.core.advice import ModelChoice
    from advisor.core.models.ps_des.contention import Contention


def one_layer_doc(*, pull_bytes: int = 1000, push_bytes: int = 1000, steps: int = 2) -> dict[str, Any]:
    """A one-layer job: PS reads W, pulls it, worker computes, pushes the gradient, PS updates.

    Each step k (k = 0, 1, ...) records: read 10 us, pull 100 us, compute 50+k us, push 100 us,
    update 20 us, back to back, so the step spans 280 + k us.
    """
    ops = [
        {"name": "ps0:read", "resource": "ps", "ps": 0},
        {"name": "pull", "resource": "downlink", "ps": 0, "bytes": pull_bytes, "deps": ["ps0:read"]},
        {"name": "worker:compute", "resource": "worker", "deps": ["pull"]},
        {"name": "push", "resource": "uplink", "ps": 0, "bytes": push_bytes, "deps": ["worker:compute"]},
        {"name": "ps0:update", "resource": "ps", "ps": 0, "deps": ["push"]},
    ]
    timings = []
    for k in range(steps):
        dur = [10.0, 100.0, 50.0 + k, 100.0, 20.0]
        start = [0.0, 10.0, 110.0, 160.0 + k, 260.0 + k]
        timings.append({"index": k, "start_us": start, "duration_us": dur})
    return {
        "format": "advisor-profile",
        "version": 1,
        "job": {"model": "one-layer", "batch_size": 4, "recorded_bandwidth_bps": 8e7},
        "ops": ops,
        "steps": timings,
    }


def one_layer(**kwargs: Any) -> Profile:
    doc = one_layer_doc(**kwargs)
    return build_profile(**doc)


def des_choice(contention: "Contention | None" = None, *, equal_shares: bool = False) -> "ModelChoice":
    """The model choice that means the PS simulation with ``contention`` (the default rules when
    None), or Li et al.'s equal shares."""
    from advisor.core.models.ps_des.contention import Contention
    from advisor.core.models.ps_des.model import contention_choice

    return contention_choice(None if equal_shares else contention or Contention())


def pull_push_pair_ends(engine: Any, network: Any) -> dict[tuple[int, int, str], float]:
    """Two workers on one PS, a step of one pull and one push of 8e5 bits each (0.1 s alone on an
    8 Mbit/s link), no compute, worker 1 starting 50 ms after worker 0, two steps each, simulated by
    ``engine`` (``simulate_reference`` or ``simulate_fast``) on ``network``: each transfer's end
    time by (worker, step, "pull" or "push"), for timelines worked out by hand."""
    from advisor.core.models.ps_des.simulator.inputs import prepare
    from advisor.core.sim_types import SimulationSettings

    profile = build_profile(job=dict(batch_size=1, parameter_servers=1), ops=[
        dict(name="pull", resource="downlink", ps=0, bytes=100_000, deps=[]),
        dict(name="push", resource="uplink", ps=0, bytes=100_000, deps=["pull"])],
        steps=[dict(index=0, start_us=[0.0, 0.0], duration_us=[0.0, 0.0])])
    sim = SimulationSettings(workers=2, steps=2, warmup_steps=0, seed=0, start_offsets_s=(0.0, 0.05),
                             record_timeline=True)
    result = engine(profile, prepare(profile, network, sim), True)
    assert result.timeline is not None
    return {(e.worker, e.step, e.op): e.end_s for e in result.timeline}
