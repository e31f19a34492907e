"""The recorded stream order against the step it replays (docs/accuracy.md, one worker).

Independent truth: the traced steps' own rate, batch / mean client wall time, which the
profiled run itself achieved. One worker has no contention, so a replay in the order each
traced step ran reproduces that rate; the release order (``fifo``), the same layer-by-layer
order in every step, lets the CNN's forward pass overlap pulls that really arrived after it
needed them and is several per cent faster than the steps it replays.
"""

from __future__ import annotations

import pytest

from advisor.core.profile_check import traced_rate
from advisor.core.sim_types import StreamOrder
from advisor.importers.loader import load_profile
from benchmarks.stream_order import Trace, one_worker
from tests.conftest import ps_async_data


@pytest.mark.parametrize("cc", ["cubic", "bbr"])
def test_the_recorded_order_replays_the_cnn_at_its_own_rate(cc: str) -> None:
    path = ps_async_data("condensed", cc, "cnn_bw100.json.gz")
    profile = load_profile(path)
    own = traced_rate(profile)
    assert own is not None
    trace = Trace(f"async {cc}/cnn", path, 100e6, measured=own)
    recorded = one_worker(trace, profile, StreamOrder.RECORDED, steps=200)
    fifo = one_worker(trace, profile, StreamOrder.FIFO, steps=200)
    assert recorded == pytest.approx(own, rel=0.02)  # measured: within 0.6 %
    assert fifo > 1.05 * own  # measured: 7-10 % above
