r"""A small TF2 custom training loop under ``MultiWorkerMirroredStrategy``, profiled by
``advisor.profiling.AdvisorStepProfiler``, and the recorder of its example bundle
``tests/data/allreduce/mwms-custom-loop/profile.json.gz``.

Record the example (one worker on 127.0.0.1, no network namespace, no root; TensorFlow's venv):

    /tmp/tfvenv/bin/python scripts/record_custom_loop_example.py

starts a stand-in for the controller's ingest endpoint on 127.0.0.1 (``netns_testbed.Ingest``),
runs the program below as its own process with ``ADVISOR_PROFILE=1`` and a one-worker
``TF_CONFIG`` (127.0.0.1, a free port), and writes the bundle it uploaded, byte for byte, to
``--out`` (default the example's folder). The program, alone (the environment says whether and
where to upload; this is also what ``tests/heavy/test_tf_custom_loop.py`` runs):

    python scripts/record_custom_loop_example.py train OUT_JSON [--total N] [--steps-per-call K]
        [--strategy mwms|mirrored] [--examples N]

trains ``--total`` steps (or until ``profiler.should_stop``; or until ``--examples`` run out),
``--steps-per-call`` steps per ``tf.function`` call (a ``tf.range`` loop when > 1), and writes to
OUT_JSON each step's begin time (``time.perf_counter``, taken just before the step's block), the
upload's outcome and the step at which ``should_stop`` turned true.

The model: dense 64-512-256-10 (ReLU between), float32, Adam, batch 32 of random data; after
each dense layer a ``tf.numpy_function`` sleeps 3 ms in the forward pass and 6 ms in the backward
pass (a custom gradient), so the step is mostly emulated accelerator time, not CPU, on a machine
that is recording measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's advisor, not an installed one
sys.path.insert(0, str(REPO / "scripts"))

OUT = REPO / "tests" / "data" / "allreduce" / "mwms-custom-loop"
WIDTHS = (64, 512, 256, 10)  # 64x512+512 + 512x256+256 + 256x10+10 = 33,280 + 131,328 + 2,570 = 167,178 float32
BATCH = 32
FORWARD_S, BACKWARD_S = 0.003, 0.006  # per dense layer
WARMUP, STEPS = 10, 30
BANDWIDTH_MBIT = 100


def build(tf: Any, keras: Any) -> Any:
    """The dense layers, each followed by a sleep in both passes (emulated accelerator compute)."""

    class Sleep(keras.layers.Layer):  # type: ignore[misc]
        def call(self, x):  # type: ignore[no-untyped-def]
            @tf.custom_gradient
            def sleep(x):  # type: ignore[no-untyped-def]
                y = tf.numpy_function(lambda a: (time.sleep(FORWARD_S), a)[1], [x], tf.float32, name="sleep_fwd")
                y.set_shape(x.shape)

                def grad(dy):  # type: ignore[no-untyped-def]
                    g = tf.numpy_function(lambda a: (time.sleep(BACKWARD_S), a)[1], [dy], tf.float32,
                                          name="sleep_bwd")
                    g.set_shape(dy.shape)
                    return g
                return y, grad
            return sleep(x)

    layers: list[Any] = [keras.Input((WIDTHS[0],))]
    for i, width in enumerate(WIDTHS[1:]):
        last = i == len(WIDTHS) - 2
        layers += [keras.layers.Dense(width, activation=None if last else "relu", name=f"fc{i}"),
                   Sleep(name=f"sleep{i}")]
    return keras.Sequential(layers, name="mlp")


def train(args: argparse.Namespace) -> None:
    """The custom training loop (module docstring)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    if args.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:  # first, before TensorFlow runs anything
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    from advisor.profiling import AdvisorStepProfiler

    with strategy.scope():
        model = build(tf, keras)
        optimizer = keras.optimizers.Adam(1e-4)
    loss_of = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    rng = np.random.default_rng(0)
    x = rng.random((BATCH * 8, WIDTHS[0]), dtype=np.float32)
    y = rng.integers(0, WIDTHS[-1], len(x))
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    data = data.repeat() if args.examples is None else data.repeat().take(args.examples // BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    iterator = iter(strategy.experimental_distribute_dataset(data.with_options(options)))

    def step_fn(inputs: Any) -> Any:
        xb, yb = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_of(yb, model(xb, training=True)), global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def one_step(it: Any) -> Any:
        return strategy.reduce("SUM", strategy.run(step_fn, args=(next(it),)), axis=None)

    @tf.function
    def several_steps(it: Any) -> Any:
        loss = tf.constant(0.0)
        for _ in tf.range(args.steps_per_call):
            loss = strategy.reduce("SUM", strategy.run(step_fn, args=(next(it),)), axis=None)
        return loss

    train_step = one_step if args.steps_per_call == 1 else several_steps
    # each step's strategy.reduce of the float32 loss is one more all-reduce (4 bytes) across the workers
    profiler = AdvisorStepProfiler(strategy, model, optimizer, batch_size=BATCH, model_name="mlp-custom-loop",
                                   collectives=[("loss", 4)])
    begins: list[float] = []
    stopped_at = None
    try:
        with profiler:
            for step in range(args.total):
                begins.append(time.perf_counter())
                with profiler.step():
                    train_step(iterator)
                if profiler.should_stop:
                    stopped_at = step
                    break
            begins.append(time.perf_counter())  # the end of the last step
    except tf.errors.OutOfRangeError:
        print(f"the data ran out after {len(begins) - 1} steps", file=sys.stderr)
    result = profiler.result
    args.out.write_text(json.dumps({
        "begins": begins, "stopped_at": stopped_at, "uploaded": result is not None and result.ok,
        "variables": {str(v.path): [list(v.shape), v.dtype] for v in model.trainable_variables},
    }))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record(args: argparse.Namespace) -> None:
    """Run the program once with profiling on, uploading to a local stand-in; keep the bundle."""
    from netns_testbed import Ingest

    ingest = Ingest()
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "worker", "index": 0}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
    env.update(ingest.environ(STEPS, WARMUP, ADVISOR_BANDWIDTH_MBIT=str(BANDWIDTH_MBIT)),
               TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2")
    log = ingest.token.parent / "train.json"
    proc = subprocess.run([sys.executable, __file__, "train", str(log), "--total", str(WARMUP + STEPS + 20)],
                          env=env, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the training program failed ({proc.returncode})")
    body = ingest.bundle("AdvisorStepProfiler")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.json.gz").write_bytes(body)
    ran = json.loads(log.read_text())
    print(f"wrote {args.out / 'profile.json.gz'} ({len(body)} bytes); the loop stopped after step "
          f"{ran['stopped_at']} (profiler.should_stop)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="record the example bundle (the default)")
    rec.add_argument("--out", type=Path, default=OUT)
    run = sub.add_parser("train", help="the custom training loop itself")
    run.add_argument("out", type=Path, help="where the step times go (JSON)")
    run.add_argument("--total", type=int, default=WARMUP + STEPS + 20)
    run.add_argument("--steps-per-call", type=int, default=1)
    run.add_argument("--strategy", choices=("mwms", "mirrored"), default="mwms")
    run.add_argument("--examples", type=int, default=None, help="stop when this many examples are used")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args)
    else:
        if args.command is None:
            args.out = OUT
        record(args)


if __name__ == "__main__":
    main()
