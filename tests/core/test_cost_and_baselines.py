"""Saturation, cost-optimal W and the coarse baselines, on curves worked out by hand."""

from __future__ import annotations

import pytest

from advisor.core.models.cynthia import cynthia_throughput as cynthia
from advisor.core.phases import Phases, phases
from advisor.core.phases import mva_throughput as phase_queueing
from advisor.core.cost import Constraints, CostError, Prices, cost_optimal, cost_per_example, saturation_point
from advisor.core.sim_types import SimulationSettingsError
from tests.factories import one_layer

W = [1, 2, 3, 4, 5]
T = [100.0, 190.0, 250.0, 260.0, 262.0]  # gains per added worker: 90, 60, 10, 2
PRICES = Prices(worker_per_hour=3.0, ps_per_hour=1.0)


def test_cost_per_example() -> None:
    # (1 x 3 + 1 x 1) per hour at 100 examples/s: 4 / (3600 x 100)
    assert cost_per_example(PRICES, 1, 1, 100.0) == pytest.approx(4 / 360000)


def test_saturation_is_where_a_worker_adds_under_5_percent() -> None:
    # 5 % of T(1) = 5 examples/s; the first gain below it is 4 -> 5 (2/s): saturation at W = 4
    assert saturation_point(W, T) == 4
    # with a 15 % threshold (15/s) the first small gain is 3 -> 4 (10/s): W = 3
    assert saturation_point(W, T, threshold=0.15) == 3
    # gaps count per added worker: 2 -> 4 adds 70 in 2 workers = 35/worker, 4 -> 8 adds 2 in 4
    assert saturation_point([1, 2, 4, 8], [100, 190, 260, 262]) == 4


def test_cost_optimal_minimises_cost_per_example() -> None:
    # cost per example is proportional to (3W + 1) / T: 0.0400, 0.0368, 0.0400, 0.0500, 0.0611
    assert cost_optimal(W, T, PRICES).workers == 2


def test_deadline_forces_more_workers() -> None:
    # 1.8e6 examples in 2 hours needs 250 examples/s: only W >= 3 qualify, of which 3 is cheapest
    c = cost_optimal(W, T, PRICES, constraints=Constraints(examples=1.8e6, deadline_hours=2.0))
    assert (c.workers, c.hours) == (3, pytest.approx(2.0))


def test_budget_and_max_workers() -> None:
    # 1.8e6 examples at W = 2 cost 1.8e6 x 7 / (3600 x 190) = 18.42; a budget of 18 rules out all W
    with pytest.raises(CostError, match="no worker count"):
        cost_optimal(W, T, PRICES, constraints=Constraints(examples=1.8e6, budget=18.0))
    assert cost_optimal(W, T, PRICES, constraints=Constraints(max_workers=1)).workers == 1


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        # 1.8e6 examples in 1 h needs 500 examples/s; W = 5 gives 262: 1.8e6 / 262 / 3600 = 1.91 h
        (Constraints(examples=1.8e6, deadline_hours=1.0),
         "no worker count in 1..5 meets the deadline of 1 h for 1,800,000 examples: "
         "the fastest, W = 5 at 262.0 examples/s, takes 1.91 h"),
        (Constraints(examples=1.8e9, deadline_hours=1.0), "takes 1,908 h"),
        # the cheapest run is W = 2 at 18.42 (test_budget_and_max_workers)
        (Constraints(examples=1.8e6, budget=18.0),
         "no worker count in 1..5 meets the budget of 18 for 1,800,000 examples: the cheapest, W = 2, costs 18.42"),
        # with at most 3 workers the fastest is W = 3: 1.8e6 / 250 / 3600 = 2 h
        (Constraints(max_workers=3, examples=1.8e6, deadline_hours=1.5),
         "the fastest with at most 3 worker(s), W = 3 at 250.0 examples/s, takes 2 h"),
        # 2 h needs W >= 3 (W = 3 costs 1.8e6 x 10 / (3600 x 250) = 20); 19.9 affords W <= 2 (W = 2: 2.63 h)
        (Constraints(examples=1.8e6, deadline_hours=2.0, budget=19.9),
         "no worker count in 1..5 meets both the deadline of 2 h and the budget of 19.9 for 1,800,000 examples: "
         "the cheapest within the deadline, W = 3, costs 20.00; the fastest within the budget, W = 2, takes 2.63 h"),
    ],
)
def test_unmet_constraints_say_which_and_the_best_possible(constraints: Constraints, message: str) -> None:
    with pytest.raises(CostError) as caught:
        cost_optimal(W, T, PRICES, constraints=constraints)
    assert message in str(caught.value) and "Constraints(" not in str(caught.value)


def test_a_worker_limit_below_the_curve_says_where_the_curve_starts() -> None:
    with pytest.raises(CostError, match=r"no worker count in 4\.\.5 is within the limit of 2 worker\(s\): "
                                        r"the curve starts at W = 4"):
        cost_optimal([4, 5], [260.0, 262.0], PRICES, constraints=Constraints(max_workers=2))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Prices(worker_per_hour=-1.0),
        lambda: Prices(worker_per_hour=0.0, ps_per_hour=0.0),
        lambda: Constraints(deadline_hours=1.0),
        lambda: Constraints(max_workers=0),
        lambda: saturation_point([2, 1], [1.0, 2.0]),
    ],
)
def test_impossible_settings(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CostError):
        make()


SIMPLE = Phases(downlink_s=1.0, compute_s=2.0, uplink_s=1.0, update_s=0.0, batch_size=10)


def test_cynthia_by_hand() -> None:
    # T_C = 1, T_P = 2, U_1 = 1 / (2 + 2) = 0.25
    assert cynthia(SIMPLE, 1) == pytest.approx(10 / (2 * 1 + 2))  # W U_1 = 0.25 -> max(1, .) = 1
    assert cynthia(SIMPLE, 8) == pytest.approx(80 / (2 * 2 + 2))  # W U_1 = 2


def test_phase_queueing_by_hand() -> None:
    # W = 1: nothing queues, one cycle is 1 + 2 + 1 + 0 = 4 s: 10 / 4 examples/s
    assert phase_queueing(SIMPLE, 1) == pytest.approx(2.5)
    # W = 2, MVA: Q(1) = 0.25 at each link; R = 1.25 + 1.25; X = 2 / (2.5 + 2) steps/s
    assert phase_queueing(SIMPLE, 2) == pytest.approx(10 * 2 / 4.5)


@pytest.mark.parametrize("w", [1, 2, 3, 5, 8, 16, 64])
def test_phase_queueing_respects_the_bottleneck_and_linear_bounds(w: int) -> None:
    x = phase_queueing(SIMPLE, w)
    assert x <= w * phase_queueing(SIMPLE, 1) + 1e-9
    assert x <= SIMPLE.batch_size / 1.0 + 1e-9  # a link busy 1 s per step: at most 1 step/s
    assert x >= phase_queueing(SIMPLE, max(1, w - 1)) - 1e-9  # more workers never hurt in MVA


def test_phases_of_a_profile() -> None:
    # one_layer: 1000 B each way; at 8 Mbit/s each is 1 ms; compute 50/51 us, PS 10 + 20 us
    p = phases(one_layer(), 8e6)
    assert (p.downlink_s, p.uplink_s) == (pytest.approx(1e-3), pytest.approx(1e-3))
    assert p.compute_s == pytest.approx(50.5e-6) and p.update_s == pytest.approx(30e-6)
    with pytest.raises(SimulationSettingsError):
        phases(one_layer(), 0.0)
