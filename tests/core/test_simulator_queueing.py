"""Request-path queueing delay and staggered starts: hand derivations, validation, invariants.

Units as in test_simulator_closed_form: S = 1 MB through B = 8 Mbit/s takes 1 s alone, so
every time below is a dyadic fraction and exact. Both engines are checked.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError
from advisor.core.simulator import simulate, simulate_reference_engine
from advisor.core.simulator.stagger import even_stagger
from tests.core.test_simulator_closed_form import B, S, one_layer
from tests.core.test_simulator_equivalence import random_profiles

ENGINES = [simulate, simulate_reference_engine]


def run(engine, profile: Profile, steps: int, offsets: tuple[float, ...], **net):  # type: ignore[no-untyped-def]
    """Run ``len(offsets)`` workers started at ``offsets`` on a B link."""
    network = NetworkModel(bandwidth_bps=B, **net)
    sim = SimulationSettings(workers=len(offsets), steps=steps, warmup_steps=0, start_offsets_s=offsets)
    return engine(profile, network, sim)


def _profile(ops: list[dict], durations_s: list[float]) -> Profile:
    step = dict(index=0, start_us=[0.0] * len(ops), duration_us=[d * 1e6 for d in durations_s])
    return build_profile(job=dict(batch_size=1), ops=ops, steps=[step])


@pytest.mark.parametrize("engine", ENGINES)
def test_staggered_start_without_delay(engine) -> None:  # type: ignore[no-untyped-def]
    # one_layer: pull S -> compute 0.25 -> push S -> update 0.25; W1 starts at 0.5.
    # W0 pulls alone 0..0.5 (0.5 sent), shares with W1 -> its last 0.5 takes 1 s: ends 1.5.
    #   W1 sent 0.5 by 1.5, alone -> 2.0.
    # W0 computes 1.5..1.75, pushes alone 1.75..2.25 (0.5 sent); W1 computes 2..2.25 and joins:
    #   W0 ends 3.25, W1 alone -> 3.75. Updates: W0 3.25..3.5, W1 3.75..4.0.
    # Step 2: W0 pulls alone 3.5..4.0 (0.5), W1 joins at 4.0: W0 ends 5.0, W1 5.5. W0 computes
    #   5..5.25, pushes alone to 5.75, W1 (computes 5.5..5.75) joins: W0 6.75, W1 7.25. +0.25.
    result = run(engine, one_layer([0.25]), steps=2, offsets=(0.0, 0.5))
    assert result.step_ends_s == ((3.5, 7.0), (4.0, 7.5))


@pytest.mark.parametrize("engine", ENGINES)
def test_push_waits_while_the_other_worker_pulls(engine) -> None:  # type: ignore[no-untyped-def]
    # As above with d = 0.125. Pulls are not delayed (no uplink traffic before 1.75):
    # W0 0..1.5, W1 0.5..2.0. W0's push is dispatched at 1.75 while W1's pull is in service on
    # the downlink: its request waits 1.75..1.875, then it sends alone. W1 computes 2..2.25 and
    # pushes at 2.25 (downlink idle: no delay); W0 has 0.625 left: shared, ends 3.5; W1 has
    # 0.375 left, alone -> 3.875. Updates: W0 3.5..3.75, W1 3.875..4.125.
    result = run(engine, one_layer([0.25]), steps=1, offsets=(0.0, 0.5), queue_delay_s=0.125)
    assert result.step_ends_s == ((3.75,), (4.125,))
    # Started together both workers pull, then push, in lockstep: the opposite direction is
    # never busy when a stream starts, so the delay changes nothing (16S/B + c + 16S/B + u).
    together = run(engine, one_layer([0.25]), steps=2, offsets=(0.0, 0.0), queue_delay_s=0.125)
    assert together.step_ends_s == ((4.5, 9.0), (4.5, 9.0))


def _pull_and_push(pull: int, push: int) -> Profile:
    """Two independent streams at t=0: "a" on the downlink, "b" on the uplink."""
    ops = [dict(name="a", resource="downlink", ps=0, bytes=pull), dict(name="b", resource="uplink", ps=0, bytes=push)]
    return _profile(ops, [0.0, 0.0])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_workers_own_flow_never_delays_it(engine) -> None:  # type: ignore[no-untyped-def]
    # One worker: its push starts while its own pull is in service -> no wait: both end at 1.
    assert run(engine, _pull_and_push(S, S), steps=1, offsets=(0.0,), queue_delay_s=0.5).step_ends_s == ((1.0,),)
    # W1 starting at 0.25 finds W0's pull and push in service: both its streams wait to 0.75.
    # W0 sent 0.75 of each alone, then shares: ends 0.75 + 0.5 = 1.25; W1 has 0.75 left at
    # 1.25 -> 2.0. Without the delay: W0 ends 0.25 + 1.5 = 1.75, W1 2.0.
    delayed = run(engine, _pull_and_push(S, S), steps=1, offsets=(0.0, 0.25), queue_delay_s=0.5)
    assert delayed.step_ends_s == ((1.25,), (2.0,))
    assert run(engine, _pull_and_push(S, S), steps=1, offsets=(0.0, 0.25)).step_ends_s == ((1.75,), (2.0,))


@pytest.mark.parametrize("engine", ENGINES)
def test_second_http2_chunks_are_not_delayed(engine) -> None:  # type: ignore[no-untyped-def]
    # a = S down, b = 2S up, WIN = S/2, d = 0.125, W1 starts at 0.25.
    # W0's first chunks a1, b1 (0.5 each) start at 0 alone. W1's a1 and b1 find W0's flows on
    # the opposite directions: they wait 0.25..0.375. W0 has 0.125 of each left, shared at
    # B/2: a1 and b1 end at 0.625. W0's second chunks a2 (0.5) and b2 (1.5) start at once,
    # though W1's b1 / a1 occupy the opposite directions (a first chunk would wait).
    # Downlink: W1 a1 (0.375 left) vs W0 a2: W1 a1 ends 1.375; its a2 starts (no delay);
    #   W0 a2 has 0.125 left -> 1.625; W1 a2 has 0.375 left alone -> 2.0.
    # Uplink: W1 b1 (0.375 left) vs W0 b2: b1 ends 1.375, W1 b2 (1.5) starts; W0 b2 has 1.125
    #   left -> shared, ends 1.375 + 2.25 = 3.625; W1 b2 then has 0.375 left -> 4.0.
    result = run(engine, _pull_and_push(S, 2 * S), steps=1, offsets=(0.0, 0.25), queue_delay_s=0.125, win_bytes=S / 2)
    assert result.step_ends_s == ((3.625,), (4.0,))
    assert result.events == 2 * 4


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_byte_transfers_are_not_delayed(engine) -> None:  # type: ignore[no-untyped-def]
    # "ctl" (0 bytes, downlink) gates compute c (2 s); "push" (S, uplink) is independent.
    # W1 starts at 0.25 while W0 pushes: ctl still completes at once, c runs 0.25..2.25.
    # W1's push finds the downlink idle: no delay; shared with W0 (0.75 left): W0 1.75, W1 2.0.
    ops = [
        dict(name="push", resource="uplink", ps=0, bytes=S),
        dict(name="ctl", resource="downlink", ps=0, bytes=0),
        dict(name="c", resource="worker", deps=["ctl"]),
    ]
    result = run(engine, _profile(ops, [0.0, 0.0, 2.0]), steps=1, offsets=(0.0, 0.25), queue_delay_s=0.5)
    assert result.step_ends_s == ((2.0,), (2.25,))


@pytest.mark.parametrize("engine", ENGINES)
def test_timeline_shows_the_wait_inside_the_chunk(engine) -> None:  # type: ignore[no-untyped-def]
    network = NetworkModel(bandwidth_bps=B, queue_delay_s=0.5)
    sim = SimulationSettings(workers=2, steps=1, warmup_steps=0, start_offsets_s=(0.0, 0.25), record_timeline=True)
    result = engine(_pull_and_push(S, S), network, sim)
    w1 = sorted((e.op, e.start_s, e.end_s) for e in result.timeline if e.worker == 1)
    assert w1 == [("a", 0.25, 2.0), ("b", 0.25, 2.0)]


def test_even_stagger_spreads_workers_over_one_period() -> None:
    assert even_stagger(1, 2.0) == (0.0,)
    assert even_stagger(4, 2.0) == (0.0, 0.5, 1.0, 1.5)
    for bad in ((0, 1.0), (2, -1.0), (2, float("nan"))):
        with pytest.raises(SimulationSettingsError):
            even_stagger(*bad)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_offsets_and_zero_delay_change_nothing(engine) -> None:  # type: ignore[no-untyped-def]
    profile = one_layer([0.5, 1.0])
    base = run(engine, profile, steps=4, offsets=(0.0, 0.0, 0.0))
    explicit = engine(
        profile,
        NetworkModel(bandwidth_bps=B, queue_delay_s=0.0),
        SimulationSettings(workers=3, steps=4, warmup_steps=0),
    )
    assert base == explicit


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_bad_queue_delay_is_refused(bad: float) -> None:
    with pytest.raises(SimulationSettingsError, match="queue_delay_s"):
        NetworkModel(bandwidth_bps=B, queue_delay_s=bad)


@pytest.mark.parametrize(
    ("offsets", "match"),
    [((0.0,), "one value per worker"), ((0.0, 1.0, 2.0), "one value per worker"), ((0.0, -1.0), r"start_offsets_s\[1\]"),
     ((float("inf"), 0.0), r"start_offsets_s\[0\]"), ([0.0, 1.0], "tuple")],
)  # fmt: skip
def test_bad_start_offsets_are_refused(offsets, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SimulationSettingsError, match=match):
        SimulationSettings(workers=2, start_offsets_s=offsets)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    profile=random_profiles(),
    workers=st.integers(1, 4),
    delay=st.sampled_from([0.0, 1e-3, 0.25]),
    data=st.data(),
)
def test_each_chunk_holds_its_slot_alone_and_no_deadlock(  # type: ignore[no-untyped-def]
    profile: Profile, workers: int, delay: float, data
) -> None:
    offsets = tuple(data.draw(st.lists(st.floats(0, 1), min_size=workers, max_size=workers)))
    network = NetworkModel(bandwidth_bps=5e7, win_bytes=1e6, queue_delay_s=delay)
    sim = SimulationSettings(workers=workers, steps=3, warmup_steps=0, start_offsets_s=offsets, record_timeline=True)
    result = simulate(profile, network, sim)
    assert all(len(ends) == 3 for ends in result.step_ends_s)
    lanes: dict[tuple[int, str, int | None], list[tuple[float, float]]] = {}
    for e in result.timeline:
        assert e.start_s >= offsets[e.worker] - 1e-9
        if e.end_s > e.start_s:
            lanes.setdefault((e.worker, e.resource, e.ps), []).append((e.start_s, e.end_s))
    for spans in lanes.values():
        spans.sort()
        assert all(start >= end - 1e-12 for (_, end), (start, _) in zip(spans, spans[1:]))
