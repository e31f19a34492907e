r"""Ground truth for the ring model on TF2 Keras with MultiWorkerMirroredStrategy: the one-worker
bundle recorded by ``advisor.profiling.keras_mwms.AdvisorMwmsCallback`` and measured examples/s
with W = 1..4 real workers (issue 17, part 3).

Testbed (as ``tests/data/ps-async/README.md`` and ``scripts/record_ps_traces.py`` do it for PS): every
worker is its own process in its own Linux network namespace (``mwms-w<k>``); the namespaces are
joined by a bridge in a namespace of its own (``mwms-br``), nothing is added to the host's. Every
worker's link is shaped with ``tc tbf`` in both directions (the qdisc on the worker's end of its
veth shapes worker -> bridge, the one on the bridge's end bridge -> worker), TCP congestion
control ``cubic`` (a route attribute). Workers run Keras ``model.fit`` under
``MultiWorkerMirroredStrategy`` with ``CommunicationImplementation.RING`` (TF's ring collectives,
gRPC between workers), intra-op 1 thread, inter-op 2 threads. Accelerator compute is emulated:
after every dense layer a ``tf.numpy_function`` sleeps in the forward pass and a matching one in
the backward pass (custom gradient), so 4 workers do not contend for the 2 cores; the gradients
are real (4.2 MB of float32 per step, see ``MODELS``).

Run as root with the TensorFlow venv (never the main Python):

    /tmp/tfvenv/bin/python scripts/record_allreduce_mwms.py --mbit 100 --config mwms-mlp4m-bw100
    /tmp/tfvenv/bin/python scripts/record_allreduce_mwms.py --mbit 50 --config mwms-mlp4m-bw50

writes ``tests/data/allreduce/<config>/profile.json.gz`` (the bundle the callback uploads, from a
one-worker run in the same testbed), ``measured.json`` (examples/s per W, each worker's steps over
its own span, summed: ``advisor.profiling.step_logs``; repeats and their spread) and
``step_logs.json.gz`` (each run's step ends, and each worker's CPU seconds over the measured
steps, ``cpu_s``: what the host's cores spent on it). ``--only profile`` / ``--only measure`` does
one half. Namespaces are deleted at the end, also on failure.

``probe`` times lone collectives instead, no training and nothing else running (as
``record_allreduce_ddp.py probe`` does for gloo): every worker all-reduces float32 tensors of 4 bytes,
1 MiB and 8 MiB with the same strategy and options, each a ``tf.function`` of one
``all_reduce`` under ``strategy.run``, ``--probe-reps`` times after a 4-byte all-reduce that lines
the workers up; worker 0 prints the timings, which ``--probe-out`` appends to a JSON file:

    /tmp/tfvenv/bin/python scripts/record_allreduce_mwms.py probe --mbit 100 --workers 2,3,4 \
        --probe-out tests/data/allreduce/grpc-ring-probe/probe.json

``colocate`` runs N copies of the program side by side on the host, each alone (one replica,
nothing to all-reduce with, no namespaces), for every N of ``--workers``, and writes each copy's
wall and CPU seconds per step over ``--measure-steps`` steps after ``--skip`` (a file barrier
starts them together): what a worker's own CPU per step becomes when others share the cores.

    /tmp/tfvenv/bin/python scripts/record_allreduce_mwms.py colocate --model mlp4m --workers 1,2,3,4,5,6,8 \
        --probe-out tests/data/allreduce/colocation-probe/colocate.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import netns_testbed as testbed  # scripts/netns_testbed.py, beside this script

from advisor.profiling.step_logs import synchronous_throughput

PREFIX = os.environ.get("MWMS_NS_PREFIX", "mwms")  # another prefix (mwmsd) lets a diagnostic run beside a sweep
SUBNET = os.environ.get("MWMS_SUBNET", "10.213.79")
PORT = 2223
QUEUE_MS = 20  # tbf queue: shallow, as a switch port (a 100 ms queue inflates the RTT of the ring's two-way flows)
REPO = Path(__file__).resolve().parent.parent
STEP_LOGS = "step_logs.json.gz"  # each measured run's step ends, per W, run and worker
MODELS = {
    # widths (input to classes), batch per worker, sleep per layer forward, backward (s)
    # parameters: 256x1024+1024 + 1024x512+512 + 512x512+512 + 512x10+10 = 1,055,754 float32 = 4,223,016 bytes
    "mlp4m": ((256, 1024, 512, 512, 10), 32, 0.005, 0.010),
    # the parameter-server programs of scripts/record_ps_traces.py, so that a PS trace of one can be
    # scored against MWMS runs of the same program: 784-384-256-128-10 (434,186 parameters,
    # 1,736,744 bytes), 3 ms a layer and pass
    "mlp": ((784, 384, 256, 128, 10), 32, 0.003, 0.003),
}
# convolutional programs: channels (input first, 3x3 stride-2 convolutions on 8x8 inputs), dense
# widths after flattening (1x1x128), batch per worker, sleep per layer forward, backward (s);
# record_ps_traces.py's cnn: 111,050 parameters, 444,200 bytes, 5 layers x 2 passes x 11 ms
CNNS = {"cnn": ((3, 32, 64, 128), (128, 128, 10), 8, 0.011, 0.011)}
PROGRAMS = sorted({*MODELS, *CNNS})


def batch_of(model: str) -> int:
    return CNNS[model][2] if model in CNNS else MODELS[model][1]


def input_shape(model: str) -> tuple[int, ...]:
    return (8, 8, CNNS[model][0][0]) if model in CNNS else (MODELS[model][0][0],)


def classes(model: str) -> int:
    return CNNS[model][1][-1] if model in CNNS else MODELS[model][0][-1]


# ---------------------------------------------------------------- network namespaces and tc


def setup_network(workers: int, mbit: float) -> list[str]:
    """The testbed (netns_testbed.py), tbf on every worker link; the workers' addresses."""
    names = [f"w{k}" for k in range(workers)]
    return list(testbed.setup_network(PREFIX, SUBNET, names, mbit=mbit, queue_ms=QUEUE_MS).values())


