"""Jobs with several parameter servers: which multi-flow goodput applies, checked by hand and on
invariants, and the accuracy reached on the recorded 2-PS runs (tests/data/ps-traces).

Independent truths: a two-worker lockstep step worked out by hand, the capacity of a link
(no direction carries more bits than its rate x the elapsed time), the W x T(1) bound, and the
real throughput of the recorded runs (``benchmarks/multi_ps_accuracy.py`` prints every point).
"""

from __future__ import annotations

import math
import statistics

import pytest

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.ps_des.contention import (
    MULTI_FLOW_GOODPUT,
    MULTI_PS_FLOW_GOODPUT,
    CongestionControl,
    Contention,
)
from advisor.core.profile import Profile, Resource, build_profile
from advisor.core.sim_types import (
    NetworkModel,
    SimulationSettings,
    SimulationSettingsError,
)
from benchmarks import multi_ps_accuracy as bench

LINK = 100e6
MODEL = registry.get(registry.DEFAULT_MODEL)


def _network(profile: Profile | None, parameter_servers: int | None = None, **params: object) -> NetworkModel:
    """The network the default model simulates for ``profile`` (its ``network``)."""
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=LINK), curve=CurveSettings(workers=(1,)),
                            parameter_servers=parameter_servers)
    return MODEL.network(model_inputs(profile, request), registry.params_for(MODEL, params))  # type: ignore[attr-defined]


def test_the_one_ps_value_applies_to_one_ps_and_the_own_value_to_several() -> None:
    c = Contention(CongestionControl.CUBIC, 0.1, multi_flow_goodput=0.8, multi_ps_flow_goodput=0.9)
    assert [c.flow_goodput(m) for m in (1, 2, 3, 8)] == [0.8, 0.9, 0.9, 0.9]
    net = NetworkModel(bandwidth_bps=LINK)
    assert c.apply(net).multi_flow_goodput == 0.8  # the default is one PS, as before
    assert c.apply(net, 2).multi_flow_goodput == 0.9
    assert (MULTI_FLOW_GOODPUT, MULTI_PS_FLOW_GOODPUT) == (0.85, 1.0)


@pytest.mark.parametrize("value", [0.0, -0.1, 1.01, math.nan, math.inf])
def test_an_impossible_multi_ps_flow_goodput_is_refused(value: float) -> None:
    with pytest.raises(SimulationSettingsError, match="multi_ps_flow_goodput"):
        Contention(multi_ps_flow_goodput=value)


def test_the_simulated_job_picks_the_goodput() -> None:
    one, rr, greedy = bench.trace(bench.ONE_PS), *(bench.trace(t) for t in bench.TWO_PS.values())
    assert _network(one).multi_flow_goodput == MULTI_FLOW_GOODPUT
    assert _network(rr).multi_flow_goodput == _network(greedy).multi_flow_goodput == MULTI_PS_FLOW_GOODPUT
    # the --ps 2 what-if simulates 2 PS: their value; --ps 1 on the one-PS trace is the trace itself
    assert _network(one, parameter_servers=2).multi_flow_goodput == MULTI_PS_FLOW_GOODPUT
    assert _network(one, parameter_servers=1).multi_flow_goodput == MULTI_FLOW_GOODPUT
    assert _network(rr, multi_ps_flow_goodput=0.9).multi_flow_goodput == 0.9  # a stated value wins
    assert _network(None).multi_flow_goodput == MULTI_FLOW_GOODPUT  # no profile: one PS


def _two_ps_lockstep_profile(pull_bytes: int) -> Profile:
    """Two PS, one variable each: read, pull from both at once, compute 100 us, push to both,
    update. Identical steps, no client gap."""
    ops, start, dur = [], [], []
    for p in (0, 1):
        ops += [{"name": f"ps{p}:read", "resource": "ps", "ps": p},
                {"name": f"pull{p}", "resource": "downlink", "ps": p, "bytes": pull_bytes, "deps": [f"ps{p}:read"]}]
        start += [0.0, 0.0]
        dur += [0.0, 100.0]
    ops.append({"name": "worker:compute", "resource": "worker", "deps": ["pull0", "pull1"]})
    start.append(100.0)
    dur.append(100.0)
    for p in (0, 1):
        ops += [{"name": f"push{p}", "resource": "uplink", "ps": p, "bytes": pull_bytes, "deps": ["worker:compute"]},
                {"name": f"ps{p}:update", "resource": "ps", "ps": p, "deps": [f"push{p}"]}]
        start += [200.0, 300.0]
        dur += [100.0, 0.0]
    steps = [{"index": k, "start_us": start, "duration_us": dur} for k in range(3)]
    return build_profile(job={"model": "two-ps", "batch_size": 10, "recorded_bandwidth_bps": LINK,
                              "parameter_servers": 2}, ops=ops, steps=steps)


