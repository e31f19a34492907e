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
worker's link too. TCP congestion control is ``cubic`` on every connection (the shared data's main
set; ``--congestion bbr`` for BBR; set as a route attribute because a namespace's sysctl may be
read-only). Accelerator compute is emulated: after every dense layer a
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
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import netns_testbed as testbed  # scripts/netns_testbed.py, beside this script

PREFIX = "advrec"
SUBNET = "10.213.77"
PORT = 2222
# a synchronous chief's queue runner waits for gradients that no longer come when training
# stops: the session's close waits this long for it (TF's default, 120 s, per run)
STOP_GRACE_S = 2
MODELS = {
    # widths (input to classes), batch, emulated compute per layer and pass in seconds
    # (4 layers x 2 passes x 3 ms = 24 ms, about the 25 ms of tests/data/ps-async's mlp)
    "mlp": ((784, 384, 256, 128, 10), 32, 0.003),
    # the same MLP with four times its compute (96 ms): transfer and compute about even, between
    # the mlp and the cnn (tests/data/ps-sync/held-out, recorded to check the synchronous model on
    # a program none of its constants saw)
    "mlpmid": ((784, 384, 256, 128, 10), 32, 0.012),
}
# a compute-heavy program (about tests/data/ps-async's cnn: 0.44 MB each way, 110 ms of
# emulated compute, batch 8): 3 convolutions 3x3 (32, 64, 128 channels, stride 2) on 8x8x3
# inputs, flattened (1x1x128), then dense 128-128-10: 111,050 parameters; (channels, dense
# widths from the flattened size), batch, emulated compute per layer and pass
CNNS = {"cnn": ((3, 32, 64, 128), (128, 128, 10), 8, 0.011)}


# ---------------------------------------------------------------- network namespaces and tc


def task_names(n_ps: int, workers: int = 1) -> list[str]:
    return [f"ps{i}" for i in range(n_ps)] + [f"w{k}" for k in range(workers)]


def setup_network(n_ps: int, mbit: float, queue_ms: int, shape: str, workers: int = 1,
                  worker_mbits: Sequence[float] = (), sysctls: dict[str, str] | None = None,
                  congestion: str = "cubic") -> dict[str, str]:
    """The testbed (netns_testbed.py), the PS links shaped (all links with ``shape == "all"``),
    worker k's own link at ``worker_mbit(worker_mbits, k)`` where that is set, ``sysctls`` in
    every namespace and TCP ``congestion`` on every connection; returns each task's IP address."""
    return testbed.setup_network(PREFIX, SUBNET, task_names(n_ps, workers), mbit=mbit, queue_ms=queue_ms,
                                 shaped=lambda name: name.startswith("ps") or shape == "all",
                                 rate=lambda name: worker_mbit(worker_mbits, int(name[1:])) if name.startswith("w")
                                 else None, sysctls=sysctls, congestion=congestion)


def teardown_network() -> None:
    """Delete every namespace this script creates."""
    testbed.teardown_network(PREFIX)


# ---------------------------------------------------------------- the training program


def build_model(tf, model: str, *, sync: int = 0, backup: int = 0, speed: float = 1.0):  # type: ignore[no-untyped-def]
    """The program on random inputs with a sleep after every layer in both passes:
    (global step, train op, the SyncReplicasOptimizer or None). ``sync`` > 0: synchronous
    training over that many workers, ``backup`` of them backup workers (replicas_to_aggregate =
    sync - backup, total_num_replicas = sync). ``speed``: this worker's emulated accelerator
    against the profiled one's (0.5: each sleep twice as long; a slower node)."""
    import numpy as np

    def sleeper(tag: str):  # type: ignore[no-untyped-def]
        def sleep(x: np.ndarray) -> np.ndarray:
            time.sleep(sleep_s / speed)
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
    layer = 0
    if model in CNNS:
        channels, widths, batch, sleep_s = CNNS[model]
        h = tf.random.normal([batch, 8, 8, channels[0]])
        for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
            k = tf.compat.v1.get_variable(f"conv{i}/W", [3, 3, c_in, c_out])
            b = tf.compat.v1.get_variable(f"conv{i}/b", [c_out], initializer=tf.compat.v1.zeros_initializer())
            h = emulated(tf.nn.relu(tf.nn.conv2d(h, k, strides=2, padding="SAME") + b), layer)
            layer += 1
        h = tf.reshape(h, [batch, -1])  # 1 x 1 x 128 after three stride-2 convolutions of 8 x 8
        widths = (int(h.shape[1]), *widths[1:])
    else:
        widths, batch, sleep_s = MODELS[model]
        h = tf.random.normal([batch, widths[0]])
    labels = tf.random.uniform([batch], maxval=widths[-1], dtype=tf.int32)
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        w = tf.compat.v1.get_variable(f"fc{i}/W", [fan_in, fan_out])
        b = tf.compat.v1.get_variable(f"fc{i}/b", [fan_out], initializer=tf.compat.v1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < len(widths) - 2:
            h = tf.nn.relu(h)
        h = emulated(h, layer)
        layer += 1
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, h)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.01)
    if sync:
        optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=max(sync - backup, 1), total_num_replicas=sync)
    train_op = optimizer.minimize(loss, global_step=global_step)
    return global_step, train_op, (optimizer if sync else None)


