"""A synchronous job's counted examples inside real TensorFlow: the share of a step that moves the model.

Run: /tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy/test_sync_share_tf.py

Independent truths: the R and W given to TensorFlow's ``SyncReplicasOptimizer`` (read back from the
graph it builds, on the chief and on a worker, whatever the optimizer is named: the graphs of
``scripts/record_sync_graphs.py``, whose copies the default suite reads), and, in a real
two-worker run with one backup worker, the global step: the job's aggregated examples are its
updates x R x batch, which the two workers' counters must add up to although each ran a step per
update.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import pytest

import advisor.profiling as profiling
from advisor.profiling.sync_share import SyncShare, sync_share
from tests.heavy.test_tf_profiling import _free_ports, _tf_config
from advisor.profiling import throughput
from tests.heavy.test_tf_throughput import counts, progress

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu")


def _recorder() -> Any:
    """scripts/record_sync_graphs.py, which builds the graphs (and wrote the default suite's copies)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "record_sync_graphs.py"
    spec = importlib.util.spec_from_file_location("record_sync_graphs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_r_and_w_read_back_from_real_graphs(tf: Any) -> None:
    recorder = _recorder()
    for replicas, total, chief, name in recorder.CASES:
        found = sync_share({"node": recorder.graph_nodes(tf, replicas, total, chief, name)})
        if replicas is None:
            assert found is None
        else:  # an update hands out max(W, R) tokens (TensorFlow's tokens_per_step)
            assert found == SyncShare(replicas, max(total, replicas)), (replicas, total, chief, name)
            assert found.share == min(1.0, replicas / total)


BATCH = 8
UPDATES = 30


def test_two_workers_with_a_backup_count_the_aggregated_examples(tf: Any, port: int,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """W = 2, R = 1: each worker runs a step per update, and the job counts one batch per update;
    its progress by the global step (read with every step here) is one batch per update too."""
    from tensorflow.python.training import session_manager

    monkeypatch.setattr(throughput, "GLOBAL_STEP_EVERY_S", 0.0)

    init = session_manager.SessionManager.__init__

    def quick(self: Any, *args: Any, **kwargs: Any) -> None:  # the worker polls for the chief's init
        kwargs["recovery_wait_secs"] = 0.2  # every 0.2 s, not TensorFlow's 30 s
        init(self, *args, **kwargs)

    monkeypatch.setattr(session_manager.SessionManager, "__init__", quick)
    ready = threading.Barrier(2, timeout=120)  # both train: neither runs all the updates alone
    ps, w0, w1 = _free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{w0}", f"127.0.0.1:{w1}"]}
    spec = tf.train.ClusterSpec(cluster)
    tf.distribute.Server(spec, job_name="ps", task_index=0)
    servers = [tf.distribute.Server(spec, job_name="worker", task_index=i) for i in range(2)]
    steps = [0, 0]
    updates = [0, 0]
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            env = {"TF_CONFIG": _tf_config(cluster, "worker", index), "ADVISOR_METRICS_PORT": str(port)}
            hook = profiling.AdvisorProfilingHook(batch_size=BATCH, environ=env)
            with tf.Graph().as_default():
                setter = tf.compat.v1.train.replica_device_setter(cluster=spec,
                                                                  worker_device=f"/job:worker/task:{index}")
                with tf.compat.v1.device(setter):
                    global_step = tf.compat.v1.train.get_or_create_global_step()
                    w = tf.compat.v1.get_variable("w", [16, 4])
                    loss = tf.reduce_sum(tf.matmul(tf.random.normal([BATCH, 16]), w) ** 2)
                    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.01)
                    opt = tf.compat.v1.train.SyncReplicasOptimizer(sgd, replicas_to_aggregate=1, total_num_replicas=2)
                    train = opt.minimize(loss, global_step=global_step)
                hooks = [opt.make_session_run_hook(index == 0), hook]
                config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
                with tf.compat.v1.train.MonitoredTrainingSession(
                        master=servers[index].target, is_chief=index == 0, hooks=hooks, config=config,
                        log_step_count_steps=0, stop_grace_period_secs=2) as session:  # the queue runner's, not 120 s
                    ready.wait()
                    while updates[index] < UPDATES:
                        _, done = session.run([train, global_step])
                        steps[index] += 1
                        updates[index] = int(done)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    examples, counted_steps = counts(port)
    assert min(steps) >= UPDATES / 2  # both trained
    assert counted_steps == sum(steps)  # the steps counter still counts every step
    assert examples == pytest.approx(sum(steps) * BATCH / 2)  # R / W of each step's batch
    # and that is the job's progress, one batch per update (R = 1), within the steps that were
    # under way when the workers stopped (at most one each, counted or not)
    assert abs(examples - max(updates) * BATCH) <= 2 * BATCH
    # the global step's R batches per update, read by whichever worker read last
    assert abs(progress(port) - max(updates) * BATCH) <= 2 * BATCH
