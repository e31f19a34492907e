"""``AdvisorMwmsCallback`` inside real Keras MultiWorkerMirroredStrategy training, uploading to a
local receiver; the bundle imports into a profile whose W = 1 ring prediction matches the
measured rate; the shapes it cannot trace fail loudly.

Run (TensorFlow lives in its own venv, never the main environment):

    /tmp/tfvenv/bin/pip install --no-deps -e .
    /tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy/test_keras_mwms.py

Independent truths: the gradient bytes derived by hand from the layer widths (float32, 4 bytes
per weight and bias); TF's pack layout for the default ``bytes_per_pack=0`` (one pack, the
variable list reversed: ``cross_device_ops.CollectiveAllReduce._all_reduce``); the measured
examples/s of the untraced steps after the profile, timed by the program itself.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.profiling import ProfilingUnsupportedError
from tests.conftest import REPO
from tests.profiling import Receiver

pytestmark = pytest.mark.heavy

PROGRAM = Path(__file__).with_name("mwms_program.py")
TOTAL_STEPS = 90  # the program's steps per run
BATCH = 16
WARMUP, STEPS = 10, 30
# (64, 256, 128, 10) dense layers, float32: kernel in x out x 4 bytes, bias out x 4 bytes
GRADIENTS = {"fc0/kernel": 64 * 256 * 4, "fc0/bias": 256 * 4, "fc1/kernel": 256 * 128 * 4, "fc1/bias": 128 * 4,
             "fc2/kernel": 128 * 10 * 4, "fc2/bias": 10 * 4}


@pytest.fixture(scope="module")
def tf() -> Any:
    """TensorFlow, imported here (not at collection) so the default run does not even mention it."""
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu (see the module docstring)")


def _run(mode: str, url: str, tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("ADVISOR_")}
    env.update({"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": url, "ADVISOR_TOKEN_FILE": str(token),
                "ADVISOR_PROFILE_WARMUP": str(WARMUP), "ADVISOR_PROFILE_STEPS": str(STEPS),
                "ADVISOR_STOP_AFTER_UPLOAD": "0", "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", **extra})
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(PROGRAM), mode, str(out)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    return proc, out


def test_one_worker_profile_uploads_and_predicts_its_own_rate(tf: Any, tmp_path: Path) -> None:
    with Receiver() as rx:
        proc, out = _run("train", rx.url, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(rx.requests) == 1
    request = rx.requests[0]
    assert request.headers["authorization"] == "Bearer t0k3n"
    bundle = request.bundle()
    assert (bundle["format"], bundle["kind"], bundle["meta"]["world_size"]) == ("advisor-allreduce-upload", "tf-mwms", 1)
    assert {g["name"]: g["bytes"] for g in bundle["gradients"]} == GRADIENTS
    assert bundle["buckets"] == [[5, 4, 3, 2, 1, 0]]  # one pack, last variable first
    # the process's CPU per untraced warm-up step: measured, and no more than the machine's cores
    # could give in the traced steps' longest wall time
    longest_s = max(step["wall_us"] for step in bundle["steps"]) / 1e6
    assert 0 < bundle["meta"]["cpu_s_per_step"] <= (os.cpu_count() or 1) * longest_s
    # the step logs its loss only (a float32 scalar with one worker): Keras's MWMS step reduces it as
    # a 4-byte sum and an 8-byte int64 count, after the gradients' pack
    assert bundle["collectives"] == [{"name": "loss/sum", "bytes": 4}, {"name": "loss/count", "bytes": 8}]
    assert len(bundle["steps"]) == STEPS
    assert [s["index"] for s in bundle["steps"]] == list(range(WARMUP, WARMUP + STEPS))
    for step in bundle["steps"]:
        ready = step["grad_ready_us"]
        assert step["backward_start_us"] < ready[4] <= ready[2] <= ready[0] == step["backward_end_us"]  # backward order
    profile = read_allreduce_upload(bundle, origin="upload")
    assert profile.job.kind.value == "tf-mwms"

    # measured: the untraced steps after the profile (the first few after it pay for reading the trace)
    ends = json.loads(out.read_text())["ends"]
    tail = ends[WARMUP + STEPS + 5:]
    measured = BATCH * (len(tail) - 1) / (tail[-1] - tail[0])
    path = tmp_path / "profile.json.gz"
    path.write_bytes(gzip.compress(json.dumps(bundle).encode()))
    cli = subprocess.run([sys.executable, "-m", "advisor.cli", "predict", str(path), "--bandwidth", "1e9",
                          "--workers", "1", "--json", "--quiet"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert cli.returncode == 0, cli.stderr[-2000:]
    predicted = json.loads(cli.stdout)["curve"][0]["throughput"]
    assert predicted == pytest.approx(measured, rel=0.03), (predicted, measured)


def test_steps_per_execution_above_one_is_refused(tf: Any, tmp_path: Path) -> None:
    with Receiver() as rx:
        proc, _ = _run("spe2", rx.url, tmp_path)
    assert proc.returncode != 0
    assert "steps_per_execution=2" in proc.stderr and "ProfilingUnsupportedError" in proc.stderr
    assert rx.requests == []


def test_another_strategy_is_refused(tf: Any, tmp_path: Path) -> None:
    with Receiver() as rx:
        proc, _ = _run("mirrored", rx.url, tmp_path)
    assert proc.returncode != 0
    assert "MirroredStrategy" in proc.stderr and "MultiWorkerMirroredStrategy().scope()" in proc.stderr
    assert rx.requests == []


def test_more_than_one_worker_is_refused_at_construction(tf: Any, tmp_path: Path) -> None:
    from advisor.profiling.keras_mwms import AdvisorMwmsCallback

    tf_config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
    env = {"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": "http://127.0.0.1:9/x", "TF_CONFIG": json.dumps(tf_config)}
    with pytest.raises(ProfilingUnsupportedError, match="2 worker"):
        AdvisorMwmsCallback(batch_size=BATCH, environ=env)
    assert not AdvisorMwmsCallback(batch_size=BATCH, environ={}).active


def test_the_ps_keras_callback_points_mwms_users_here(tf: Any) -> None:
    from advisor.profiling import AdvisorKerasCallback

    with pytest.raises(ProfilingUnsupportedError, match="AdvisorMwmsCallback") as info:
        AdvisorKerasCallback(batch_size=BATCH, environ={"ADVISOR_PROFILE": "1"})
    assert "ParameterServerStrategy cannot be recorded" in str(info.value)


def test_two_real_workers_count_their_steps_and_the_jobs_progress(tf: Any, tmp_path: Path) -> None:
    """Two processes of one MultiWorkerMirroredStrategy job on 127.0.0.1, the callback counting
    (ADVISOR_METRICS_PORT, no ADVISOR_PROFILE): each counts its own TOTAL_STEPS batches of BATCH,
    and each reads the job's progress from the optimizer's iterations as both workers' batches
    (the strategy is a CollectiveAllReduceStrategy by class; it is recognised by what it is)."""
    import socket

    def free() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    cluster = {"worker": [f"127.0.0.1:{free()}", f"127.0.0.1:{free()}"]}
    procs, outs = [], []
    for index in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
        env.update({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                    "ADVISOR_METRICS_PORT": str(free()), "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"})
        outs.append(tmp_path / f"out{index}.json")
        procs.append(subprocess.Popen([sys.executable, str(PROGRAM), "count", str(outs[-1])], env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    for out in outs:
        found = json.loads(out.read_text())
        assert found["iterations"] == TOTAL_STEPS
        assert (found["steps"], found["examples"]) == (TOTAL_STEPS, TOTAL_STEPS * BATCH)
        assert found["progress"] == TOTAL_STEPS * BATCH * 2  # both workers' batches per iteration