def teardown_network() -> None:
    """Delete every namespace this script creates."""
    testbed.teardown_network(PREFIX)


# ---------------------------------------------------------------- the training program


def build_program(tf, keras, model_name: str):  # type: ignore[no-untyped-def]
    """The model ``model_name`` of ``MODELS`` or ``CNNS``, compiled (``build_model``)."""
    if model_name in CNNS:
        channels, widths, _, fwd_s, bwd_s = CNNS[model_name]
        return build_model(tf, keras, widths, fwd_s, bwd_s, channels=channels, name=model_name)
    widths, _, fwd_s, bwd_s = MODELS[model_name]
    return build_model(tf, keras, widths, fwd_s, bwd_s, name=model_name)


def build_model(tf, keras, widths: Sequence[int], fwd_s: float, bwd_s: float,  # type: ignore[no-untyped-def]
                channels: Sequence[int] = (), name: str = "mlp"):
    """Dense layers of ``widths`` (after 3x3 stride-2 convolutions of ``channels`` on 8x8 inputs,
    flattened, when given; ``widths[0]`` is then the flattened size) with a sleep after each layer
    in both passes (emulated accelerator compute)."""

    def sleeper(seconds: float):  # type: ignore[no-untyped-def]
        def sleep(x):  # type: ignore[no-untyped-def]
            time.sleep(seconds)
            return x
        return sleep

    class Compute(keras.layers.Layer):  # type: ignore[misc]
        def call(self, x):  # type: ignore[no-untyped-def]
            @tf.custom_gradient
            def compute(x):  # type: ignore[no-untyped-def]
                y = tf.numpy_function(sleeper(fwd_s), [x], tf.float32, name="compute_fwd")
                y.set_shape(x.shape)

                def grad(dy):  # type: ignore[no-untyped-def]
                    g = tf.numpy_function(sleeper(bwd_s), [dy], tf.float32, name="compute_bwd")
                    g.set_shape(dy.shape)
                    return g
                return y, grad
            return compute(x)

    inputs = keras.Input((8, 8, channels[0]) if channels else (widths[0],))
    h = inputs
    for i, out in enumerate(channels[1:]):
        h = keras.layers.Conv2D(out, 3, strides=2, padding="same", activation="relu", name=f"conv{i}")(h)
        h = Compute(name=f"compute_conv{i}")(h)
    if channels:
        h = keras.layers.Flatten()(h)  # 1 x 1 x 128 after three stride-2 convolutions of 8 x 8
    for i, width in enumerate(widths[1:]):
        h = keras.layers.Dense(width, activation="relu" if i < len(widths) - 2 else None, name=f"fc{i}")(h)
        h = Compute(name=f"compute{i}")(h)
    model = keras.Model(inputs, h, name=name)
    model.compile(optimizer=keras.optimizers.SGD(0.001),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def ring_strategy(tf):  # type: ignore[no-untyped-def]
    """Every task's TensorFlow: intra-op 1 thread, inter-op 2, and MWMS with RING collectives (one
    replica when no TF_CONFIG names a cluster)."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))


def multi_worker_fit(tf: Any, strategy: Any, model: Any, batch: tuple[Any, Any]) -> None:
    """Make Keras 3.15's ``fit`` work with more than one MWMS worker. Its fit first "symbolically
    builds" the model from strategy.reduce("MEAN", batch) of a (x, y) tuple of PerReplica, which
    fails with more than one worker (it reduces a tuple): build everything from a plain ``batch``
    up front and skip that step (the same variables result). And its step reduces each logged
    metric with strategy.reduce("MEAN", v, axis=0), which fails on a scalar with more than one
    worker: log the loss as a 1-element vector instead."""
    with strategy.scope():
        model._symbolic_build(data_batch=(tf.constant(batch[0]), tf.constant(batch[1])))
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    model.compute_metrics = lambda *a, **k: {"loss": tf.reshape(model._loss_tracker.result(), [1])}


def run_task(args: argparse.Namespace) -> None:
    """One worker (inside its namespace): trains with MWMS; logs step ends, or records the bundle."""
    import numpy as np
    import tensorflow as tf

    strategy = ring_strategy(tf)
    import keras

    keras.config.disable_traceback_filtering()  # whole tracebacks when a worker fails

    batch = batch_of(args.model)
    workers = strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_program(tf, keras, args.model)
    rng = np.random.default_rng(0)
    x = rng.random((batch * workers * 8, *input_shape(args.model)), dtype=np.float32)
    y = rng.integers(0, classes(args.model), len(x))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch * workers).repeat()  # global batch
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = dataset.with_options(options)
    multi_worker_fit(tf, strategy, model, (x[:batch], y[:batch]))
    out = Path(args.out)
    if args.profile:
        ingest = testbed.Ingest()
        env = ingest.environ(args.steps, args.warmup, TF_CONFIG=os.environ["TF_CONFIG"],
                             ADVISOR_BANDWIDTH_MBIT=str(args.mbit), ADVISOR_STOP_AFTER_UPLOAD="1")
        from advisor.profiling.keras_mwms import AdvisorMwmsCallback

        callback = AdvisorMwmsCallback(batch_size=batch, model_name=args.model, environ=env)
        model.fit(dataset, steps_per_epoch=args.warmup + args.steps + 20, epochs=1, verbose=0, callbacks=[callback])
        bundle = ingest.bundle("the callback")
        out.write_bytes(bundle)  # already gzip (allreduce_bundle.encode_allreduce_bundle)
        print(f"worker: bundle {len(bundle)} bytes -> {out}", flush=True)
        return
    ends: list[float] = []
    cpu: list[float] = []  # this process's CPU seconds (all threads) at the end of the warm-up and of the last step
    begins: list[int] = []
    logdir = tempfile.mkdtemp(prefix="mwms-diag-")

    class StepLog(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_begin(self, batch_index, logs=None):  # type: ignore[no-untyped-def]
            if args.diag and batch_index == args.skip:
                tf.profiler.experimental.start(logdir)
            if args.diag and args.skip <= batch_index <= args.skip + 10:
                begins.append(time.time_ns())
            if args.diag and batch_index == args.skip + 10:
                tf.profiler.experimental.stop()

        def on_train_batch_end(self, batch_index, logs=None):  # type: ignore[no-untyped-def]
            ends.append(time.time())
            if batch_index in (args.skip - 1, args.skip + args.measure_steps - 1):
                cpu.append(time.process_time())

    model.fit(dataset, steps_per_epoch=args.skip + args.measure_steps, epochs=1, verbose=0, callbacks=[StepLog()])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    out.with_name(f"{out.name}.w{index}").write_text(json.dumps(ends))
    out.with_name(f"{out.name}.w{index}.cpu").write_text(json.dumps(cpu))
    if args.diag and index == 0:
        _diagnose(Path(logdir), begins, out.with_name(f"{out.name}.diag.json"))


def _diagnose(logdir: Path, begins: Sequence[int], out: Path) -> None:
    """Where a multi-worker step's time goes (worker 0, 10 traced steps): backward's end, each
    collective op's start and end, in ms from the step's begin."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from advisor.profiling.mwms_trace import events_from_xspace

    ops = []
    for path in logdir.glob("plugins/profile/*/*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        ops.extend(events_from_xspace(space))
    steps = []
    for start, end in zip(begins, begins[1:]):
        mine = [op for op in ops if start <= op.start_ns < end]
        grads = [op.end_ns for op in mine if "gradient_tape" in op.name.split("/")]
        steps.append({
            "wall_ms": (end - start) / 1e6,
            "backward_end_ms": (max(grads) - start) / 1e6 if grads else None,
            "collectives": [[op.name, round((op.start_ns - start) / 1e6, 2), round((op.end_ns - start) / 1e6, 2)]
                            for op in mine if "Collective" in op.name or "collective" in op.name],
            "after_backward_ms": sorted(((op.end_ns - start) / 1e6, op.name) for op in mine)[-3:],
        })
    out.write_text(json.dumps(steps, indent=1))


# ---------------------------------------------------------------- orchestration


PROBE_BYTES = (4, 2**20, 8 * 2**20)  # a lone all-reduce's sizes: the rounds' latency, then the bytes' time


def run_probe_task(args: argparse.Namespace) -> None:
    """One worker of ``probe``: times lone ring all-reduces of PROBE_BYTES (worker 0 writes them to
    ``<out>.probe``, one JSON object per size)."""
    import tensorflow as tf

    strategy = ring_strategy(tf)

    def reducer(size: int):  # type: ignore[no-untyped-def]
        """A tf.function all-reducing a float32 tensor of ``size`` bytes made in the replica (a
        tensor passed in from outside has no device for MWMS to reduce to)."""
        @tf.function
        def once():  # type: ignore[no-untyped-def]
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.zeros([size // 4])))
        return once

    line_up = reducer(4)
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    stagger = random.Random(index)
    found = []
    for size in PROBE_BYTES:
        once = reducer(size)
        once().numpy()  # traced and run once before timing
        times = []
        cpu_start = time.process_time()
        for _ in range(args.probe_reps):
            line_up().numpy()
            if args.probe_gap_ms:  # the workers idle as between a training step's all-reduces
                # --probe-stagger: each its own uniform share of the gap, so they reach the call apart
                time.sleep(args.probe_gap_ms / 1e3 * (stagger.random() if args.probe_stagger else 1.0))
            start = time.perf_counter()
            once().numpy()
            times.append(time.perf_counter() - start)
        cpu = (time.process_time() - cpu_start) / args.probe_reps
        found.append({"workers": strategy.num_replicas_in_sync, "bytes": size, "median_s": statistics.median(times),
                      "min_s": min(times), "reps": len(times), "cpu_s": round(cpu, 6),
                      **({"gap_s": args.probe_gap_ms / 1e3, "stagger": args.probe_stagger}
                         if args.probe_gap_ms else {})})
    Path(f"{args.out}.probe.w{index}").write_text(json.dumps(found))


def probe(args: argparse.Namespace) -> None:
    """Lone all-reduces at every W of ``--workers`` above 1 (``run_probe_task``), printed and, with
    ``--probe-out``, added to that file with the link rate and how they were taken."""
    scratch = Path(tempfile.mkdtemp(prefix="mwms-probe-")) / "probe"
    found = []
    for workers in (w for w in args.workers if w > 1):
        launch(args, workers, scratch, profile=False, task="probe-task")
        got = json.loads(scratch.with_name("probe.probe.w0").read_text())
        each = [json.loads(scratch.with_name(f"probe.probe.w{k}").read_text()) for k in range(workers)]
        for i, row in enumerate(got):  # every worker's CPU per call (line-up included), worker 0 the timings
            row["cpu_s"] = [rows[i]["cpu_s"] for rows in each]
        for row in got:
            print(json.dumps(row), flush=True)
        found += got
    if args.probe_out:
        how = (f"scripts/record_allreduce_mwms.py probe: TensorFlow 2.21 CPU MultiWorkerMirroredStrategy, "
                      f"CommunicationImplementation.RING (gRPC between workers), one process per worker in its own "
                      f"network namespace, every worker link tc tbf at the run's bandwidth_bps both ways (burst "
                      f"{testbed.BURST}, queue {QUEUE_MS} ms, TCP cubic); each size a tf.function of one all_reduce "
                      f"under strategy.run, timed {args.probe_reps} times on worker 0 after a 4-byte all-reduce "
                      "that lines the workers up; cpu_s: each worker's CPU seconds (all its threads) per timed call, "
                      "the line-up all-reduce included; no training, nothing else running"
               + (f"; gap_s: every worker slept that long after the line-up, before the timed call"
                  + (" (stagger: each a uniform random share of it, seeded by its index)" if args.probe_stagger else "")
                  if args.probe_gap_ms else ""))
        testbed.add_probe_run(Path(args.probe_out), how, {"bandwidth_bps": args.mbit * 1e6, "timings": found})


def run_colocate_task(args: argparse.Namespace) -> None:
    """One copy of ``colocate``: the program alone (no TF_CONFIG), after the barrier of
    ``args.copies`` ready files beside ``args.out``; writes its wall and CPU seconds per step."""
    import numpy as np
    import tensorflow as tf

    strategy = ring_strategy(tf)
    import keras

    with strategy.scope():
        model = build_program(tf, keras, args.model)
    batch = batch_of(args.model)
    rng = np.random.default_rng(0)
    x = rng.random((batch * 8, *input_shape(args.model)), dtype=np.float32)
    y = rng.integers(0, classes(args.model), len(x))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    marks: list[tuple[float, float]] = []

    class Marks(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch_index, logs=None):  # type: ignore[no-untyped-def]
            if batch_index in (args.skip - 1, args.skip + args.measure_steps - 1):
                marks.append((time.perf_counter(), time.process_time()))

    out = Path(args.out)
    out.with_name(f"{out.name}.ready.{os.getpid()}").write_text("1")
    while len(list(out.parent.glob(f"{out.name}.ready.*"))) < args.copies:
        time.sleep(0.05)
    model.fit(dataset, steps_per_epoch=args.skip + args.measure_steps, epochs=1, verbose=0, callbacks=[Marks()])
    (wall0, cpu0), (wall1, cpu1) = marks
    out.with_name(f"{out.name}.{os.getpid()}").write_text(json.dumps(
        {"step_s": (wall1 - wall0) / args.measure_steps, "cpu_s": (cpu1 - cpu0) / args.measure_steps}))


def colocate(args: argparse.Namespace) -> None:
    """``colocate``: N copies side by side for every N of ``--workers`` (``run_colocate_task``),
    printed and, with ``--probe-out``, added to that file."""
    found = []
    for copies in args.workers:
        scratch = Path(tempfile.mkdtemp(prefix="mwms-colocate-"))
        with testbed.processes() as procs:
            for _ in range(copies):
                env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
                env.pop("TF_CONFIG", None)
                procs.append(subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "colocate-task", "--model", args.model,
                     "--out", str(scratch / "copy"), "--copies", str(copies), "--skip", str(args.skip),
                     "--measure-steps", str(args.measure_steps)], env=env))
            for proc in procs:
                if proc.wait(timeout=args.timeout) != 0:
                    raise SystemExit(f"a copy of {args.model} failed at {copies} copies")
        each = [json.loads(f.read_text()) for f in sorted(scratch.glob("copy.[0-9]*"))]
        row = {"copies": copies, "step_s": [round(e["step_s"], 6) for e in each],
               "cpu_s": [round(e["cpu_s"], 6) for e in each]}
        print(json.dumps(row), flush=True)
        found.append(row)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.probe_out:
        how = (f"scripts/record_allreduce_mwms.py colocate: N copies of the program side by side on the host, each "
               f"alone (TensorFlow 2.21 CPU, MultiWorkerMirroredStrategy without TF_CONFIG: one replica), intra-op 1 "
               f"thread, inter-op 2, started together by a file barrier; step_s and cpu_s: each copy's wall and CPU "
               f"seconds (all its threads) per step over {args.measure_steps} steps after {args.skip}; nothing else "
               "running")
        testbed.add_probe_run(Path(args.probe_out), how, {"model": args.model, "runs": found})


def launch(args: argparse.Namespace, workers: int, out: Path, *, profile: bool, task: str = "task") -> None:
    """One run of ``workers`` workers in their namespaces (``out``: bundle, or step logs ``<out>.w<k>``)."""
    addresses = setup_network(workers, args.mbit) if not args.no_netns else ["127.0.0.1"] * workers
    ports = [PORT] * workers if not args.no_netns else [PORT + k for k in range(workers)]
    cluster = {"worker": [f"{a}:{p}" for a, p in zip(addresses, ports)]}
    logs = Path(tempfile.mkdtemp(prefix="mwms-logs-"))
    base = [sys.executable, str(Path(__file__).resolve()), task, "--model", args.model, "--mbit", str(args.mbit),
            "--out", str(out), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--skip", str(args.skip), "--measure-steps", str(args.measure_steps), "--probe-reps", str(args.probe_reps),
            "--probe-gap-ms", str(args.probe_gap_ms)] + (["--probe-stagger"] if args.probe_stagger else [])
    if profile:
        base.append("--profile")
    if args.diag:
        base.append("--diag")
    try:
        with testbed.processes() as procs:
            for k in range(workers):
                env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
                       "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": k}})}
                prefix = [] if args.no_netns else ["ip", "netns", "exec", f"{PREFIX}-w{k}"]
                if args.cpu_list:
                    prefix += ["taskset", "-c", args.cpu_list]
                with (logs / f"w{k}.log").open("wb") as log:
                    procs.append(subprocess.Popen(prefix + base, env=env, stdout=log, stderr=subprocess.STDOUT))
            testbed.wait_workers(procs, logs, args.timeout)
    finally:
        if not args.no_netns:
            teardown_network()
    shutil.rmtree(logs, ignore_errors=True)


