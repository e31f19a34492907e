"""Synchronous PS (SyncReplicasOptimizer) in the simulator: both engines agree, W = 1 is the
asynchronous run, hand-computed barriers, and sync never beats async on the real traces."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings
from advisor.core.models.ps_des.simulator.fast import FastRun, compile_profile, simulate_fast
from advisor.core.models.ps_des.simulator.inputs import prepare
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from advisor.core.models.ps_des.sync import engine_steps, replicas, update_rows
from benchmarks.synthetic import inception_like, tiny_mlp
from tests.core.test_simulator_equivalence import networks, random_profiles, real_mlp_profile


def same_run(fast: SimulationResult, ref: SimulationResult) -> None:
    """Same events, step ends (rows may be ragged: workers left waiting) and update times."""
    assert fast.events == ref.events
    assert [len(e) for e in fast.step_ends_s] == [len(e) for e in ref.step_ends_s]
    for f, r in zip(fast.step_ends_s, ref.step_ends_s):
        np.testing.assert_allclose(f, r, rtol=1e-9, atol=1e-8)
    assert (fast.updates_s is None) == (ref.updates_s is None)
    if fast.updates_s is not None:
        np.testing.assert_allclose(fast.updates_s, ref.updates_s or (), rtol=1e-9, atol=1e-8)


def both(profile: Profile, network: NetworkModel, sim: SimulationSettings, **regime):  # type: ignore[no-untyped-def]
    inputs = prepare(profile, network, sim, **regime)
    return simulate_fast(profile, inputs), simulate_reference(profile, inputs)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(profile=random_profiles(), network=networks, workers=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       data=st.data())  # fmt: skip
def test_sync_fast_engine_matches_reference_on_random_dags(  # type: ignore[no-untyped-def]
    profile: Profile, network: NetworkModel, workers: int, seed: int, data
) -> None:
    r = data.draw(st.integers(1, workers))
    speeds = tuple(data.draw(st.lists(st.sampled_from([1.0, 0.5, 2.0, 0.3]), max_size=workers)))
    sim = SimulationSettings(workers=workers, steps=5, warmup_steps=0, seed=seed)
    same_run(*both(profile, network, sim, sync_replicas=r, worker_speeds=speeds))


def test_sync_fast_engine_matches_reference_on_a_real_trace_and_synthetic_chains() -> None:
    contention = NetworkModel(bandwidth_bps=1e8, win_bytes=65535.0, request_queue_s=0.005, share_sigma=1.0,
                              multi_flow_goodput=0.85)  # fmt: skip
    for profile in (real_mlp_profile(), inception_like(layers=6, compute_ms=40.0, total_mb=4.0, recorded_steps=3)):
        for network in (NetworkModel(bandwidth_bps=1e8), contention, replace(contention, window_gain=1.25)):
            for r in (1, 2, 3):
                sim = SimulationSettings(workers=3, steps=8, warmup_steps=0, seed=4, start_offsets_s=(0.0, 0.01, 0.3))
                same_run(*both(profile, network, sim, sync_replicas=r, worker_speeds=(1.0, 0.7)))


def test_sync_equals_async_at_one_worker_bit_for_bit() -> None:
    # At W = 1 with R = 1 every step end is an update and nothing waits: the same run.
    for profile in (tiny_mlp(), inception_like(layers=8, total_mb=8.0, recorded_steps=4)):
        net = NetworkModel(bandwidth_bps=1e8, request_queue_s=0.005, share_sigma=1.0, multi_flow_goodput=0.85)
        sim = SimulationSettings(workers=1, steps=30, warmup_steps=0, seed=9)
        sync = simulate_fast(profile, prepare(profile, net, sim, sync_replicas=1))
        plain = simulate_fast(profile, prepare(profile, net, sim))
        assert sync.step_ends_s == plain.step_ends_s
        assert sync.updates_s == plain.step_ends_s[0]
        assert sync.events == plain.events


def chain_profile(compute_us: float, apply_us: float) -> Profile:
    """pull -> compute -> push -> apply, 8-byte tensors (instant at 1 Tbit/s: 64 ps, under
    half a tick of the 2**-32 s grid, so each transfer takes 0 s)."""
    ops = [
        dict(name="v", resource="ps", ps=0, op_type="VarHandleOp"),
        dict(name="pull", resource="downlink", ps=0, bytes=8, deps=["v"]),
        dict(name="c", resource="worker", deps=["pull"]),
        dict(name="push", resource="uplink", ps=0, bytes=8, deps=["c"]),
        dict(name="apply", resource="ps", ps=0, deps=["push", "v"]),
    ]
    steps = [dict(index=0, start_us=[0.0] * 5, duration_us=[0.0, 0.0, compute_us, 0.0, apply_us])]
    return build_profile(job=dict(batch_size=10, parameter_servers=1), ops=ops, steps=steps)


def test_hand_computed_barrier_with_and_without_a_backup_worker() -> None:
    # c = 10 ms of compute, a = 1 ms of PS apply; worker 1 at speed 0.5 computes for 20 ms.
    # Step times: worker 0 T0 = 11 ms, worker 1 T1 = 21 ms (transfers take 0 s, see chain_profile).
    # R = 2: every update waits for both: one update per max(T0, T1) = 21 ms, at 21, 42, 63 ms...
    # R = 1: worker 0's gradient alone makes an update every 11 ms; worker 1's step (21 ms) always
    # spans one of them, so its gradient is always stale and dropped: updates at 11, 22, 33 ms...
    profile = chain_profile(10_000.0, 1_000.0)
    net = NetworkModel(bandwidth_bps=1e12)
    sim = SimulationSettings(workers=2, steps=6, warmup_steps=0)
    for r, period in ((2, 0.021), (1, 0.011)):
        fast, ref = both(profile, net, sim, sync_replicas=r, worker_speeds=(1.0, 0.5))
        same_run(fast, ref)
        # (while worker 0 runs: a plain run then lets worker 1 finish its steps alone)
        np.testing.assert_allclose((fast.updates_s or ())[:6], period * np.arange(1, 7), rtol=1e-7)
    # R = 2: both workers wait for each other, so both end each step at the update.
    fast, _ = both(profile, net, sim, sync_replicas=2, worker_speeds=(1.0, 0.5))
    np.testing.assert_allclose(fast.step_ends_s[0], 0.021 * np.arange(1, 7) - 0.010, rtol=1e-7)  # 11, 32, 53... ms
    np.testing.assert_allclose(fast.step_ends_s[1], 0.021 * np.arange(1, 7), rtol=1e-7)


def test_continued_sync_run_is_the_longer_run() -> None:
    # FastRun pauses and resumes; the update times it reports are those of one long run.
    profile = tiny_mlp()
    compiled = compile_profile(profile, NetworkModel(bandwidth_bps=1e8))
    run = FastRun(compiled, 3, seed=2, sync_replicas=2)
    run.advance(10)
    late = run.advance(40)
    once = FastRun(compiled, 3, seed=2, sync_replicas=2).advance(40)
    assert late.updates_s is not None and once.updates_s is not None
    np.testing.assert_array_equal(late.updates_s, once.updates_s)
    assert late.until_s == once.until_s


def test_update_rows_deal_every_counted_gradient_once() -> None:
    # 5 updates of R = 2 gradients over W = 3 rows: update j goes to rows 2j mod 3 and 2j+1 mod 3:
    # j=0 -> 0,1; j=1 -> 2,0; j=2 -> 1,2; j=3 -> 0,1; j=4 -> 2,0.
    t = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    rows = update_rows(t, 3, 2)
    assert [r.tolist() for r in rows] == [[1.0, 2.0, 4.0, 5.0], [1.0, 3.0, 4.0], [2.0, 3.0, 5.0]]
    assert replicas(4, None, None) == 4 and replicas(4, 6, None) == 4 and replicas(4, None, 1) == 3
    assert replicas(1, None, 3) == 1
    assert engine_steps(100, 4, 2) == 200 and engine_steps(100, 3, 3) == 100
    assert not math.isnan(rows[0][0])


def _throughput(seen, warmup: int) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(mean, low, high) examples/s over the curve's window: after every row's warm-up, up to the pause."""
    from advisor.core.curve import batch_means

    start = max(float(e[warmup - 1]) for e in seen.step_ends_s)
    return batch_means(seen.step_ends_s, start, seen.until_s, seen.batch_size)


