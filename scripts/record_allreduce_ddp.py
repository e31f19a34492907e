r"""Record ground truth for the ring all-reduce model: real PyTorch DDP (gloo) runs with W = 1..4
workers over shaped links, and the one-worker profile the advisor's DDP hook uploads.

Why: the ring model (advisor/core/models/ring_allreduce) predicts a synchronous all-reduce job
from one worker's trace; this measures what such a job really does on this machine, beside the
trace the hook records (issue 17, part 3).

Testbed (as ``tests/data/ps-async/README.md`` and ``scripts/record_ps_traces.py`` take PS traces): each
worker is its own process in its own Linux network namespace (``ddp-w<k>``); the namespaces are
joined by a bridge in a namespace of its own (``ddp-br``), so nothing is added to the host's
namespace. Every worker link is shaped with ``tc tbf`` in both directions (the qdisc on the
worker's end of its veth shapes worker -> bridge, the one on the bridge's end bridge -> worker),
optionally with ``netem`` delay on both ends (where the kernel has ``sch_netem``; this
machine's does not, so the recorded configurations add no delay); TCP congestion control is cubic (a route
attribute). Workers run ``torch.distributed`` with the gloo backend over these links
(``GLOO_SOCKET_IFNAME=eth0``), rank 0 serving the TCP store.

Accelerator compute is emulated: the model is a chain of layers, each an autograd Function that
sleeps a fixed time in forward and in backward and owns one parameter tensor of a chosen size,
whose gradient (zeros) it returns from backward. So per-layer order, gradient sizes and the
overlap of backward with DDP's bucketed all-reduce are those of a DNN on an accelerator, while
the 2 CPU cores stay nearly idle (sleeps do not contend). Data loading is a random batch.

Workers run at the scheduler's normal priority. Record on a calm machine: where other jobs keep
the 2 cores busy, a sleeping worker that wakes up behind them stretches its emulated compute by
however long the run queue is (W = 1 varied by 40 % between runs at load 9-18). ``--rt-priority
N`` runs the workers at real-time round-robin priority (``chrt --rr N``), which wakes them on
time on a loaded machine, as the first configurations were recorded; but with more workers than
cores it can slow the step itself: ddp-slow's program ran W = 8 at 206 examples/s at priority 10
and 244 at the normal priority (``ddp-slow-calm``), W = 1..4 alike; with all its gradients in
one bucket, the priority changed nothing (``ddp-one-bucket``).

Run as root with a Python that has torch and advisor (a venv: never the main one):

    /tmp/torchvenv/bin/python scripts/record_allreduce_ddp.py --config ddp-overlap --repeats 2
    /tmp/torchvenv/bin/python scripts/record_allreduce_ddp.py --config ddp-comm --repeats 2

Each writes ``tests/data/allreduce/<config>/``: ``profile.json.gz`` (the bundle the hook uploaded
from a one-worker run), ``measured.json`` (examples/s at W = 1..4, each worker's timed steps over
its own span, summed: ``advisor.profiling.step_logs``), ``step_logs.json.gz`` (every run's step
ends) and ``README.md``. The namespaces are deleted when a run ends, also on failure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import netns_testbed as testbed  # scripts/netns_testbed.py, beside this script

from advisor.profiling.step_logs import synchronous_throughput

PREFIX = "ddp"
SUBNET = "10.217.17"
PORT = 29517
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "allreduce"
MIB = 1024 * 1024
STEP_LOGS = "step_logs.json.gz"  # each measured run's step ends, per W, repeat and worker
FIRST_RT_PRIORITY = 10  # the priority of the sets recorded before measured.json kept it


@dataclass(frozen=True)
class Config:
    """One measured configuration: the emulated model, the batch and the links."""

    layers_mib: tuple[float, ...]  # parameter (gradient) size of each layer, input to output
    forward_s: float  # sleep per layer in forward
    backward_s: float  # sleep per layer in backward
    batch: int
    mbit: float  # tbf rate of every worker link, each direction
    delay_ms: float  # netem delay on each end of every link (0: none)
    queue_ms: int  # tbf queue
    note: str
    # DDP's bucket_cap_mb; None leaves DDP its defaults (25 MiB, and a first bucket of at most
    # 1 MiB). Passed explicitly, even as 25, torch 2.13 caps the first bucket at it too.
    bucket_cap_mb: float | None = None


CONFIGS = {
    # 2 MiB of gradients in 8 layers, 96 ms of emulated compute: backward mostly hides the
    # all-reduce at W = 2 and not quite at W = 4.
    "ddp-overlap": Config((0.125, 0.25, 0.25, 0.5, 0.5, 0.25, 0.125, 0.0625), 0.004, 0.008, 32, 200.0, 0.0, 20,
                          "compute and communication of the same order, overlapped"),
    # 8 MiB of gradients in 4 layers, 24 ms of emulated compute: the links set the pace.
    "ddp-comm": Config((3.0, 3.0, 1.0, 1.0), 0.002, 0.004, 16, 200.0, 0.0, 20,
                       "communication-bound: the all-reduce dominates the step"),
    # 3 MiB in 6 layers, 54 ms of compute, on a slower link: another rate.
    "ddp-slow": Config((0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 0.003, 0.006, 16, 100.0, 0.0, 20,
                       "a slower link (100 Mbit/s): communication-bound from W = 2"),
    # ddp-slow again on a calm machine, at the scheduler's normal priority: at real-time
    # round-robin priority its W = 8 ran 206 examples/s, at the normal one 244.
    "ddp-slow-calm": Config((0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 0.003, 0.006, 16, 100.0, 0.0, 20,
                            "the ddp-slow program measured again on a calm machine, at the normal priority"),
    # ddp-slow's program with bucket_cap_mb 25 passed explicitly, which in torch 2.13 caps the
    # first bucket at 25 MiB too: all 3 MiB in one bucket, all-reduced after backward.
    "ddp-one-bucket": Config((0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 0.003, 0.006, 16, 100.0, 0.0, 20,
                             "the program of ddp-slow with its 3 MiB in one bucket, all-reduced after backward",
                             bucket_cap_mb=25.0),
    # The same at 500 Mbit/s. Not a valid configuration on this machine: at W >= 3 the kernel's
    # bridge and tbf cannot forward 500 Mbit/s per link on 2 busy cores (``probe``: a lone 8 MiB
    # all-reduce takes 1.9x the ring's time at W = 3, 4, against 1.0-1.02x at 200 Mbit/s).
    "ddp-fast": Config((0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 0.003, 0.006, 16, 500.0, 0.0, 20,
                       "a faster link (500 Mbit/s): compute and communication of the same order"),
    # 2 MiB in 8 layers as ddp-overlap, with 0.5 MiB buckets: four of two layers each (torch 2.13
    # caps the first bucket at the smaller bucket_cap_mb too), each all-reduced as soon as backward
    # has filled it (several rings per step).
    "ddp-buckets": Config((0.25,) * 8, 0.004, 0.008, 32, 200.0, 0.0, 20,
                          "several buckets a step (bucket_cap_mb 0.5), each overlapping the rest of backward",
                          bucket_cap_mb=0.5),
}


# ---------------------------------------------------------------- network namespaces and tc


def setup_network(workers: int, cfg: Config) -> list[str]:
    """The testbed (netns_testbed.py), every worker link shaped as ``cfg`` says; each worker's address."""
    names = [f"w{k}" for k in range(workers)]
    return list(testbed.setup_network(PREFIX, SUBNET, names, mbit=cfg.mbit, queue_ms=cfg.queue_ms,
                                      delay_ms=cfg.delay_ms).values())