def measure(args: argparse.Namespace, folder: Path) -> None:
    """Measured examples/s per W into ``measured.json`` (merged with what is there: repeats add up)."""
    batch = batch_of(args.model)
    path = folder / "measured.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    runs: dict[int, list[float]] = {int(k): v for k, v in old.get("runs", {}).items()}
    logs_path = folder / STEP_LOGS
    kept = json.loads(gzip.decompress(logs_path.read_bytes())) if logs_path.is_file() else {}
    logs, cpu = kept.get("runs", {}), kept.get("cpu_s", {})
    for _ in range(args.repeats):
        for workers in args.workers:
            scratch = folder / "run"
            for attempt in (1, 2):  # on this shared machine a worker is now and then lost: run it again
                try:
                    launch(args, workers, scratch, profile=False)
                    break
                except SystemExit as exc:
                    print(f"W={workers}: run {attempt} failed: {str(exc)[:300]}", flush=True)
                    if attempt == 2:
                        raise
            ends, used = [], []
            for k in range(workers):
                part, spent = scratch.with_name(f"run.w{k}"), scratch.with_name(f"run.w{k}.cpu")
                ends.append(json.loads(part.read_text()))
                first, last = json.loads(spent.read_text())
                used.append(round(last - first, 4))
                part.unlink()
                spent.unlink()
            rate = synchronous_throughput(ends, batch, args.skip)
            runs.setdefault(workers, []).append(rate)
            logs.setdefault(str(workers), []).append([[round(t, 6) for t in e] for e in ends])
            # runs recorded before CPU was kept have none: each W's list holds the runs that did
            cpu.setdefault(str(workers), []).append(used)
            print(f"W={workers}: {rate:.1f} examples/s, {statistics.fmean(used) / args.measure_steps * 1e3:.1f} ms "
                  "of CPU per worker step", flush=True)
            _write_measured(args, path, runs)
            doc = {"batch_size": batch, "warmup_steps": args.skip, "runs": logs, "cpu_s": cpu,
                   "measure_steps": args.measure_steps}
            logs_path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))


