"""The pei2019 model behind the ThroughputModel protocol: answers, link bound, curve choice, errors."""

from __future__ import annotations

import math

import pytest

from advisor.core.models.pei import MODELS, PeiModel, fit_report, profile_transfers
from advisor.core.models.protocol import Exact, ExactRun, ModelInputs, Need
from advisor.core.models.registry import params_for
from advisor.core.pei import transmission as tx
from advisor.core.pei.iteration import predict_iteration
from advisor.core.profile import build_profile
from advisor.core.spec import Sigmoid, parse_spec
from advisor.errors import ModelInputError
from advisor.importers.spec_file import example_spec_path, load_spec
from tests.conftest import ps_async_data

MODEL: PeiModel = MODELS[0]


@pytest.fixture(scope="module")
def resnet():
    return load_spec(example_spec_path("resnet50"))


def test_protocol_surface():
    assert MODEL.name == "pei2019" and MODEL.needs == frozenset({Need.LAYER_SPEC})
    assert set(MODEL.Params.model_fields) == {"mode", "dop", "batch", "memory_floor", "curve"}


@pytest.mark.parametrize("mode", ["ps", "nccl"])
def test_answer_is_workers_times_batch_over_iteration(resnet, mode):
    params = params_for(MODEL, {"mode": mode})
    inputs = ModelInputs(spec=resnet)
    MODEL.check(inputs, params)
    for workers in (1, 2, 4, 8):
        run = MODEL.start(inputs, params, workers, seed=0)
        assert isinstance(run, ExactRun)
        answer = run.advance(10)
        assert isinstance(answer, Exact)
        t = predict_iteration(resnet, workers, mode).total
        assert answer.throughput == pytest.approx(workers * resnet.batch / t)


@pytest.mark.parametrize("mode", ["ps", "nccl"])
@pytest.mark.parametrize("workers", [1, 2, 4, 8, 16])
def test_link_bound_is_never_below_the_answer(resnet, mode, workers):
    params = params_for(MODEL, {"mode": mode})
    inputs = ModelInputs(spec=resnet)
    answer = MODEL.start(inputs, params, workers, 0).advance(1).throughput
    bound = MODEL.link_bound(inputs, params, workers)
    assert answer <= bound and math.isfinite(bound)


def test_more_gpus_per_link_cost_more(resnet):
    # Four links: 8 GPUs share each link two ways (link_num = 2), so PS mode scales worse from 4 to 8.
    t4 = predict_iteration(resnet, 4, "ps").total
    t8 = predict_iteration(resnet, 8, "ps").total
    assert t8 > t4  # the same per-GPU batch: more GPUs never make an iteration shorter


def test_params_are_validated():
    with pytest.raises(ModelInputError, match="dop"):
        params_for(MODEL, {"dop": "1.5"})
    with pytest.raises(ModelInputError, match="mode"):
        params_for(MODEL, {"mode": "mpi"})
    assert params_for(MODEL, {"batch": "64"}).batch == 64


def test_missing_inputs_are_named():
    params = params_for(MODEL)
    with pytest.raises(ModelInputError, match="needs a layer spec"):
        MODEL.check(ModelInputs(), params)
    with pytest.raises(ModelInputError, match="lacks layers and gpu"):
        MODEL.check(ModelInputs(spec=parse_spec({"cluster": {"x": 1}})), params)
    one_gpu = parse_spec({"batch": 8, "gpu": "V100", "layers": [{"type": "fc", "in_channels": 100, "out_channels": 10}]})
    MODEL.check(ModelInputs(spec=one_gpu), params)
    assert MODEL.start(ModelInputs(spec=one_gpu), params, 1, 0).advance(1).throughput > 0
    with pytest.raises(ModelInputError, match="2 GPUs need the spec's links"):
        MODEL.start(ModelInputs(spec=one_gpu), params, 2, 0)
    with pytest.raises(ModelInputError, match="curve=profile needs a profile"):
        MODEL.check(ModelInputs(spec=one_gpu), params_for(MODEL, {"curve": "profile"}))


