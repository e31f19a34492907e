r"""Record real TensorFlow parameter-server traces with 1 or more PS, the way tests/data/ps-async was taken.

Why: the advisor's multi-PS paths (the W = 1 anchor on a profile traced with 2 PS, the ``--ps M``
what-if) need ground truth that ``tests/data/ps-async`` (1 PS only) lacks. This script records one
program's profile with M PS and 1 worker through the project's own hook
(``advisor.profiling.AdvisorProfilingHook``), so the result is the upload bundle the importers read.

Testbed (as ``tests/data/ps-async/README.md`` describes it): every task (each PS, the worker) is its own
process in its own Linux network namespace; the namespaces are joined by a bridge that lives in a
namespace of its own (nothing is added to the host's namespace). Each PS link is shaped with
``tc tbf`` in both directions (``--shape ps``, the default: the qdisc on the PS's end of its veth
shapes PS -> bridge, the one on the bridge's end shapes bridge -> PS); ``--shape all`` shapes the
worker's link too. TCP congestion control is ``cubic`` on every connection (the shared data's main set; set
as a route attribute because a namespace's sysctl may be read-only). Accelerator compute is emulated: after every dense layer a
``tf.numpy_function`` sleeps in the forward pass and a matching one in the backward pass (custom
gradient). The worker runs a small HTTP receiver on its own loopback that stores the bundle the
hook uploads.

Run as root, with a Python that has tensorflow-cpu and advisor (a venv: never the main one):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install -e '.[test,tensorflow]'
    /tmp/tfvenv/bin/python scripts/record_ps_traces.py --ps 1 --out tests/data/ps-traces/mlp_ps1_bw100.trace.json.gz
    /tmp/tfvenv/bin/python scripts/record_ps_traces.py --ps 2 --out tests/data/ps-traces/mlp_ps2_bw100.trace.json.gz

``--no-netns`` falls back to plain loopback (no shaping: use only where namespaces do not work).
The namespaces (``advrec-*``) are deleted when the run ends, also on failure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import netns_testbed as testbed  # scripts/netns_testbed.py, beside this script

PREFIX = "advrec"
SUBNET = "10.213.77"
PORT = 2222
MODELS = {
    # widths (input to classes), batch, emulated compute per layer and pass in seconds
    # (4 layers x 2 passes x 3 ms = 24 ms, about the 25 ms of tests/data/ps-async's mlp)
    "mlp": ((784, 384, 256, 128, 10), 32, 0.003),
}


# ---------------------------------------------------------------- network namespaces and tc


def task_names(n_ps: int, workers: int = 1) -> list[str]:
    return [f"ps{i}" for i in range(n_ps)] + [f"w{k}" for k in range(workers)]


def setup_network(n_ps: int, mbit: float, queue_ms: int, shape: str, workers: int = 1) -> dict[str, str]:
    """The testbed (netns_testbed.py), the PS links shaped (all links with ``shape == "all"``);
    returns each task's IP address."""
    return testbed.setup_network(PREFIX, SUBNET, task_names(n_ps, workers), mbit=mbit, queue_ms=queue_ms,
                                 shaped=lambda name: name.startswith("ps") or shape == "all")


def teardown_network() -> None:
    """Delete every namespace this script creates."""
    testbed.teardown_network(PREFIX)


# ---------------------------------------------------------------- the training program


def build_model(tf, widths: Sequence[int], batch: int, sleep_s: float):  # type: ignore[no-untyped-def]
    """The MLP on random inputs with a sleep after every layer in both passes; (global step, train op)."""
    import numpy as np

    def sleeper(tag: str):  # type: ignore[no-untyped-def]
        def sleep(x: np.ndarray) -> np.ndarray:
            time.sleep(sleep_s)
            return x
        sleep.__name__ = f"sleep_{tag}"
        return sleep

    def emulated(h, i: int):  # type: ignore[no-untyped-def]
        @tf.custom_gradient
        def layer_compute(x):  # type: ignore[no-untyped-def]
            y = tf.compat.v1.numpy_function(sleeper(f"fwd{i}"), [x], tf.float32, name=f"compute_fwd{i}")
            y.set_shape(x.shape)

            def grad(dy):  # type: ignore[no-untyped-def]
                g = tf.compat.v1.numpy_function(sleeper(f"bwd{i}"), [dy], tf.float32, name=f"compute_bwd{i}")
                g.set_shape(dy.shape)
                return g
            return y, grad
        return layer_compute(h)

    global_step = tf.compat.v1.train.get_or_create_global_step()
    h = tf.random.normal([batch, widths[0]])
    labels = tf.random.uniform([batch], maxval=widths[-1], dtype=tf.int32)
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        w = tf.compat.v1.get_variable(f"fc{i}/W", [fan_in, fan_out])
        b = tf.compat.v1.get_variable(f"fc{i}/b", [fan_out], initializer=tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(widths) - 2:
            h = tf.nn.relu(h)
        h = emulated(h, i)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, h)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
    return global_step, train_op


