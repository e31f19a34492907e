"""The worker's own link as a multi-PS trace shows it (core/models/ps_des/worker_link.py).

Hand-made two-PS steps with known bytes and spans; the expected rates and step times are
worked out beside each case. The cause this guards: a trace whose worker pulled from two PS at
once, each at its PS link's full rate, was simulated behind a worker link as fast as one PS
link, so the two pulls shared it and the W = 1 step came out slower than the trace's own.
"""

from __future__ import annotations

import pytest

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.ps_des.worker_link import (
    WIDER_THAN_ONE_LINK, traced_worker_rate_bps, with_traced_worker_link, worker_link_note,
)
from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel

MB = 1_000_000
LINK = 100e6


def two_pulls(second_starts_us: float, n_ps: int = 2, recorded: float | None = LINK) -> Profile:
    """Two 1 MB pulls (from PS 0 and PS ``n_ps - 1``), each recorded over 80 ms (1 MB at
    100 Mbit/s), the second starting at ``second_starts_us``; then 20 ms of compute."""
    ops = [
        dict(name="pull_a", resource="downlink", ps=0, bytes=MB),
        dict(name="pull_b", resource="downlink", ps=n_ps - 1, bytes=MB),
        dict(name="compute", resource="worker", deps=["pull_a", "pull_b"]),
    ]
    end = max(80_000.0, second_starts_us + 80_000.0)
    steps = [dict(index=k, start_us=(0.0, second_starts_us, end), duration_us=(80_000.0, 80_000.0, 20_000.0))
             for k in range(3)]
    job = dict(batch_size=10, parameter_servers=n_ps, recorded_bandwidth_bps=recorded)
    return build_profile(job=job, ops=ops, steps=steps)


def test_concurrent_pulls_from_two_ps_show_twice_one_link() -> None:
    # 2 x 8e6 bits over the union of [0, 80] ms and [0, 80] ms = 80 ms: 2e8 bit/s
    assert traced_worker_rate_bps(two_pulls(0.0)) == pytest.approx(2e8)
    # overlapping by half: union [0, 120] ms: 16e6 / 0.12 = 1.333e8 bit/s
    assert traced_worker_rate_bps(two_pulls(40_000.0)) == pytest.approx(16e6 / 0.12)


def test_serial_pulls_show_one_link_and_keep_the_papers_rule() -> None:
    # one after the other: union 160 ms, 16e6 / 0.16 = 1e8 bit/s = one PS link: no evidence
    profile = two_pulls(80_000.0)
    assert traced_worker_rate_bps(profile) == pytest.approx(1e8)
    net = NetworkModel(bandwidth_bps=LINK)
    assert with_traced_worker_link(profile, net) is net
    assert worker_link_note(profile, net) is None


def test_a_worker_faster_than_one_link_is_not_capped_by_it() -> None:
    net = NetworkModel(bandwidth_bps=0.95 * LINK)  # the simulated rate: goodput applied
    wider = with_traced_worker_link(two_pulls(0.0), net)
    assert wider.worker_bandwidth_bps == pytest.approx(2 * 0.95 * LINK)  # M links' worth: never binds
    note = worker_link_note(two_pulls(0.0), net)
    assert note is not None and "200 Mbit/s" in note and "100 Mbit/s" in note


def test_the_threshold_is_relative_to_the_recorded_link() -> None:
    # 16e6 bits over (160 ms - x) of union; just above and below WIDER_THAN_ONE_LINK x 1e8
    net = NetworkModel(bandwidth_bps=LINK)
    for factor, wider in ((WIDER_THAN_ONE_LINK * 1.01, True), (WIDER_THAN_ONE_LINK * 0.99, False)):
        union_us = 16e6 / (factor * 1e8) * 1e6
        got = with_traced_worker_link(two_pulls(union_us - 80_000.0), net)
        assert (got.worker_bandwidth_bps is not None) is wider


def test_one_ps_or_a_given_worker_link_is_left_alone() -> None:
    # one PS: both pulls on PS 0 and concurrent; the worker's link cannot show, nothing changes
    one = two_pulls(0.0, n_ps=1)
    assert traced_worker_rate_bps(one) is None
    net = NetworkModel(bandwidth_bps=LINK)
    assert with_traced_worker_link(one, net) is net
    given = NetworkModel(bandwidth_bps=LINK, worker_bandwidth_bps=LINK)
    assert with_traced_worker_link(two_pulls(0.0), given) is given


@pytest.mark.parametrize("name", ["li2020-des", "li2020-des+contention"])
@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_the_simulated_step_is_the_traced_one(name: str, engine: str) -> None:
    # W = 1, goodput 1: each pull has its own 100 Mbit/s PS link and the worker's link does not
    # bind (the trace shows 200 Mbit/s), so both take 8e6 / 1e8 = 80 ms, then 20 ms of compute:
    # a 100 ms step, 10 examples -> 100 examples/s. Capped by a 100 Mbit/s worker link (the old
    # rule) the two pulls shared it: 160 ms + 20 ms, 55.6 examples/s.
    model = registry.get(name)
    curve = CurveSettings(workers=(1,), steps=40, warmup_steps=4, seed=0)
    inputs = model_inputs(two_pulls(0.0), AdviceRequest(network=NetworkModel(bandwidth_bps=LINK), curve=curve,
                                                         goodput=1.0))
    params = registry.params_for(model, {"engine": engine})
    (point,) = predict_curve(model, inputs, params, curve)
    assert point.throughput == pytest.approx(100.0, rel=1e-6)