def teardown_network() -> None:
    """Delete every namespace this script creates."""
    testbed.teardown_network(PREFIX)


# ---------------------------------------------------------------- the training program


def build_model(torch, cfg: Config):  # type: ignore[no-untyped-def]
    """The chain of sleeping layers (module docstring) as an ``nn.Module``."""

    class SleepLayer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, forward_s, backward_s):  # type: ignore[no-untyped-def]
            time.sleep(forward_s)
            ctx.backward_s = backward_s
            ctx.shape = weight.shape
            return x.clone()

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            time.sleep(ctx.backward_s)
            return grad, torch.zeros(ctx.shape), None, None

    class Emulated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ParameterList(
                torch.nn.Parameter(torch.zeros(int(mib * MIB) // 4)) for mib in cfg.layers_mib)

        def forward(self, x):  # type: ignore[no-untyped-def]
            for weight in self.layers:
                x = SleepLayer.apply(x, weight, cfg.forward_s, cfg.backward_s)
            return x

    return Emulated()


def run_task(args: argparse.Namespace) -> None:
    """One worker (inside its namespace): trains ``--steps`` steps, logging each; with
    ``--profile`` (W = 1 only) the advisor hook traces and uploads instead."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    cfg = CONFIGS[args.config]
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{PORT}", rank=args.rank,
                            world_size=args.world)
    buckets = {} if cfg.bucket_cap_mb is None else {"bucket_cap_mb": cfg.bucket_cap_mb}
    model = torch.nn.parallel.DistributedDataParallel(build_model(torch, cfg), **buckets)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    out = Path(args.out)
    if args.profile:
        ingest = testbed.Ingest()
        env = ingest.environ(args.steps, args.warmup, ADVISOR_STOP_AFTER_UPLOAD="0", WORLD_SIZE="1")
        from advisor.profiling.torch import profile_ddp

        profile_ddp(model, optimizer, batch_size=cfg.batch, model_name=args.config, environ=env)
    log = []
    dist.barrier()  # start together
    for _ in range(args.warmup + args.steps + 1):
        start = time.time()
        x = torch.randn(cfg.batch, 16)
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        log.append((start, time.time(), time.process_time()))  # and the process's CPU: gloo's threads too
    if args.profile:
        out.write_bytes(ingest.bundle("the hook"))  # already gzip (advisor.profiling.allreduce_bundle)
    else:
        out.with_name(f"{out.name}.w{args.rank}").write_text(json.dumps(log))
    dist.destroy_process_group()


def run_probe_task(args: argparse.Namespace) -> None:
    """One worker of ``probe``: times lone gloo all-reduces of 1 and 8 MiB (rank 0 prints them)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{PORT}", rank=args.rank,
                            world_size=args.world)
    for mib in (1, 8):
        tensor = torch.zeros(int(mib * MIB) // 4)
        dist.all_reduce(tensor)
        times = []
        cpu_start = time.process_time()
        for _ in range(10):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - start)
        cpu = (time.process_time() - cpu_start) / len(times)  # this rank's CPU per call, the barrier included
        print(json.dumps({"workers": args.world, "mib": mib, "rank": args.rank, "median_s": statistics.median(times),
                          "min_s": min(times), "reps": len(times), "cpu_s": round(cpu, 6)}), flush=True)
    dist.destroy_process_group()


# ---------------------------------------------------------------- orchestration


def _probe_rows(logs: Path, workers: int) -> list[dict[str, object]]:
    """The probe's timings of one run: rank 0's per size, with every rank's CPU per call."""
    ranks = [[json.loads(line) for line in (logs / f"w{k}.log").read_text(errors="replace").splitlines()
              if line.startswith("{")] for k in range(workers)]
    rows = []
    for i, row in enumerate(ranks[0]):
        rows.append({"workers": row["workers"], "bytes": int(row["mib"] * MIB), "median_s": row["median_s"],
                     "min_s": row["min_s"], "reps": row["reps"], "cpu_s": [r[i]["cpu_s"] for r in ranks]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def run(args: argparse.Namespace, workers: int, out: Path, *, profile: bool, steps: int,
        probed: list[dict[str, object]] | None = None) -> None:
    """One run of ``workers`` processes, each in its namespace (``probed`` collects a probe's timings)."""
    probed = [] if probed is None else probed
    cfg = CONFIGS[args.config]
    try:
        addresses = setup_network(workers, cfg)
    except BaseException:
        teardown_network()
        raise
    logs = Path(tempfile.mkdtemp(prefix="ddp-logs-"))
    base = [sys.executable, str(Path(__file__).resolve()), "task", "--config", args.config, "--world", str(workers),
            "--master", addresses[0], "--steps", str(steps), "--warmup", str(args.warmup), "--out", str(out)]
    if profile:
        base.append("--profile")
    if args.mode == "probe":
        base[2] = "probe-task"
    rt = ["chrt", "--rr", str(args.rt_priority)] if args.rt_priority else []
    try:
        with testbed.processes() as procs:
            for k in range(workers):
                env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
                with (logs / f"w{k}.log").open("wb") as log:
                    procs.append(subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-w{k}", *rt, *base, "--rank", str(k)],
                                                  env=env, stdout=log, stderr=subprocess.STDOUT))
            testbed.wait_workers(procs, logs, args.timeout)
            if args.mode == "probe":
                probed.extend(_probe_rows(logs, workers))
    finally:
        teardown_network()
    shutil.rmtree(logs, ignore_errors=True)


def measure(args: argparse.Namespace, workers: int,
            scratch: Path) -> tuple[float, int, list[list[float]], list[float]]:
    """One run's examples/s (``advisor.profiling.step_logs``: each worker's timed steps over its
    own span, summed), the timed steps per worker, each worker's step ends (s), and each
    worker's CPU seconds over its timed steps (all its threads)."""
    run(args, workers, scratch, profile=False, steps=args.measure_steps)
    ends, cpu = [], []
    for k in range(workers):
        part = scratch.with_name(f"{scratch.name}.w{k}")
        log = json.loads(part.read_text())
        ends.append([entry[1] for entry in log])
        cpu.append(log[-1][2] - log[args.warmup - 1][2])  # from the end of the warm-up, as the rate
        part.unlink()
    rate = synchronous_throughput(ends, CONFIGS[args.config].batch, args.warmup)
    return rate, len(ends[0]) - args.warmup, ends, cpu


def read_step_logs(folder: Path) -> tuple[dict[str, list[list[list[float]]]], dict[str, list[list[float]]]]:
    """``step_logs.json.gz``'s runs (W -> per repeat, per worker, its step ends, s) and ``cpu_s``
    (W -> per repeat, each worker's CPU seconds over its timed steps); {} for what it lacks."""
    path = folder / STEP_LOGS
    if not path.is_file():
        return {}, {}
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return dict(doc["runs"]), dict(doc.get("cpu_s", {}))


def write_step_logs(folder: Path, batch: int, warmup: int, runs: dict[str, list[list[list[float]]]],
                    cpu: dict[str, list[list[float]]], measure_steps: int) -> None:
    """Every measured run's step ends beside measured.json, so that its figures can be recomputed,
    and, where kept, each worker's CPU over its ``measure_steps`` + 1 timed steps (the MWMS
    recorder's layout, which ``benchmarks.allreduce_accuracy`` reads)."""
    doc: dict[str, object] = {"batch_size": batch, "warmup_steps": warmup,
                              "runs": dict(sorted(runs.items(), key=lambda kv: int(kv[0])))}
    if cpu:
        doc.update(cpu_s=dict(sorted(cpu.items(), key=lambda kv: int(kv[0]))), measure_steps=measure_steps + 1)
    (folder / STEP_LOGS).write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))


def describe(name: str, cfg: Config, args: argparse.Namespace) -> str:
    return (f"PyTorch DDP (gloo) with W worker processes on one 2-core machine, each in its own network "
            f"namespace joined by a bridge; every worker link shaped with tc tbf at {cfg.mbit:g} Mbit/s each "
            f"direction (burst {testbed.BURST}, {cfg.queue_ms} ms queue"
            + (f", netem {cfg.delay_ms:g} ms delay on each end" if cfg.delay_ms else ", no added delay")
            + f"), TCP cubic. Emulated accelerator compute: {len(cfg.layers_mib)} layers, each sleeping "
            f"{cfg.forward_s * 1e3:g} ms in forward and {cfg.backward_s * 1e3:g} ms in backward and owning a "
            f"float32 parameter of {', '.join(f'{m:g}' for m in cfg.layers_mib)} MiB "
            f"({sum(cfg.layers_mib):g} MiB of gradients), "
            + ("DDP defaults (25 MiB buckets, 1 MiB first bucket), " if cfg.bucket_cap_mb is None else
               f"DDP's bucket_cap_mb {cfg.bucket_cap_mb:g} (the profile records the buckets DDP built), ")
            + f"SGD, batch {cfg.batch} per worker. "
            + (f"Workers at real-time round-robin priority (chrt --rr {args.rt_priority}). " if args.rt_priority
               else "Workers at the scheduler's normal priority. ")
            + "load_before: the machine's 1-minute load average before each run. examples_per_s: the sum over workers of each one's examples per "
            f"second over its own steps after {args.warmup} warm-up steps (its {args.measure_steps + 1} timed steps "
            f"over its time from the end of its warm-up to the end of its last step: advisor.profiling.step_logs); "
            f"median of the repeats, spread = [min, max]; step_logs.json.gz holds each run's step ends. "
            f"profile.json.gz: the bundle "
            f"advisor.profiling.torch uploaded from a one-worker run of the same program "
            f"({args.warmup} warm-up steps, {args.profile_steps} traced). Recorded with "
            f"scripts/record_allreduce_ddp.py --config {name}.")


def loads(point: dict) -> str:
    """A point's 1-minute load averages before its runs, or "-" where they were not kept."""
    return ", ".join(f"{x:.1f}" for x in point.get("load_before", [])) or "-"


def readme(name: str, cfg: Config, measured: dict) -> str:
    """The folder's README: what the files are, how they were taken, the measured points."""
    rows = "\n".join(f"| {p['workers']} | {p['examples_per_s']:.1f} | {p['spread'][0]:.1f} - {p['spread'][1]:.1f} | "
                     f"{p['repeats']} | {p['steps']} | {loads(p)} |" for p in measured["points"])
    return (f"# {name}: PyTorch DDP over gloo, measured on this machine\n\n"
            f"{cfg.note[0].upper()}{cfg.note[1:]}.\n\n"
            "- `profile.json.gz`: the all-reduce upload bundle (`advisor-allreduce-upload`, kind `pytorch-ddp`) "
            "that `advisor.profiling.torch.profile_ddp` uploaded from a one-worker run of the program; "
            "`advisor predict profile.json.gz --bandwidth ...` reads it.\n"
            "- `measured.json`: examples/s summed over workers at each W (`points`), the link rate "
            "(`bandwidth_bps`, each direction of every worker link), added delay, batch per worker, and how.\n\n"
            f"How: {measured['how']}\n\n"
            + ("Workers ran with a real-time round-robin priority (`chrt --rr 10`) so that the shared machine's run "
               "queue did not stretch the emulated compute (without it, W = 1 varied by 40 % between runs).\n\n"
               if measured.get("rt_priority", FIRST_RT_PRIORITY) else "")
            + "| W | examples/s (median) | spread | repeats | steps per worker | load before the runs |\n"
            "|---|---|---|---|---|---|\n"
            f"{rows}\n\n"
            "Predictions against these: `python3 -m benchmarks.allreduce_accuracy`.\n")


def record(args: argparse.Namespace) -> None:
    cfg = CONFIGS[args.config]
    folder = (Path(args.out) if args.out else OUT / args.config).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="ddp-run-")) / "run"
    if not args.skip_profile:
        run(args, 1, folder / "profile.json.gz", profile=True, steps=args.profile_steps)
        print(f"profile -> {folder / 'profile.json.gz'}", flush=True)
    points = []
    old = folder / "measured.json"
    if args.merge and old.is_file():  # keep the points of the worker counts not measured now
        points = [p for p in json.loads(old.read_text())["points"] if p["workers"] not in args.workers]
    logs, cpu = read_step_logs(folder) if args.merge else ({}, {})
    for workers in args.workers:
        rates, steps, before = [], 0, []
        logs[str(workers)], cpu[str(workers)] = [], []
        for rep in range(args.repeats):
            before.append(round(os.getloadavg()[0], 2))  # the rest of the machine's (the last run's ranks decay in it)
            rate, steps, ends, used = measure(args, workers, scratch)
            rates.append(rate)
            logs[str(workers)].append([[round(t, 6) for t in e] for e in ends])
            cpu[str(workers)].append([round(c, 4) for c in used])
            print(f"{args.config} W={workers} repeat {rep}: {rate:.2f} examples/s ({steps} steps)", flush=True)
        points.append({"workers": workers, "examples_per_s": round(statistics.median(rates), 3), "steps": steps,
                       "repeats": len(rates), "spread": [round(min(rates), 3), round(max(rates), 3)],
                       "load_before": before})
    points.sort(key=lambda p: p["workers"])
    measured = {"kind": "pytorch-ddp", "bandwidth_bps": cfg.mbit * 1e6, "delay_ms": cfg.delay_ms,
                "rt_priority": args.rt_priority,
                "batch_size": cfg.batch, "how": describe(args.config, cfg, args), "points": points}
    (folder / "measured.json").write_text(json.dumps(measured, indent=1) + "\n")
    write_step_logs(folder, cfg.batch, args.warmup, logs, cpu, args.measure_steps)
    (folder / "README.md").write_text(readme(args.config, cfg, measured))
    print(json.dumps(points), flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", choices=("record", "task", "probe", "probe-task"), default="record",
                        help="record (default) sets up and runs everything; task is one worker of it; probe "
                             "times lone gloo all-reduces of 1 and 8 MiB at each --workers over the shaped links")
    parser.add_argument("--config", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--workers", type=lambda t: [int(w) for w in t.split(",")], default=[1, 2, 3, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help="steps before tracing / before the window")
    parser.add_argument("--profile-steps", type=int, default=60, help="traced steps of the one-worker profile")
    parser.add_argument("--measure-steps", type=int, default=300, help="steps per worker after warm-up")
    parser.add_argument("--skip-profile", action="store_true", help="keep the profile, measure only")
    parser.add_argument("--merge", action="store_true",
                        help="keep measured.json's points for worker counts not in --workers")
    parser.add_argument("--probe-out", help="probe: add the timings, with every rank's CPU, to this JSON file")
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="run workers with this SCHED_RR priority (0: normal scheduling), see the docstring")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before a run is given up")
    parser.add_argument("--out", help="folder (default tests/data/allreduce/<config>); in a task: the output file")
    # task-only
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--master", default="127.0.0.1")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "task":
        run_task(args)
    elif args.mode == "probe-task":
        run_probe_task(args)
    elif args.mode == "probe":
        scratch = Path(tempfile.mkdtemp(prefix="ddp-probe-")) / "probe"
        found: list[dict[str, object]] = []
        for workers in args.workers:
            if workers > 1:
                run(args, workers, scratch, profile=False, steps=0, probed=found)
        if args.probe_out:
            cfg = CONFIGS[args.config]
            how = ("scripts/record_allreduce_ddp.py probe: torch.distributed all_reduce over gloo (no DDP, no "
                          "training), one process per worker in its own network namespace, every worker link tc tbf at "
                          "the run's bandwidth_bps both ways, workers at real-time priority unless rt_priority is 0; "
                          "per size 10 timed calls on rank 0, each after a barrier; cpu_s: every rank's CPU seconds "
                          "per call, the barrier included")
            testbed.add_probe_run(Path(args.probe_out), how, {"config": args.config, "bandwidth_bps": cfg.mbit * 1e6,
                                                              "rt_priority": args.rt_priority, "timings": found})
    else:
        record(args)


if __name__ == "__main__":
    main()