class GreedyByBytes:
    """A ``ps_strategy``: each variable to the PS holding the fewest bytes so far (ties: lowest
    index), as TF 1's ``contrib.training.GreedyLoadBalancingStrategy`` with ``byte_size_load_fn``
    did (gone from TF 2)."""

    def __init__(self, tf, n_ps: int) -> None:  # type: ignore[no-untyped-def]
        self._tf = tf
        self._loads = [0] * n_ps

    def __call__(self, op) -> int:  # type: ignore[no-untyped-def]
        shape = self._tf.TensorShape(op.get_attr("shape"))
        size = (shape.num_elements() or 0) * self._tf.as_dtype(op.get_attr("dtype")).base_dtype.size
        ps = min(range(len(self._loads)), key=lambda i: (self._loads[i], i))
        self._loads[ps] += size
        return ps


def run_task(args: argparse.Namespace) -> None:
    """One task of the cluster (inside its namespace): a PS serves; the worker trains and records."""
    import tensorflow as tf

    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    threads = dict(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1 if job == "ps" else 2)
    server = tf.distribute.Server(cluster, job_name=job, task_index=index, config=tf.compat.v1.ConfigProto(**threads))
    if job == "ps":
        server.join()
        return
    widths, batch, sleep_s = MODELS[args.model]
    tf.compat.v1.disable_eager_execution()
    strategy = GreedyByBytes(tf, len(tf_config["cluster"]["ps"])) if args.placement == "greedy" else None
    setter = tf.compat.v1.train.replica_device_setter(cluster=cluster, worker_device=f"/job:worker/task:{index}",
                                                      ps_strategy=strategy)
    with tf.compat.v1.device(setter):
        global_step, train_op = build_model(tf, widths, batch, sleep_s)
    if args.measure_steps:
        _measure(tf, server, index, global_step, train_op, args.measure_steps, threads, Path(args.out))
        return

    ingest = testbed.Ingest()
    env = ingest.environ(args.steps, args.warmup, TF_CONFIG=os.environ["TF_CONFIG"],
                         ADVISOR_BANDWIDTH_MBIT=str(args.mbit))
    from advisor.profiling import AdvisorProfilingHook

    hook = AdvisorProfilingHook(batch_size=batch, model_name=args.model, environ=env)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"], **threads)
    runs = 0
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=index == 0, hooks=[hook], config=config, log_step_count_steps=0
    ) as session:
        while not session.should_stop() and runs < args.warmup + args.steps + 50:
            session.run([train_op, global_step])
            runs += 1
    Path(args.out).write_bytes(ingest.bundle("the hook"))  # already gzip (advisor.profiling.bundle)
    print(f"worker: {runs} runs, bundle {len(testbed.IngestStub.body)} bytes -> {args.out}", flush=True)


def _measure(tf, server, index: int, global_step, train_op, steps: int, threads: dict, out: Path) -> None:  # type: ignore[no-untyped-def]
    """Train ``steps`` steps untraced, logging (start, end, global step) of each: the measured runs."""
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"], **threads)
    log = []
    ready = out.with_name(f"{out.name}.ready")
    ready.mkdir(exist_ok=True)
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=index == 0, config=config, log_step_count_steps=0
    ) as session:
        # start together: TF takes seconds to start, and a worker that ran alone first would
        # leave no window where all run
        (ready / f"w{index}").touch()
        while len(list(ready.iterdir())) < workers:
            time.sleep(0.05)
        for _ in range(steps):
            start = time.time()
            _, step = session.run([train_op, global_step])
            log.append((start, time.time(), int(step)))
    out.with_name(f"{out.name}.w{index}").write_text(json.dumps(log))


def throughput_window(logs: Sequence[Sequence[tuple[float, float, int]]], batch: int, skip: int = 20) -> float:
    """Examples/s summed over workers in the window where all run (as tests/data/ps-async's ``thr_window``):
    from the latest end of a worker's ``skip``-th step to the earliest end of a worker's last
    step; each worker's steps that end inside it, times the batch, over its length."""
    start = max(log[skip - 1][1] for log in logs)
    end = min(log[-1][1] for log in logs)
    if end <= start:
        raise SystemExit("no window where all workers run: train more steps")
    done = sum(1 for log in logs for (_, e, _) in log if start < e <= end)
    return done * batch / (end - start)


# ---------------------------------------------------------------- orchestration


