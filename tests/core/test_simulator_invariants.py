"""Properties every simulation must have, over random profiles; and clear errors."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings, SimulationSettingsError, StreamOrder
from advisor.core.models.ps_des.simulator import simulate
from advisor.core.models.ps_des.simulator.inputs import prepare
from advisor.core.models.ps_des.simulator.timeline import to_chrome_trace
from benchmarks.synthetic import tiny_mlp
from tests.core.test_simulator_equivalence import networks, random_profiles

HYP = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def layered_profiles(draw: st.DrawFn) -> Profile:
    """Deterministic (one recorded step) layer chains: pulls at start, fwd chain, bwd chain
    releasing pushes, PS updates. Every queue then receives its ops in an order that does not
    depend on timing (pulls all at t=0, pushes in bwd-chain order, one PS update per push in
    push order), so each op's end is a max-plus (monotone) function of the durations: slower
    links can only delay a step, never speed it up (no scheduling anomaly)."""
    n = draw(st.integers(1, 4))
    n_ps = 1
    sizes = draw(st.lists(st.integers(1, 3_000_000), min_size=n, max_size=n))
    ops: list[dict] = []
    for i in range(n):
        ops.append(dict(name=f"pull{i}", resource="downlink", ps=i % n_ps, bytes=sizes[i]))
        ops.append(dict(name=f"f{i}", resource="worker", deps=[f"pull{i}"] + ([f"f{i - 1}"] if i else [])))
    for i in reversed(range(n)):
        ops.append(dict(name=f"b{i}", resource="worker", deps=[f"b{i + 1}" if i < n - 1 else f"f{n - 1}"]))
        ops.append(dict(name=f"push{i}", resource="uplink", ps=i % n_ps, bytes=sizes[i], deps=[f"b{i}"]))
        ops.append(dict(name=f"upd{i}", resource="ps", ps=i % n_ps, deps=[f"push{i}"]))
    durations = draw(st.lists(st.floats(0, 2e5), min_size=len(ops), max_size=len(ops)))
    for k, op in enumerate(ops):
        if op["resource"] in ("downlink", "uplink"):
            durations[k] = 0.0
    step = dict(index=0, start_us=[0.0] * len(ops), duration_us=durations)
    return build_profile(job=dict(batch_size=16, parameter_servers=n_ps), ops=ops, steps=[step])


@HYP
@given(profile=layered_profiles(), workers=st.integers(2, 5), bw=st.floats(1e7, 1e9))
def test_w_workers_are_at_most_w_times_one_worker(profile: Profile, workers: int, bw: float) -> None:
    # One worker alone takes T1 per step (one recorded step: no sampling noise). With W workers
    # and one PS each transfer chunk gets min(B/n, NIC) <= its rate alone, computation is
    # unchanged, and the layered graph has no scheduling anomaly (see layered_profiles), so
    # every step takes >= T1. (With 2 PS this can fail: max-min sharing may give a worker *more*
    # on one PS when others crowd the other, section 5.)
    network = NetworkModel(bandwidth_bps=bw)
    steps = 6
    one = simulate(profile, network, SimulationSettings(workers=1, steps=steps, warmup_steps=0))
    t1 = one.step_ends_s[0][0]
    assert one.step_ends_s[0] == pytest.approx([t1 * (k + 1) for k in range(steps)], rel=1e-9)
    many = simulate(profile, network, SimulationSettings(workers=workers, steps=steps, warmup_steps=0))
    for ends in many.step_ends_s:
        # The k-th step of any worker ends no earlier than k * T1 ...
        for k, end in enumerate(ends):
            assert end >= (k + 1) * t1 * (1 - 1e-9)
    # ... so the examples done by any time t are at most W * t / T1 * batch.
    assert many.throughput(1) <= workers * one.throughput(1) * (1 + 1e-9) + workers * profile.job.batch_size / (
        min(e[-1] for e in many.step_ends_s) - max(e[0] for e in many.step_ends_s)
    )


@HYP
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4))
def test_links_never_carry_more_than_their_capacity(profile: Profile, network: NetworkModel, workers: int) -> None:
    # By the time t any step ends, the steps completed so far moved their bytes through each
    # PS link direction, which carries at most B: completed(t) * bits_per_step(ps, dir) <= B t
    # (times are rounded to a 0.23 ns grid, hence 10 ns of slack).
    result = simulate(profile, network, SimulationSettings(workers=workers, steps=5, warmup_steps=0))
    ends = sorted(t for worker_ends in result.step_ends_s for t in worker_ends)
    per_step: Counter[tuple[int, str]] = Counter()
    for op in profile.ops:
        if op.resource.is_transfer:
            per_step[(op.ps, op.resource.value)] += 8 * op.bytes
    heaviest = max(per_step.values())
    for done, t in enumerate(ends, start=1):
        assert done * heaviest <= network.bandwidth_bps * (t * (1 + 1e-9) + 1e-8)


def _timeline(profile: Profile, network: NetworkModel, workers: int, steps: int = 4) -> SimulationResult:
    sim = SimulationSettings(workers=workers, steps=steps, warmup_steps=0, record_timeline=True)
    return simulate(profile, network, sim)


@HYP
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4))
def test_timeline_every_op_once_in_order_and_no_deadlock(profile: Profile, network: NetworkModel, workers: int) -> None:
    result = _timeline(profile, network, workers)
    assert all(len(ends) == 4 for ends in result.step_ends_s)  # no deadlock: all steps ran
    assert all(b >= a for ends in result.step_ends_s for a, b in zip(ends, ends[1:]))
    chunks: dict[tuple[int, int, str], list] = defaultdict(list)
    for e in result.timeline:
        assert 0 <= e.start_s <= e.end_s
        chunks[(e.worker, e.step, e.op)].append(e)
    win = math.inf if network.win_bytes is None else network.win_bytes
    for w in range(workers):
        for k in range(4):
            for op in profile.ops:
                got = chunks[(w, k, op.name)]
                assert len(got) == (2 if op.resource.is_transfer and op.bytes > win else 1)
                first_start = min(c.start_s for c in got)
                for dep in op.deps:  # an op starts after all its dependencies ended
                    assert first_start >= max(c.end_s for c in chunks[(w, k, dep)]) - 1e-12
            assert max(c.end_s for (ww, kk, _), cs in chunks.items() if (ww, kk) == (w, k) for c in cs) == pytest.approx(
                result.step_ends_s[w][k], abs=1e-9
            )
    assert result.events == len(result.timeline)


@HYP
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4))
def test_one_chunk_at_a_time_per_worker_and_resource(profile: Profile, network: NetworkModel, workers: int) -> None:
    result = _timeline(profile, network, workers)
    lanes: dict[tuple[int, str, int | None], list[tuple[float, float]]] = defaultdict(list)
    for e in result.timeline:
        if e.end_s > e.start_s:
            lanes[(e.worker, e.resource, e.ps)].append((e.start_s, e.end_s))
    for spans in lanes.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-12


def test_same_seed_same_result_and_different_seeds_sample_differently() -> None:
    profile = tiny_mlp(recorded_steps=10)
    network = NetworkModel(bandwidth_bps=1e8, order=StreamOrder.RANDOM)
    a = simulate(profile, network, SimulationSettings(workers=3, steps=20, seed=7, warmup_steps=0))
    b = simulate(profile, network, SimulationSettings(workers=3, steps=20, seed=7, warmup_steps=0))
    c = simulate(profile, network, SimulationSettings(workers=3, steps=20, seed=8, warmup_steps=0))
    assert a == b
    assert a.step_ends_s != c.step_ends_s
    sampled = [prepare(profile, network, SimulationSettings(workers=3, steps=20, seed=s, warmup_steps=0)).sampled for s in (7, 8)]
    assert not np.array_equal(*sampled)


def test_single_step_profile_does_not_depend_on_the_seed() -> None:
    profile = tiny_mlp(recorded_steps=1)
    network = NetworkModel(bandwidth_bps=1e8)
    runs = [simulate(profile, network, SimulationSettings(workers=2, steps=5, seed=s, warmup_steps=0)) for s in (1, 2)]
    assert runs[0] == runs[1]


def test_chrome_trace_has_complete_events_per_worker_and_ps() -> None:
    result = _timeline(tiny_mlp(), NetworkModel(bandwidth_bps=1e8), workers=2, steps=2)
    trace = json.loads(json.dumps(to_chrome_trace(result)))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    on_workers = [e for e in complete if e["pid"] < 2]
    assert len(on_workers) == len(result.timeline)
    assert {e["pid"] for e in complete} == {0, 1, 2}  # two workers, one parameter server
    last = max(e["ts"] + e["dur"] for e in complete)
    assert last == pytest.approx(max(max(ends) for ends in result.step_ends_s) * 1e6)
    with pytest.raises(SimulationSettingsError, match="record_timeline"):
        to_chrome_trace(simulate(tiny_mlp(), NetworkModel(bandwidth_bps=1e8), SimulationSettings(workers=1, steps=2, warmup_steps=0)))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_bad_bandwidth_is_refused(bad: float) -> None:
    with pytest.raises(SimulationSettingsError, match="bandwidth_bps"):
        NetworkModel(bandwidth_bps=bad)
    with pytest.raises(SimulationSettingsError, match="worker_bandwidth_bps"):
        NetworkModel(bandwidth_bps=1e8, worker_bandwidth_bps=bad)


@pytest.mark.parametrize("workers", [0, -3])
def test_fewer_than_one_worker_is_refused(workers: int) -> None:
    with pytest.raises(SimulationSettingsError, match="workers"):
        SimulationSettings(workers=workers)


def test_custom_order_names_are_checked() -> None:
    profile = tiny_mlp()
    settings_ = SimulationSettings(workers=1, steps=2, warmup_steps=0)
    unknown = NetworkModel(bandwidth_bps=1e8, order=StreamOrder.CUSTOM, custom_order=("pull_fc0/W", "no_such_stream"))
    with pytest.raises(SimulationSettingsError, match="no_such_stream"):
        simulate(profile, unknown, settings_)
    compute = NetworkModel(bandwidth_bps=1e8, order=StreamOrder.CUSTOM, custom_order=("fc0/fwd",))
    with pytest.raises(SimulationSettingsError, match="fc0/fwd"):
        simulate(profile, compute, settings_)
    ok = NetworkModel(bandwidth_bps=1e8, order=StreamOrder.CUSTOM, custom_order=("pull_fc3/W", "pull_fc0/W"))
    assert len(simulate(profile, ok, settings_).step_ends_s[0]) == 2
