"""Curve, confidence intervals and adaptive stopping, with stand-in simulations of known output."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.core.curve import CurveSettings, predict_curve, throughput_interval
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings, SimulationSettingsError
from tests.factories import one_layer

NET = NetworkModel(bandwidth_bps=1e9)


def _periodic(period_s: float, batch: int = 4):  # type: ignore[no-untyped-def]
    """A stand-in simulation: every worker ends a step every ``period_s``, offset by worker."""
    calls: list[int] = []

    def simulate(profile, network, s: SimulationSettings) -> SimulationResult:  # type: ignore[no-untyped-def]
        calls.append(s.steps)
        ends = tuple(tuple(period_s * (k + 1) + w * period_s / s.workers for k in range(s.steps)) for w in range(s.workers))
        return SimulationResult(workers=s.workers, batch_size=batch, step_ends_s=ends, events=s.steps * s.workers)

    simulate.calls = calls  # type: ignore[attr-defined]
    return simulate


def test_a_regular_run_gets_a_narrow_interval_around_the_truth() -> None:
    # W workers each finishing 4 examples every 0.5 s: exactly W x 8 examples/s. Every worker
    # progresses at a constant rate, so every slice sees the same rate and the interval is ~0.
    sim = _periodic(0.5)
    points = predict_curve(one_layer(), NET, CurveSettings(workers=(1, 2, 4), steps=200, warmup_steps=10), sim)
    for p in points:
        assert p.low <= p.high and p.low == pytest.approx(p.workers * 8.0, rel=0.01)
        assert p.high == pytest.approx(p.workers * 8.0, rel=0.01)
        assert p.rel_halfwidth < 1e-6


def test_a_single_worker_whose_steps_vary_gets_a_real_interval() -> None:
    # One worker, steps alternating 1 s and 3 s: ends 1, 4, 5, 8, 9, 12. Window (4, 12] in four
    # 2 s slices. Whole steps ending in each slice: 1, 1, 1, 1 (a width of 0, which would be
    # wrong). Progress (steps done, linear within a step): 2, 3 1/3, 4, 5 1/3, 6 at the edges,
    # so 2/3, 1/3, 2/3, 1/3 steps/s; mean of whole steps 4 / 8 s = 0.5/s;
    # half-width = t(0.975, 3) * std([2/3, 1/3, 2/3, 1/3], ddof=1) / sqrt(4) = 3.1824 * 0.19245 / 2
    ends = (1.0, 4.0, 5.0, 8.0, 9.0, 12.0)
    r = SimulationResult(workers=1, batch_size=1, step_ends_s=(ends,), events=6)
    mean, low, high = throughput_interval(r, warmup_steps=2, batches=4, confidence=0.95)
    assert mean == pytest.approx(0.5)
    assert (high - mean, mean - low) == pytest.approx((0.30624, 0.30624), rel=1e-3)


def test_batch_means_interval_by_hand() -> None:
    # one worker; steps end at 1, 2, 3, 4 then 4.5, 5, ... : two batches over (1, 7]:
    ends = (1.0, 2.0, 3.0, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0)
    r = SimulationResult(workers=1, batch_size=1, step_ends_s=(ends,), events=10)
    mean, low, high = throughput_interval(r, warmup_steps=1, batches=2, confidence=0.95)
    # batch (1, 4]: 3 steps in 3 s = 1/s; batch (4, 7]: 6 steps in 3 s = 2/s; mean 1.5
    # half-width = t(0.975, 1) * std([1, 2], ddof=1) / sqrt(2) = 12.706 * 0.7071 / 1.4142 = 6.353
    assert mean == pytest.approx(1.5)
    assert high == pytest.approx(1.5 + 6.3531, rel=1e-3)
    assert low == 0.0  # clipped: throughput cannot be negative


def test_next_step_count_aims_at_the_target() -> None:
    from advisor.core.curve import next_step_count

    # 150 measured steps gave +-6 %; +-2 % needs 9x the measured steps: 50 + 150 x 9 x 1.2 = 1670
    assert next_step_count(200, 50, 0.06, 0.02, 4000) == 1670
    assert next_step_count(200, 50, 0.021, 0.02, 4000) == 400  # nearly there: still at least double
    assert next_step_count(200, 50, 0.5, 0.02, 4000) == 4000  # capped


def test_adaptive_stopping_grows_steps_until_narrow_enough() -> None:
    rng = np.random.default_rng(1)

    def noisy(profile, network, s: SimulationSettings) -> SimulationResult:  # type: ignore[no-untyped-def]
        noisy.calls.append(s.steps)  # type: ignore[attr-defined]
        t = np.cumsum(rng.exponential(1.0, size=s.steps))  # steps of random length: a wide interval
        return SimulationResult(workers=1, batch_size=1, step_ends_s=(tuple(t),), events=s.steps)

    noisy.calls = []  # type: ignore[attr-defined]
    cfg = CurveSettings(workers=(1,), warmup_steps=10, target_rel_halfwidth=0.05, min_steps=100, max_steps=6400)
    (point,) = predict_curve(one_layer(), NET, cfg, noisy)
    assert noisy.calls[0] == 100 and all(b >= 2 * a or b == 6400 for a, b in zip(noisy.calls, noisy.calls[1:]))  # type: ignore[attr-defined]
    assert point.rel_halfwidth <= 0.05 or point.steps == 6400
    assert point.steps == noisy.calls[-1]  # type: ignore[attr-defined]


def test_progress_is_reported_per_point() -> None:
    seen = []
    predict_curve(one_layer(), NET, CurveSettings(workers=(1, 3), steps=100, warmup_steps=5), _periodic(1.0),
                  progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]


@pytest.mark.parametrize(
    "kwargs",
    [dict(workers=()), dict(workers=(0, 1)), dict(workers=(2, 1)), dict(workers=(1,), confidence=1.0),
     dict(workers=(1,), target_rel_halfwidth=0.0), dict(workers=(1,), batches=1)],
)
def test_impossible_curve_settings(kwargs: dict) -> None:
    with pytest.raises(SimulationSettingsError):
        CurveSettings(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(warmup_steps=-1), "warm-up steps must be >= 0, got -1"),
        (dict(steps=0), "steps per worker must be >= 1, got 0"),
        (dict(steps=0, target_rel_halfwidth=0.02), "steps per worker must be >= 1, got 0"),
        (dict(seed=-1), "seed must be >= 0 (numpy seeds its random generators with integers >= 0), got -1"),
        (dict(steps=250, warmup_steps=250), "the warm-up (250 steps) must be shorter than the 250 steps simulated"),
        (dict(warmup_steps=200, target_rel_halfwidth=0.02),
         "an adaptive curve needs warm-up steps < min_steps <= max_steps, got 200 < 200 <= 4000"),
        (dict(min_steps=500, max_steps=400, target_rel_halfwidth=0.02), "got 50 < 500 <= 400"),
    ],
)
def test_impossible_curve_settings_say_which_and_why(kwargs: dict, message: str) -> None:
    with pytest.raises(SimulationSettingsError) as caught:
        CurveSettings(workers=(1,), **kwargs)
    assert message in str(caught.value)


def test_fixed_steps_need_only_exceed_the_warm_up() -> None:
    """min_steps and max_steps bound adaptive runs; a fixed run of 500 steps may warm up for 250."""
    assert CurveSettings(workers=(1,), steps=500, warmup_steps=250).steps == 500
    assert CurveSettings(workers=(1,), steps=60, warmup_steps=10, min_steps=500, max_steps=400).steps == 60
    assert CurveSettings(workers=(1,), seed=2**70).seed == 2**70  # numpy takes any integer >= 0


def test_next_step_count_grows_less_when_the_run_is_continued() -> None:
    from advisor.core.curve import next_step_count

    # nearly there: 50 + 150 x (0.021 / 0.02)^2 x 1.2 = 249 steps; a continued run need not double
    assert next_step_count(200, 50, 0.021, 0.02, 4000, min_growth=1.25) == 250
    assert next_step_count(200, 50, 0.03, 0.02, 4000, min_growth=1.25) == 455  # 50 + ceil(150 x 2.25 x 1.2)
    # far off (50 + 150 x 25 x 1.2 = 4550): a continued run grows at most max_growth per look
    assert next_step_count(200, 50, 0.1, 0.02, 4000, min_growth=1.25, max_growth=2.0) == 400
    assert next_step_count(200, 50, 0.1, 0.02, 4000, min_growth=1.25) == 4000


def test_the_project_engine_measures_a_point_as_a_plain_run_of_as_many_steps() -> None:
    # The curve continues one run per point (simulator.fast.FastRun); with fixed steps its
    # interval equals that of a plain simulation of the same steps and seed.
    from advisor.core.models.ps_des.simulator import simulate
    from benchmarks.synthetic import tiny_mlp

    profile, net = tiny_mlp(), NetworkModel(bandwidth_bps=1e8)
    points = predict_curve(profile, net, CurveSettings(workers=(1, 3), steps=120, warmup_steps=20, seed=2), simulate)
    for p in points:
        plain = simulate(profile, net, SimulationSettings(workers=p.workers, steps=120, warmup_steps=20, seed=2))
        assert (p.throughput, p.low, p.high) == pytest.approx(throughput_interval(plain, 20), rel=1e-12)


def test_an_adaptive_point_of_the_project_engine_is_its_run_continued() -> None:
    # A point that needed more steps than min_steps is exactly the fixed-step point of its final
    # count: the same run, extended rather than restarted (events count the run once).
    from advisor.core.models.ps_des.simulator import simulate
    from benchmarks.synthetic import tiny_mlp

    profile, net = tiny_mlp(), NetworkModel(bandwidth_bps=1e8)
    cfg = CurveSettings(workers=(2,), warmup_steps=20, target_rel_halfwidth=0.002, min_steps=60, max_steps=900)
    (adaptive,) = predict_curve(profile, net, cfg, simulate)
    assert adaptive.steps > 60
    fixed = CurveSettings(workers=(2,), steps=adaptive.steps, warmup_steps=20)
    assert predict_curve(profile, net, fixed, simulate) == (adaptive,)


def test_importing_predict_does_not_load_the_engine() -> None:
    # The controller imports CurveSettings in its parent process and the engine (numba) only in
    # the worker processes; predict recognises the engine without importing it.
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, advisor.core.curve; print('numba' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