def test_sync_never_beats_async_on_the_real_traces() -> None:
    # Same trace, link, seed and (per row) steps; R = W. A barrier can only add waiting: every
    # worker's step is the traced one, and a synchronous worker starts its next step no earlier
    # than it would alone. (Not a theorem under contention, which the barrier reshapes; an
    # invariant on every trace in tests/data/ps-async.) Where both saturate the link (the MLP at
    # 50 Mbit/s) they are equal up to sampling: sync's mean must not exceed async's interval.
    import glob
    from pathlib import Path

    from advisor.core.models.ps_des.contention import Contention
    from advisor.core.models.ps_des.sync import update_samples
    from advisor.importers.loader import load_profile
    from tests.conftest import ps_async_data

    traces = sorted(glob.glob(str(ps_async_data("condensed") / "*" / "*.json.gz")))
    assert len(traces) >= 4
    steps, warmup = 80, 15
    for path in traces:
        bw = 100e6 if "bw100" in path else 50e6
        profile = load_profile(Path(path), bandwidth_bps=bw)
        for net in (NetworkModel(bandwidth_bps=0.95 * bw), Contention().apply(NetworkModel(bandwidth_bps=0.95 * bw))):
            compiled = compile_profile(profile, net)
            for w in (1, 2, 3, 4, 6, 8):
                plain = _throughput(FastRun(compiled, w, 0).advance(steps), warmup)
                seen = FastRun(compiled, w, 0, sync_replicas=w).advance(steps)
                sync = _throughput(update_samples(seen.updates_s, w, w, seen.until_s, steps, seen.events,
                                                  seen.batch_size), warmup)  # fmt: skip
                assert sync[0] <= plain[2], (path, net, w, sync, plain)
                if w == 1:
                    assert sync == pytest.approx(plain, rel=1e-12)


