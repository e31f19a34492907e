"""The huang-replay batch-size what-if against real TensorFlow (heavy suite).

Run as the rest of the heavy suite (``/tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy``).
A small CNN (the shape of ``tests/data/ps-async``'s cnn, without the emulated sleeps: every op is real
arithmetic, so its time grows with the batch) is traced at batch 8 through the profiling hook,
then trained untraced at batch 32 and timed. The model replays the batch-8 trace with
``batch_size=32`` (batch dimensions rescaled, compute re-timed by the per-op-type linear fits)
and must land within 30 % of the measured examples/s, and above its own batch-8 prediction as
the measurement is above the batch-8 measurement. 30 %: the fits extrapolate 4x beyond the
profiled shapes, and one process runs the PS, the worker and the client on a shared CPU.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import advisor.profiling as profiling
from advisor.core.advice import AdviceRequest, prepare_profile
from advisor.core.curve import CurveSettings
from advisor.core.models.huang_replay import MODELS
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from advisor.importers.tf_profile import build_profile_from_trace
from advisor.importers.trace_upload import read_trace_upload_bytes
from tests.heavy.test_tf_profiling import _cluster, _environ
from tests.profiling import Receiver

pytestmark = pytest.mark.heavy

TRACED_BATCH, WHAT_IF_BATCH = 8, 32
LOOPBACK = NetworkModel(10_000e6)  # the hook records ADVISOR_BANDWIDTH_MBIT=10000 (_environ)


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu (see test_tf_profiling.py)")


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("heavy-token\n")
    return path


def _train_cnn(tf: Any, cluster: dict[str, list[str]], batch: int, hooks: list[Any], runs: int) -> list[float]:
    """Serve a PS and a worker here, train a 3-conv CNN on random 8x8x3 images; step times (s)."""
    spec = tf.train.ClusterSpec(cluster)
    tf.distribute.Server(spec, job_name="ps", task_index=0)
    worker = tf.distribute.Server(spec, job_name="worker", task_index=0)
    times: list[float] = []
    with tf.Graph().as_default():
        setter = tf.compat.v1.train.replica_device_setter(cluster=spec, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            h = tf.random.uniform([batch, 8, 8, 3])
            labels = tf.random.uniform([batch], maxval=10, dtype=tf.int32)
            channels = 3
            for i, (out, pool) in enumerate(((32, False), (64, True), (128, True))):
                w = tf.compat.v1.get_variable(f"conv{i}/W", [3, 3, channels, out])
                b = tf.compat.v1.get_variable(f"conv{i}/b", [out], initializer=tf.compat.v1.zeros_initializer())
                h = tf.nn.relu(tf.nn.conv2d(h, w, strides=1, padding="SAME") + b)
                if pool:
                    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
                channels = out
            h = tf.reduce_mean(h, axis=[1, 2])
            w = tf.compat.v1.get_variable("fc/W", [channels, 10])
            logits = tf.matmul(h, w)
            loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
            train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
        config = tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", "/job:worker/task:0"], inter_op_parallelism_threads=2,
            intra_op_parallelism_threads=1,
        )
        with tf.compat.v1.train.MonitoredTrainingSession(
            master=worker.target, is_chief=True, hooks=hooks, config=config, log_step_count_steps=0
        ) as session:
            while not session.should_stop() and len(times) < runs:
                start = time.perf_counter()
                session.run([train, global_step])
                times.append(time.perf_counter() - start)
    return times


def _traced_profile(tf: Any, token: Path) -> Profile:
    cluster = _cluster()
    with Receiver() as rx:
        hook = profiling.AdvisorProfilingHook(batch_size=TRACED_BATCH, model_name="cnn", environ=_environ(cluster, rx.url, token))
        _train_cnn(tf, cluster, TRACED_BATCH, [hook], runs=200)
    assert len(rx.requests) == 1
    return build_profile_from_trace(read_trace_upload_bytes(rx.requests[0].body, origin="heavy"))


def _measured(tf: Any, batch: int) -> float:
    """Examples/s of untraced training at ``batch``, steps 10-80 (after start-up)."""
    times = _train_cnn(tf, _cluster(), batch, [], runs=80)
    return batch / (sum(times[10:]) / len(times[10:]))


def _predicted(profile: Profile, batch: int | None) -> float:
    request = AdviceRequest(network=LOOPBACK, curve=CurveSettings(workers=(1,)))
    inputs = ModelInputs(profile=prepare_profile(profile, request), network=LOOPBACK)
    model = MODELS[0]
    params = model.Params(batch_size=batch)
    model.check(inputs, params)
    samples = model.start(inputs, params, 1, 0).advance(40)
    ends = samples.step_ends_s[0]
    return samples.batch_size * (len(ends) - 10) / float(ends[-1] - ends[9])


def test_batch_size_what_if_matches_a_real_run_at_the_other_batch(tf: Any, token: Path) -> None:
    profile = _traced_profile(tf, token)
    assert profile.job.batch_size == TRACED_BATCH
    assert all(op.input_shapes is not None for op in profile.ops if op.op_type == "Conv2D")
    measured_small, measured_big = _measured(tf, TRACED_BATCH), _measured(tf, WHAT_IF_BATCH)
    predicted_small, predicted_big = _predicted(profile, None), _predicted(profile, WHAT_IF_BATCH)
    assert predicted_big == pytest.approx(measured_big, rel=0.30), (predicted_big, measured_big)
    assert (predicted_big > predicted_small) == (measured_big > measured_small)
