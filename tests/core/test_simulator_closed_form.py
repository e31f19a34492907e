"""Simulator results against hand derivations (times chosen dyadic so they are exact floats).

Unit: S = 1 MB pushed through B = 8 Mbit/s takes 8S/B = 1 s when a worker has the link alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, StreamOrder
from advisor.core.models.ps_des.simulator import simulate, simulate_reference_engine
from advisor.core.models.ps_des.simulator.inputs import sample_steps
from advisor.core.models.ps_des.simulator.sharing import water_fill

S = 1_000_000  # bytes
B = 8e6  # bits/s: 8 * S / B = 1 s
ENGINES = [simulate, simulate_reference_engine]


def one_layer(computes_s: list[float], update_s: float = 0.25) -> Profile:
    """pull (S bytes) -> compute c -> push (S bytes) -> ps update u; one recorded step per c."""
    ops = [
        dict(name="pull", resource="downlink", ps=0, bytes=S),
        dict(name="comp", resource="worker", deps=["pull"]),
        dict(name="push", resource="uplink", ps=0, bytes=S, deps=["comp"]),
        dict(name="upd", resource="ps", ps=0, deps=["push"]),
    ]
    steps = [
        dict(index=k, start_us=[0.0] * 4, duration_us=[0.0, c * 1e6, 0.0, update_s * 1e6])
        for k, c in enumerate(computes_s)
    ]
    return build_profile(job=dict(batch_size=8), ops=ops, steps=steps)


def run(engine, profile: Profile, workers: int, steps: int, seed: int = 0, **net):  # type: ignore[no-untyped-def]
    network = NetworkModel(bandwidth_bps=net.pop("bandwidth_bps", B), **net)
    return engine(profile, network, SimulationSettings(workers=workers, steps=steps, warmup_steps=0, seed=seed))


@pytest.mark.parametrize("engine", ENGINES)
def test_one_worker_step_is_pull_plus_compute_plus_push_plus_update(engine) -> None:  # type: ignore[no-untyped-def]
    # Alone, each op waits only for its predecessor and each transfer gets all of B:
    # step = 8S/B + c + 8S/B + u = 1 + 0.5 + 1 + 0.25 = 2.75 s; steps follow back to back.
    result = run(engine, one_layer([0.5]), workers=1, steps=3)
    assert result.step_ends_s == ((2.75, 5.5, 8.25),)
    assert result.events == 4 * 3


@pytest.mark.parametrize("engine", ENGINES)
def test_two_workers_started_together_share_both_links(engine) -> None:  # type: ignore[no-untyped-def]
    # Both pull at t=0 at B/2 each: pulls end at 16S/B = 2; both compute 0.5 -> 2.5; both push
    # at B/2 -> 4.5; update -> 4.75. Identical workers stay in lockstep, so every step takes
    # 16S/B + c + 16S/B + u = 4.75 s.
    result = run(engine, one_layer([0.5]), workers=2, steps=2)
    assert result.step_ends_s == ((4.75, 9.5), (4.75, 9.5))
    assert result.throughput(0) == pytest.approx(2 * 8 / 4.75)


def _seed_giving(samples: list[list[int]], recorded: int) -> int:
    """First seed whose sampled profile steps (each worker's own stream) are ``samples``."""
    for seed in range(1000):
        drawn = [sample_steps(seed, w, len(row), recorded).tolist() for w, row in enumerate(samples)]
        if drawn == samples:
            return seed
    raise AssertionError("no seed found")


@pytest.mark.parametrize("engine", ENGINES)
def test_two_workers_out_of_phase_share_links_by_processor_sharing(engine) -> None:  # type: ignore[no-untyped-def]
    # Worker 0 always gets recorded step 0 (c = 1 s), worker 1 recorded step 1 (c = 1.5 s); u = 0.25.
    # t=0..2     both pulls share B: each needs 1 s alone -> both end at 2.
    # W0 computes 2..3, W1 2..3.5.
    # W0 pushes alone 3..3.5 (0.5 sent); W1 joins at 3.5: B/2 each. W0's last 0.5 takes 1 s
    #            -> 4.5; W1 sent 0.5 by 4.5, finishes alone at 5.0.
    # W0 update 4.5..4.75 (step 1 ends 4.75); W1 update 5..5.25 (step 1 ends 5.25).
    # W0 pulls alone 4.75..5.25 (0.5 sent); W1 joins at 5.25: W0 ends 6.25, W1 alone -> 6.75.
    # W0 computes 6.25..7.25, pushes alone (W1 computes 6.75..8.25) 7.25..8.25, update -> 8.5.
    # W1 pushes 8.25..9.25 alone (W0's push ended at 8.25), update -> 9.5.
    seed = _seed_giving([[0, 0], [1, 1]], recorded=2)
    result = run(engine, one_layer([1.0, 1.5]), workers=2, steps=2, seed=seed)
    assert result.step_ends_s == ((4.75, 8.5), (5.25, 9.5))


@pytest.mark.parametrize("engine", ENGINES)
def test_worker_nic_slower_than_the_ps_link_limits_a_lone_worker(engine) -> None:  # type: ignore[no-untyped-def]
    # NIC = B/4: each transfer takes 4 s alone: 4 + 0.5 + 4 + 0.25 = 8.75.
    result = run(engine, one_layer([0.5]), workers=1, steps=1, worker_bandwidth_bps=B / 4)
    assert result.step_ends_s == ((8.75,),)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_byte_transfer_takes_no_time_but_orders_its_dependents(engine) -> None:  # type: ignore[no-untyped-def]
    # "ctl" (0 bytes) is released after c1 (1 s) and completes at once; c2 (0.5 s) waits for it.
    # The pull of S bytes on the same link is in flight 0..1 and does not delay ctl.
    ops = [
        dict(name="pull", resource="downlink", ps=0, bytes=S),
        dict(name="c1", resource="worker"),
        dict(name="ctl", resource="downlink", ps=0, bytes=0, deps=["c1"]),
        dict(name="c2", resource="worker", deps=["ctl", "pull"]),
    ]
    durations = [0.0, 0.5e6, 0.0, 0.5e6]
    profile = build_profile(job=dict(batch_size=1), ops=ops, steps=[dict(index=0, start_us=[0.0] * 4, duration_us=durations)])
    result = run(engine, profile, workers=1, steps=1)
    # pull ends at 1.0; c1 ends 0.5 -> ctl at 0.5; c2 needs pull -> 1.0..1.5.
    assert result.step_ends_s == ((1.5,),)


def fig12_profile() -> Profile:
    """Streams A..E (sizes 5, 2, 7, 3, 4 MB) all released at t=0 in that order."""
    sizes = {"A": 5, "B": 2, "C": 7, "D": 3, "E": 4}
    ops = [dict(name=n, resource="downlink", ps=0, bytes=s * S) for n, s in sizes.items()]
    step = dict(index=0, start_us=[0.0] * 5, duration_us=[0.0] * 5)
    return build_profile(job=dict(batch_size=1), ops=ops, steps=[step])


@pytest.mark.parametrize("engine", ENGINES)
def test_http2_multiplexing_reproduces_fig12(engine) -> None:  # type: ignore[no-untyped-def]
    # Fig. 12: WIN = 3 (MB here, 1 MB = 1 s). Every stream's first service sends at most WIN;
    # a stream no larger than WIN finishes in it; a preempted stream waits (behind every stream
    # still waiting for its first service) and its second service runs it to completion.
    #   A: 3 of 5   0..3   (2 left)          B: 2 of 2   3..5   done
    #   C: 3 of 7   5..8   (4 left)          D: 3 of 3   8..11  done (= WIN: whole stream)
    #   E: 3 of 4   11..14 (1 left)
    #   A: last 2   14..16 done   C: last 4   16..20 done   E: last 1   20..21 done
    network = NetworkModel(bandwidth_bps=B, win_bytes=3 * S)
    settings = SimulationSettings(workers=1, steps=1, warmup_steps=0, record_timeline=True)
    result = engine(fig12_profile(), network, settings)
    chunks = [(e.op, e.start_s, e.end_s) for e in result.timeline]
    assert chunks == [
        ("A", 0, 3), ("B", 3, 5), ("C", 5, 8), ("D", 8, 11), ("E", 11, 14),
        ("A", 14, 16), ("C", 16, 20), ("E", 20, 21),
    ]  # fmt: skip
    assert result.events == 8


@pytest.mark.parametrize("engine", ENGINES)
def test_flow_control_off_serves_whole_streams_in_order(engine) -> None:  # type: ignore[no-untyped-def]
    # FIFO: A 0..5, B 5..7, C 7..14, D 14..17, E 17..21. REVERSE of critical path: no stream
    # has a consumer, so all tie at -inf and release order remains.
    settings = SimulationSettings(workers=1, steps=1, warmup_steps=0, record_timeline=True)
    result = engine(fig12_profile(), NetworkModel(bandwidth_bps=B), settings)
    assert [(e.op, e.end_s) for e in result.timeline] == [("A", 5), ("B", 7), ("C", 14), ("D", 17), ("E", 21)]
    custom = NetworkModel(bandwidth_bps=B, order=StreamOrder.CUSTOM, custom_order=("E", "D"))
    result = engine(fig12_profile(), custom, settings)
    # Named first (E 0..4, D 4..7), the rest in release order: A 7..12, B 12..14, C 14..21.
    assert [(e.op, e.end_s) for e in result.timeline] == [("E", 4), ("D", 7), ("A", 12), ("B", 14), ("C", 21)]


def recorded_order_profile() -> Profile:
    """fig12's streams A..E as one recorded step that received them in the order C, A, E, B, D
    (their recorded ends; recorded durations play no part in a transfer's simulated time), and
    two computations x (0.5 s) and y (0.25 s), both needing A, that the step ran y first."""
    sizes = {"A": 5, "B": 2, "C": 7, "D": 3, "E": 4}
    ops = [dict(name=n, resource="downlink", ps=0, bytes=s * S) for n, s in sizes.items()]
    ops += [dict(name="x", resource="worker", deps=["A"]), dict(name="y", resource="worker", deps=["A"])]
    ends_s = {"C": 7, "A": 12, "E": 16, "B": 18, "D": 21}
    start = [0.0] * 5 + [12.5e6, 12.0e6]
    duration = [ends_s[n] * 1e6 for n in sizes] + [0.5e6, 0.25e6]
    step = dict(index=0, start_us=start, duration_us=duration)
    return build_profile(job=dict(batch_size=1), ops=ops, steps=[step])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_recorded_order_serves_streams_and_runs_computations_as_the_step_did(engine) -> None:  # type: ignore[no-untyped-def]
    # Whole streams in the recorded order of their ends: C 0..7, A 7..12, E 12..16, B 16..18,
    # D 18..21; x and y are released together when A ends at 12 and run in their recorded
    # order, y 12..12.25 then x 12.25..12.75. FIFO instead: A 0..5, B 5..7, C 7..14, D 14..17,
    # E 17..21, and x (released first) 5..5.5 before y 5.5..5.75.
    settings = SimulationSettings(workers=1, steps=1, warmup_steps=0, record_timeline=True)
    recorded = engine(recorded_order_profile(), NetworkModel(bandwidth_bps=B, order=StreamOrder.RECORDED), settings)
    assert sorted((e.start_s, e.end_s, e.op) for e in recorded.timeline) == [
        (0, 7, "C"), (7, 12, "A"), (12, 12.25, "y"), (12, 16, "E"), (12.25, 12.75, "x"), (16, 18, "B"), (18, 21, "D"),
    ]  # fmt: skip
    fifo = engine(recorded_order_profile(), NetworkModel(bandwidth_bps=B), settings)
    assert sorted((e.end_s, e.op) for e in fifo.timeline) == [
        (5, "A"), (5.5, "x"), (5.75, "y"), (7, "B"), (14, "C"), (17, "D"), (21, "E"),
    ]  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_each_replayed_step_takes_the_order_of_the_recorded_step_it_samples(engine) -> None:  # type: ignore[no-untyped-def]
    # Two recorded steps that received two 1 s streams P and Q in opposite orders; c needs P
    # and takes 0.5 s. A replayed step of recorded step 0 (P first) ends at max(1 + 0.5, 2) = 2;
    # one of step 1 (Q first) at 2 + 0.5 = 2.5. Which recorded step each replays is
    # sample_steps'.
    ops = [dict(name="P", resource="downlink", ps=0, bytes=S), dict(name="Q", resource="downlink", ps=0, bytes=S),
           dict(name="c", resource="worker", deps=["P"])]
    steps = [dict(index=0, start_us=[0.0, 0.0, 1e6], duration_us=[1e6, 2e6, 0.5e6]),
             dict(index=1, start_us=[0.0, 0.0, 2e6], duration_us=[2e6, 1e6, 0.5e6])]
    profile = build_profile(job=dict(batch_size=1), ops=ops, steps=steps)
    result = run(engine, profile, workers=1, steps=6, seed=3, order=StreamOrder.RECORDED)
    sampled = sample_steps(3, 0, 6, 2)
    assert set(sampled) == {0, 1}  # the seed replays both
    lengths = [2.0 if k == 0 else 2.5 for k in sampled]
    assert result.step_ends_s[0] == pytest.approx(tuple(np.cumsum(lengths)))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_two_ps_sharing_is_the_papers_rule(n: int) -> None:
    # Section 5: worker 0 is alone on PS0 and shares PS1 with n-1 others. It gets 1/n of PS1
    # (equal sharing) and up to 1 - 1/n on PS0 (its NIC already carries 1/n).
    flows = [(0, 0), (0, 1)] + [(w, 1) for w in range(1, n)]
    rates = water_fill(flows, link_bps=B, nic_bps=B)
    assert rates[1:] == pytest.approx([B / n] * n)
    assert rates[0] == pytest.approx(B * (1 - 1 / n))


def test_one_ps_sharing_is_equal_and_capped_by_the_nic() -> None:
    assert water_fill([(w, 0) for w in range(4)], link_bps=B, nic_bps=B) == [B / 4] * 4
    assert water_fill([(w, 0) for w in range(4)], link_bps=B, nic_bps=B / 8) == [B / 8] * 4


@pytest.mark.parametrize("engine", ENGINES)
def test_two_parameter_servers_engine_uses_the_papers_rule(engine) -> None:  # type: ignore[no-untyped-def]
    # W=2. Worker steps pull "a" (4 MB, PS0) and "b" (1 MB, PS1) at t=0. Four flows: each PS
    # link and each NIC carries two, so all get B/2: b ends at 2 s (both workers). Then each
    # worker is alone on its NIC with one flow on PS0 shared by 2 -> B/2 still: a has 4-1 = 3 MB
    # left -> 6 s more: ends at 8.
    ops = [dict(name="a", resource="downlink", ps=0, bytes=4 * S), dict(name="b", resource="downlink", ps=1, bytes=S)]
    step = dict(index=0, start_us=[0.0, 0.0], duration_us=[0.0, 0.0])
    profile = build_profile(job=dict(batch_size=1, parameter_servers=2), ops=ops, steps=[step])
    assert run(engine, profile, workers=2, steps=1).step_ends_s == ((8.0,), (8.0,))
    # W=1: NIC B shared by 2 flows -> B/2 each; b ends at 2, then a alone at B: 4-1 = 3 MB -> 5.
    assert run(engine, profile, workers=1, steps=1).step_ends_s == ((5.0,),)
