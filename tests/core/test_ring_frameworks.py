"""The ring model's per-framework terms against hand-computed steps and invariants: the two-way
share of a ring link's goodput, the per-round latency and the step's other collectives (each a
ring pass of its own), and their defaults by the profile's framework.

Every expected value is derived by hand in the comment beside it. The profiles are all-reduce
profiles as the bundle importer builds them (forward, backward, one uplink per gradient,
optimizer), or the recorded MWMS bundles of tests/data/allreduce.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs, Samples
from advisor.core.models.ring_allreduce import HIERARCHICAL, RING, HierarchicalParams, RingParams
from advisor.core.models.ring_allreduce.model import GENERIC, GLOO, GRPC_RING, LATENCY_CAL
from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel
from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.profiling.allreduce_bundle import build_allreduce_bundle
from tests.conftest import REPO

RATE = 1e8  # bit/s
MB = 1_000_000
# the recorded Keras MWMS configurations: a one-worker profile and its measured link rate
MWMS = sorted(d.parent for d in (REPO / "tests" / "data" / "allreduce").glob("mwms-*/measured.json")
              if (d.parent / "profile.json.gz").is_file())


def _allreduce(kind: str = "tf-mwms", collectives: tuple[int, ...] | None = None, grad_bytes: int = MB) -> Profile:
    """Forward 10 ms, backward 14 ms (the only gradient ready when it ends, at 24 ms), optimizer
    2 ms after the gradient: compute 24 ms, update 2 ms, W = 1 step 26 ms."""
    ops: list[dict[str, Any]] = [
        {"name": "forward", "resource": "worker"},
        {"name": "backward/0000", "resource": "worker", "deps": ["forward"]},
        {"name": "gradient/w", "resource": "uplink", "ps": 0, "bytes": grad_bytes, "deps": ["backward/0000"]},
        {"name": "optimizer", "resource": "worker", "deps": ["backward/0000", "gradient/w"]},
    ]
    start = [0.0, 10e3, 24e3, 24e3]
    duration = [10e3, 14e3, 0.0, 2e3]
    return build_profile(job={"batch_size": 8, "kind": kind, "collectives": collectives}, ops=ops,
                         steps=[{"index": 0, "start_us": start, "duration_us": duration}])


def _inputs(profile: Profile, **kwargs: Any) -> ModelInputs:
    return ModelInputs(profile=profile, network=NetworkModel(bandwidth_bps=RATE), **kwargs)


def _step_s(profile: Profile, workers: int, params: RingParams, model: Any = RING) -> float:
    samples = model.start(_inputs(profile), params, workers, seed=0).advance(5)
    assert isinstance(samples, Samples)
    return samples.until_s / samples.steps


# --- the two-way share of the link's goodput --------------------------------------------------

@pytest.mark.parametrize(("workers", "expected_s"), [
    # one 1 MB gradient, latency 1 ms, share 0.8 of 1e8 bit/s each way:
    # W = 2: 2 rounds of (1 ms + 8e6 bit / (2 x 0.8e8)) = 2 x 0.051 = 0.102 s
    (2, 0.102),
    # W = 4: 6 rounds of (1 ms + 8e6 / (4 x 0.8e8)) = 6 x 0.026 = 0.156 s
    (4, 0.156),
])
def test_the_two_way_share_slows_every_round_by_its_factor(workers: int, expected_s: float) -> None:
    profile = _allreduce(collectives=())  # no other collective: the step is compute + ring + update
    step = _step_s(profile, workers, RingParams(latency_s=1e-3, two_way_share=0.8))
    assert step - 0.026 == pytest.approx(expected_s, rel=1e-9)


# --- the step's other collectives, each a ring pass of its own --------------------------------

@pytest.mark.parametrize(("workers", "expected_s"), [
    # latency 5 ms, share 1, gradient 1 MB: the gradient's ring ends at 24 ms + T_g, then the two
    # metric collectives (4 and 8 bytes) run one after the other, alongside the 2 ms update.
    # W = 2: T_g = 2 x (5 ms + 8e6 / 2e8) = 0.09; the collectives 2 x (5 ms + 32 / 2e8) and
    # 2 x (5 ms + 64 / 2e8) = 0.02 + 9.6e-7 > 2 ms: step 0.024 + 0.09 + 0.02000096 = 0.13400096 s
    (2, 0.13400096),
    # W = 4 (chunks of 1/4 MB, 6 rounds): T_g = 6 x (5 ms + 8e6 / 4e8) = 0.15; the collectives
    # 6 x (5 ms + 32 / 4e8) + 6 x (5 ms + 64 / 4e8) = 0.06 + 1.44e-6: step 0.23400144 s
    (4, 0.23400144),
    # W = 1: no rounds, no collective: compute 24 ms + update 2 ms
    (1, 0.026),
])
def test_each_collective_pays_its_own_rounds(workers: int, expected_s: float) -> None:
    step = _step_s(_allreduce(collectives=(4, 8)), workers, RingParams(latency_s=5e-3, two_way_share=1.0))
    assert step == pytest.approx(expected_s, rel=1e-9)


def test_collectives_shorter_than_the_update_hide_behind_it() -> None:
    # latency 0, W = 2: the collectives take 2 x 32 / 2e8 + 2 x 64 / 2e8 = 9.6e-7 s < the 2 ms
    # update, so the step is 0.024 + 2 x 8e6 / 2e8 (0.08) + 0.002 = 0.106 s, as without them
    params = RingParams(latency_s=0.0, two_way_share=1.0)
    assert _step_s(_allreduce(collectives=(4, 8)), 2, params) == pytest.approx(0.106, rel=1e-9)
    assert _step_s(_allreduce(collectives=()), 2, params) == pytest.approx(0.106, rel=1e-9)


def test_the_hierarchical_ring_times_each_collective_with_its_own_formula() -> None:
    # 4 workers, 2 per node (intra 1e9 bit/s, 10 us; inter latency 5 ms, share 1): a collective of
    # c bytes takes 2 x (10 us + 8c / 2e9) + 2 x (5 ms + 8c / 2e8); the gradient (1 MB):
    # 2 x (1e-5 + 0.004) + 2 x (0.005 + 0.04) = 0.00802 + 0.09 = 0.09802; the collectives (4, 8):
    # 2 x 2e-5 + 4 x 5e-3 + (16 x 12) / 2e9 + (16 x 12) / 2e8 = 0.02004 + 1.056e-6:
    # step 0.024 + 0.09802 + 0.020041056 = 0.142061056 s
    params = HierarchicalParams(gpus_per_node=2, intra_node_bandwidth_bps=1e9, intra_node_latency_s=1e-5,
                                latency_s=5e-3, two_way_share=1.0)
    assert _step_s(_allreduce(collectives=(4, 8)), 4, params, HIERARCHICAL) == pytest.approx(0.142061056, rel=1e-9)


def test_a_bundles_metric_collectives_reach_the_step() -> None:
    # Two logged metrics (loss, accuracy): four collectives of 4, 8, 4, 8 bytes. At W = 2, latency
    # 5 ms, share 1, each costs 2 x 5 ms plus its bytes: 4 x 0.01 + 2 x 2 x (32 + 64) / 2e8 =
    # 0.04000192 s after the gradient's ring, against 0.02000096 s with the loss's two only.
    step = {"index": 0, "wall_us": 26_000.0, "backward_start_us": 10_000.0, "backward_end_us": 24_000.0,
            "grad_ready_us": [24_000.0], "optimizer_us": [24_000.0, 2_000.0]}
    metrics = [("accuracy/sum", 4), ("accuracy/count", 8), ("loss/sum", 4), ("loss/count", 8)]
    bundle = build_allreduce_bundle("tf-mwms", {"batch_size": 8, "world_size": 1}, [("w", MB)], [step],
                                    buckets=[[0]], collectives=metrics)
    profile = read_allreduce_upload(bundle, origin="t")
    assert profile.job.collectives == (4, 8, 4, 8)
    params = RingParams(latency_s=5e-3, two_way_share=1.0)
    assert _step_s(profile, 2, params) - _step_s(_allreduce(collectives=(4, 8)), 2, params) == pytest.approx(
        0.04000192 - 0.02000096, rel=1e-9)


# --- defaults by framework ---------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "figures"), [("tf-mwms", GRPC_RING), ("pytorch-ddp", GLOO)])
def test_unset_latency_and_share_are_the_frameworks(kind: str, figures: Any) -> None:
    profile = _allreduce(kind=kind, collectives=())
    resolved = RING.resolved(_inputs(profile), RingParams())
    assert (resolved.latency_s, resolved.two_way_share) == (figures.latency_s, figures.two_way_share)
    # given values win over the framework's
    given = RING.resolved(_inputs(profile), RingParams(latency_s=1e-3, two_way_share=0.5))
    assert (given.latency_s, given.two_way_share) == (1e-3, 0.5)
    # and the defaults act as the same values given: the same step (W = 3: 4 rounds)
    assert _step_s(profile, 3, RingParams()) == _step_s(profile, 3, RingParams(
        latency_s=figures.latency_s, two_way_share=figures.two_way_share))


def test_a_parameter_server_trace_takes_tensorflows_ring() -> None:
    # a TensorFlow PS trace as an all-reduce what-if is the program under MWMS (Keras fit), whose
    # ring over TCP is gRPC's: its figures and the loss's two reductions, as an MWMS profile that
    # recorded none (benchmarks/allreduce_accuracy.py scores it on MWMS runs of the same programs)
    from tests.core.test_ring_allreduce import _backprop

    profile = _backprop()
    assert profile.job.kind.value == "tf-ps"
    resolved = RING.resolved(_inputs(profile), RingParams())
    assert (resolved.latency_s, resolved.two_way_share) == (GRPC_RING.latency_s, GRPC_RING.two_way_share)
    outlook = RING.outlook(_inputs(profile), RingParams(), {1: 1.0})
    assert outlook.details["collectives"] == {"bytes": [4, 8], "source": "framework"}


def test_a_parameter_server_trace_of_a_gpu_worker_takes_ncclish_figures() -> None:
    # with GPUs MWMS all-reduces with NCCL, not TF's gRPC ring: the framework-free figures, no
    # other collective
    from tests.core.test_ring_allreduce import _backprop

    cpu = _backprop()
    gpu = cpu.model_copy(update={"job": cpu.job.model_copy(update={"worker_on_gpu": True})})
    resolved = RING.resolved(_inputs(gpu), RingParams())
    assert (resolved.latency_s, resolved.two_way_share) == (GENERIC.latency_s, GENERIC.two_way_share) == (50e-6, 1.0)
    assert RING.outlook(_inputs(gpu), RingParams(), {1: 1.0}).details["collectives"]["bytes"] == []


def test_an_mwms_profile_without_recorded_collectives_gets_kerass_loss_reductions() -> None:
    # Keras's fit reduces at least its loss: a float32 sum and an int64 count. Unrecorded (None),
    # the model assumes those; recorded as none (()), it runs none. With latency L and share s of
    # 1e8 at W = 2 they add 2 x (L + 32 / (2e8 s)) + 2 x (L + 64 / (2e8 s)) to the step (more than
    # the 2 ms update for the gRPC figures).
    assert GRPC_RING.collectives == (4, 8)
    lat, share = GRPC_RING.latency_s, GRPC_RING.two_way_share
    extra = 4 * lat + 2 * (32 + 64) / (2e8 * share)
    assert extra > 0.002
    unrecorded, none = _allreduce(collectives=None), _allreduce(collectives=())
    assert _step_s(unrecorded, 2, RingParams()) - _step_s(none, 2, RingParams()) == pytest.approx(
        extra - 0.002, rel=1e-9)
    outlook = RING.outlook(_inputs(unrecorded), RingParams(), {1: 1.0})
    assert outlook.details["collectives"] == {"bytes": [4, 8], "source": "framework"}
    assert outlook.params["latency_s"] == lat and outlook.params["two_way_share"] == share
    recorded = RING.outlook(_inputs(_allreduce(collectives=(4, 8, 4, 8))), RingParams(), {1: 1.0})
    assert recorded.details["collectives"] == {"bytes": [4, 8, 4, 8], "source": "recorded"}


def test_every_frameworks_latency_lies_in_the_calibration_range() -> None:
    # a calibration starts from the resolved value, so it must be one its grid spans
    for figures in (GLOO, GRPC_RING, GENERIC):
        assert LATENCY_CAL.low <= figures.latency_s <= LATENCY_CAL.high
        assert 0 < figures.two_way_share <= 1


def test_a_ddp_profile_runs_no_other_collective() -> None:
    # DDP reduces only its buckets: unrecorded collectives are none, so the step is compute + ring
    # + update: W = 2 with gloo's figures: 2 x (L + 8e6 / (2 x 1e8 x s))
    profile = _allreduce(kind="pytorch-ddp", collectives=None)
    expected = 2 * (GLOO.latency_s + 8e6 / (2e8 * GLOO.two_way_share))
    assert _step_s(profile, 2, RingParams()) - 0.026 == pytest.approx(expected, rel=1e-9)


# --- invariants on the recorded MWMS profiles --------------------------------------------------

def _recorded(folder: Any) -> tuple[Profile, float]:
    measured = json.loads((folder / "measured.json").read_text())
    doc = json.loads(gzip.decompress((folder / "profile.json.gz").read_bytes()))
    return read_allreduce_upload(doc, origin=str(folder)), float(measured["bandwidth_bps"])


@pytest.mark.parametrize("folder", MWMS, ids=lambda f: f.name)
def test_recorded_mwms_profiles_keep_the_ceilings(folder: Any) -> None:
    # Synchronous: never more than W x the one-worker rate. The links: each carries 2(W-1)/W of
    # the bytes all-reduced per step (gradients and Keras's collectives) at most at the link's
    # goodput, so throughput <= W x batch / (2(W-1)/W x 8 bytes / (rate x goodput)), whatever the
    # share and latency (both only slow it); and within the model's own link_bound.
    profile, bandwidth = _recorded(folder)
    inputs = ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=bandwidth),
                         goodput=0.95)
    params = registry.params_for(RING)
    workers = (1, 2, 3, 4, 8, 16)
    curve = predict_curve(RING, inputs, params, CurveSettings(workers=workers, steps=200, seed=2))
    one = curve[0].throughput
    extra = profile.job.collectives if profile.job.collectives is not None else GRPC_RING.collectives
    sent = sum(op.bytes for op in profile.ops if op.resource.is_transfer) + sum(extra)
    batch = profile.job.batch_size
    for point in curve[1:]:
        w = point.workers
        assert point.throughput <= w * one * 1.001
        assert point.throughput <= w * batch / (2 * (w - 1) / w * 8 * sent / (bandwidth * 0.95))
        assert point.throughput <= RING.link_bound(inputs, params, w) * 1.001


def test_a_calibration_starts_from_the_frameworks_latency() -> None:
    # The closed loop's stated values are the ones the prediction used: for an MWMS profile the
    # gRPC ring's latency, not an unset parameter; observing the job at W = 2 exactly as the
    # stated curve predicts leaves them where they were.
    from advisor.core.advice import AdviceRequest, ModelChoice, advise
    from advisor.core.online_calibration import Observation, Rule, calibrate

    profile = _allreduce(collectives=None)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=RATE), goodput=0.95, model=ModelChoice("ring-allreduce"),
                            curve=CurveSettings(workers=(1, 2, 3), steps=60, warmup_steps=5))
    at2 = advise(profile, request).point(2).throughput
    out = calibrate(profile, request, [Observation(2, at2, 0.01)], rule=Rule.REFIT)
    assert out.stated == {"latency_s": GRPC_RING.latency_s, "goodput": 0.95}
    assert out.values == out.stated
