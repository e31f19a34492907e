"""How advice is shown: a bimodal point's range covers both outcomes, in JSON, table and plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.core.advice import AdviceRequest, advise
from advisor.core.curve import CurveSettings
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.report import advice_table, advice_to_json

EXAMPLE = Path(__file__).resolve().parents[1] / "advisor" / "data" / "example-mlp.profile.json.gz"


@pytest.fixture(scope="module")
def bimodal():
    """The bundled mlp at 100 Mbit/s: transfer-bound, so at W = 2 the alternating outcome (each
    worker nearly as fast as alone) is far above the drifting one the simulation predicts."""
    profile = load_profile(EXAMPLE)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=100e6),
                            curve=CurveSettings(workers=(1, 2, 3), steps=300, warmup_steps=20))
    return profile, request, advise(profile, request)


def test_the_outcome_range_covers_both_outcomes_of_a_bimodal_point(bimodal) -> None:
    profile, request, advice = bimodal
    doc = advice_to_json(profile, request, advice)
    two = doc["curve"][1]
    assert two["alternating"] is not None and two["alternating"] > 1.3 * two["throughput"]
    assert (two["outcome_low"], two["outcome_high"]) == (two["low"], two["alternating"])
    for point in (doc["curve"][0], doc["curve"][2]):  # no second outcome: the range is the interval
        assert point["alternating"] is None
        assert (point["outcome_low"], point["outcome_high"]) == (point["low"], point["high"])
    row = next(line for line in advice_table(profile, request, advice).splitlines() if line.startswith("  2  "))
    assert f"or up to {two['alternating']:.1f}" in row


def test_the_plot_draws_a_bimodal_point(bimodal, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from advisor.plot import plot_advice

    _, _, advice = bimodal
    out = tmp_path / "curve.png"
    plot_advice(advice, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
