"""A job whose profile records no bandwidth, with no bandwidth setting: the prediction measures it."""

from __future__ import annotations

import json

import pytest

from advisor.controller.pipeline.predictions import PredictionParams, prediction_key, prediction_params, run_prediction
from advisor.controller.settings import SettingsError, load_settings
from advisor.core.bandwidth import BandwidthNotMeasurable
from advisor.core.cost import Prices
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json
from tests.conftest import ps_async_data
from tests.factories import one_layer

COMMON = dict(max_workers=2, target=0.05, seed=0, saturation_threshold=0.05)


def test_where_the_bandwidth_comes_from() -> None:
    given = prediction_params(50e6, Prices(), bandwidth_bps=1e8, **COMMON)
    recorded = prediction_params(50e6, Prices(), bandwidth_bps=None, **COMMON)
    unknown = prediction_params(None, Prices(), bandwidth_bps=None, **COMMON)
    forced = prediction_params(50e6, Prices(), bandwidth_bps=1e8, measure=True, **COMMON)
    assert (given.bandwidth_bps, given.bandwidth_source) == (1e8, "given")
    assert (recorded.bandwidth_bps, recorded.bandwidth_source) == (50e6, "recorded")
    assert (unknown.bandwidth_bps, unknown.bandwidth_source) == (None, "measured")
    assert (forced.bandwidth_bps, forced.bandwidth_source) == (None, "measured")
    assert len({prediction_key("sha", p) for p in (given, recorded, unknown)}) == 3


def test_the_prediction_measures_it_and_says_so() -> None:
    """cubic/mlp_bw100 carries no bandwidth; the testbed shaped its link to 100 Mbit/s."""
    profile = load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))
    assert profile.job.recorded_bandwidth_bps is None
    params = prediction_params(None, Prices(), bandwidth_bps=None, **COMMON)
    doc = json.loads(run_prediction(profile_to_json(profile), params.as_dict()))
    assert doc["network"]["bandwidth_source"] == "measured"
    assert 90e6 <= doc["network"]["bandwidth_bps"] <= 110e6
    assert any("measured from the profile's transfer times" in note for note in doc["notes"])


def test_a_profile_that_cannot_be_measured_fails_with_the_reason() -> None:
    params = PredictionParams(**{**prediction_params(None, Prices(), bandwidth_bps=None, **COMMON).as_dict()})
    with pytest.raises(BandwidthNotMeasurable, match="give the bandwidth"):
        run_prediction(profile_to_json(one_layer(steps=3)), params.as_dict())


def test_the_bandwidth_setting_measure() -> None:
    measure = load_settings(bandwidth=" Measure ")
    assert measure.measure_bandwidth() and measure.bandwidth_bps() is None
    given = load_settings(bandwidth="10Gbit/s")
    assert not given.measure_bandwidth() and given.bandwidth_bps() == 10e9
    assert measure.prediction_fingerprint() != given.prediction_fingerprint() != load_settings().prediction_fingerprint()
    with pytest.raises(SettingsError, match="bandwidth .fast"):
        load_settings(bandwidth="fast")
