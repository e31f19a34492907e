"""How advice is shown: a bimodal point's range covers both outcomes, in JSON, table and plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.core.advice import AdviceRequest, ModelChoice, advise
from advisor.core.cost import cost_per_example
from advisor.core.curve import CurveSettings
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.report import advice_table, advice_to_json

EXAMPLE = Path(__file__).resolve().parents[1] / "advisor" / "data" / "example-mlp.profile.json.gz"


@pytest.fixture(scope="module")
def bimodal():
    """The bundled mlp at 100 Mbit/s: transfer-bound, so at W = 2 the alternating outcome (each
    worker nearly as fast as alone, less the two-way loss) is well above the drifting one the
    simulation predicts."""
    profile = load_profile(EXAMPLE)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=100e6),
                            curve=CurveSettings(workers=(1, 2, 3), steps=300, warmup_steps=20))
    return profile, request, advise(profile, request)


def test_the_outcome_range_covers_both_outcomes_of_a_bimodal_point(bimodal) -> None:
    profile, request, advice = bimodal
    doc = advice_to_json(profile, request, advice)
    two = doc["curve"][1]
    assert two["alternating"] is not None and two["alternating"] > two["high"]
    drifting, alternating = two["outcomes"]
    assert (drifting["name"], alternating["name"]) == ("drifting", "alternating")
    assert (drifting["throughput"], alternating["throughput"]) == (two["throughput"], two["alternating"])
    assert (drifting["low"], drifting["high"]) == (two["low"], two["high"])  # the point's interval is the prediction's
    # no congestion control stated: the probability is unknown, said as 50 %
    assert drifting["probability"] == alternating["probability"] == 0.5 and not alternating["probability_known"]
    assert "unknown" in alternating["basis"]
    assert (two["outcome_low"], two["outcome_high"]) == (min(drifting["low"], alternating["low"]), alternating["high"])
    for point in (doc["curve"][0], doc["curve"][2]):  # no second outcome: the range is the interval
        assert point["alternating"] is None
        assert (point["outcome_low"], point["outcome_high"]) == (point["low"], point["high"])
        assert [o["name"] for o in point["outcomes"]] == ["predicted"] and point["outcomes"][0]["probability"] == 1
    lines = advice_table(profile, request, advice).splitlines()
    row = lines.index(next(line for line in lines if line.startswith("  2  ")))
    assert "(drifting, probability 50%)" in lines[row]
    assert lines[row + 1].startswith(" or") and f"{two['alternating']:.1f}" in lines[row + 1]
    assert "(alternating, probability 50%, unknown: see note)" in lines[row + 1]


def test_a_stated_network_gives_the_alternation_its_testbed_probability() -> None:
    """bbr: 6 of 6 testbed runs alternated, (6 + 1) / (6 + 2) = 87.5 % (core/models/ps_des/arrangements.py); the
    decision weighs both outcomes: the expected cost lies between the two outcomes' point costs."""
    profile = load_profile(EXAMPLE)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=100e6),
                            curve=CurveSettings(workers=(1, 2), steps=300, warmup_steps=20),
                            model=ModelChoice("li2020-des+contention", {"congestion_control": "bbr"}))
    two = advise(profile, request).point(2)
    assert [(o.name, o.probability, o.known) for o in two.outcomes] == [("drifting", 0.125, True),
                                                                          ("alternating", 0.875, True)]
    assert "6 of 6 testbed runs" in two.outcomes[1].basis
    costs = [cost_per_example(request.prices, 2, 1, o.throughput) for o in two.outcomes]
    assert min(costs) < two.expected_cost_per_example < max(costs)


def test_the_plot_draws_a_bimodal_point(bimodal, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from advisor.plot import plot_advice

    _, _, advice = bimodal
    out = tmp_path / "curve.png"
    plot_advice(advice, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
