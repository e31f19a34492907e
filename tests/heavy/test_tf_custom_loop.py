"""``AdvisorStepProfiler`` inside a real TF2 custom training loop (``strategy.run`` in a
``tf.function``) under a one-worker MultiWorkerMirroredStrategy, uploading to a local receiver:
the bundle is the Keras callback's (kind ``tf-mwms``), imports into a profile, and its W = 1 ring
prediction matches the rate the loop measured itself; the set-ups it cannot trace fail loudly.

Run (TensorFlow lives in its own venv, never the main environment):

    PYTHONPATH=$PWD /tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy/test_tf_custom_loop.py

The program is ``scripts/record_custom_loop_example.py train`` (its own process: MWMS must be
created before TensorFlow runs anything). Independent truths: the gradient bytes from the layer
widths by hand (float32, 4 bytes per weight and bias) and from the shapes of the model's variables
as the program reports them; TF's pack layout for the default ``bytes_per_pack=0`` (one pack, the
variable list reversed); the loop's own step begin times (``time.perf_counter`` in the program,
not the profiler's clock) and its examples/s on the untraced steps after the profile.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from advisor.importers.uploads import profile_from_upload
from advisor.profiling import ProfilingConfigError, ProfilingUnsupportedError
from tests.conftest import REPO
from tests.profiling import Receiver

pytestmark = pytest.mark.heavy

PROGRAM = REPO / "scripts" / "record_custom_loop_example.py"
BATCH = 32
WARMUP, STEPS = 10, 30
# dense 64-512-256-10, float32: kernel in x out x 4 bytes, bias out x 4 bytes (the program's WIDTHS)
GRADIENTS = {"mlp/fc0/kernel": 64 * 512 * 4, "mlp/fc0/bias": 512 * 4, "mlp/fc1/kernel": 512 * 256 * 4,
             "mlp/fc1/bias": 256 * 4, "mlp/fc2/kernel": 256 * 10 * 4, "mlp/fc2/bias": 10 * 4}


@pytest.fixture(scope="module")
def tf() -> Any:
    """TensorFlow, imported here (not at collection) so the default run does not even mention it."""
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu (see the module docstring)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(url: str, tmp_path: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The program as one worker of a one-worker TF_CONFIG on 127.0.0.1, profiling on."""
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{_free_port()}"]}, "task": {"type": "worker", "index": 0}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
    env.update({"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": url, "ADVISOR_TOKEN_FILE": str(token),
                "ADVISOR_PROFILE_WARMUP": str(WARMUP), "ADVISOR_PROFILE_STEPS": str(STEPS),
                "TF_CONFIG": json.dumps(tf_config), "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", **extra})
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(PROGRAM), "train", str(out), *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=REPO, check=False)
    return proc, out