def worker_speed(speeds: Sequence[float], index: int) -> float:
    """Worker ``index``'s emulated compute speed: ``--worker-speeds`` taken in turn (1.0 if none)."""
    return speeds[index % len(speeds)] if speeds else 1.0


def worker_mbit(mbits: Sequence[float], index: int) -> float | None:
    """Worker ``index``'s own link rate in Mbit/s: ``--worker-mbits`` taken in turn, None (the
    link as ``--shape`` leaves it) for no list or a 0 in it."""
    return (mbits[index % len(mbits)] or None) if mbits else None


def batch_of(model: str) -> int:
    return CNNS[model][2] if model in CNNS else MODELS[model][1]


def load_average() -> float:
    """The machine's 1-minute load average (what a data set's README states per run)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


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


def _start_quickly() -> None:
    """A worker that is not the chief polls for the chief's initialisation every 30 s
    (``SessionManager``'s ``recovery_wait_secs``): half a minute of every run spent waiting. Poll
    every half second instead; nothing measured changes (measurement starts after all sessions
    are up)."""
    from tensorflow.python.training import session_manager

    init = session_manager.SessionManager.__init__

    def quick(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[no-untyped-def]
        kwargs["recovery_wait_secs"] = 0.5
        init(self, *args, **kwargs)

    session_manager.SessionManager.__init__ = quick


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
    batch = batch_of(args.model)
    tf.compat.v1.disable_eager_execution()
    _start_quickly()
    n_ps = len(tf_config["cluster"]["ps"])
    strategy = {"greedy": GreedyByBytes(tf, n_ps), "last-ps": lambda op: n_ps - 1,
                "step-apart": lambda op: 0 if op.name == "global_step" else n_ps - 1,
                "biases-apart": lambda op: 0 if op.name.endswith("/b") else n_ps - 1}.get(args.placement)
    setter = tf.compat.v1.train.replica_device_setter(cluster=cluster, worker_device=f"/job:worker/task:{index}",
                                                      ps_strategy=strategy)
    workers = len(tf_config["cluster"]["worker"])
    with tf.compat.v1.device(setter):
        global_step, train_op, sync_opt = build_model(tf, args.model, sync=workers if args.sync else 0,
                                                      backup=min(args.backup, workers - 1),
                                                      speed=worker_speed(args.worker_speeds, index))
    sync_hooks = [sync_opt.make_session_run_hook(is_chief=index == 0)] if sync_opt is not None else []
    if args.measure_steps:
        _measure(tf, server, index, global_step, train_op, args.measure_steps, threads, Path(args.out),
                 sync_hooks, until_global_step=args.measure_steps if args.sync else None,
                 traced=range(args.skip, args.skip + args.trace_steps) if index < args.trace_workers else range(0))
        return

    ingest = testbed.Ingest()
    env = ingest.environ(args.steps, args.warmup, TF_CONFIG=os.environ["TF_CONFIG"],
                         ADVISOR_BANDWIDTH_MBIT=str(args.mbit))
    from advisor.profiling import AdvisorProfilingHook

    hook = AdvisorProfilingHook(batch_size=batch, model_name=args.model, environ=env)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"], **threads)
    runs = 0
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=index == 0, hooks=[hook, *sync_hooks], config=config, log_step_count_steps=0,
        stop_grace_period_secs=STOP_GRACE_S,
    ) as session:
        while not session.should_stop() and runs < args.warmup + args.steps + 50:
            session.run([train_op, global_step])
            runs += 1
    Path(args.out).write_bytes(ingest.bundle("the hook"))  # already gzip (advisor.profiling.bundle)
    print(f"worker: {runs} runs, bundle {len(testbed.IngestStub.body)} bytes -> {args.out}", flush=True)


def _measure(tf, server, index: int, global_step, train_op, steps: int, threads: dict, out: Path,  # type: ignore[no-untyped-def]
             hooks: Sequence[Any] = (), until_global_step: int | None = None, traced: range = range(0)) -> None:
    """Train ``steps`` steps untraced, logging (start, end, global step) of each: the measured runs.
    Synchronous (``until_global_step``): until the shared global step reaches it, so that no
    worker stops while another waits at the barrier for its gradient."""
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"], **threads)
    log = []
    ready = out.with_name(f"{out.name}.ready")
    ready.mkdir(exist_ok=True)
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=index == 0, config=config, log_step_count_steps=0, hooks=list(hooks),
        stop_grace_period_secs=STOP_GRACE_S,
    ) as session:
        # start together: TF takes seconds to start, and a worker that ran alone first would
        # leave no window where all run
        (ready / f"w{index}").touch()
        while len(list(ready.iterdir())) < workers:
            time.sleep(0.05)
        step = 0
        timings = []  # --trace-steps: where the traced steps' time went (this worker's view, every partition)
        while (step < until_global_step) if until_global_step else (len(log) < steps):
            start = time.time()
            if len(log) in traced:
                meta = tf.compat.v1.RunMetadata()
                _, step = session.run([train_op, global_step], run_metadata=meta,
                                      options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE))
                timings.append(_step_records(meta, start, time.time()))
            else:
                _, step = session.run([train_op, global_step])
            log.append((start, time.time(), int(step)))
            if until_global_step and len(log) > 4 * until_global_step:
                break  # a barrier that never completes: the log says so
    out.with_name(f"{out.name}.w{index}").write_text(json.dumps(log))
    if timings:
        out.with_name(f"{out.name}.w{index}.timings").write_text(json.dumps(timings))


def _step_records(meta, start_s: float, end_s: float) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """One traced step: its client start and end, and each recorded node's device, name, label,
    start and end (microseconds since the epoch, as step_stats keep them)."""
    nodes = [[dev.device, n.node_name, n.timeline_label, n.all_start_micros, n.all_start_micros + n.all_end_rel_micros]
             for dev in meta.step_stats.dev_stats for n in dev.node_stats]
    return {"client": [round(start_s * 1e6), round(end_s * 1e6)], "nodes": nodes}


def update_throughput(logs: Sequence[Sequence[tuple[float, float, int]]], batch: int, replicas: int,
                      skip: int = 20) -> float:
    """Synchronous runs: examples of *aggregated* gradients per second (what the sync model
    counts: a backup worker's dropped gradient moves nothing), over the same window as
    ``throughput_window``: the global-step increase the workers saw between its ends, times
    ``replicas`` x batch, over its length."""
    start = max(log[skip - 1][1] for log in logs)
    end = min(log[-1][1] for log in logs)
    if end <= start:
        raise SystemExit("no window where all workers run: train more steps")
    first = max(s for log in logs for (_, e, s) in log if e <= start)
    last = max(s for log in logs for (_, e, s) in log if e <= end)
    return (last - first) * replicas * batch / (end - start)


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
            addresses = setup_network(args.ps, args.mbit, args.queue_ms, args.shape, workers, args.worker_mbits,
                                      dict(args.sysctl), args.congestion)
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
            "--warmup", str(args.warmup), "--mbit", str(args.mbit), "--placement", args.placement, "--out", str(out),
            "--backup", str(args.backup)] + (["--sync"] if args.sync else []) + \
        (["--worker-speeds", ",".join(map(str, args.worker_speeds))] if args.worker_speeds else [])
    if args.measure:
        base += ["--measure-steps", str(args.measure_steps or 100), "--skip", str(args.skip),
                 "--trace-steps", str(args.trace_steps), "--trace-workers", str(args.trace_workers)]
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
            sampler = start_tcp_sampler(out, args.tcp_sample_ms) if args.tcp_sample_ms and not args.no_netns else None
            try:
                testbed.wait_workers(procs[args.ps:], logs, args.timeout)
            finally:
                if sampler is not None:
                    sampler.kill()
                    sampler.wait()
        if args.measure and not args.no_netns:
            counters = testbed.network_counters(PREFIX, names)
            out.with_name(f"{out.name}.net").write_text(json.dumps(counters))
    finally:
        if not args.no_netns:
            teardown_network()
    if not args.measure:
        print(f"recorded {out} ({out.stat().st_size} bytes)")
    shutil.rmtree(logs, ignore_errors=True)


# ``ss -tin`` of the first PS's namespace every few ms, each sample headed by the wall clock: the
# PS's view of its two connections with each worker, which a traced step's transfer start and end
# cannot show. TensorFlow moves every tensor by a RecvTensor call from the task that needs it, so
# pulls arrive at the worker on the worker's connection to the PS's server (on the PS's side: the
# sender's cwnd, RTT and bytes acked), and pushes at the PS on the PS's connection to the worker's
# server (bytes received and the receiver's RTT estimate). bash's $EPOCHREALTIME keeps one spawn
# (ss) per sample.
PULL_CONNECTION, PUSH_CONNECTION = 0, 1
SS_LOOP = 'while :; do echo "@ $EPOCHREALTIME"; ss -tinH state established; sleep {s}; done'
SS_FIELDS = {"rtt": r"\brtt:([\d.]+)", "cwnd": r"\bcwnd:(\d+)", "bytes_acked": r"\bbytes_acked:(\d+)",
             "bytes_received": r"\bbytes_received:(\d+)", "unacked": r"\bunacked:(\d+)",
             "rcv_rtt": r"\brcv_rtt:([\d.]+)", "retrans": r"\bretrans:\d+/(\d+)"}


def start_tcp_sampler(out: Path, every_ms: float) -> subprocess.Popen[bytes]:
    """The ``ss`` loop in the first PS's namespace, writing to ``<out>.tcp`` (``--tcp-sample-ms``)."""
    with out.with_name(f"{out.name}.tcp").open("wb") as sink:
        return subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-ps0", "bash", "-c",
                                 SS_LOOP.format(s=every_ms / 1e3)], stdout=sink, stderr=subprocess.DEVNULL)


