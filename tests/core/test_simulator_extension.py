"""Continued runs (``fast.FastRun``) and the engine's exact shortcuts.

An extended run must equal a longer run from the start with the same seed, bit for bit, and
what a run has shown when its first worker finishes n steps must equal a plain ``simulate``
of n steps up to that moment (they differ only afterwards, where the plain run lets that
worker stop).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError
from advisor.core.models.ps_des.simulator import simulate
from advisor.core.models.ps_des.simulator.fast import FastRun, compile_profile
from advisor.core.models.ps_des.simulator.inputs import prepare_graph, sample_steps, with_steps
from advisor.core.models.ps_des.simulator.jit import TIME_GRID, quantize
from advisor.core.models.ps_des.simulator.plan import chain_spans
from benchmarks.synthetic import inception_like, tiny_mlp
from tests.core.test_simulator_equivalence import networks, random_profiles

HYP = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    return (
        a.until_s == b.until_s
        and a.events == b.events
        and all(np.array_equal(x, y) for x, y in zip(a.step_ends_s, b.step_ends_s, strict=True))
    )


@HYP
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), seed=st.integers(0, 2**16),
       first=st.integers(1, 5), more=st.integers(1, 5))  # fmt: skip
def test_an_extended_run_equals_a_longer_run_from_the_start(
    profile: Profile, network: NetworkModel, workers: int, seed: int, first: int, more: int
) -> None:
    compiled = compile_profile(profile, network)
    extended = FastRun(compiled, workers, seed)
    extended.advance(first)
    assert _same(extended.advance(first + more), FastRun(compiled, workers, seed).advance(first + more))


@HYP
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), steps=st.integers(1, 6))
def test_a_run_shows_what_a_plain_run_of_as_many_steps_shows_until_its_first_worker_is_done(
    profile: Profile, network: NetworkModel, workers: int, steps: int
) -> None:
    seen = FastRun(compile_profile(profile, network), workers, seed=7).advance(steps)
    plain = simulate(profile, network, SimulationSettings(workers=workers, steps=steps, warmup_steps=0, seed=7))
    # the pause comes when the first worker ends its last step: the plain run's window end
    assert seen.until_s == min(ends[-1] for ends in plain.step_ends_s)
    for ends, observed in zip(plain.step_ends_s, seen.step_ends_s, strict=True):
        before = [t for t in ends if t < seen.until_s]
        assert observed[: len(before)].tolist() == before
        assert all(t == seen.until_s for t in observed[len(before) :])  # the rest end at the pause itself


def test_extending_the_inception_scale_step_in_many_pieces_changes_nothing() -> None:
    compiled = compile_profile(inception_like(layers=30), NetworkModel(bandwidth_bps=1e9))
    pieces = FastRun(compiled, 6, seed=3)
    for steps in (5, 6, 13, 30):
        pieces.advance(steps)
    assert _same(pieces.advance(31), FastRun(compiled, 6, seed=3).advance(31))


def test_a_run_only_goes_forward() -> None:
    run = FastRun(compile_profile(tiny_mlp(), NetworkModel(bandwidth_bps=1e8)), 2)
    run.advance(3)
    with pytest.raises(SimulationSettingsError):
        run.advance(3)


def test_steps_that_take_no_time_stop_the_run_instead_of_looping() -> None:
    # A zero-byte pull and a computation of 0 s: every step ends at t = 0, so the endless run
    # never leaves t = 0; it stops when its arrays are full, and an extension starts it again.
    ops = [dict(name="p", resource="downlink", ps=0, bytes=0), dict(name="c", resource="worker", deps=["p"])]
    profile = build_profile(job=dict(batch_size=1), ops=ops, steps=[dict(index=0, start_us=[0.0] * 2, duration_us=[0.0] * 2)])
    run = FastRun(compile_profile(profile, NetworkModel(bandwidth_bps=1e8)), 2)
    assert [len(e) for e in run.advance(4).step_ends_s] == [5, 5]
    seen = run.advance(9)
    assert seen.until_s == 0.0 and [len(e) for e in seen.step_ends_s] == [10, 10]


def test_each_worker_replays_its_own_stream_whatever_the_workers_and_steps() -> None:
    graph = prepare_graph(tiny_mlp(recorded_steps=7), NetworkModel(bandwidth_bps=1e8))
    few = with_steps(replace(graph, workers=2), seed=5, steps=10)
    many = with_steps(replace(graph, workers=5), seed=5, steps=40)
    assert np.array_equal(many.sampled[:2, :10], few.sampled)
    assert np.array_equal(few.sampled[1], sample_steps(5, 1, 10, 7))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    start=st.integers(0, 2**44),  # on the grid, up to about 4,000 s
    durations=st.lists(st.one_of(st.floats(0, 5.0), st.integers(0, 5_000_000).map(lambda us: us * 1e-6)), min_size=1, max_size=6),
)
def test_the_chain_shortcut_is_exactly_the_member_by_member_rounding(start: int, durations: list[float]) -> None:
    span, until = chain_spans(np.array([durations]), np.array([0, len(durations)]), np.arange(len(durations)))
    now = start / TIME_GRID
    chained = now
    for d in durations:
        chained = quantize(chained + d)
    if now + span[0, 0] < until[0, 0]:
        assert now + span[0, 0] == chained


def test_the_chain_shortcut_covers_ordinary_runs() -> None:
    # Durations in microseconds, runs of a few thousand seconds: nearly every chain qualifies.
    rng = np.random.default_rng(0)
    dur = rng.integers(1, 2_000_000, size=(20, 500)) * 1e-6
    ptr = np.arange(0, 501, 5)
    _, until = chain_spans(dur, ptr, np.arange(500))
    assert np.mean(until > 4000.0) > 0.8
    assert math.isinf(chain_spans(np.array([[-1.0]]), np.array([0, 1]), np.array([0]))[1][0, 0])
