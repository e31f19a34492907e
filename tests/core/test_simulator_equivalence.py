"""The fast engine gives the reference engine's results: random DAGs and a real trace.

"Same" means every step end within rtol 1e-9 (plus 10 ns absolute: both engines round
completion times to a 0.23 ns grid and may land one tick apart) and the same event count.
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings, StreamOrder
from advisor.core.models.ps_des.simulator.fast import simulate_fast
from advisor.core.models.ps_des.simulator.inputs import prepare
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from benchmarks.synthetic import inception_like, tiny_mlp
from tests.conftest import ps_async_data

RESOURCES = ["downlink", "worker", "uplink", "ps"]


@st.composite
def random_profiles(draw: st.DrawFn, max_ops: int = 10) -> Profile:
    """Random step graphs: ops in topological order, each depending on up to 3 earlier ones."""
    n_ps = draw(st.integers(1, 2))
    n = draw(st.integers(2, max_ops))
    ops = []
    for i in range(n):
        resource = "downlink" if i == 0 else draw(st.sampled_from(RESOURCES))
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        op = dict(name=f"o{i}", resource=resource, deps=[f"o{d}" for d in sorted(deps)])
        if resource != "worker":
            op["ps"] = draw(st.integers(0, n_ps - 1))
        if resource in ("downlink", "uplink"):
            op["bytes"] = draw(st.one_of(st.just(0), st.integers(1, 4_000_000)))
        ops.append(op)
    durations = st.lists(st.floats(0, 0.3e6, allow_nan=False), min_size=n, max_size=n)
    starts = st.lists(st.floats(0, 0.3e6, allow_nan=False), min_size=n, max_size=n)  # StreamOrder.RECORDED's keys
    steps = [dict(index=k, start_us=draw(starts), duration_us=d)
             for k, d in enumerate(draw(st.lists(durations, min_size=1, max_size=3)))]
    return build_profile(job=dict(batch_size=4, parameter_servers=n_ps), ops=ops, steps=steps)


networks = st.builds(
    NetworkModel,
    bandwidth_bps=st.floats(1e7, 1e8),
    win_bytes=st.one_of(st.none(), st.integers(1_000, 3_000_000).map(float)),
    order=st.sampled_from([StreamOrder.FIFO, StreamOrder.CRITICAL_PATH, StreamOrder.REVERSE, StreamOrder.RANDOM,
                           StreamOrder.RECORDED]),
    worker_bandwidth_bps=st.one_of(st.none(), st.floats(1e7, 1e8)),
    # the contention rules (reference.py), each off half of the time
    request_queue_s=st.sampled_from([0.0, 0.0, 1e-3, 0.25]),
    share_sigma=st.sampled_from([0.0, 1.0]),
    multi_flow_goodput=st.sampled_from([1.0, 0.85]),
    window_gain=st.sampled_from([0.0, 1.0, 1.25]),
    two_way_efficiency=st.sampled_from([0.0, 0.0, 0.8]),
)


def assert_same(fast: SimulationResult, ref: SimulationResult) -> None:
    assert fast.events == ref.events
    assert len(fast.step_ends_s) == len(ref.step_ends_s)
    np.testing.assert_allclose(np.array(fast.step_ends_s), np.array(ref.step_ends_s), rtol=1e-9, atol=1e-8)


def both(profile: Profile, network: NetworkModel, sim: SimulationSettings, compress: bool = True):  # type: ignore[no-untyped-def]
    inputs = prepare(profile, network, sim)
    return simulate_fast(profile, inputs, compress=compress), simulate_reference(profile, inputs)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_fast_engine_matches_reference_on_random_dags(
    profile: Profile, network: NetworkModel, workers: int, seed: int
) -> None:
    sim = SimulationSettings(workers=workers, steps=5, warmup_steps=0, seed=seed)
    assert_same(*both(profile, network, sim))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       data=st.data())  # fmt: skip
def test_fast_engine_matches_reference_with_staggered_starts(  # type: ignore[no-untyped-def]
    profile: Profile, network: NetworkModel, workers: int, seed: int, data
) -> None:
    one = st.one_of(st.just(0.0), st.floats(0, 2))
    offsets = data.draw(st.one_of(st.just(()), st.lists(one, min_size=workers, max_size=workers)))
    sim = SimulationSettings(workers=workers, steps=5, warmup_steps=0, seed=seed, start_offsets_s=tuple(offsets))
    assert_same(*both(profile, network, sim))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(profile=random_profiles(), workers=st.integers(1, 4), win=st.sampled_from([None, 1e6]))
def test_fast_engine_without_chain_merging_matches_reference(profile: Profile, workers: int, win: float | None) -> None:
    sim = SimulationSettings(workers=workers, steps=4, warmup_steps=0)
    assert_same(*both(profile, NetworkModel(bandwidth_bps=5e7, win_bytes=win), sim, compress=False))


def test_fast_engine_matches_reference_on_synthetic_chains() -> None:
    # Chain merging is active here (most compute ops are merged).
    profile = inception_like(layers=6, compute_ms=40.0, total_mb=4.0, recorded_steps=3)
    for network in (NetworkModel(bandwidth_bps=1e8), NetworkModel(bandwidth_bps=1e8, win_bytes=2e5)):
        assert_same(*both(profile, network, SimulationSettings(workers=3, steps=6, warmup_steps=0, seed=1)))
    two_ps = inception_like(layers=6, compute_ms=40.0, total_mb=4.0, recorded_steps=3, parameter_servers=2)
    assert_same(*both(two_ps, NetworkModel(bandwidth_bps=1e8), SimulationSettings(workers=3, steps=6, warmup_steps=0)))
    assert_same(*both(tiny_mlp(), NetworkModel(bandwidth_bps=1e8), SimulationSettings(workers=4, steps=8, warmup_steps=0)))


def real_mlp_profile(steps: int = 20) -> Profile:
    """The recorded MLP run (real tensor sizes and op durations) with hand-coded dependencies.

    Kept minimal on purpose (the project's importer does this properly): pulls are the
    worker-side RecvTensor records, pushes the PS-side ones, compute is the emulated
    fwd/bwd PyFunc ops and the PS's ResourceApplyGradientDescent ops; dependencies follow
    the layer names (fcN) in the tensor names.
    """
    path = ps_async_data("condensed", "cubic", "mlp_bw100.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    records = [_step_records(s) for s in doc["steps"]]
    complete = [r for r in records if len(r) == len(records[0]) and set(r) == set(records[0])][:steps]
    names = sorted(complete[0])
    ops = [_real_op(name, complete[0][name][0], complete[0][name][2], names) for name in names]
    timed = [dict(index=k, start_us=[0.0] * len(names), duration_us=[r[n][1] for n in names]) for k, r in enumerate(complete)]
    return build_profile(job=dict(model="mlp", batch_size=32), ops=ops, steps=timed)


def _step_records(step: dict) -> dict[str, tuple[str, float, int]]:
    """name -> (kind, duration_us, bytes) for the ops the test profile uses."""
    out: dict[str, tuple[str, float, int]] = {}
    for dev in step["devices"]:
        on_ps = "/job:ps" in dev["device"]
        for node in dev["nodes"]:
            dur = float(node["end_rel_us"])
            if node["name"] == "RecvTensor":
                tensor = node["label"].split()[2]
                kind = "uplink" if on_ps else "downlink"
                out[tensor] = (kind, dur, int(node["outputs"][0]["requested_bytes"]))
            elif node["name"].endswith("emu_fwd") or node["name"].endswith("emu_bwd"):
                out[node["name"]] = ("worker", dur, 0)
            elif node["name"].endswith("ResourceApplyGradientDescent"):
                out[node["name"]] = ("ps", dur, 0)
    return out


def _real_op(name: str, kind: str, nbytes: int, names: list[str]) -> dict:
    layer = re.search(r"fc(\d)", name)
    i = int(layer.group(1)) if layer else None
    op: dict = dict(name=name, resource=kind)
    if kind != "worker":
        op["ps"] = 0
    if kind in ("downlink", "uplink"):
        op["bytes"] = nbytes
    deps: list[str] = []
    if kind == "worker" and name.endswith("emu_fwd"):
        deps = [n for n in names if n.startswith("edge_") and f"fc{i}/" in n and "gradients" not in n]
        deps += [f"fc{i - 1}/emu_fwd"] if i else []
    elif kind == "worker":
        deps = [f"gradients/fc{i + 1}/IdentityN_grad/emu_bwd" if i < 3 else "fc3/emu_fwd"]
    elif kind == "uplink" and i is not None:
        deps = [f"gradients/fc{i}/IdentityN_grad/emu_bwd"]
    elif kind == "ps":
        grad = "MatMul_grad" if "/W/" in name else "add_grad"
        deps = [n for n in names if n.startswith("edge_") and f"gradients/fc{i}/{grad}" in n]
    op["deps"] = [d for d in deps if d in names]
    return op


def test_fast_engine_matches_reference_on_a_real_trace() -> None:
    profile = real_mlp_profile()
    assert 30 <= len(profile.ops) <= 40
    for network in (NetworkModel(bandwidth_bps=1e8), NetworkModel(bandwidth_bps=5e7, win_bytes=65535.0)):
        for workers in (1, 3):
            assert_same(*both(profile, network, SimulationSettings(workers=workers, steps=10, warmup_steps=0, seed=3)))


def test_fast_engine_matches_reference_on_a_real_trace_with_contention() -> None:
    profile = real_mlp_profile()
    for queue, two_way in ((0.005, 0.0), (0.1, 0.0), (0.1, 0.83)):
        for win in (None, 65535.0):
            network = NetworkModel(bandwidth_bps=1e8, win_bytes=win, request_queue_s=queue, share_sigma=1.0,
                                   multi_flow_goodput=0.85, two_way_efficiency=two_way)
            for offsets in ((0.0, 0.0, 0.0), (0.0, 0.1, 0.2)):
                sim = SimulationSettings(workers=3, steps=10, warmup_steps=0, seed=3, start_offsets_s=offsets)
                assert_same(*both(profile, network, sim))


def test_fast_engine_matches_reference_on_synthetic_chains_with_contention() -> None:
    one_ps = inception_like(layers=6, compute_ms=40.0, total_mb=4.0, recorded_steps=3)
    two_ps = inception_like(layers=6, compute_ms=40.0, total_mb=4.0, recorded_steps=3, parameter_servers=2)
    for gain, two_way in ((0.0, 0.0), (1.25, 0.0), (0.0, 0.8), (1.25, 0.8)):  # window caps, the two-way loss
        network = NetworkModel(bandwidth_bps=1e8, request_queue_s=0.02, share_sigma=1.0, multi_flow_goodput=0.85,
                               window_gain=gain, two_way_efficiency=two_way)
        for profile in (one_ps, two_ps):
            assert_same(*both(profile, network, SimulationSettings(workers=4, steps=8, warmup_steps=0, seed=2)))


def test_fast_engine_matches_reference_in_the_recorded_order_of_a_real_trace() -> None:
    # The CNN's steps received their pulls and ran their ops in varying orders (its docs:
    # models.md, stream order): every op keyed, through both engines, with and without contention.
    from advisor.importers.loader import load_profile

    profile = load_profile(ps_async_data() / "condensed" / "cubic" / "cnn_bw100.json.gz")
    for network in (NetworkModel(bandwidth_bps=1e8, order=StreamOrder.RECORDED),
                    NetworkModel(bandwidth_bps=1e8, order=StreamOrder.RECORDED, request_queue_s=0.02, share_sigma=1.0,
                                 multi_flow_goodput=0.85, window_gain=1.25)):
        for workers in (1, 3):
            assert_same(*both(profile, network, SimulationSettings(workers=workers, steps=10, warmup_steps=0, seed=3)))