def test_the_custom_loop_uploads_the_callbacks_bundle_and_predicts_its_own_rate(tf: Any, tmp_path: Path) -> None:
    total = WARMUP + STEPS + 40
    with Receiver() as rx:
        proc, out = _run(rx.url, tmp_path, "--total", str(total), ADVISOR_STOP_AFTER_UPLOAD="0",
                         ADVISOR_BANDWIDTH_MBIT="100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(out.read_text())
    assert ran["uploaded"] and ran["stopped_at"] is None  # ADVISOR_STOP_AFTER_UPLOAD=0: the loop went on
    assert len(rx.requests) == 1
    assert rx.requests[0].headers["authorization"] == "Bearer t0k3n"
    bundle = rx.requests[0].bundle()
    assert (bundle["format"], bundle["version"], bundle["kind"]) == ("advisor-allreduce-upload", 4, "tf-mwms")
    # the process's CPU per untraced warm-up step: measured, and no more than the machine's cores
    # could give in the traced steps' longest wall time
    longest_s = max(step["wall_us"] for step in bundle["steps"]) / 1e6
    assert 0 < bundle["meta"]["cpu_s_per_step"] <= (os.cpu_count() or 1) * longest_s
    assert bundle["collectives"] == [{"name": "loss", "bytes": 4}]  # the loop's declared strategy.reduce of its loss
    assert bundle["meta"]["world_size"] == 1 and bundle["meta"]["batch_size"] == BATCH
    assert bundle["link"] == {"rate_bps": 100e6, "source": "controller-setting"}  # ADVISOR_BANDWIDTH_MBIT=100

    # gradient bytes: by hand from the widths, and from the variables' shapes the program saw
    assert {g["name"]: g["bytes"] for g in bundle["gradients"]} == GRADIENTS
    shapes = {name: math.prod(shape) * 4 for name, (shape, dtype) in ran["variables"].items() if dtype == "float32"}
    assert shapes == GRADIENTS
    assert bundle["buckets"] == [[5, 4, 3, 2, 1, 0]]  # one pack, last variable first

    steps = bundle["steps"]
    assert [s["index"] for s in steps] == list(range(WARMUP, WARMUP + STEPS))
    for step in steps:  # backward runs from the last layer to the first
        ready = step["grad_ready_us"]
        assert step["backward_start_us"] < ready[4] <= ready[2] <= ready[0] == step["backward_end_us"]
        assert step["optimizer_us"][1] > 0  # Adam's updates were found under its scope
    profile = profile_from_upload(bundle, origin="upload")
    assert profile.job.kind.value == "tf-mwms"
    assert len(profile.steps) == STEPS

    # the traced steps on the loop's own clock: step k runs from begins[k] to begins[k + 1]. The first
    # traced step's begin also starts the profiler, so compare from the second traced step on.
    begins = ran["begins"]
    loop_s = begins[WARMUP + STEPS] - begins[WARMUP + 1]
    traced_s = sum(s["wall_us"] for s in steps[1:]) / 1e6
    assert traced_s == pytest.approx(loop_s, rel=0.005, abs=0.002), (traced_s, loop_s)

    # W = 1 (no all-reduce) replays the traced steps: the examples/s the loop timed over them (the first
    # traced step included: its wall is the profiler's begin to the next, which the loop saw a bit longer)
    path = tmp_path / "profile.json.gz"
    path.write_bytes(gzip.compress(json.dumps(bundle).encode()))
    cli = subprocess.run([sys.executable, "-m", "advisor.cli", "predict", str(path), "--workers", "1", "--json",
                          "--quiet"], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert cli.returncode == 0, cli.stderr[-2000:]
    predicted = json.loads(cli.stdout)["curve"][0]["throughput"]
    timed = BATCH * STEPS / (begins[WARMUP + STEPS] - begins[WARMUP])
    assert predicted == pytest.approx(timed, rel=0.03), (predicted, timed)
    # and the untraced steps after the profile (the first few after it pay for reading the trace and
    # uploading), loosely: the machine records measurements beside this test, and the same untraced steps
    # moved by 10 % between runs of the loop; tracing slows a ~35 ms step by well under that
    tail = begins[WARMUP + STEPS + 5:]
    measured = BATCH * (len(tail) - 1) / (tail[-1] - tail[0])
    assert predicted == pytest.approx(measured, rel=0.2), (predicted, measured)


def test_several_steps_in_one_call_are_refused(tf: Any, tmp_path: Path) -> None:
    with Receiver() as rx:
        proc, _ = _run(rx.url, tmp_path, "--total", "6", "--steps-per-call", "2",
                       ADVISOR_PROFILE_WARMUP="1", ADVISOR_PROFILE_STEPS="2")
    assert proc.returncode != 0
    assert "ProfilingUnsupportedError" in proc.stderr and "ran 2 times in traced step 1" in proc.stderr
    assert "run one step per call" in proc.stderr
    assert rx.requests == []


def test_when_the_data_runs_out_the_steps_that_ran_are_uploaded(tf: Any, tmp_path: Path) -> None:
    # 2 warm-up steps, then 4 more batches: steps 2-5 are traced; step 6 begins and finds no data
    with Receiver() as rx:
        proc, out = _run(rx.url, tmp_path, "--examples", str(BATCH * 6), ADVISOR_PROFILE_WARMUP="2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the data ran out after 6 steps" in proc.stderr
    assert len(rx.requests) == 1
    steps = rx.requests[0].bundle()["steps"]
    assert [s["index"] for s in steps] == [2, 3, 4, 5]
    begins = json.loads(out.read_text())["begins"]  # 7 begins: steps 0-6, the last one failed at once
    assert len(begins) == 7
    assert sum(s["wall_us"] for s in steps[1:]) / 1e6 == pytest.approx(begins[6] - begins[3], rel=0.01, abs=0.002)


def _environ(**extra: str) -> dict[str, str]:
    return {"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": "http://127.0.0.1:9/x", **extra}


def test_what_it_refuses_at_construction(tf: Any) -> None:
    import keras

    from advisor.profiling import AdvisorStepProfiler

    optimizer = keras.optimizers.SGD(0.1)
    two = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
    with pytest.raises(ProfilingUnsupportedError, match="2 worker"):
        AdvisorStepProfiler(None, None, optimizer, BATCH, environ=_environ(TF_CONFIG=json.dumps(two)))
    with pytest.raises(ProfilingConfigError, match="AdvisorStepProfiler needs the examples per step"):
        AdvisorStepProfiler(None, None, optimizer, environ=_environ())
    with pytest.raises(ProfilingUnsupportedError, match="needs the step's optimizer"):
        AdvisorStepProfiler(None, None, None, BATCH, environ=_environ())
    for strategy in (tf.distribute.MirroredStrategy(), tf.distribute.get_strategy()):
        with pytest.raises(ProfilingUnsupportedError) as info:
            AdvisorStepProfiler(strategy, None, optimizer, BATCH, environ=_environ())
        message = str(info.value)
        assert f"this model trains under {type(strategy).__name__}" in message
        assert "Create tf.distribute.MultiWorkerMirroredStrategy()" in message


def test_without_advisor_profile_it_does_nothing(tf: Any) -> None:
    from advisor.profiling import AdvisorStepProfiler

    profiler = AdvisorStepProfiler(None, None, None, environ={"TF_CONFIG": "not even JSON"})
    assert not profiler.active
    ran = []
    with profiler:
        for k in range(3):
            with profiler.step():
                ran.append(k)
    assert ran == [0, 1, 2] and not profiler.should_stop and profiler.result is None
