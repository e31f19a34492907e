"""A window per connection (``NetworkModel.window_gain``, simulator/reference.py): the water-filling
with caps, a two-worker timeline computed by hand in both engines, and where the models use it."""

from __future__ import annotations

import math

import pytest

from advisor.core.models.ps_des.contention import Contention
from advisor.core.models.ps_des.simulator.fast import simulate_fast
from advisor.core.models.ps_des.simulator.reference import simulate_reference
from advisor.core.models.ps_des.simulator.sharing import water_fill
from advisor.core.models.ps_des.sync import SYNC_WINDOW_GAIN, SyncContentionParams
from advisor.core.models.ps_des.model import ContentionParams
from advisor.core.sim_types import NetworkModel, SimulationSettingsError
from tests.factories import pull_push_pair_ends


def test_a_cap_is_a_constraint_of_its_own_flow_and_leaves_the_rest_to_the_others() -> None:
    # three flows on a 90 bit/s link: equal shares are 30 each; capping the first at 10 leaves
    # 80 to the other two (40 each); a cap above the share changes nothing
    flows = [(0, 0), (1, 0), (2, 0)]
    assert water_fill(flows, 90.0, 1e9) == [30.0, 30.0, 30.0]
    assert water_fill(flows, 90.0, 1e9, caps=[10.0, math.inf, math.inf]) == [10.0, 40.0, 40.0]
    assert water_fill(flows, 90.0, 1e9, caps=[50.0, math.inf, math.inf]) == [30.0, 30.0, 30.0]
    # weights 1, 2, 3 (15, 30, 45); the third capped at 15: the other two share 75 as 1:2
    assert water_fill(flows, 90.0, 1e9, [1.0, 2.0, 3.0], caps=[math.inf, math.inf, 15.0]) == [25.0, 50.0, 15.0]


# Two workers, one PS, a step of one pull and one push of 8e5 bits each on an 8 Mbit/s link (0.1 s
# alone), no compute; worker 1 starts 50 ms after worker 0. By hand, with equal shares:
# - step 0, both rules: w0 pulls alone to 0.05 (4e5 bits), then beside w1 at 4 Mbit/s: ends 0.15;
#   w1's pull ends at 0.2 (alone from 0.15); w0 pushes alone from 0.15 until w1's push joins at
#   0.2, ends 0.3 (at 4 Mbit/s: the rate its connection ends at); w1's push ends 0.35 (alone from 0.3).
# - step 1 without windows: w0's pull runs alone at 8 Mbit/s from 0.3 to 0.35, then shares: 0.45.
# - with window_gain 1: w0's pull connection ended at 4 Mbit/s, and w1's push is on the other
#   direction until 0.35: 2e5 bits by then, the other 6e5 shared at 4 Mbit/s: ends 0.5. w1's pull
#   (its connection ended at 8 Mbit/s) has 2e5 left at 0.5: 0.525. w0's push (ended at 4 Mbit/s)
#   is capped while w1 pulls: 1e5 bits by 0.525, the rest shared with w1's push, which started
#   at 0.525: 0.7; w1's push: 0.7125.
HAND = {0.0: {(0, 0, "pull"): 0.15, (1, 0, "pull"): 0.2, (0, 0, "push"): 0.3, (1, 0, "push"): 0.35,
              (0, 1, "pull"): 0.45, (1, 1, "pull"): 0.5, (0, 1, "push"): 0.6, (1, 1, "push"): 0.65},
        1.0: {(0, 0, "pull"): 0.15, (1, 0, "pull"): 0.2, (0, 0, "push"): 0.3, (1, 0, "push"): 0.35,
              (0, 1, "pull"): 0.5, (1, 1, "pull"): 0.525, (0, 1, "push"): 0.7, (1, 1, "push"): 0.7125}}


@pytest.mark.parametrize("gain", sorted(HAND))
@pytest.mark.parametrize("engine", [simulate_reference, simulate_fast])
def test_a_connection_keeps_its_window_while_the_other_direction_is_busy(engine, gain: float) -> None:  # type: ignore[no-untyped-def]
    ends = pull_push_pair_ends(engine, NetworkModel(bandwidth_bps=8e6, window_gain=gain))
    assert ends == pytest.approx(HAND[gain], abs=1e-8)


def test_the_window_gain_is_checked_and_only_the_synchronous_models_use_it_by_default() -> None:
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(SimulationSettingsError, match="window_gain"):
            NetworkModel(bandwidth_bps=1e8, window_gain=bad)
    assert ContentionParams().window_gain == 0.0  # the asynchronous rules' constants were fitted without it
    assert SyncContentionParams().window_gain == SYNC_WINDOW_GAIN > 0
    applied = SyncContentionParams().contention().apply(NetworkModel(bandwidth_bps=1e8))
    assert applied.window_gain == SYNC_WINDOW_GAIN
    assert Contention().apply(NetworkModel(bandwidth_bps=1e8)).window_gain == 0.0
