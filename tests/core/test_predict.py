"""Curve, confidence intervals and adaptive stopping, with stand-in simulations of known output."""

from __future__ import annotations

import numpy as np
import pytest

from collections.abc import Callable

from advisor.core.curve import CurveSettings, predict_curve, throughput_interval
from advisor.core.models.protocol import ModelBase, ModelInputs, ModelParams, Need, Samples
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings, SimulationSettingsError
from tests.factories import one_layer

NET = NetworkModel(bandwidth_bps=1e9)
INPUTS = ModelInputs(profile=one_layer(), network=NET)
Ends = Callable[[int, int], list[float]]  # (worker, workers) -> as many step ends as asked for, then more


class StandIn(ModelBase):
    """A stand-in model whose step ends are given: ``ends(w, workers)`` is an endless iterator of
    worker w's step end times; ``calls`` records each ``advance``."""

    name, description, needs, Params = "stand-in", "test", frozenset({Need.PROFILE}), ModelParams

    def __init__(self, ends, batch: int = 4) -> None:  # type: ignore[no-untyped-def]
        self.ends, self.batch, self.calls = ends, batch, []  # type: ignore[var-annotated]

    def check(self, inputs, params) -> None:  # type: ignore[no-untyped-def]
        pass

    def link_bound(self, inputs, params, workers) -> float:  # type: ignore[no-untyped-def]
        return float("inf")

    def start(self, inputs, params, workers, seed):  # type: ignore[no-untyped-def]
        model, streams, got = self, [self.ends(w, workers) for w in range(workers)], [[] for _ in range(workers)]

        class Run:
            def advance(self, steps: int) -> Samples:
                model.calls.append(steps)
                for it, seen in zip(streams, got):
                    while len(seen) < steps + 5:
                        seen.append(next(it))
                until = min(seen[steps - 1] for seen in got)
                ends = tuple(np.array([t for t in seen if t <= until]) for seen in got)
                return Samples(ends, until, steps, steps * workers, model.batch)

        return Run()


def _periodic(period_s: float, batch: int = 4) -> StandIn:
    """Every worker ends a step every ``period_s``, offset by worker."""
    def ends(w: int, workers: int):  # type: ignore[no-untyped-def]
        k = 0
        while True:
            k += 1
            yield period_s * k + w * period_s / workers
    return StandIn(ends, batch)


def _curve(model: StandIn, cfg: CurveSettings, **kw):  # type: ignore[no-untyped-def]
    return predict_curve(model, INPUTS, ModelParams(), cfg, **kw)


def test_a_regular_run_gets_a_narrow_interval_around_the_truth() -> None:
    # W workers each finishing 4 examples every 0.5 s: exactly W x 8 examples/s. Every worker
    # progresses at a constant rate, so every slice sees the same rate and the interval is ~0.
    sim = _periodic(0.5)
    points = _curve(sim, CurveSettings(workers=(1, 2, 4), steps=200, warmup_steps=10))
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

    def ends(w: int, workers: int):  # type: ignore[no-untyped-def]
        t = 0.0
        while True:  # steps of random length: a wide interval
            t += rng.exponential(1.0)
            yield t

    noisy = StandIn(ends, batch=1)
    cfg = CurveSettings(workers=(1,), warmup_steps=10, target_rel_halfwidth=0.05, min_steps=100, max_steps=6400)
    (point,) = _curve(noisy, cfg)
    calls = noisy.calls
    # a continued run grows by a quarter to double per look (curve.CONTINUED_GROWTH, CONTINUED_MAX_GROWTH)
    assert calls[0] == 100 and len(calls) > 1
    assert all(1.25 * a <= b <= 2 * a or b == 6400 for a, b in zip(calls, calls[1:]))
    assert point.rel_halfwidth <= 0.05 or point.steps == 6400
    assert point.steps == calls[-1]


def test_progress_is_reported_per_point() -> None:
    seen = []
    _curve(_periodic(1.0), CurveSettings(workers=(1, 3), steps=100, warmup_steps=5),
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
        (dict(warmup_steps=150, target_rel_halfwidth=0.02),
         "an adaptive curve needs warm-up steps < min_steps <= max_steps, got 150 < 150 <= 4000"),
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
    from advisor.core.models import registry
    from advisor.core.models.ps_des.simulator import simulate
    from benchmarks.synthetic import tiny_mlp

    profile, net = tiny_mlp(), NetworkModel(bandwidth_bps=1e8)
    model = registry.get("li2020-des")
    cfg = CurveSettings(workers=(1, 3), steps=120, warmup_steps=20, seed=2)
    points = predict_curve(model, ModelInputs(profile=profile, network=net), registry.params_for(model), cfg)
    for p in points:
        plain = simulate(profile, net, SimulationSettings(workers=p.workers, steps=120, warmup_steps=20, seed=2))
        assert (p.throughput, p.low, p.high) == pytest.approx(throughput_interval(plain, 20), rel=1e-12)


def test_an_adaptive_point_of_the_project_engine_is_its_run_continued() -> None:
    # A point that needed more steps than min_steps is exactly the fixed-step point of its final
    # count: the same run, extended rather than restarted (events count the run once).
    from advisor.core.models import registry
    from benchmarks.synthetic import tiny_mlp

    model = registry.get("li2020-des")
    inputs, params = ModelInputs(profile=tiny_mlp(), network=NetworkModel(bandwidth_bps=1e8)), registry.params_for(model)
    cfg = CurveSettings(workers=(2,), warmup_steps=20, target_rel_halfwidth=0.002, min_steps=60, max_steps=900)
    (adaptive,) = predict_curve(model, inputs, params, cfg)
    assert adaptive.steps > 60
    fixed = CurveSettings(workers=(2,), steps=adaptive.steps, warmup_steps=20)
    assert predict_curve(model, inputs, params, fixed) == (adaptive,)


def test_the_reference_engine_gives_the_compiled_engines_curve() -> None:
    # engine=reference restarts a plain run of the reference engine for each look; it must
    # measure what the compiled engine's continued run measures (tests/core/test_simulator_equivalence.py
    # shows the two engines agree run by run).
    from advisor.core.models import registry
    from benchmarks.synthetic import tiny_mlp

    model = registry.get("li2020-des")
    inputs = ModelInputs(profile=tiny_mlp(), network=NetworkModel(bandwidth_bps=1e8))
    cfg = CurveSettings(workers=(1, 3), steps=80, warmup_steps=10, seed=4)
    fast = predict_curve(model, inputs, registry.params_for(model), cfg)
    slow = predict_curve(model, inputs, registry.params_for(model, {"engine": "reference"}), cfg)
    for a, b in zip(fast, slow):
        assert (a.throughput, a.low, a.high) == pytest.approx((b.throughput, b.low, b.high), rel=1e-9)


def test_importing_the_curve_and_the_registry_does_not_load_the_engine() -> None:
    # The controller imports CurveSettings and lists models in its parent process and runs the
    # engine (numba) only in the worker processes.
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, advisor.core.curve, advisor.core.advice; from advisor.core.models import registry; "
            "registry.all_models(); print('numba' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
