"""The contention rules (request-path queueing, uneven shares, multi-flow goodput) and
staggered starts: hand derivations, validation, invariants.

Units as in test_simulator_closed_form: S = 1 MB through B = 8 Mbit/s takes 1 s alone, so
most times below are dyadic fractions and exact. Both engines are checked. The rules are
stated in advisor/core/models/ps_des/simulator/reference.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError
from advisor.core.models.ps_des.simulator import simulate, simulate_reference_engine
from advisor.core.models.ps_des.simulator.fast import simulate_fast
from advisor.core.models.ps_des.simulator.inputs import SHARE_DRAWS, draw_share_weights, prepare
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from advisor.core.models.ps_des.simulator.sharing import water_fill
from advisor.core.models.ps_des.simulator.stagger import even_stagger
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


def _pull_and_push(pull: int, push: int) -> Profile:
    """Two independent streams at t=0: "a" on the downlink, "b" on the uplink."""
    ops = [dict(name="a", resource="downlink", ps=0, bytes=pull), dict(name="b", resource="uplink", ps=0, bytes=push)]
    return _profile(ops, [0.0, 0.0])


# -- request-path queueing at release -------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("queue", "w1_end"), [(0.0, 4.0), (0.5, 4.5), (1.0, 4.75)])
def test_a_pull_waits_behind_the_other_workers_queued_push(engine, queue: float, w1_end: float) -> None:  # type: ignore[no-untyped-def]
    # one_layer: pull S -> compute 0.25 -> push S -> update 0.25. W0 alone: pull 0..1,
    # compute ..1.25, push 1.25..2.25, update ..2.5. W1 starts at 1.5, when W0's push still has
    # 0.75 S to send (0.75 s of B): its pull waits min(q, 0.75) and then runs alone for 1 s:
    # q = 0 -> pull 1.5..2.5, end 2.5 + 0.25 + 1 + 0.25 = 4.0; q = 0.5 -> from 2.0, end 4.5;
    # q = 1 -> the whole queued push, 0.75: from 2.25, end 4.75. W0 is never slowed.
    result = run(engine, one_layer([0.25]), steps=1, offsets=(0.0, 1.5), request_queue_s=queue)
    assert result.step_ends_s == ((2.5,), (w1_end,))


@pytest.mark.parametrize("engine", ENGINES)
def test_pushes_are_not_delayed_and_a_waiting_pull_holds_nothing(engine) -> None:  # type: ignore[no-untyped-def]
    # a = S down, b = S up, both roots. W1 starts at 0.25: W0's push has 0.75 S queued, so
    # W1's pull waits min(0.5, 0.75) = 0.5 and starts at 0.75; its push starts at once and
    # shares the uplink: W0's b (0.75 left) ends 1.75, W1's b 2.0. Downlink: W0's a alone to
    # 0.75 (0.75 sent), then shared: ends 1.25; W1's a has 0.75 left at 1.25 -> 2.0.
    network = NetworkModel(bandwidth_bps=B, request_queue_s=0.5)
    sim = SimulationSettings(workers=2, steps=1, warmup_steps=0, start_offsets_s=(0.0, 0.25), record_timeline=True)
    result = engine(_pull_and_push(S, S), network, sim)
    assert sorted((e.worker, e.op, e.start_s, e.end_s) for e in result.timeline) == [
        (0, "a", 0.0, 1.25), (0, "b", 0.0, 1.75), (1, "a", 0.75, 2.0), (1, "b", 0.25, 2.0)]  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_the_workers_own_push_never_delays_its_pull(engine) -> None:  # type: ignore[no-untyped-def]
    # push b (S up) and compute c (0.25) are roots; pull a (S down) follows c. Alone: a is
    # released at 0.25 while the worker's own push has 0.75 S left: no wait, a ends 1.25.
    ops = [dict(name="b", resource="uplink", ps=0, bytes=S), dict(name="c", resource="worker"),
           dict(name="a", resource="downlink", ps=0, bytes=S, deps=["c"])]  # fmt: skip
    result = run(engine, _profile(ops, [0.0, 0.25, 0.0]), steps=1, offsets=(0.0,), request_queue_s=0.5)
    assert result.step_ends_s == ((1.25,),)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_byte_transfers_are_not_delayed(engine) -> None:  # type: ignore[no-untyped-def]
    # "ctl" (0 bytes, downlink) gates compute c (2 s); "push" (S, uplink) is independent.
    # W1 starts at 0.25 while W0 pushes: ctl still completes at once, c runs 0.25..2.25.
    # W1's push shares the uplink with W0's (0.75 left): W0 1.75, W1 2.0.
    ops = [
        dict(name="push", resource="uplink", ps=0, bytes=S),
        dict(name="ctl", resource="downlink", ps=0, bytes=0),
        dict(name="c", resource="worker", deps=["ctl"]),
    ]
    result = run(engine, _profile(ops, [0.0, 0.0, 2.0]), steps=1, offsets=(0.0, 0.25), request_queue_s=0.5)
    assert result.step_ends_s == ((2.0,), (2.25,))


@pytest.mark.parametrize("engine", ENGINES)
def test_workers_in_lockstep_never_wait(engine) -> None:  # type: ignore[no-untyped-def]
    # Started together both workers pull, then push, in lockstep: no push is in flight when
    # a pull is released, so the rule changes nothing (2 x 8S/B + c + 2 x 8S/B... per step).
    profile = one_layer([0.25])
    assert run(engine, profile, steps=2, offsets=(0.0, 0.0), request_queue_s=0.5) == run(
        engine, profile, steps=2, offsets=(0.0, 0.0))


# -- uneven shares ---------------------------------------------------------------------------


def _with_weights(profile: Profile, network: NetworkModel, sim: SimulationSettings, downlink: dict[int, list[float]]):  # type: ignore[no-untyped-def]
    """Inputs whose downlink weights of worker w are ``downlink[w]`` (then 1), others 1."""
    inputs = prepare(profile, replace(network, share_sigma=1.0), sim)
    weights = np.ones_like(inputs.share_weights)
    for w, seq in downlink.items():
        weights[w, 0, 0, : len(seq)] = seq
    return replace(inputs, share_weights=weights)


SHARE_ENGINES = [simulate_fast, simulate_reference]


def _pull(compute_s: float = 0.0) -> Profile:
    ops = [dict(name="a", resource="downlink", ps=0, bytes=S)]
    if compute_s:
        ops.append(dict(name="c", resource="worker", deps=["a"]))
    return _profile(ops, [0.0, compute_s][: len(ops)])


@pytest.mark.parametrize("engine", SHARE_ENGINES)
def test_weights_split_a_link_in_proportion(engine) -> None:  # type: ignore[no-untyped-def]
    # Two pulls of S at 0 with weights 1 and 3: W1 gets 3B/4 and ends at 4/3; W0 has sent
    # S/3 and sends its last 2S/3 alone: ends 2.0, as with equal shares (work-conserving).
    sim = SimulationSettings(workers=2, steps=1, warmup_steps=0)
    inputs = _with_weights(_pull(), NetworkModel(bandwidth_bps=B), sim, {1: [3.0]})
    ends = engine(_pull(), inputs).step_ends_s
    assert ends[0] == (2.0,) and ends[1] == pytest.approx((4 / 3,), abs=1e-9)


@pytest.mark.parametrize("engine", SHARE_ENGINES)
def test_a_connection_draws_a_new_weight_only_after_being_idle(engine) -> None:  # type: ignore[no-untyped-def]
    # Pull a (S) then compute c (1 s); W1's downlink weights are 3, then 1.
    # Step 1: as above, W1's pull ends 4/3 and W0's 2.0; steps end 7/3 (W1) and 3.0 (W0).
    # Step 2: W1's pull starts at 7/3 after its connection was idle since 4/3: next weight, 1.
    # It runs alone to 3.0 (2/3 sent), then shares equally with W0's: ends 3 + 2/3 = 11/3, so
    # W1's step ends 14/3 (keeping weight 3 it would end 40/9). W0's pull ends 13/3, its step 16/3.
    sim = SimulationSettings(workers=2, steps=2, warmup_steps=0)
    profile = _pull(1.0)
    inputs = _with_weights(profile, NetworkModel(bandwidth_bps=B), sim, {1: [3.0, 1.0]})
    ends = engine(profile, inputs).step_ends_s
    assert ends == (pytest.approx((3.0, 16 / 3), abs=1e-9), pytest.approx((7 / 3, 14 / 3), abs=1e-9))


@pytest.mark.parametrize("engine", SHARE_ENGINES)
def test_back_to_back_streams_keep_their_weight(engine) -> None:  # type: ignore[no-untyped-def]
    # Pull a only: W1's step 2 pull starts at the instant its step-1 pull ended (4/3): no idle
    # time, so it keeps weight 3 (the next draw, 1/3, is not used). With W0's 2S/3 left:
    # W1 ends 4/3 + 4/3 = 8/3 having let W0 send 1/3; W0's last 1/3 alone: 3.0; W0's step 2
    # alone: 4.0.
    sim = SimulationSettings(workers=2, steps=2, warmup_steps=0)
    inputs = _with_weights(_pull(), NetworkModel(bandwidth_bps=B), sim, {1: [3.0, 1 / 3]})
    ends = engine(_pull(), inputs).step_ends_s
    assert ends == (pytest.approx((3.0, 4.0), abs=1e-9), pytest.approx((4 / 3, 8 / 3), abs=1e-9))


def test_weighted_water_filling_by_hand() -> None:
    # one link, weights 1 and 3: B/4 and 3B/4
    assert water_fill([(0, 0), (1, 0)], B, B, [1.0, 3.0]) == [B / 4, 3 * B / 4]
    # NICs of B/2: worker 1's NIC binds first (level B/6, rate 3 x B/6 = B/2), then W0 gets
    # the link's remaining B/2 (its NIC allows B/2 as well: the tie goes to the link)
    assert water_fill([(0, 0), (1, 0)], B, B / 2, [1.0, 3.0]) == [B / 2, B / 2]
    # equal weights: the paper's rule for 2 PS (worker 0 on both PS, worker 1 on PS 0)
    assert water_fill([(0, 0), (0, 1), (1, 0)], B, B) == [B / 2, B / 2, B / 2]
    # one worker, connections to PS 0 (weight 1) and PS 1 (weight 3): the link levels are B and
    # B/3, the NIC's B/4, so the NIC binds and splits B by weight
    rates = water_fill([(0, 0), (0, 1)], B, B, [1.0, 3.0])
    assert rates == [B / 4, 3 * B / 4]


def test_share_weights_are_lognormal_per_worker_stream_and_independent_of_w() -> None:
    few, many = draw_share_weights(5, 2, 1, 1.0), draw_share_weights(5, 4, 1, 1.0)
    assert few.shape == (2, 1, 2, SHARE_DRAWS)
    np.testing.assert_array_equal(few, many[:2])  # worker w's weights do not depend on W
    logs = np.log(many).ravel()
    assert abs(logs.mean()) < 0.03 and abs(logs.std() - 1.0) < 0.03
    assert (draw_share_weights(5, 3, 2, 0.0) == 1.0).all()


# -- multi-flow goodput ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shared_link_direction_delivers_eta_of_its_capacity(engine) -> None:  # type: ignore[no-untyped-def]
    # Alone a pull of S takes 1 s whatever eta; two pulls together share eta B = B/2: 4 s each.
    assert run(engine, _pull(), steps=1, offsets=(0.0,), multi_flow_goodput=0.5).step_ends_s == ((1.0,),)
    assert run(engine, _pull(), steps=1, offsets=(0.0, 0.0), multi_flow_goodput=0.5).step_ends_s == ((4.0,), (4.0,))
    assert water_fill([(0, 0), (1, 0)], B, B, None, 0.5) == [B / 4, B / 4]
    assert water_fill([(0, 0), (1, 1)], B, B, None, 0.5) == [B, B]  # one flow per link: no loss


@pytest.mark.parametrize(
    ("field", "bad"),
    [("request_queue_s", -0.1), ("request_queue_s", float("nan")), ("request_queue_s", float("inf")),
     ("share_sigma", -1.0), ("share_sigma", float("nan")), ("multi_flow_goodput", 0.0),
     ("multi_flow_goodput", 1.5), ("multi_flow_goodput", float("nan"))],
)  # fmt: skip
def test_bad_contention_settings_are_refused(field: str, bad: float) -> None:
    with pytest.raises(SimulationSettingsError, match=field):
        NetworkModel(bandwidth_bps=B, **{field: bad})


# -- staggered starts ------------------------------------------------------------------------


def test_even_stagger_spreads_workers_over_one_period() -> None:
    assert even_stagger(1, 2.0) == (0.0,)
    assert even_stagger(4, 2.0) == (0.0, 0.5, 1.0, 1.5)
    for bad in ((0, 1.0), (2, -1.0), (2, float("nan"))):
        with pytest.raises(SimulationSettingsError):
            even_stagger(*bad)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_offsets_and_rules_off_change_nothing(engine) -> None:  # type: ignore[no-untyped-def]
    profile = one_layer([0.5, 1.0])
    base = run(engine, profile, steps=4, offsets=(0.0, 0.0, 0.0))
    explicit = engine(
        profile,
        NetworkModel(bandwidth_bps=B, request_queue_s=0.0, share_sigma=0.0, multi_flow_goodput=1.0),
        SimulationSettings(workers=3, steps=4, warmup_steps=0),
    )
    assert base == explicit


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
    queue=st.sampled_from([0.0, 1e-3, 0.25]),
    data=st.data(),
)
def test_each_chunk_holds_its_slot_alone_and_no_deadlock(  # type: ignore[no-untyped-def]
    profile: Profile, workers: int, queue: float, data
) -> None:
    offsets = tuple(data.draw(st.lists(st.floats(0, 1), min_size=workers, max_size=workers)))
    network = NetworkModel(bandwidth_bps=5e7, win_bytes=1e6, request_queue_s=queue, share_sigma=1.0, multi_flow_goodput=0.85)
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
