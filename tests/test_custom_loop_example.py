"""The recorded custom-training-loop bundle (tests/data/allreduce/mwms-custom-loop: uploaded by
``AdvisorStepProfiler`` from a one-worker MWMS loop, ``scripts/record_custom_loop_example.py``)
reads as a ``tf-mwms`` profile and predicts with the default all-reduce model.

Independent truths, from how the program was built (the folder's README.md): the gradient bytes of
a dense 64-512-256-10 float32 MLP; TF's one default pack, last variable first; the emulated
compute, 3 ms asleep after every dense layer forward and 6 ms backward, which bounds where backward
starts and how far apart the layers' gradients become ready; the 100 Mbit/s link the recording
set, and the ring's bytes on it: each worker sends 2 (W - 1) / W times the gradients per step, and
with one pack that starts only once backward is over.
"""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from advisor.cli import main
from advisor.core.models.ring_allreduce.model import GRPC_RING
from advisor.importers.uploads import profile_from_upload

BUNDLE = Path(__file__).resolve().parent / "data" / "allreduce" / "mwms-custom-loop" / "profile.json.gz"
BATCH = 32
WIDTHS = (64, 512, 256, 10)
LINK_BPS = 100e6  # ADVISOR_BANDWIDTH_MBIT=100
FORWARD_MS, BACKWARD_MS = 3.0, 6.0  # asleep per dense layer


def _bundle() -> dict[str, Any]:
    return json.loads(gzip.decompress(BUNDLE.read_bytes()))


def _gradients() -> dict[str, int]:
    out = {}
    for i, (n_in, n_out) in enumerate(itertools.pairwise(WIDTHS)):
        out[f"mlp/fc{i}/kernel"] = n_in * n_out * 4
        out[f"mlp/fc{i}/bias"] = n_out * 4
    return out


def test_the_bundle_holds_the_programs_gradients_in_tfs_one_pack() -> None:
    bundle = _bundle()
    assert (bundle["format"], bundle["version"], bundle["kind"]) == ("advisor-allreduce-upload", 3, "tf-mwms")
    # the program declares its loss's strategy.reduce: one float32 (4 bytes) a step, besides the gradients
    assert bundle["collectives"] == [{"name": "loss", "bytes": 4}]
    assert (bundle["meta"]["world_size"], bundle["meta"]["batch_size"]) == (1, BATCH)
    assert {g["name"]: g["bytes"] for g in bundle["gradients"]} == _gradients()
    assert sum(g["bytes"] for g in bundle["gradients"]) == 668_712  # 167,178 float32, the README's total
    assert bundle["buckets"] == [[5, 4, 3, 2, 1, 0]]
    assert bundle["link"] == {"rate_bps": LINK_BPS, "source": "controller-setting"}
    profile = profile_from_upload(bundle, origin="mwms-custom-loop")
    assert profile.job.kind.value == "tf-mwms"
    assert len(profile.steps) == 30


def test_the_steps_show_the_programs_emulated_compute() -> None:
    steps = _bundle()["steps"]
    assert [s["index"] for s in steps] == list(range(10, 40))  # ADVISOR_PROFILE_WARMUP=10, _STEPS=30
    for s in steps:
        fc0, fc1, fc2 = s["grad_ready_us"][0], s["grad_ready_us"][2], s["grad_ready_us"][4]
        assert s["grad_ready_us"][1::2] == [fc0, fc1, fc2]  # a layer's bias is ready with its kernel
        assert s["backward_start_us"] >= 3 * FORWARD_MS * 1e3  # three forward sleeps come first
        # backward: the loss gradient, sleep2's 6 ms, fc2's gradients, sleep1's, fc1's, sleep0's, fc0's
        assert fc2 - s["backward_start_us"] >= BACKWARD_MS * 1e3
        assert fc1 - fc2 >= BACKWARD_MS * 1e3 and fc0 - fc1 >= BACKWARD_MS * 1e3
        assert fc0 == s["backward_end_us"] <= s["optimizer_us"][0]
        assert s["optimizer_us"][0] + s["optimizer_us"][1] <= s["wall_us"]


def test_the_default_allreduce_model_predicts_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(BUNDLE), "--workers", "1-4", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "ring-allreduce"
    assert doc["network"]["bandwidth_bps"] == LINK_BPS and doc["network"]["bandwidth_source"] == "recorded"
    rate = {point["workers"]: point["throughput"] for point in doc["curve"]}
    steps = _bundle()["steps"]
    # one worker all-reduces nothing: the traced steps' own rate
    assert rate[1] == pytest.approx(BATCH / (statistics.mean(s["wall_us"] for s in steps) / 1e6), rel=0.01)
    backward_end_s = statistics.mean(s["backward_end_us"] for s in steps) / 1e6
    ring_bytes = sum(_gradients().values())
    for w in (2, 3, 4):
        # the one pack waits for backward's end, then each link carries 2 (W - 1) / W of the gradients:
        # no faster than that at the full link rate; and no slower than that at the product's TCP
        # goodput (0.95) and TF's gRPC ring's stated two-way share and per-round latency
        # (docs/models-ring.md) for the pack and for the declared 4-byte loss, and the optimizer after the pack
        ring_s = 2 * (w - 1) / w * ring_bytes * 8 / LINK_BPS
        fastest = w * BATCH / (backward_end_s + ring_s)
        slow_bps = LINK_BPS * 0.95 * GRPC_RING.two_way_share
        slow_ring_s = 2 * (w - 1) * (2 * GRPC_RING.latency_s + (ring_bytes + 4) * 8 / (w * slow_bps))
        slowest = w * BATCH / (statistics.mean(s["wall_us"] for s in steps) / 1e6 + slow_ring_s)
        assert 0.95 * slowest <= rate[w] <= fastest, (w, slowest, rate[w], fastest)  # 5 %: the step's client gap


def test_without_its_link_rate_the_prediction_asks_for_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _bundle()
    doc["link"] = None
    path = tmp_path / "no-link.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert main(["predict", str(path), "--workers", "1-2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the profile records no link rate" in err and "--bandwidth RATE" in err
