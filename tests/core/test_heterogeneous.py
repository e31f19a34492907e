"""Heterogeneous workers in the simulator: per-worker compute speeds and link (NIC) rates.

All 1.0 is the homogeneous run bit for bit; the engines agree; a slow worker on an unsaturated
link adds its own rate (closed form); a slow NIC stretches that worker's transfers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.curve import throughput_interval
from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.models.ps_des.simulator.fast import FastRun, compile_profile, simulate_fast
from advisor.core.models.ps_des.simulator.inputs import prepare
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from benchmarks.synthetic import inception_like, tiny_mlp
from tests.core.test_simulator_equivalence import networks, random_profiles, real_mlp_profile
from tests.core.test_sync_ps import both, same_run


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       data=st.data())  # fmt: skip
def test_fast_engine_matches_reference_with_speeds_and_nics(  # type: ignore[no-untyped-def]
    profile: Profile, network: NetworkModel, workers: int, seed: int, data
) -> None:
    speeds = tuple(data.draw(st.lists(st.sampled_from([1.0, 0.5, 2.0, 0.25]), max_size=workers)))
    nics = tuple(data.draw(st.lists(st.sampled_from([1e7, 3e7, 1e8, 1e9]), max_size=workers)))
    sim = SimulationSettings(workers=workers, steps=5, warmup_steps=0, seed=seed)
    same_run(*both(profile, network, sim, worker_speeds=speeds, worker_bandwidths_bps=nics))


def test_all_speeds_one_is_the_homogeneous_run_bit_for_bit() -> None:
    contention = NetworkModel(bandwidth_bps=1e8, request_queue_s=0.005, share_sigma=1.0, multi_flow_goodput=0.85)
    two_ps = inception_like(layers=6, total_mb=4.0, recorded_steps=3, parameter_servers=2)
    for profile in (real_mlp_profile(), tiny_mlp(), two_ps):
        for network in (NetworkModel(bandwidth_bps=1e8), contention):
            sim = SimulationSettings(workers=3, steps=10, warmup_steps=0, seed=5)
            plain = prepare(profile, network, sim)
            ones = prepare(profile, network, sim, worker_speeds=(1.0, 1.0, 1.0), worker_bandwidths_bps=(1e8,) * 3)
            for engine in (simulate_fast, simulate_reference):
                a, b = engine(profile, plain), engine(profile, ones)
                assert a.step_ends_s == b.step_ends_s and a.events == b.events
            compiled = compile_profile(profile, network)
            ones_c = compile_profile(profile, network, (1.0,) * 3, (1e8,) * 3)
            x, y = FastRun(compiled, 3, 5).advance(20), FastRun(ones_c, 3, 5).advance(20)
            assert all(np.array_equal(p, q) for p, q in zip(x.step_ends_s, y.step_ends_s)) and x.until_s == y.until_s


def chain(recorded: int, seed: int = 0) -> Profile:
    """pull -> fwd -> bwd -> push -> apply, 8-byte tensors (0 s at 1 Tbit/s: 64 ps is under
    half a tick of the 2**-32 s time grid), compute 5-15 ms per op, apply 0.5-1.5 ms."""
    rng = np.random.default_rng(seed)
    ops = [
        dict(name="pull", resource="downlink", ps=0, bytes=8),
        dict(name="fwd", resource="worker", deps=["pull"]),
        dict(name="bwd", resource="worker", deps=["fwd"]),
        dict(name="push", resource="uplink", ps=0, bytes=8, deps=["bwd"]),
        dict(name="apply", resource="ps", ps=0, deps=["push"]),
    ]
    steps = []
    for k in range(recorded):
        fwd, bwd, apply = rng.uniform(5e3, 15e3), rng.uniform(5e3, 15e3), rng.uniform(500, 1500)
        steps.append(dict(index=k, start_us=[0.0] * 5, duration_us=[0.0, fwd, bwd, 0.0, apply]))
    return build_profile(job=dict(batch_size=16, parameter_servers=1), ops=ops, steps=steps)


def test_one_half_speed_worker_adds_its_own_rate_on_an_unsaturated_link() -> None:
    # On a link that never binds, workers do not interact: worker w's steps are a renewal
    # process with mean E[T_w] = E[(fwd + bwd) / s_w + apply] over the recorded steps (drawn
    # uniformly with replacement), so the throughput is sum_w batch / E[T_w].
    profile = chain(recorded=6)
    dur = np.array([s.duration_us for s in profile.steps]) * 1e-6
    speeds = (1.0, 1.0, 0.5)
    expected = sum(16 / np.mean((dur[:, 1] + dur[:, 2]) / s + dur[:, 4]) for s in speeds)
    sim = SimulationSettings(workers=3, steps=3000, warmup_steps=50, seed=1)
    result = simulate_fast(profile, prepare(profile, NetworkModel(bandwidth_bps=1e12), sim, worker_speeds=speeds))
    mean, low, high = throughput_interval(result, 50)
    assert low <= expected <= high
    assert abs(mean / expected - 1) < 0.01
    # and the slow worker's own steps take twice the compute: its mean step time is E[T_2]
    t2 = np.diff(result.step_ends_s[2]).mean()
    assert abs(t2 / np.mean((dur[:, 1] + dur[:, 2]) / 0.5 + dur[:, 4]) - 1) < 0.01


def test_a_slow_nic_stretches_only_that_workers_transfers() -> None:
    # One recorded step: pull 1 MB -> compute 10 ms -> push 1 MB -> apply 0. Link 100 Mbit/s.
    # Worker 1 has a 10 Mbit/s NIC, worker 0 the link rate; each alone on the link would take
    # 2 x 8e6 bits / rate + 10 ms. Worker 1's transfers are NIC-bound at 10 Mbit/s (water-filling
    # freezes it there and leaves worker 0 the other 90 Mbit/s), so at W = 1 worker 1 takes
    # 1.6 s + 10 ms; worker 0 alone 0.16 s + 10 ms.
    ops = [
        dict(name="pull", resource="downlink", ps=0, bytes=1_000_000),
        dict(name="c", resource="worker", deps=["pull"]),
        dict(name="push", resource="uplink", ps=0, bytes=1_000_000, deps=["c"]),
        dict(name="apply", resource="ps", ps=0, deps=["push"]),
    ]
    profile = build_profile(job=dict(batch_size=1, parameter_servers=1), ops=ops,
                            steps=[dict(index=0, start_us=[0.0] * 4, duration_us=[0.0, 10e3, 0.0, 0.0])])  # fmt: skip
    net = NetworkModel(bandwidth_bps=1e8)
    sim = SimulationSettings(workers=1, steps=3, warmup_steps=0)
    slow = simulate_fast(profile, prepare(profile, net, sim, worker_bandwidths_bps=(1e7,)))
    np.testing.assert_allclose(slow.step_ends_s[0], 1.61 * np.arange(1, 4), rtol=1e-7)
    fast = simulate_fast(profile, prepare(profile, net, sim, worker_bandwidths_bps=(1e8,)))
    np.testing.assert_allclose(fast.step_ends_s[0], 0.17 * np.arange(1, 4), rtol=1e-7)
    # Two workers, worker 1 behind a 10 Mbit/s NIC: their first pulls start together; worker 1
    # gets 10 Mbit/s, worker 0 the remaining 90 Mbit/s: its pull ends at 8e6 / 9e7 = 88.9 ms, its
    # push (alone on the uplink) 10 + 80 ms later: 178.9 ms. Worker 1 is NIC-bound throughout
    # (its NIC's 10 Mbit/s is below any share of the link): 0.8 + 0.01 + 0.8 = 1.61 s.
    sim2 = SimulationSettings(workers=2, steps=2, warmup_steps=0)
    for engine in (simulate_fast, simulate_reference):
        two = engine(profile, prepare(profile, net, sim2, worker_bandwidths_bps=(1e8, 1e7)))
        np.testing.assert_allclose([two.step_ends_s[0][0], two.step_ends_s[1][0]], [8e6 / 9e7 + 0.09, 1.61], rtol=1e-7)


def test_models_with_all_speeds_one_give_the_homogeneous_curve() -> None:
    from advisor.core.curve import CurveSettings
    from tests.core.test_sync_ps import _curve, _inputs

    cfg = CurveSettings(workers=(1, 2, 4), warmup_steps=20, target_rel_halfwidth=0.03, min_steps=100, seed=1)
    profile = real_mlp_profile()
    for name in ("li2020-des+contention", "li2020-des", "li2020-des-sync+contention"):
        plain = _curve(name, _inputs(profile, 100e6), cfg)
        ones = _curve(name, _inputs(profile, 100e6, worker_speeds=(1.0,) * 4, worker_bandwidths_bps=(100e6,) * 4), cfg)
        assert plain == ones
    # The link-bound MLP: its 25 ms of compute mostly overlaps 280 ms of transfers, so half-speed
    # workers are slower, but by little.
    slow = _curve("li2020-des", _inputs(profile, 100e6, worker_speeds=(0.5, 0.5, 0.5, 0.5)), cfg)
    assert slow[0].high < _curve("li2020-des", _inputs(profile, 100e6), cfg)[0].low


def test_models_refuse_bad_speeds_and_rates_naming_the_field() -> None:
    from advisor.core.curve import CurveSettings
    from advisor.core.models import registry
    from advisor.errors import ModelInputError
    from tests.core.test_sync_ps import _curve, _inputs

    cfg = CurveSettings(workers=(1,), steps=50, warmup_steps=5)
    for extra, field in (({"worker_speeds": (1.0, 0.0)}, "worker_speeds"),
                         ({"worker_bandwidths_bps": (-1.0,)}, "worker_bandwidths_bps")):  # fmt: skip
        with pytest.raises(ModelInputError, match=field):
            _curve("li2020-des+contention", _inputs(tiny_mlp(), 1e8, **extra), cfg)
    assert registry.get("li2020-des")  # the registry still answers after a refusal


def test_a_much_slower_worker_still_gets_its_warm_up_in_the_window() -> None:
    # Worker 1 at a tenth of the speed on an unsaturated link: when worker 0 has run the curve's
    # first look (100 steps), worker 1 has run about 10, fewer than the 20 warm-up steps. The run
    # goes on until every worker has its steps; the point then adds worker 1's own rate:
    # closed form as in the half-speed test, sum_w b / E[T_w].
    from advisor.core.curve import CurveSettings
    from advisor.core.models.protocol import ModelInputs
    from tests.core.test_sync_ps import _curve

    profile = chain(recorded=4, seed=3)
    dur = np.array([s.duration_us for s in profile.steps]) * 1e-6
    cfg = CurveSettings(workers=(2,), warmup_steps=20, target_rel_halfwidth=0.02, min_steps=100, seed=1)
    inputs = ModelInputs(profile=profile, network=NetworkModel(bandwidth_bps=1e12), worker_speeds=(1.0, 0.1))
    (point,) = _curve("li2020-des", inputs, cfg)
    expected = sum(16 / np.mean((dur[:, 1] + dur[:, 2]) / s + dur[:, 4]) for s in (1.0, 0.1))
    assert point.low <= expected <= point.high
