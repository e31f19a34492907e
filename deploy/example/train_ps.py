r"""A minimal tf.compat.v1 parameter-server training program that advisor can profile.

Every task of the job runs this same file; ``TF_CONFIG`` (set by the training operator, or by
hand) says which task it is. A parameter server serves the variables until it is stopped; a
worker trains a small MLP on synthetic data, asynchronously (``replica_device_setter`` puts the
variables on the parameter servers, plain ``GradientDescentOptimizer.minimize``).

The one line advisor needs is the hook in the worker's ``MonitoredTrainingSession``:
``AdvisorProfilingHook(batch_size=...)``. It records nothing unless the advisor controller
launched this job as a profiling run (``ADVISOR_PROFILE=1``); then worker 0 traces
``ADVISOR_PROFILE_STEPS`` steps, uploads them, and asks the session to stop. With
``ADVISOR_METRICS_PORT`` set (deploy/example-tfjob.yaml sets it on the Worker template), the
same hook counts every step of every worker, ``--batch-size`` examples each, and serves the
counts at ``:<port>/metrics`` for Prometheus (docs/profiling.md, "Observed throughput").

By hand, on one machine (two shells; see docs/profiling.md for the ADVISOR_* variables):

    CLUSTER='"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}'
    TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" python deploy/example/train_ps.py
    # in the second shell, the same CLUSTER, and the worker (add the ADVISOR_* variables to profile):
    TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" python deploy/example/train_ps.py --steps 200
    # to watch its counters, start the worker with ADVISOR_METRICS_PORT=9464 and, meanwhile:
    curl -s 127.0.0.1:9464/metrics | grep ^advisor_training
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence

import tensorflow as tf

from advisor.profiling import AdvisorProfilingHook


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=1000, help="train until the global step reaches this")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per step per worker")
    parser.add_argument("--layers", default="784,256,128,10", help="MLP widths, input to classes")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    return parser.parse_args(argv)


def build_model(widths: Sequence[int], batch_size: int, learning_rate: float) -> tuple[tf.Tensor, tf.Operation]:
    """An MLP on random inputs: returns (global step, train op). Variables: W and b per layer."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    x = tf.random.normal([batch_size, widths[0]])
    labels = tf.random.uniform([batch_size], maxval=widths[-1], dtype=tf.int32)
    h = x
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        w = tf.compat.v1.get_variable(f"fc{i}/W", [fan_in, fan_out])
        b = tf.compat.v1.get_variable(f"fc{i}/b", [fan_out], initializer=tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(widths) - 2:
            h = tf.nn.relu(h)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, h)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(learning_rate).minimize(loss, global_step=global_step)
    return global_step, train_op


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], int(tf_config["task"].get("index", 0))
    server = tf.distribute.Server(cluster, job_name=job, task_index=index)
    if job == "ps":
        server.join()  # serves variables until the pod is deleted
        return

    tf.compat.v1.disable_eager_execution()
    worker = f"/job:{job}/task:{index}"
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=cluster, worker_device=worker)):
        widths = [int(w) for w in args.layers.split(",")]
        global_step, train_op = build_model(widths, args.batch_size, args.learning_rate)

    hooks = [AdvisorProfilingHook(batch_size=args.batch_size, model_name="mlp")]
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", worker])  # talk to the PS only
    # The step limit is checked on the fetched global step rather than with StopAtStepHook, whose
    # read of the global step goes through a cond (initialized_value): extra transfers every step.
    step = 0
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=index == 0, hooks=hooks, config=session_config, log_step_count_steps=0
    ) as session:
        while not session.should_stop() and step < args.steps:
            _, step = session.run([train_op, global_step])
    logging.info("worker %d done", index)


if __name__ == "__main__":
    main()