def _transfer_profile(curve: Sigmoid, sizes: list[int], steps: int = 3):
    """A profile whose pushes take exactly what ``curve`` says (one per size, back to back)."""
    ops = [{"name": "worker:compute", "resource": "worker"}]
    ops += [{"name": f"push{i}", "resource": "uplink", "ps": 0, "bytes": b, "deps": ["worker:compute"]}
            for i, b in enumerate(sizes)]
    durations = [100.0] + [tx.seconds(curve, b) * 1e6 for b in sizes]
    starts, t = [], 0.0
    for d in durations:
        starts.append(t)
        t += d
    timing = [{"index": k, "start_us": starts, "duration_us": durations} for k in range(steps)]
    return build_profile(format="advisor-profile", version=1, job={"batch_size": 8}, ops=ops, steps=timing)


def test_curve_is_fitted_to_the_profiles_transfers(resnet):
    truth = Sigmoid(k=2.0, a=0.25, w=0.9)
    profile = _transfer_profile(truth, [2_000, 30_000, 400_000, 5_000_000, 60_000_000])
    sizes, durations = profile_transfers(profile)
    assert len(sizes) == 15 and durations.min() > 0
    fit = fit_report(profile)
    assert fit.rms_relative_error < 0.01
    params = params_for(MODEL, {"mode": "ps"})
    fitted = MODEL.start(ModelInputs(spec=resnet, profile=profile), params, 4, 0).advance(1).throughput
    direct = 4 * resnet.batch / predict_iteration(resnet, 4, "ps", curve=truth).total
    assert fitted == pytest.approx(direct, rel=0.01)
    # curve=links ignores the profile; the spec's own line gives another answer.
    by_links = MODEL.start(ModelInputs(spec=resnet, profile=profile), params_for(MODEL, {"mode": "ps", "curve": "links"}),
                           4, 0).advance(1).throughput
    assert by_links == pytest.approx(4 * resnet.batch / predict_iteration(resnet, 4, "ps").total)


def test_a_profile_without_three_sizes_is_a_named_error(resnet):
    profile = _transfer_profile(Sigmoid(k=1, a=1, w=1), [1000, 2000])
    with pytest.raises(ModelInputError, match="pei2019.*at least 3 sizes"):
        MODEL.check(ModelInputs(spec=resnet, profile=profile), params_for(MODEL))


def test_fit_on_a_real_trace_reports_its_error():
    from advisor.importers.loader import load_profile

    fit = fit_report(load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz")))
    # The trace's link is 100 Mbit/s: the fitted asymptote k / a must be near 0.0125 GB/s.
    assert fit.curve.k / fit.curve.a == pytest.approx(0.0125, rel=0.25)
    # Its transfers include queueing behind other streams: the error is large, and reported as such.
    assert 0.2 < fit.rms_relative_error < 2.0


def test_explain_reports_the_parts_and_the_fit(resnet):
    truth = Sigmoid(k=2.0, a=0.25, w=0.9)
    profile = _transfer_profile(truth, [2_000, 30_000, 400_000, 5_000_000, 60_000_000])
    params = params_for(MODEL, {"mode": "nccl"})
    report = MODEL.explain(ModelInputs(spec=resnet, profile=profile), params, 2)
    parts = report["t_read_s"] + report["t_forward_s"] + report["t_backward_s"] + report["t_update_s"]
    assert report["t_total_s"] == pytest.approx(parts)
    assert report["examples_per_s"] == pytest.approx(2 * resnet.batch / parts)
    assert report["curve"] == "fitted to the profile's transfers" and report["fit"]["rms_relative_error"] < 0.01
    assert MODEL.explain(ModelInputs(spec=resnet), params, 2)["fit"] is None
