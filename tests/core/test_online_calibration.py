"""The closed loop's update (core/online_calibration.py) on models fast enough to check it exactly.

``phase-mva`` is a closed form whose only calibration parameter is the link's goodput, so the
"truth" can be the same model at another goodput: a bandwidth stated 2x too high is a goodput
of 0.95 where the links deliver 0.475 of the stated rate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.curve import CurveSettings
from advisor.core.models.ps_des.sync import with_barrier
from advisor.core.online_calibration import (
    MAX_GRID, MISSTATED, CalibrationError, Grid, Observation, Rule, axes, calibratable, calibrate,
    two_hypothesis_log_prior, with_values,
)
from advisor.core.models import registry
from advisor.core.models.protocol import CalibrationParam
from advisor.core.sim_types import NetworkModel
from benchmarks.synthetic import tiny_mlp

WORKERS = tuple(range(1, 7))


def request(goodput: float = 0.95, bandwidth: float = 1e8, model: str = "phase-mva") -> AdviceRequest:
    return AdviceRequest(network=NetworkModel(bandwidth_bps=bandwidth),
                         curve=CurveSettings(workers=WORKERS, steps=200, warmup_steps=20), goodput=goodput,
                         model=ModelChoice(model))


def truth_at(workers: int, goodput: float = 0.475) -> float:
    return advise(tiny_mlp(), request(goodput)).point(workers).throughput


def test_the_observed_point_narrows_to_its_noise_and_stays_where_the_curve_agreed() -> None:
    stated = advise(tiny_mlp(), request())
    at3 = stated.point(3).throughput
    result = calibrate(tiny_mlp(), request(), [Observation(3, at3, 0.03)])
    point, low, high = result.request.posterior.table[3]
    assert point == pytest.approx(at3, rel=0.01)
    # log-scale half-width ~ 1.96 x 0.03 (the observation's noise; the assumed model error, 10 % at
    # 95 %, is the larger, so the noise sets it): about +-6 %
    assert math.log(high / low) / 2 == pytest.approx(1.96 * 0.03, rel=0.15)
    assert result.values["goodput"] == pytest.approx(0.95)


def test_a_bandwidth_stated_twice_too_high_is_taken_by_the_goodput_and_corrects_other_workers() -> None:
    observed = [Observation(4, truth_at(4), 0.03)]
    result = calibrate(tiny_mlp(), request(), observed)
    assert 0.4 <= result.values["goodput"] <= 0.55 and result.stated["goodput"] == 0.95
    assert result.error_before > 0.3 and result.error_after < 0.05  # 99 % off before, a few after
    table = result.request.posterior.table
    for w in (2, 6):  # not observed: corrected by the goodput, within a few percent of the truth
        assert table[w][0] == pytest.approx(truth_at(w), rel=0.06)
        assert table[w][1] <= truth_at(w) <= table[w][2]
    assert result.changed and "goodput" in result.report()["parameters"]


def test_an_observation_the_models_error_explains_stays_a_discrepancy_and_keeps_the_values() -> None:
    """8 % above the stated curve, where the model's assumed error is +-10 % at 95 %: the stated
    values keep most of the posterior, the curve moves as conditioning alone moves it (the
    discrepancy, correlated rho^|W - 3| with its neighbours), and the interval at a far W still
    holds the stated curve. Observed 99 % off (a bandwidth stated 2x too high), they lose it."""
    stated = advise(tiny_mlp(), request())
    near = calibrate(tiny_mlp(), request(), [Observation(3, stated.point(3).throughput * 1.08, 0.03)])
    assert near.values == near.stated and near.stated_probability is not None and near.stated_probability > 0.8
    assert near.report()["stated_values_probability"] == pytest.approx(near.stated_probability, abs=1e-4)
    conditioned = calibrate(tiny_mlp(), request(), [Observation(3, stated.point(3).throughput * 1.08, 0.03)],
                            rule=Rule.CONDITION)
    for w in WORKERS:  # the mixture is nearly all the stated row: the condition rule's point
        assert near.request.posterior.table[w][0] == pytest.approx(conditioned.request.posterior.table[w][0], rel=0.02)
    low, high = near.request.posterior.table[6][1:]
    assert low <= stated.point(6).throughput <= high
    far = calibrate(tiny_mlp(), request(), [Observation(4, truth_at(4), 0.03)])
    assert far.stated_probability is not None and far.stated_probability < 1e-3


def test_the_two_hypotheses_put_one_minus_epsilon_on_the_stated_row_and_epsilon_spread_over_the_grid() -> None:
    values = np.array([[0.5], [0.8], [0.95], [1.0]])
    grid = Grid((CalibrationParam("goodput", (0.5, 0.8, 1.0), "g"),), (0.95,), values, (1,),
                np.ones((4, 1)), np.zeros((4, 1)))
    # wrong values: a normal around 0.95 half the range (0.5..1.0) wide, exp(-2 ((v - 0.95) / 0.5)^2)
    slab = np.exp(-2 * ((values[:, 0] - 0.95) / 0.5) ** 2)
    slab /= slab.sum()
    for eps in (MISSTATED, 0.3, 1.0):
        prior = np.exp(two_hypothesis_log_prior(grid, misstated=eps))
        assert grid.stated_row == 2
        assert prior == pytest.approx(eps * slab + (1 - eps) * np.array([0, 0, 1, 0]))
    with pytest.raises(CalibrationError, match="misstated values must be in"):
        calibrate(tiny_mlp(), request(), [Observation(3, 100.0, 0.03)], misstated=0.0)


def _product_grid(stated_b: float = 1.0) -> Grid:
    """a in {0, 1, 2} (stated 1) times b in {0, 1, 2, 3, 4} (stated ``stated_b``), every row a
    combination, as ``grid_for`` builds them."""
    a = CalibrationParam("a", (0.0, 1.0, 2.0), "a")
    b = CalibrationParam("b", (0.0, 1.0, 2.0, 3.0, 4.0), "b")
    values = np.array([[x, y] for x in a.grid for y in b.grid])
    return Grid((a, b), (1.0, stated_b), values, (1,), np.ones((len(values), 1)), np.zeros((len(values), 1)))


def test_each_stated_value_is_right_or_wrong_on_its_own() -> None:
    """By hand, two parameters and 0.3: each is wrong with e = 1 - 0.7^(1/2) = 0.16334, a wrong
    one spread as a normal half its range wide around it (exp(-2 d^2), d in ranges: a 0, 1, 2 ->
    0.6065, 1, 0.6065; b 0..4 around 1 -> 0.8825, 1, 0.8825, 0.6065, 0.3247), and a row's prior
    is the product of its two values'. All stated values right: 0.7 of the stated row's."""
    grid = _product_grid()
    e = 1 - math.sqrt(0.7)
    spread_a = np.exp(-2 * ((np.array([0.0, 1.0, 2.0]) - 1) / 2) ** 2)
    spread_b = np.exp(-2 * ((np.arange(5.0) - 1) / 4) ** 2)
    p_a = e * spread_a / spread_a.sum() + (1 - e) * np.array([0, 1, 0])
    p_b = e * spread_b / spread_b.sum() + (1 - e) * np.array([0, 1, 0, 0, 0])
    prior = np.exp(two_hypothesis_log_prior(grid, misstated=0.3))
    assert prior == pytest.approx(np.outer(p_a, p_b).ravel())
    assert prior.sum() == pytest.approx(1.0) and grid.stated_row == 6  # (a, b) = (1, 1)
    assert prior[grid.stated_row] >= 0.7 and (1 - e) ** 2 == pytest.approx(0.7)


def test_a_value_shown_wrong_leaves_the_others_on_theirs() -> None:
    """An observation only a = 2 explains (a likelihood that rules out every other a, whatever b):
    given it, b keeps its stated value with its own prior share, 1 - e plus e of its spread, at
    least 0.84; one prior over both at once had put b's stated value at its spread's 0.27."""
    grid = _product_grid()
    loglik = np.where(grid.values[:, 0] == 2.0, 0.0, -50.0)
    w = np.exp(loglik + two_hypothesis_log_prior(grid, misstated=0.3))
    w /= w.sum()
    b_stated = w[(grid.values[:, 0] == 2.0) & (grid.values[:, 1] == 1.0)].sum()
    assert b_stated >= math.sqrt(0.7) and b_stated == pytest.approx(
        math.sqrt(0.7) + (1 - math.sqrt(0.7)) * 1 / np.exp(-2 * ((np.arange(5.0) - 1) / 4) ** 2).sum())


def test_the_refit_rule_moves_the_values_and_keeps_the_models_own_interval() -> None:
    result = calibrate(tiny_mlp(), request(), [Observation(4, truth_at(4), 0.03)], rule=Rule.REFIT)
    assert result.request.posterior is None
    assert result.values["goodput"] == pytest.approx(0.5)  # the grid value nearest 0.475
    assert result.request.goodput == pytest.approx(0.5)


def test_the_refit_rule_keeps_the_stated_values_when_they_explain_the_observation() -> None:
    at4 = advise(tiny_mlp(), request()).point(4).throughput
    result = calibrate(tiny_mlp(), request(), [Observation(4, at4 * 1.01, 0.03)], rule=Rule.REFIT)
    assert result.values == result.stated and not result.changed


def test_the_condition_rule_keeps_the_values_and_moves_the_curve() -> None:
    result = calibrate(tiny_mlp(), request(), [Observation(4, truth_at(4), 0.03)], rule=Rule.CONDITION)
    assert result.values == result.stated
    # the assumed model error is +-10 % at 95 %: s = ln(1.1 / 0.9) / (2 x 1.959964) = 0.051192; the
    # median moves s^2 / (s^2 + 0.03^2) = 0.744365 of the way (in log) from the curve to the observation
    stated = advise(tiny_mlp(), request()).point(4).throughput
    moved = stated * math.exp(0.744365 * math.log(truth_at(4) / stated))
    assert result.request.posterior.table[4][0] == pytest.approx(moved, rel=0.01)


def test_the_grid_is_kept_for_the_next_observation() -> None:
    cache: dict = {}
    calibrate(tiny_mlp(), request(), [Observation(4, truth_at(4), 0.03)], cache=cache, cache_key="tiny")
    [(key, grid)] = cache.items()
    calibrate(tiny_mlp(), request(), [Observation(4, truth_at(4), 0.03), Observation(2, truth_at(2), 0.03)],
              cache=cache, cache_key="tiny")
    assert list(cache.items()) == [(key, grid)]  # the same grid object: not predicted again
    # the grid spans the goodput, so a request at another stated goodput uses it too
    calibrate(tiny_mlp(), request(goodput=0.8), [Observation(4, truth_at(4), 0.03)], cache=cache, cache_key="tiny")
    assert len(cache) == 1


def test_what_cannot_be_calibrated_says_why() -> None:
    with pytest.raises(CalibrationError, match="W=9 is outside the curve"):
        calibrate(tiny_mlp(), request(), [Observation(9, 100.0, 0.03)])
    dts = AdviceRequest(network=None, curve=CurveSettings(workers=(1, 2)), model=ModelChoice("dts"))
    with pytest.raises(CalibrationError, match="model 'dts' has no calibration parameters: its rates are"):
        calibrate(None, dts, [Observation(1, 100.0, 0.03)])
    assert calibratable("li2020-des+contention") and not calibratable("dts") and not calibratable("nonesuch")
    with pytest.raises(CalibrationError, match="relative noise must be in"):
        Observation(2, 100.0, 1.5)
    with pytest.raises(CalibrationError, match="must be finite and > 0"):
        Observation(2, -1.0, 0.03)


def test_axes_are_thinned_to_the_limit_and_keep_the_stated_value() -> None:
    a = CalibrationParam("a", tuple(float(x) for x in range(11)), "a")
    b = CalibrationParam("b", tuple(float(x) for x in range(9)), "b")
    c = CalibrationParam("c", (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7), "c")
    out = axes((a, b, c), (3.5, 4.0, 0.35))
    assert math.prod(len(x) for x in out) <= MAX_GRID
    assert 3.5 in out[0] and 4.0 in out[1] and 0.35 in out[2]
    assert all(x[0] == p.low and x[-1] == p.high for x, p in zip(out, (a, b, c)))  # the ends stay


def test_a_thinned_axis_keeps_the_values_farthest_from_those_kept() -> None:
    """By hand: 1..9 with 2 stated, thinned to four: the ends and 2, then the farthest from
    {1, 2, 9}, 5 or 6 (3 away from both sides; the lower on a tie)."""
    a = CalibrationParam("a", tuple(float(x) for x in range(1, 10)), "a")
    b = CalibrationParam("b", (1.0, 2.0), "b")
    assert axes((a, b), (2.0, 1.0), limit=8) == [[1.0, 2.0, 5.0, 9.0], [1.0, 2.0]]
    # on a log scale the middle of 1..100 is 10
    g = CalibrationParam("g", (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0), "g", log=True)
    assert axes((g,), (100.0,), limit=3) == [[1.0, 10.0, 100.0]]


def test_the_synchronous_models_grid_keeps_a_goodput_for_a_bandwidth_stated_twice_too_high() -> None:
    """Four calibration parameters: halving the longest axis again and again had left goodput
    [0.25, 0.9, 0.95, 1.0], so a bandwidth stated 2x too high (0.475) could not be corrected; and
    with these stated values it never ended (an axis of four whose halving kept all four)."""
    calibration = registry.get("li2020-des-sync+contention").calibration
    names = [p.name for p in calibration]
    for values in ({"barrier_s": 0.0, "share_sigma": 0.75, "multi_flow_goodput": 0.85, "goodput": 0.95},
                   {"barrier_s": 0.002, "share_sigma": 0.25, "multi_flow_goodput": 0.65, "goodput": 0.95}):
        stated = [values[n] for n in names]
        out = axes(calibration, stated)
        assert math.prod(len(x) for x in out) <= MAX_GRID
        goodput = out[names.index("goodput")]
        assert any(abs(math.log(v / 0.475)) < math.log(1.1) for v in goodput), goodput  # within 10 % of 2x
        for x, p, s in zip(out, calibration, stated):
            assert x[0] == p.low and x[-1] == p.high and s in x and len(x) >= 3


def test_a_barrier_cost_delays_every_update_and_the_work_after_it() -> None:
    # updates at 1, 2, 3 s, the window ending at 2.5 s; barrier 0.1 s from W = 2 on:
    # update j at t_j + (j + 1) 0.1 = 1.1, 2.2, 3.3; two updates were applied by 2.5 s: it ends 0.2 s later
    updates, until = with_barrier(np.array([1.0, 2.0, 3.0]), 2.5, workers=2, barrier_s=0.1)
    assert updates.tolist() == pytest.approx([1.1, 2.2, 3.3]) and until == pytest.approx(2.7)
    same, until1 = with_barrier(np.array([1.0, 2.0]), 2.5, workers=1, barrier_s=0.1)
    assert same.tolist() == [1.0, 2.0] and until1 == 2.5  # one worker: no barrier to wait at


def test_a_job_with_several_ps_calibrates_the_goodput_its_prediction_reads() -> None:
    """With 2 PS the contention rules read ``multi_ps_flow_goodput``, never ``multi_flow_goodput``
    (``Contention.flow_goodput``): the calibration moves the former, whether the trace has 2 PS or
    a 1-PS trace is asked ``--ps 2``, and the latter only for a 1-PS job. The truth is the same
    simulation with the 2-PS goodput at 0.6: a W = 4 observation of it moves the value down."""
    from advisor.core.advice import model_inputs
    from advisor.core.models import registry
    from advisor.importers.loader import load_profile
    from tests.conftest import REPO

    traces = REPO / "tests" / "data" / "ps-traces"
    two, one = load_profile(traces / "mlp_ps2_bw100.trace.json.gz"), load_profile(traces / "mlp_ps1_bw100.trace.json.gz")
    model = registry.get("li2020-des+contention")

    def req(**params: object) -> AdviceRequest:
        return AdviceRequest(network=NetworkModel(bandwidth_bps=1e8), goodput=0.95,
                             curve=CurveSettings(workers=(1, 2, 4), steps=200, warmup_steps=20, seed=1),
                             model=ModelChoice("li2020-des+contention", {"congestion_control": "cubic",
                                                                          "queue_s": 0.1, **params}))

    names = {name: [c.name for c in model.calibration_for(model_inputs(p, r))]
             for name, p, r in (("2 PS", two, req()), ("1 PS", one, req()),
                                ("--ps 2", one, replace(req(), parameter_servers=2)))}
    assert "multi_ps_flow_goodput" in names["2 PS"] and "multi_flow_goodput" not in names["2 PS"]
    assert names["--ps 2"] == names["2 PS"]
    assert "multi_flow_goodput" in names["1 PS"] and "multi_ps_flow_goodput" not in names["1 PS"]

    # each parameter the calibration moves acts on the 2-PS curve: its grid's ends give different W = 4
    inputs = model_inputs(two, req())
    params = model.resolved(inputs, registry.params_for(model, req().model.params))
    j = names["2 PS"].index("multi_ps_flow_goodput")
    ends = []
    for end in (0.6, 1.0):
        values = [0.95 if c.name == "goodput" else getattr(params, c.name) for c in model.calibration_for(inputs)]
        values[j] = end
        inp, par = with_values(model, inputs, params, values)
        ends.append(advise(two, replace(req(), model=ModelChoice(model.name, par.model_dump(mode="json")),
                                        goodput=inp.goodput)).point(4).throughput)
    assert ends[0] < 0.9 * ends[1]
    truth = advise(two, req(multi_ps_flow_goodput=0.6)).point(4).throughput
    result = calibrate(two, req(), [Observation(4, truth, 0.03)], rule=Rule.REFIT)
    assert set(result.values) == set(names["2 PS"])
    assert result.error_before > 0.3 and result.error_after < 0.05


def test_the_values_reported_follow_the_likelier_hypothesis_not_the_heaviest_row() -> None:
    """Five rows, the stated one (row 2) holding 0.35 of "the stated values are right" beside 0.05
    of the other hypothesis: it is the heaviest row (0.40), but that hypothesis has lost (0.35 <
    0.5), so the values are the likeliest row of the other, row 4 (0.25). At 0.6 the stated row."""
    from advisor.core.online_calibration import _likeliest_row

    grid = Grid((CalibrationParam("goodput", (0.5, 1.0), "g"),), (0.95,), np.array([[0.5], [0.6], [0.95], [0.7], [0.8]]),
                (1,), np.ones((5, 1)), np.zeros((5, 1)))
    assert grid.stated_row == 2
    w = np.array([0.1, 0.1, 0.4, 0.15, 0.25])
    assert int(np.argmax(w)) == 2 and _likeliest_row(grid, w, 0.35) == 4
    assert _likeliest_row(grid, np.array([0.05, 0.05, 0.65, 0.1, 0.15]), 0.6) == 2
    assert _likeliest_row(grid, w, None) == 2  # a rule without the two hypotheses: the heaviest row