def record(args: argparse.Namespace, workers: int = 1, out: Path | None = None) -> None:
    """One run: trace 1 worker (``--out`` gets the bundle), or measure ``workers`` (``out`` gets
    each worker's step log, ``<out>.w<k>``)."""
    out = (out or Path(args.out)).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    names = task_names(args.ps, workers)
    if args.no_netns:
        addresses = {name: "127.0.0.1" for name in names}
        ports = {name: PORT + k for k, name in enumerate(names)}
    else:
        try:
            addresses = setup_network(args.ps, args.mbit, args.queue_ms, args.shape, workers)
        except BaseException:
            teardown_network()
            raise
        ports = {name: PORT for name in names}
    cluster = {
        "ps": [f"{addresses[f'ps{i}']}:{ports[f'ps{i}']}" for i in range(args.ps)],
        "worker": [f"{addresses[f'w{k}']}:{ports[f'w{k}']}" for k in range(workers)],
    }
    logs = Path(tempfile.mkdtemp(prefix="advrec-logs-"))
    base = [sys.executable, str(Path(__file__).resolve()), "task", "--model", args.model, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--mbit", str(args.mbit), "--placement", args.placement, "--out", str(out)]
    if args.measure:
        base += ["--measure-steps", str(args.measure_steps or 100)]
    repo = str(Path(__file__).resolve().parent.parent)
    try:
        with testbed.processes() as procs:
            for name in names:
                role, index = ("worker", int(name[1:])) if name.startswith("w") else ("ps", int(name[2:]))
                env = {**os.environ, "PYTHONPATH": repo, "TF_CPP_MIN_LOG_LEVEL": "2",
                       "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})}
                prefix = [] if args.no_netns else ["ip", "netns", "exec", f"{PREFIX}-{name}"]
                with (logs / f"{name}.log").open("wb") as log:
                    procs.append(subprocess.Popen(prefix + base, env=env, stdout=log, stderr=subprocess.STDOUT))
                if role == "ps":
                    time.sleep(1.0)
            testbed.wait_workers(procs[args.ps:], logs, args.timeout)
    finally:
        if not args.no_netns:
            teardown_network()
    if not args.measure:
        print(f"recorded {out} ({out.stat().st_size} bytes)")
    shutil.rmtree(logs, ignore_errors=True)


def measure(args: argparse.Namespace) -> None:
    """Measured throughput with 1 PS or more and each W of ``--measure`` (untraced runs), into
    ``--out`` as JSON: ``results[]`` with ``W``, ``thr_window`` and each worker's step log."""
    out = Path(args.out).resolve()
    batch = MODELS[args.model][1]
    results = []
    for workers in args.measure:
        scratch = out.with_name(f"{out.name}.run")
        shutil.rmtree(scratch.with_name(f"{scratch.name}.ready"), ignore_errors=True)
        record(args, workers, scratch)
        shutil.rmtree(scratch.with_name(f"{scratch.name}.ready"), ignore_errors=True)
        logs = []
        for k in range(workers):
            part = scratch.with_name(f"{scratch.name}.w{k}")
            logs.append([tuple(x) for x in json.loads(part.read_text())])
            part.unlink()
        thr = throughput_window(logs, batch)
        print(f"W={workers}: {thr:.1f} examples/s", flush=True)
        results.append({"W": workers, "thr_window": thr, "step_log": logs})
    meta = {"model": args.model, "batch": batch, "n_ps": args.ps, "placement": args.placement, "bw_mbit": args.mbit,
            "steps_per_worker": args.measure_steps or 100, "window_skips_steps": 20, "shape": args.shape}
    body = json.dumps({"meta": meta, "results": results}).encode()
    out.write_bytes(gzip.compress(body, mtime=0) if out.name.endswith(".gz") else body)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", choices=("record", "task"), default="record",
                        help="record (default) sets up and runs everything; task is one process of it")
    parser.add_argument("--ps", type=int, default=1, help="parameter servers (1 worker always)")
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--placement", choices=("round-robin", "greedy"), default="round-robin",
                        help="variable placement on the PS: TF's default round-robin, or greedy by bytes")
    parser.add_argument("--steps", type=int, default=60, help="traced steps")
    parser.add_argument("--warmup", type=int, default=10, help="untraced steps first")
    parser.add_argument("--mbit", type=float, default=100.0, help="tbf rate of each shaped link direction")
    parser.add_argument("--queue-ms", type=int, default=100, help="tbf queue (latency)")
    parser.add_argument("--shape", choices=("ps", "all"), default="ps", help="shape the PS links, or every link")
    parser.add_argument("--no-netns", action="store_true", help="plain loopback, no shaping (fallback)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the worker is given up")
    parser.add_argument("--measure", type=lambda t: [int(w) for w in t.split(",")], default=None,
                        help="measure throughput untraced with these worker counts, e.g. 1,2,3,4 (--out gets JSON, gzip if .gz)")
    parser.add_argument("--measure-steps", type=int, default=0,
                        help="steps per worker of a measured run (default 100); in a task: measure, do not trace")
    parser.add_argument("--out", required=True, help="where the upload bundle goes (gzip, as uploaded)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "task":
        run_task(args)
    elif args.measure:
        measure(args)
    else:
        record(args)


if __name__ == "__main__":
    main()
