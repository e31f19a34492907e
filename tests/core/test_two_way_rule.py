"""The two-way loss as a simulation rule (``NetworkModel.two_way_efficiency``, an experimental
setting no model uses by default): the link capacity it gives, a two-worker timeline computed by
hand in both engines, and how a model switches it on."""

from __future__ import annotations

import math

import pytest

from advisor.core.models.ps_des.contention import CongestionControl
from advisor.core.models.ps_des.model import ContentionParams, PsDes
from advisor.core.models.ps_des.simulator.fast import simulate_fast
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from advisor.core.models.ps_des.simulator.sharing import link_capacity, water_fill
from advisor.core.models.ps_des.two_way import PROBED
from advisor.core.models.protocol import ModelInputs
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from tests.factories import pull_push_pair_ends


def test_a_direction_loses_only_while_the_other_direction_carries_data() -> None:
    # without the rule: eta once two flows share the direction; with it: e while PS 0's other
    # direction is busy, the whole link otherwise, however many flows
    assert link_capacity(100.0, 1, 0.85, None, 0) == 100.0
    assert link_capacity(100.0, 3, 0.85, None, 0) == pytest.approx(85.0)
    assert link_capacity(100.0, 3, 0.85, (0.8, {1}), 0) == 100.0  # PS 1's other direction is busy, not PS 0's
    assert link_capacity(100.0, 1, 0.85, (0.8, {0}), 0) == pytest.approx(80.0)
    # two flows on PS 0 while its other direction is busy: 80 shared equally
    assert water_fill([(0, 0), (1, 0)], 100.0, 1e9, multi_flow_goodput=0.85, two_way=(0.8, {0})) == \
        pytest.approx([40.0, 40.0])


# Two workers, one PS, a step of one pull and one push of 8e5 bits each on an 8 Mbit/s link (0.1 s
# alone), no compute; worker 1 starts 50 ms after worker 0; two-way efficiency 0.5 (4 Mbit/s a
# direction while the other carries data). By hand, equal shares:
# - w0 pulls alone to 0.05 (4e5 bits), then beside w1's pull, 4 Mbit/s each (the uplink is idle:
#   the whole link): w0's pull ends 0.15;
# - w0 pushes from 0.15: both directions busy, 4 Mbit/s each way: w1's pull (4e5 left) ends 0.25,
#   w0's push has 4e5 left; w1 pushes from 0.25 beside it (downlink idle: 8 shared, 4 each): w0's
#   push ends 0.35 and w1's has 4e5 left;
# - the same pattern again half a step later: w0's pull (from 0.35, beside w1's push at 4) has 4e5
#   left at 0.45 when w1's push ends; beside w1's pull at 4: 0.55; w1's pull (4e5 left, beside w0's
#   push at 4): 0.65; w0's push (4e5 left, beside w1's push, downlink idle): 0.75; w1's push alone
#   for its last 4e5: 0.8.
# Without the rule (and eta 1) the same start gives 0.15, 0.2, 0.3, 0.35, ... (test_window_caps.py).
HAND = {(0, 0, "pull"): 0.15, (1, 0, "pull"): 0.25, (0, 0, "push"): 0.35, (1, 0, "push"): 0.45,
        (0, 1, "pull"): 0.55, (1, 1, "pull"): 0.65, (0, 1, "push"): 0.75, (1, 1, "push"): 0.8}


@pytest.mark.parametrize("engine", [simulate_reference, simulate_fast])
def test_two_workers_by_hand(engine) -> None:  # type: ignore[no-untyped-def]
    network = NetworkModel(bandwidth_bps=8e6, multi_flow_goodput=0.5, two_way_efficiency=0.5)  # eta unused
    assert pull_push_pair_ends(engine, network) == pytest.approx(HAND, abs=1e-8)


def test_the_setting_is_checked_and_off_unless_asked_for() -> None:
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(SimulationSettingsError, match="two_way_efficiency"):
            NetworkModel(bandwidth_bps=1e8, two_way_efficiency=bad)
    model = PsDes(contention=True)
    inputs = ModelInputs(network=NetworkModel(bandwidth_bps=1e8))
    assert model.network(inputs, ContentionParams()).two_way_efficiency == 0.0
    bbr = ContentionParams(congestion_control=CongestionControl.BBR, two_way_loss=True)
    assert model.network(inputs, bbr).two_way_efficiency == pytest.approx(PROBED["bbr"].efficiency)
