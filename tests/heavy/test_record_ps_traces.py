"""Recording a 2-PS trace on the namespace testbed (scripts/record_ps_traces.py), end to end.

Run as the rest of the heavy suite, as root (it creates network namespaces and tbf qdiscs, and
deletes them again): ``/tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy``. Skips where
``ip netns`` does not work. Independent truths: the bytes per PS from the layer widths and the
greedy placement (tests/data/ps-traces/README.md), the trace's own step rate for the W = 1
anchor, and the shaping: no PS link carries more than its 100 Mbit/s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.profile import Resource
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from tests.conftest import REPO

pytestmark = pytest.mark.heavy
SCRIPT = REPO / "scripts" / "record_ps_traces.py"


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu (see test_tf_profiling.py)")


@pytest.fixture(scope="module")
def netns() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root, ip and tc to build the namespace testbed")
    probe = subprocess.run(["ip", "netns", "add", "advrec-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"ip netns does not work here: {probe.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", "advrec-probe"], check=True)


def test_a_greedy_two_ps_trace_is_recorded_shaped_and_anchored(tf: Any, netns: None, tmp_path: Path) -> None:
    out = tmp_path / "ps2.trace.json.gz"
    run = subprocess.run([sys.executable, str(SCRIPT), "--ps", "2", "--placement", "greedy", "--steps", "20",
                          "--warmup", "5", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert "advrec-" not in listed  # the testbed is gone

    profile = load_profile(out)
    assert (profile.job.parameter_servers, profile.job.batch_size, profile.job.recorded_bandwidth_bps) == (2, 32, 100e6)
    pulled = {ps: sum(op.bytes for op in profile.ops if op.resource is Resource.DOWNLINK and op.ps == ps)
              for ps in (0, 1)}
    assert pulled == {0: 532_528, 1: 1_204_224}  # fc0/W (784 x 384 x 4) alone on PS 1; README
    # shaped: PS 1's one big pull (1,204,224 bytes) never beats its 100 Mbit/s link
    big = next(i for i, op in enumerate(profile.ops) if op.resource is Resource.DOWNLINK and op.bytes == 1_204_224)
    fastest = min(s.duration_us[big] for s in profile.steps) * 1e-6
    assert 8 * 1_204_224 / fastest <= 100e6

    model = registry.get(registry.DEFAULT_MODEL)
    curve = CurveSettings(workers=(1,), warmup_steps=50, target_rel_halfwidth=0.02)
    inputs = model_inputs(profile, AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=curve))
    (point,) = predict_curve(model, inputs, registry.params_for(model), curve)
    traced = profile.job.batch_size / (statistics.mean(s.wall_us for s in profile.steps) / 1e6)
    # within the W = 1 width the default model ships (+-6.2 %, docs/accuracy.md): its fifo order puts a
    # trace's W = 1 up to 4.7 % above the trace's own rate (benchmarks.stream_order); 3 % failed 2 runs in 5
    assert point.throughput == pytest.approx(traced, rel=0.062)
