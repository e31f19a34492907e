"""Overhead split and re-timing, checked against hand-computed values on the one-layer job."""

from __future__ import annotations

import pytest

from advisor.core.preprocess import (
    parsing_overhead_us, retime_transfers, split_parsing_overhead, transfer_time_us,
)
from advisor.core.profile import Resource
from advisor.errors import ProfileError
from tests.factories import one_layer


def test_overhead_model_is_linear() -> None:
    assert parsing_overhead_us(1000, 0.01, 5.0) == pytest.approx(15.0)  # 0.01*1000 + 5


def test_split_moves_overhead_into_a_parse_op_on_the_receiver() -> None:
    p = split_parsing_overhead(one_layer(pull_bytes=1000, push_bytes=2000), alpha_us_per_byte=0.01, beta_us=5.0)
    names = [op.name for op in p.ops]
    assert names == ["ps0:read", "pull", "parse:pull", "worker:compute", "push", "parse:push", "ps0:update"]
    parse_pull, parse_push = p.ops[p.index["parse:pull"]], p.ops[p.index["parse:push"]]
    assert (parse_pull.resource, parse_pull.ps) == (Resource.WORKER, None)
    assert (parse_push.resource, parse_push.ps) == (Resource.PS, 0)
    # consumers now wait for the parse, which waits for the transfer
    assert p.ops[p.index["worker:compute"]].deps == ("parse:pull",)
    assert p.ops[p.index["ps0:update"]].deps == ("parse:push",)
    step = p.steps[0]
    d = dict(zip(names, step.duration_us))
    s = dict(zip(names, step.start_us))
    # pull: recorded 100 us, overhead 0.01*1000+5 = 15 -> network 85, parse 15 from 10+85
    assert (d["pull"], d["parse:pull"], s["parse:pull"]) == pytest.approx((85.0, 15.0, 95.0))
    # push: recorded 100 us, overhead 0.01*2000+5 = 25 -> network 75, parse 25 from 160+75
    assert (d["push"], d["parse:push"], s["parse:push"]) == pytest.approx((75.0, 25.0, 235.0))
    assert step.end_us == one_layer().steps[0].end_us  # the recorded span is unchanged


def test_overhead_longer_than_the_record_leaves_a_zero_transfer() -> None:
    p = split_parsing_overhead(one_layer(), alpha_us_per_byte=1.0, beta_us=0.0)  # 1000 us > 100 us recorded
    d = dict(zip((op.name for op in p.ops), p.steps[0].duration_us))
    assert d["pull"] == 0.0 and d["parse:pull"] == 100.0


def test_split_twice_is_refused() -> None:
    once = split_parsing_overhead(one_layer(), 0.0, 1.0)
    with pytest.raises(ProfileError, match="already split"):
        split_parsing_overhead(once, 0.0, 1.0)


@pytest.mark.parametrize(("alpha", "beta"), [(-1.0, 0.0), (0.0, float("nan")), (float("inf"), 0.0)])
def test_bad_coefficients(alpha: float, beta: float) -> None:
    with pytest.raises(ProfileError, match="overhead coefficient"):
        split_parsing_overhead(one_layer(), alpha, beta)


def test_retime_gives_each_transfer_its_time_alone_on_the_link() -> None:
    # 1000 B at 8 Mbit/s = 8000 bit / 8e6 bit/s = 1 ms = 1000 us; at 80% goodput 1250 us
    assert transfer_time_us(1000, 8e6) == pytest.approx(1000.0)
    p = retime_transfers(one_layer(), 8e6, efficiency=0.8)
    d = dict(zip((op.name for op in p.ops), p.steps[1].duration_us))
    s = dict(zip((op.name for op in p.ops), p.steps[1].start_us))
    assert d == pytest.approx({"ps0:read": 10, "pull": 1250, "worker:compute": 51, "push": 1250, "ps0:update": 20})
    # a chain: each op starts when the previous ends: 0, 10, 1260, 1311, 2561
    assert [s[n] for n in ("ps0:read", "pull", "worker:compute", "push", "ps0:update")] == pytest.approx(
        [0, 10, 1260, 1311, 2561]
    )
    assert p.job.recorded_bandwidth_bps == 8e6


@pytest.mark.parametrize("bw", [0.0, -1e9, float("nan"), float("inf")])
def test_retime_refuses_impossible_bandwidth(bw: float) -> None:
    with pytest.raises(ProfileError, match="bandwidth must be a finite number > 0"):
        retime_transfers(one_layer(), bw)


def test_client_gap_follows_every_sink() -> None:
    from advisor.core.preprocess import GAP_NAME, add_client_gap
    from tests.factories import one_layer_doc
    from advisor.core.profile import build_profile

    doc = one_layer_doc(steps=2)
    doc["steps"][0]["wall_us"] = 300.0  # span 280 -> gap 20
    # step 1 has no wall time: zero gap
    p = add_client_gap(build_profile(**doc))
    gap = p.ops[p.index[GAP_NAME]]
    assert gap.deps == ("ps0:update",)  # the only op nothing depends on
    assert p.steps[0].duration_us[-1] == 20.0 and p.steps[0].start_us[-1] == 280.0
    assert p.steps[1].duration_us[-1] == 0.0
    assert p.steps[0].end_us == 300.0  # the step now spans what the client saw
    with pytest.raises(ProfileError, match="already has its client gap"):
        add_client_gap(p)