# -- the registered models ---------------------------------------------------------------


def _curve(name: str, inputs, cfg, **params):  # type: ignore[no-untyped-def]
    from advisor.core.curve import predict_curve
    from advisor.core.models import registry

    model = registry.get(name)
    p = registry.params_for(model, params)
    model.check(inputs, p)
    return predict_curve(model, inputs, p, cfg)


def _inputs(profile: Profile, bandwidth: float, **extra):  # type: ignore[no-untyped-def]
    from advisor.core.advice import AdviceRequest, model_inputs
    from advisor.core.curve import CurveSettings

    request = AdviceRequest(network=NetworkModel(bandwidth_bps=bandwidth), curve=CurveSettings(workers=(1,)), **extra)
    return model_inputs(profile, request)


def test_sync_models_at_one_worker_give_the_async_point() -> None:
    from advisor.core.curve import CurveSettings

    cfg = CurveSettings(workers=(1,), warmup_steps=20, target_rel_halfwidth=0.02, min_steps=100, seed=2)
    inputs = _inputs(real_mlp_profile(), 100e6)
    for sync, plain in (("li2020-des-sync+contention", "li2020-des+contention"), ("li2020-des-sync", "li2020-des")):
        assert _curve(sync, inputs, cfg) == _curve(plain, inputs, cfg)


def test_sync_model_counts_aggregated_examples_and_drops_backups() -> None:
    # The hand case of test_hand_computed_barrier...: T0 = 11 ms, T1 = 21 ms (speed 0.5), b = 10.
    # R = 2: 2 x 10 examples per 21 ms = 952.4 ex/s; backup_workers = 1 (R = 1): 10 per 11 ms = 909.1 ex/s.
    from advisor.core.curve import CurveSettings
    from advisor.core.models.protocol import ModelInputs

    inputs = ModelInputs(profile=chain_profile(10_000.0, 1_000.0), network=NetworkModel(bandwidth_bps=1e12),
                         worker_speeds=(1.0, 0.5))  # fmt: skip
    cfg = CurveSettings(workers=(2,), steps=60, warmup_steps=5)
    (all_in,) = _curve("li2020-des-sync", inputs, cfg)
    (backup,) = _curve("li2020-des-sync", inputs, cfg, backup_workers=1)
    (same,) = _curve("li2020-des-sync", inputs, cfg, replicas_to_aggregate=1)
    assert all_in.throughput == pytest.approx(20 / 0.021, rel=1e-3)
    assert backup.throughput == pytest.approx(10 / 0.011, rel=1e-3)
    assert same == backup