def parse_tcp_samples(text: str, addresses: dict[str, int]) -> list[list[Any]]:
    """``ss`` samples as ``[t, worker, connection, field values in SS_FIELDS order]`` rows, one per
    sample and connection with a worker (``addresses``: worker IPv4 address -> index; other
    peers are left out; a field ``ss`` did not print is None). ``connection`` is
    ``PULL_CONNECTION`` where the PS's server port is the local end, ``PUSH_CONNECTION`` where
    it is the remote one (the worker's server)."""
    rows: list[list[Any]] = []
    t, peer, kind = None, None, PULL_CONNECTION
    for line in text.splitlines():
        if line.startswith("@ "):
            t, peer = float(line[2:]), None
        elif line[:1].isspace():
            if t is not None and peer is not None:
                found = [re.search(pattern, line) for pattern in SS_FIELDS.values()]
                rows.append([t, peer, kind] + [None if m is None else float(m.group(1)) for m in found])
            peer = None
        elif line.strip():
            local, remote = line.split()[-2:]
            pulls = local.endswith(f":{PORT}")
            kind = PULL_CONNECTION if pulls else PUSH_CONNECTION
            peer = addresses.get(_ipv4(remote)) if pulls or remote.endswith(f":{PORT}") else None
    return rows


def _ipv4(endpoint: str) -> str:
    """The IPv4 address of an ``ss`` endpoint, ``10.0.0.2:40000`` or gRPC's IPv4-mapped
    ``[::ffff:10.0.0.2]:40000``."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    return host.removeprefix("::ffff:")


def _take_json(path: Path) -> Any:
    """What a run left beside its step logs (a task's side file), read and removed; None if absent."""
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    path.unlink()
    return doc


def measure(args: argparse.Namespace) -> None:
    """Measured throughput with 1 PS or more and each W of ``--measure`` (untraced runs), into
    ``--out`` as JSON: ``results[]`` with ``W``, ``thr_window`` and each worker's step log."""
    out = Path(args.out).resolve()
    batch = batch_of(args.model)
    skip = args.skip
    results = []
    for workers in args.measure:
        scratch = out.with_name(f"{out.name}.run")
        shutil.rmtree(scratch.with_name(f"{scratch.name}.ready"), ignore_errors=True)
        load_before = load_average()
        record(args, workers, scratch)
        load_after = load_average()
        shutil.rmtree(scratch.with_name(f"{scratch.name}.ready"), ignore_errors=True)
        logs = []
        for k in range(workers):
            part = scratch.with_name(f"{scratch.name}.w{k}")
            logs.append([tuple(x) for x in json.loads(part.read_text())])
            part.unlink()
        traced = {f"traced_steps_w{k}": _take_json(scratch.with_name(f"{scratch.name}.w{k}.timings"))
                  for k in range(min(args.trace_workers, workers))}
        net = _take_json(scratch.with_name(f"{scratch.name}.net"))
        tcp = scratch.with_name(f"{scratch.name}.tcp")
        if tcp.exists():
            ips = {f"{SUBNET}.{args.ps + k + 1}": k for k in range(workers)}  # task_names: the PS first
            traced["tcp_samples_ps0"] = parse_tcp_samples(tcp.read_text(), ips)
            tcp.unlink()
        replicas = max(workers - args.backup, 1) if args.sync else None
        thr = update_throughput(logs, batch, replicas, skip) if replicas else throughput_window(logs, batch, skip)
        print(f"W={workers}: {thr:.1f} examples/s (load {load_before:.2f} before, {load_after:.2f} after)", flush=True)
        results.append({"W": workers, "thr_window": thr, "replicas_to_aggregate": replicas,
                        "load_before": load_before, "load_after": load_after, "step_log": logs}
                       | ({"network_counters": net} if net else {}) | {k: v for k, v in traced.items() if v})
    meta = {"model": args.model, "batch": batch, "n_ps": args.ps, "placement": args.placement, "bw_mbit": args.mbit,
            "steps_per_worker": args.measure_steps or 100, "window_skips_steps": skip, "shape": args.shape,
            "sync": bool(args.sync), "backup_workers": args.backup if args.sync else 0,
            "queue_ms": args.queue_ms, "congestion_control": args.congestion} | \
        ({"sysctls": dict(args.sysctl)} if args.sysctl else {}) | \
        ({"worker_speeds": [worker_speed(args.worker_speeds, k) for k in range(max(args.measure))]}
         if args.worker_speeds else {}) | \
        ({"worker_mbits": [worker_mbit(args.worker_mbits, k) for k in range(max(args.measure))]}
         if args.worker_mbits else {})
    body = json.dumps({"meta": meta, "results": results}).encode()
    out.write_bytes(gzip.compress(body, mtime=0) if out.name.endswith(".gz") else body)


def sysctl_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--sysctl``: a dotted net.* name and a value."""
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("net.") or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not a net.* KEY=VALUE setting")
    return key, value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", choices=("record", "task"), default="record",
                        help="record (default) sets up and runs everything; task is one process of it")
    parser.add_argument("--ps", type=int, default=1, help="parameter servers (1 worker always)")
    parser.add_argument("--model", choices=sorted({*MODELS, *CNNS}), default="mlp")
    parser.add_argument("--sync", action="store_true",
                        help="synchronous training (SyncReplicasOptimizer over all workers)")
    parser.add_argument("--backup", type=int, default=0,
                        help="with --sync: backup workers (replicas_to_aggregate = W - backup, at least 1)")
    parser.add_argument("--skip", type=int, default=20, help="steps per worker left out of the measured window")
    parser.add_argument("--placement", choices=("round-robin", "greedy", "last-ps", "step-apart", "biases-apart"), default="round-robin",
                        help="variable placement on the PS: TF's default round-robin, greedy by bytes; every variable on "
                             "the last PS (the others idle), or all but global_step (step-apart) or the "
                             "biases (biases-apart): which small variables set several PS apart from one")
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
                        help="steps per worker of a measured run (default 100; with --sync: updates); "
                             "in a task: measure, do not trace")
    parser.add_argument("--trace-steps", type=int, default=0,
                        help="measured runs: trace this many of worker 0's steps after the skipped ones (FULL_TRACE: "
                             "every partition's node times, kept as traced_steps_w0; tracing slows those steps)")
    parser.add_argument("--trace-workers", type=int, default=1,
                        help="with --trace-steps: trace the first this many workers (worker k's steps kept as "
                             "traced_steps_w<k>; clocks are one host's, so their times compare)")
    parser.add_argument("--worker-speeds", type=lambda t: [float(s) for s in t.split(",")], default=[],
                        help="heterogeneous workers: each worker's emulated compute speed, taken in turn (e.g. 1,0.5: "
                             "every second worker's sleeps twice as long); default all 1")
    parser.add_argument("--worker-mbits", type=lambda t: [float(s) for s in t.split(",")], default=[],
                        help="heterogeneous NICs: each worker's own link rate in Mbit/s, taken in turn, shaped both "
                             "ways (e.g. 0,50: every second worker's link at 50 Mbit/s; 0 leaves a link as --shape "
                             "does); default none")
    parser.add_argument("--tcp-sample-ms", type=float, default=0.0,
                        help="measured runs: sample ss -tin in the first PS's namespace this often (kept as "
                             "tcp_samples_ps0: [t, worker, connection (0 pulls, 1 pushes), " + ", ".join(SS_FIELDS) + "] rows; about one ss "
                             "process per sample)")
    parser.add_argument("--sysctl", type=sysctl_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a kernel setting for every task's namespace, e.g. "
                             "net.ipv4.tcp_slow_start_after_idle=0 (repeatable; kept in the output's meta)")
    parser.add_argument("--congestion", choices=("cubic", "bbr"), default="cubic",
                        help="TCP congestion control of every connection (default cubic, the shared data's main set)")
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