def _write_measured(args: argparse.Namespace, path: Path, runs: dict[int, list[float]]) -> None:
    batch = batch_of(args.model)
    if args.model in CNNS:
        channels, widths, _, fwd_s, bwd_s = CNNS[args.model]
        layers = (f"3x3 stride-2 convolutions {'-'.join(map(str, channels))} on 8x8 inputs, then dense "
                  f"{'-'.join(map(str, widths))}")
    else:
        widths, _, fwd_s, bwd_s = MODELS[args.model]
        layers = f"dense {'-'.join(map(str, widths))}"
    how = (f"Keras 3 model.fit under tf.distribute.MultiWorkerMirroredStrategy with CommunicationImplementation.RING "
           f"(TensorFlow 2.21 CPU, gRPC between workers), one process per worker, each in its own network namespace "
           f"joined by a bridge; every worker link shaped with tc tbf at {args.mbit:g} Mbit/s in both directions "
           f"(burst {testbed.BURST}, queue {QUEUE_MS} ms, TCP cubic). Model: {layers} "
           f"({args.model}, its gradients in one all-reduce pack, TF's default bytes_per_pack=0) "
           f"with emulated accelerator compute: a {fwd_s * 1e3:g} ms sleep after every layer forward and "
           f"{bwd_s * 1e3:g} ms backward (tf.numpy_function), batch {batch} per worker. examples/s = the sum over "
           f"workers of batch x steps / (that worker's time from the end of step {args.skip} to the end of its last "
           f"step): advisor.profiling.step_logs; for workers in lockstep, W x one worker's rate. "
           f"Each repeat is a fresh run; spread is [min, max] over repeats; the value is their median; "
           f"{STEP_LOGS} holds the step ends of the runs that kept them."
           + (f" Every worker ran on CPU {args.cpu_list} of the host only (taskset -c {args.cpu_list})."
              if args.cpu_list else ""))
    points = []
    for workers in sorted(runs):
        rates = runs[workers]
        points.append({"workers": workers, "examples_per_s": round(statistics.median(rates), 2),
                       "steps": args.measure_steps, "repeats": len(rates),
                       "spread": [round(min(rates), 2), round(max(rates), 2)]})
    doc = {"kind": "tf-mwms", "bandwidth_bps": args.mbit * 1e6, "delay_ms": 0.0, "batch_size": batch, "how": how,
           "points": points, "runs": {str(w): [round(r, 3) for r in runs[w]] for w in sorted(runs)}}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", choices=("record", "task", "probe", "probe-task", "colocate",
                                                    "colocate-task"), default="record",
                        help="record (default) sets up and runs everything; task is one worker of it; probe times "
                        "lone all-reduces (module docstring)")
    parser.add_argument("--model", choices=PROGRAMS, default="mlp4m")
    parser.add_argument("--mbit", type=float, default=200.0, help="tbf rate of each worker link direction")
    parser.add_argument("--config", help="name under tests/data/allreduce/ (record mode)")
    parser.add_argument("--only", choices=("profile", "measure"), help="do one half only")
    parser.add_argument("--workers", type=lambda t: [int(w) for w in t.split(",")], default=[1, 2, 3, 4])
    parser.add_argument("--repeats", type=int, default=1, help="measured runs per W (more add to measured.json)")
    parser.add_argument("--steps", type=int, default=30, help="traced steps of the profile")
    parser.add_argument("--warmup", type=int, default=10, help="untraced steps before tracing")
    parser.add_argument("--skip", type=int, default=10, help="measured runs: steps before the window")
    parser.add_argument("--measure-steps", type=int, default=100, help="measured runs: steps in the window")
    parser.add_argument("--no-netns", action="store_true", help="plain loopback, no shaping (fallback)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--cpu-list", help="run every worker on these CPUs only (taskset -c LIST, e.g. 0): "
                        "what the host's cores are worth to the job")
    parser.add_argument("--diag", action="store_true", help="measured runs: trace 10 steps of worker 0 (where the time goes)")
    parser.add_argument("--probe-reps", type=int, default=10, help="probe: timed all-reduces per size")
    parser.add_argument("--probe-out", help="probe: add the timings to this JSON file")
    parser.add_argument("--probe-gap-ms", type=float, default=0.0,
                        help="probe: every worker sleeps this long before each timed all-reduce, after the line-up "
                        "(its threads idle, as between a training step's all-reduces)")
    parser.add_argument("--probe-stagger", action="store_true",
                        help="probe: each worker sleeps a uniform random share of --probe-gap-ms instead (seeded by "
                        "its index), so the workers reach each call apart, as workers slowed unevenly do")
    parser.add_argument("--copies", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    modes = {"task": run_task, "probe-task": run_probe_task, "probe": probe, "colocate-task": run_colocate_task,
             "colocate": colocate}
    if args.mode in modes:
        modes[args.mode](args)
        return
    if not args.config or not args.config.startswith("mwms-"):
        raise SystemExit("--config NAME is required and starts with mwms-")
    folder = REPO / "tests" / "data" / "allreduce" / args.config
    folder.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "profile"):
        launch(args, 1, folder / "profile.json.gz", profile=True)
        print(f"recorded {folder / 'profile.json.gz'}", flush=True)
    if args.only in (None, "measure"):
        measure(args, folder)


if __name__ == "__main__":
    main()