def pulled_chain(pull_bytes: int, compute_us: float) -> Profile:
    """pull (``pull_bytes``) -> compute -> an 8-byte push: a step whose pull shares the PS link."""
    ops = [
        dict(name="v", resource="ps", ps=0, op_type="VarHandleOp"),
        dict(name="pull", resource="downlink", ps=0, bytes=pull_bytes, deps=["v"]),
        dict(name="c", resource="worker", deps=["pull"]),
        dict(name="push", resource="uplink", ps=0, bytes=8, deps=["c"]),
    ]
    steps = [dict(index=0, start_us=[0.0] * 4, duration_us=[0.0, 0.0, compute_us, 0.0])]
    return build_profile(job=dict(batch_size=10, parameter_servers=1), ops=ops, steps=steps)


def test_drifting_rate_is_the_harmonic_mean_of_in_step_and_alone() -> None:
    # the mean of the two cycle lengths: 1/60 and 1/100 s per example average to 1/75
    from advisor.core.models.ps_des.sync import drifting_rate

    assert drifting_rate(60.0, 100.0) == pytest.approx(75.0)
    assert drifting_rate(100.0, 100.0) == 100.0
    assert drifting_rate(120.0, 100.0) == 120.0  # never below in step
    assert drifting_rate(0.0, 100.0) == 0.0


def test_one_gradient_per_update_at_two_workers_is_the_drifting_arrangement() -> None:
    # 1 MB pulled at 80 Mbit/s takes 0.1 s alone, then 0.1 s of compute: 10 examples per 0.2 s
    # (50 ex/s). Two workers in step share the link: both pulls take 0.2 s, a cycle 0.3 s with one
    # gradient counted (33.3 ex/s); drifting, the cycle averages 0.25 s: 40 ex/s, in both engines.
    from advisor.core.curve import CurveSettings
    from advisor.core.models.protocol import ModelInputs

    profile = pulled_chain(1_000_000, 100_000.0)
    net = NetworkModel(bandwidth_bps=80e6)
    in_step = simulate_fast(profile, prepare(profile, net, SimulationSettings(2, 60, 5), sync_replicas=1))
    assert np.diff(in_step.updates_s or ())[10:] == pytest.approx(0.3, rel=1e-5)  # + the 8-byte pushes
    inputs = ModelInputs(profile=profile, network=net)
    cfg = CurveSettings(workers=(1, 2), steps=60, warmup_steps=5)
    for engine in ("compiled", "reference"):
        alone, two = _curve("li2020-des-sync", inputs, cfg, backup_workers=1, engine=engine)
        assert alone.throughput == pytest.approx(50.0, rel=1e-3)
        assert two.throughput == pytest.approx(40.0, rel=1e-3), engine
    # R = 2 (no backup): the barrier holds them in step, two gradients per 0.3 s cycle
    (together,) = _curve("li2020-des-sync", inputs, CurveSettings(workers=(2,), steps=60, warmup_steps=5))
    assert together.throughput == pytest.approx(20 / 0.3, rel=1e-3)
    # uneven workers: no drifting point (the alternation and drift rules assume two traced workers)
    uneven = ModelInputs(profile=profile, network=net, worker_speeds=(1.0, 1.0 - 1e-9))
    (slow,) = _curve("li2020-des-sync", uneven, CurveSettings(workers=(2,), steps=60, warmup_steps=5),
                     backup_workers=1)
    assert slow.throughput == pytest.approx(10 / 0.3, rel=2e-3)


def test_sync_model_parameters_are_checked() -> None:
    from advisor.core.models import registry
    from advisor.errors import ModelInputError

    model = registry.get("li2020-des-sync+contention")
    with pytest.raises(ModelInputError, match="not both"):
        registry.params_for(model, {"replicas_to_aggregate": 2, "backup_workers": 1})
    with pytest.raises(ModelInputError, match="replicas_to_aggregate"):
        registry.params_for(model, {"replicas_to_aggregate": 0})
    assert registry.params_for(model, {"replicas_to_aggregate": "3"}).replicas(2) == 2  # type: ignore[attr-defined]


