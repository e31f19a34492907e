"""Measuring the PS link rate from a 1-worker profile: hand cases, the refusal, and real traces.

The real traces were recorded with the link shaped to 100 and 50 Mbit/s (tests/data/ps-async/README.md):
that shaping is the independent truth the estimates are held to. The estimate is the payload
rate one flow got, divided by the goodput the predictor assumes (0.95) to give a capacity.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls

from advisor.core.bandwidth import (
    BandwidthNotMeasurable, LinkRateMissing, estimate_bandwidth, nonnegative_line, resolve_bandwidth,
)
from advisor.core.profile import build_profile
from advisor.importers.loader import load_profile
from tests.conftest import ps_async_data
from tests.factories import one_layer


def queued_pulls(steps: int = 3):
    """Two pulls requested together at t = 10 us on one link of 80 Mbit/s (10 bytes/us), FIFO:
    1,000 B ends at 10 + 100 = 110 us, 3,000 B queues behind it and ends at 110 + 300 = 410 us;
    one push of 1,000 B alone: 100 us. No overhead."""
    ops = [
        {"name": "ps0:read", "resource": "ps", "ps": 0},
        {"name": "pull_a", "resource": "downlink", "ps": 0, "bytes": 1000, "deps": ["ps0:read"]},
        {"name": "pull_b", "resource": "downlink", "ps": 0, "bytes": 3000, "deps": ["ps0:read"]},
        {"name": "worker:compute", "resource": "worker", "deps": ["pull_a", "pull_b"]},
        {"name": "push", "resource": "uplink", "ps": 0, "bytes": 1000, "deps": ["worker:compute"]},
        {"name": "ps0:update", "resource": "ps", "ps": 0, "deps": ["push"]},
    ]
    timing = {"start_us": [0.0, 10.0, 10.0, 410.0, 460.0, 560.0],
              "duration_us": [10.0, 100.0, 400.0, 50.0, 100.0, 20.0]}
    return build_profile(job={"model": "queued", "batch_size": 1}, ops=ops,
                         steps=[{"index": k, **timing} for k in range(steps)])


def test_the_hand_computed_queue_gives_its_rate() -> None:
    estimate = estimate_bandwidth(queued_pulls(), goodput=0.8)
    assert estimate.flow_bps == pytest.approx(80e6, rel=0.01)
    assert estimate.bps == pytest.approx(100e6, rel=0.01)  # 80 Mbit/s of payload is 80 % of 100
    assert estimate.mean_abs_error_us < 1.0 and estimate.transfers == 9
    assert estimate.contrast > 2  # at 40 or 160 Mbit/s no alpha, beta >= 0 explains the queue


def test_a_lone_stream_per_link_does_not_pin_the_rate() -> None:
    """One stream per link: any faster rate plus a constant overhead fits as well."""
    with pytest.raises(BandwidthNotMeasurable, match="give the bandwidth"):
        estimate_bandwidth(one_layer(steps=3))


@pytest.mark.parametrize("seed", range(20))
def test_the_two_variable_nnls_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1e6, 30)
    y = rng.normal(rng.normal(0, 1e-4) * x + rng.normal(0, 50), 20)
    a, b = nonnegative_line(x, y)
    (sa, sb), _ = nnls(np.column_stack([x, np.ones_like(x)]), y)
    ours = ((y - a * x - b) ** 2).sum()
    theirs = ((y - sa * x - sb) ** 2).sum()
    assert a >= 0 and b >= 0 and ours == pytest.approx(theirs, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("run", "shaped"), [("mlp_bw100", 100e6), ("mlp_bw50", 50e6),
                                             ("cnn_bw100", 100e6), ("cnn_bw50", 50e6)])
def test_real_traces_give_the_shaped_rate(run: str, shaped: float) -> None:
    estimate = estimate_bandwidth(load_profile([ps_async_data("tf-native", run)]))
    assert 0.9 * shaped <= estimate.bps <= 1.1 * shaped  # measured here: 101, 51, 109, 55 Mbit/s
    assert estimate.contrast > 2


def test_half_the_shaping_measures_half_the_rate() -> None:
    for model in ("mlp", "cnn"):
        fast, slow = (estimate_bandwidth(load_profile([ps_async_data("tf-native", f"{model}_bw{bw}")])).bps
                      for bw in (100, 50))
        assert slow / fast == pytest.approx(0.5, rel=0.06)


def _ddp_profile(**job: object):
    """A one-worker DDP profile (as the bundle importer builds it): two gradients that take no
    time, since one worker reduces with nobody."""
    ops = [{"name": "forward", "resource": "worker"},
           {"name": "gradient/a", "resource": "uplink", "ps": 0, "bytes": 4_000_000, "deps": ["forward"]},
           {"name": "gradient/b", "resource": "uplink", "ps": 0, "bytes": 1_000, "deps": ["forward"]},
           {"name": "optimizer", "resource": "worker", "deps": ["gradient/a", "gradient/b"]}]
    steps = [{"index": k, "start_us": [0.0, 9.0, 9.0, 9.0], "duration_us": [9.0, 0.0, 0.0, 1.0]} for k in range(3)]
    return build_profile(job={"batch_size": 8, "kind": "pytorch-ddp", **job}, ops=ops, steps=steps)


def test_an_allreduce_profile_without_a_rate_says_what_is_missing_and_what_gives_it() -> None:
    with pytest.raises(LinkRateMissing) as info:
        estimate_bandwidth(_ddp_profile())
    text = str(info.value)
    assert text.startswith("the profile records no link rate, and a pytorch-ddp (all-reduce) profile has no "
                           "transfers to measure the link rate from")
    assert "--bandwidth RATE" in text and "'bandwidth' setting" in text
    assert "contrast" not in text and "flow rate" not in text  # not the PS trace's measurement words
    assert isinstance(info.value, BandwidthNotMeasurable)  # callers that catch the PS refusal catch this too


def test_an_allreduce_profile_gives_its_recorded_rate_and_measure_is_refused() -> None:
    recorded = _ddp_profile(recorded_bandwidth_bps=1e9, recorded_bandwidth_source="interface-speed")
    assert resolve_bandwidth(recorded, None) == (1e9, "recorded", None)
    assert resolve_bandwidth(recorded, 2e9) == (2e9, "given", None)
    with pytest.raises(LinkRateMissing, match="^a pytorch-ddp .all-reduce. profile has no transfers to measure"):
        resolve_bandwidth(recorded, None, measure=True)