@pytest.mark.parametrize("eta", [1.0, 0.85, 0.5])
def test_two_workers_in_lockstep_by_hand(eta: float) -> None:
    # Both workers start together and stay in step (equal shares: sigma 0; no request wait: no
    # push is ever in flight when a pull starts). Each link direction carries two flows at
    # eta x C / 2 each; the workers' own links (10 x C) never bind. A step: pull 8 B / (eta C / 2),
    # compute 100 us, push the same: throughput 2 x batch / step.
    pull_bytes = 12_500  # 100,000 bits: 1 ms alone at 100 Mbit/s
    profile = _two_ps_lockstep_profile(pull_bytes)
    transfer_s = 8 * pull_bytes / (eta * LINK / 2)
    expected = 2 * 10 / (2 * transfer_s + 100e-6)
    settings = CurveSettings(workers=(2,), steps=40, warmup_steps=5, seed=0)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=LINK, worker_bandwidth_bps=10 * LINK), curve=settings,
                            goodput=1.0, client_gap=False)
    params = registry.params_for(MODEL, {"share_sigma": 0.0, "congestion_control": "cubic", "queue_s": 0.1,
                                         "multi_ps_flow_goodput": eta})
    (point,) = predict_curve(MODEL, model_inputs(profile, request), params, settings)
    assert point.throughput == pytest.approx(expected, rel=1e-6)


def _link_bits(profile: Profile) -> dict[tuple[int, Resource], float]:
    """Bits per step on each (PS, direction)."""
    out: dict[tuple[int, Resource], float] = {}
    for op in profile.ops:
        if op.resource.is_transfer:
            key = (int(op.ps or 0), op.resource)
            out[key] = out.get(key, 0.0) + 8.0 * op.bytes
    return out


@pytest.mark.parametrize("placement", sorted(bench.TWO_PS))
def test_no_link_carries_more_than_its_rate(placement: str) -> None:
    # Every step's transfers are done by its end, so by the last step end each (PS, direction)
    # has carried steps x its bits per step; a link at rate C cannot have carried more than
    # C x that time. The bound is the rate itself: no multi-flow goodput above 1 can pass it.
    from advisor.core.advice import prepare_profile
    from advisor.core.models.ps_des.simulator import simulate

    profile = bench.trace(bench.TWO_PS[placement])
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=LINK), curve=CurveSettings(workers=(4,)))
    inputs = model_inputs(profile, request)
    net = MODEL.network(inputs, registry.params_for(MODEL, {"congestion_control": "cubic", "queue_s": 0.1}))  # type: ignore[attr-defined]
    result = simulate(prepare_profile(profile, request), net, SimulationSettings(workers=4, steps=60, warmup_steps=0))
    end = max(e[-1] for e in result.step_ends_s)
    done = sum(len(e) for e in result.step_ends_s)
    busiest = 0.0
    for bits in _link_bits(profile).values():
        assert done * bits <= net.bandwidth_bps * end * (1 + 1e-9)
        busiest = max(busiest, done * bits / end / net.bandwidth_bps)
    assert busiest > 0.6  # four workers keep the busiest link busy: the bound is not trivially met


@pytest.fixture(scope="module")
def measured_rows() -> list[bench.Row]:
    """Every recorded 2-PS point with both predictions, as the benchmark makes them (1000
    simulated steps a point: four curves, a few seconds)."""
    return [r for p in bench.TWO_PS for r in bench.predict(p, {}, steps=1000)]


def test_no_prediction_beats_w_times_one_worker(measured_rows: list[bench.Row]) -> None:
    # W workers cannot run faster than W lone workers: each step takes at least as long shared.
    # 2 %: the simulation's sampling noise.
    for placement in bench.TWO_PS:
        rows = {r.workers: r for r in measured_rows if r.placement == placement}
        for w, r in rows.items():
            assert r.own <= w * rows[1].own * 1.02
            assert r.what_if <= w * rows[1].what_if * 1.02


def test_the_recorded_two_ps_runs_are_predicted_within_the_measured_accuracy(measured_rows: list[bench.Row]) -> None:
    # The median is the project's 5 % aim (reached: 4.8 % own trace, 5.0 % what-if, over 34
    # points). The max is not the 15 % aim: at W = 3 the real workers spread their phases and
    # take turns on the busiest link, which the simulation does not reproduce, 12-23 % low
    # (docs/contention-model.md, section 7); 25 % bounds that known miss, and every other W stays
    # within the aim's 15 %.
    assert len(measured_rows) >= 34
    for kind in ("own_error", "what_if_error"):
        errors = [abs(getattr(r, kind)) for r in measured_rows]
        assert statistics.median(errors) <= 0.05, kind
        assert max(errors) <= 0.25, kind
        assert max(abs(getattr(r, kind)) for r in measured_rows if r.workers != 3) <= 0.15, kind


def test_the_one_ps_goodput_misses_the_two_ps_runs() -> None:
    # The reason for the own value: with the one-PS 0.85 the same runs come out a median 15 % low.
    rows = [r for p in bench.TWO_PS for r in bench.predict(p, {"multi_ps_flow_goodput": MULTI_FLOW_GOODPUT},
                                                             steps=1000, what_if=False)]
    errors = [r.own_error for r in rows if r.workers > 1]
    assert statistics.median(errors) < -0.08