def test_sync_model_timeline_shows_the_barrier() -> None:
    # R = W = 2 on the hand case (T0 = 11 ms, T1 = 21 ms): worker 0's second step starts only at
    # the first update, 21 ms, when worker 1 ends its first step.
    from advisor.core.models import registry
    from advisor.core.models.protocol import ModelInputs

    model = registry.get("li2020-des-sync")
    inputs = ModelInputs(profile=chain_profile(10_000.0, 1_000.0), network=NetworkModel(bandwidth_bps=1e12),
                         worker_speeds=(1.0, 0.5))  # fmt: skip
    trace = model.timeline(inputs, registry.params_for(model), 2, 3, 0)  # type: ignore[attr-defined]
    starts = sorted(e["ts"] for e in trace["traceEvents"] if e.get("name") == "c" and e.get("ph") == "X")
    assert starts[:4] == pytest.approx([0.0, 0.0, 21_000.0, 21_000.0], abs=1.0)  # microseconds


def test_one_gradient_per_update_reports_the_alternating_outcome_only_where_it_applies() -> None:
    """The outlook's second outcome at W = 2 when an update takes one gradient (R = 1 < W): the
    model's own W = 1 (one step per update), its overlapped transfers slowed by the two-way loss
    (``two_way.alternating_step_s``, worked out here from the trace's phases), with ONE_GRADIENT's
    probability, however close the two (the testbed's runs alternated where they were 1.2x
    apart); none when every gradient counts (R = 2), when it does not lie above W = 2 (the curve
    given by hand), or for uneven workers (the bound assumes two traced workers). The equal-shares
    model has no two-way loss: its alternation is one uncontended step."""
    from advisor.core.models import registry
    from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, ONE_GRADIENT
    from advisor.core.models.ps_des.two_way import PROBED, overlap_s
    from advisor.core.phases import phases

    model = registry.get("li2020-des-sync+contention")
    profile = real_mlp_profile()
    inputs = _inputs(profile, 100e6)
    backup = registry.params_for(model, {"backup_workers": 1, "congestion_control": "cubic", "queue_s": 0.1})
    curve = {1: 100.0, 2: 55.0, 3: 75.0}
    other = model.outlook(inputs, backup, curve).others[2]
    ph, step = phases(profile, model.network(inputs, backup).bandwidth_bps), profile.job.batch_size / 100.0
    efficiency = PROBED["loss-based, deep queue"].efficiency
    slowed = profile.job.batch_size / (step + 2 * overlap_s(ph.downlink_s, ph.uplink_s, step) * (1 / efficiency - 1))
    assert (other.name, other.instead_of) == (ALTERNATING, DRIFTING)
    assert other.throughput == pytest.approx(slowed) and efficiency * 100.0 <= other.throughput < 100.0
    assert other.probability == pytest.approx((ONE_GRADIENT.alternated + 1) / (ONE_GRADIENT.runs + 2))
    notes = model.outlook(inputs, backup, curve).notes
    assert any("W=2: two outcomes" in n for n in notes)
    assert not any("at W = 3" in n for n in notes)  # R = 2 at W = 3: a barrier again
    assert model.outlook(inputs, backup, {1: 100.0, 2: 80.0}).others[2].throughput == pytest.approx(slowed)
    assert model.outlook(inputs, backup, {1: 100.0, 2: slowed}).others == {}
    equal = registry.get("li2020-des-sync")
    assert equal.outlook(inputs, registry.params_for(equal, {"backup_workers": 1}),
                         curve).others[2].throughput == 100.0
    assert model.outlook(inputs, registry.params_for(model), curve).others == {}  # R = W
    uneven = _inputs(real_mlp_profile(), 100e6, worker_speeds=(1.0, 0.5))
    assert model.outlook(uneven, backup, curve).others == {}
    two_backups = registry.params_for(model, {"backup_workers": 2})  # R = 1 at W = 2 and 3
    notes = model.outlook(inputs, two_backups, curve).notes
    assert any("at W = 3 an update takes one gradient" in n for n in notes)
