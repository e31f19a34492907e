"""Inspection figures on hand-made profiles."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.core.profile import build_profile
from advisor.core.summary import critical_path, summarize
from advisor.core.units import UnitError, format_bandwidth, parse_bandwidth
from tests.factories import one_layer


def test_one_layer_summary() -> None:
    s = summarize(one_layer(pull_bytes=1000, push_bytes=3000, steps=2))
    assert s.bytes_per_step == {"downlink ps0": 1000, "uplink ps0": 3000}
    assert s.ops_by_resource == {"downlink": 1, "worker": 1, "uplink": 1, "ps": 2}
    # worker compute is 50 and 51 us in the two steps; ps is 10 + 20 = 30 us in both
    assert s.compute_us["worker"].mean == pytest.approx(50.5)
    assert s.compute_us["ps"].median == pytest.approx(30.0)
    # a chain's critical path is all of it: 10 + 100 + 50.5 + 100 + 20 = 280.5 us (mean durations)
    assert s.critical_path.length_us == pytest.approx(280.5)
    assert s.critical_path.ops == ("ps0:read", "pull", "worker:compute", "push", "ps0:update")


def test_critical_path_takes_the_longer_branch_of_a_diamond() -> None:
    # a -> {b (5), c (7)} -> d: the path is a, c, d with length 1 + 7 + 2 = 10
    ops = [
        {"name": "a", "resource": "ps", "ps": 0},
        {"name": "b", "resource": "downlink", "ps": 0, "bytes": 1, "deps": ["a"]},
        {"name": "c", "resource": "worker", "deps": ["a"]},
        {"name": "d", "resource": "worker", "deps": ["b", "c"]},
    ]
    p = build_profile(job={"batch_size": 1}, ops=ops, steps=[{"index": 0, "start_us": [0] * 4, "duration_us": [1, 5, 7, 2]}])
    cp = critical_path(p, np.array([1.0, 5.0, 7.0, 2.0]))
    assert (cp.length_us, cp.ops) == (10.0, ("a", "c", "d"))
    assert cp.by_resource_us == {"ps": 1.0, "worker": 9.0}


@pytest.mark.parametrize(
    ("text", "bps"),
    [("10Gbit/s", 10e9), ("100Mbps", 100e6), ("100 Mbit/s", 100e6), ("12.5MB/s", 100e6), ("1e9", 1e9), ("50M", 50e6)],
)
def test_bandwidth_units(text: str, bps: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(bps)


@pytest.mark.parametrize(("text", "message"), [("0", "bandwidth must be > 0, got '0'"),
                                             ("-5Mbit/s", "bandwidth must be > 0, got '-5Mbit/s'"),
                                             ("fast", "cannot read bandwidth 'fast'"),
                                             ("10 parsecs", "cannot read bandwidth '10 parsecs'")])
def test_bad_bandwidth(text: str, message: str) -> None:
    """A negative rate is refused as negative, not as unreadable."""
    with pytest.raises(UnitError) as caught:
        parse_bandwidth(text)
    assert message in str(caught.value)


def test_format_bandwidth() -> None:
    assert format_bandwidth(100e6) == "100 Mbit/s" and format_bandwidth(2.5e9) == "2.5 Gbit/s"
