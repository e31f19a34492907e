"""A simulated cluster shared by many jobs: fixed requests, per-job cost-optimal W, and the allocator.

Trace-driven: every job is one of the repository's real programs, its one-worker profile gives
the *predicted* curve the policies decide on, and its multi-worker measurements are the *truth*
the simulated job runs at (linear between measured W; a job never gets more workers than were
measured). Job types:

- ``tests/data/ps-traces/*``: TF parameter-server MLP, 1 and 2 PS (measured W = 1-4);
- ``tests/data/allreduce/*``: PyTorch DDP and TF MultiWorkerMirrored (measured W = 1-4; the W = 5-8 runs
  shared one 2-core host and are left out);
- ``tests/data/ps-async/{condensed,measured}/<cc>/<model>_bw100*``: TF async PS, mlp and cnn,
  cubic and bbr (measured W = 1, 2, 3, 4, 6, 8; repeats: the median); another folder of the same
  layout can be given with ``--ps-async``.

Jobs arrive as a Poisson process (rate set so that the fixed requests would keep the given share of
the capacity busy: the *load*), each with a size in examples (log-normal, about an hour at one
worker), a requested W (one of the type's measured W >= 2, uniformly) and, for 30 % of them, a
deadline of 1.5-3x the run time at the requested W. The three policies see the same arrivals:

- ``fixed``: every job runs at its requested W; jobs start in arrival order when they fit,
  skipping those that do not (Kueue's BestEffortFIFO);
- ``per-job``: each job at its own cost-optimal W on the predicted curve (``advisor predict``'s
  answer, with its deadline), the same queue;
- ``allocator``: ``core/allocation.allocate`` over every job in the system at each arrival and
  completion, resizing running jobs (a resize costs ``RESIZE_S`` seconds without progress).

Cost: (W x worker price + PS x PS price) x time held, prices 1 and 1 per hour (a PS is a pod).
Events run on SimPy (each job a process that waits for its completion or for a change of its W).

    python -m benchmarks.cluster [--ps-async DIR] [--plot cluster.png] [--seeds 5] [--loads 0.5,1,2,4,8]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import simpy

from advisor.core.allocation import Capacity, CurvePoint, JobDemand, allocate, own_optimum
from advisor.core.cost import Prices
from benchmarks.allreduce_accuracy import HOST_WORKERS, configs
from benchmarks.paths import PS_ASYNC_DATA

REPO = Path(__file__).resolve().parents[1]
PS_ASYNC = PS_ASYNC_DATA
CURVES = REPO / "benchmarks" / "data" / "cluster_curves.json"  # predicted curves, kept (--refresh recomputes)
PRICES = Prices(worker_per_hour=1.0, ps_per_hour=1.0)
RESIZE_S = 60.0  # a resized job restarts from its checkpoint: no progress for this long
DEADLINE_SHARE = 0.3
POLICIES = ("fixed", "per-job", "allocator")


@dataclass(frozen=True)
class JobType:
    name: str
    profile: Path
    bandwidth_bps: float
    truth: Mapping[int, float]  # measured examples/s per W
    parameter_servers: int

    @property
    def max_workers(self) -> int:
        return max(self.truth)

    def throughput(self, w: int) -> float:
        """Measured, linear between measured W."""
        ws = sorted(self.truth)
        return float(np.interp(w, ws, [self.truth[x] for x in ws]))


def job_types(ps_async: Path) -> list[JobType]:
    """Every program of the repository with a profile and measured multi-worker throughput."""
    found = []
    traces = REPO / "tests" / "data" / "ps-traces"
    for measured in sorted(traces.glob("*_bw100.measured.json.gz")):  # the W = 1..4 runs; repeats are .r<k>.
        doc = json.loads(gzip.decompress(measured.read_bytes()))
        stem = measured.name.removesuffix(".measured.json.gz")
        found.append(JobType(f"ps-{stem}", traces / f"{stem}.trace.json.gz", doc["meta"]["bw_mbit"] * 1e6,
                             _median_by_w(doc["results"]), int(doc["meta"]["n_ps"])))
    # configs(): a profile with its measurements (a profile alone, or a diagnostic's measurements
    # alone, is no job type); W above HOST_WORKERS shared the testbed's 2-core host, which a
    # cluster's workers, each on a node of its own here, do not
    for folder in configs():
        doc = json.loads((folder / "measured.json").read_text())
        found.append(JobType(f"ar-{folder.name}", folder / "profile.json.gz", doc["bandwidth_bps"],
                             {p["workers"]: p["examples_per_s"] for p in doc["points"] if p["workers"] <= HOST_WORKERS},
                             0))
    for cc in ("cubic", "bbr"):
        for model in ("mlp", "cnn"):
            profile = ps_async / "condensed" / cc / f"{model}_bw100.json.gz"
            runs = sorted((ps_async / "measured" / cc).glob(f"{model}_bw100*.json"))
            if profile.exists() and runs:
                results = [r for run in runs for r in json.loads(run.read_text())["results"]]
                found.append(JobType(f"async-{model}-{cc}", profile, 100e6, _median_by_w(results), 1))
    return found


def _median_by_w(results: Sequence[Mapping[str, float]]) -> dict[int, float]:
    by_w: dict[int, list[float]] = {}
    for r in results:
        by_w.setdefault(int(r["W"]), []).append(float(r["thr_window"]))
    return {w: statistics.median(v) for w, v in sorted(by_w.items())}


def predicted_curves(types: Sequence[JobType], refresh: bool, keep: bool = True) -> dict[str, list[list[float]]]:
    """Each type's predicted curve [[W, throughput, low, high], ...] over 1..its max measured W,
    as ``advisor predict`` gives it; kept in ``CURVES`` (keyed by type) and recomputed with --refresh.
    A type without a kept curve is predicted; ``keep`` False leaves ``CURVES`` as it is (tests)."""
    kept = json.loads(CURVES.read_text()) if CURVES.exists() and not refresh else {}
    missing = [t for t in types if t.name not in kept]
    if missing:
        from advisor.core.advice import AdviceRequest, ModelChoice, advise
        from advisor.core.curve import CurveSettings
        from advisor.core.models.registry import default_model_for
        from advisor.core.sim_types import NetworkModel
        from advisor.importers.loader import load_profile
        from advisor.importers.model_error_file import load_model_errors
        from advisor.parallel import PointPool

        with PointPool(0) as pool:
            for t in missing:
                print(f"predicting {t.name}", file=sys.stderr)
                profile = load_profile(t.profile)
                request = AdviceRequest(
                    network=NetworkModel(bandwidth_bps=t.bandwidth_bps),
                    curve=CurveSettings(workers=tuple(range(1, t.max_workers + 1)), target_rel_halfwidth=0.02),
                    prices=PRICES, model=ModelChoice(default_model_for(profile.job.kind.allreduce, profile.job.synchronous)),
                    model_error=load_model_errors(None))
                advice = advise(profile, request, None, pool)
                kept[t.name] = [[p.workers, p.throughput, p.low, p.high] for p in advice.points]
        if keep:
            CURVES.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return kept


@dataclass
class Job:
    id: str
    kind: JobType
    curve: tuple[CurvePoint, ...]
    arrival: float  # s
    examples: float
    requested: int
    deadline: float | None  # s, absolute
    remaining: float = 0.0
    workers: int = 0
    started: bool = False
    done: float | None = None
    last: float = 0.0  # when cost and progress were last settled
    paused_until: float = 0.0
    cost: float = 0.0
    worker_seconds: float = 0.0
    wake: simpy.Event | None = None
    own: int | None = None

    def demand(self, now: float) -> JobDemand:
        left_h = None if self.deadline is None else (self.deadline - now) / 3600
        deadline = left_h if left_h is not None and left_h > 0 else None
        return JobDemand(self.id, self.curve, max_workers=self.kind.max_workers, prices=PRICES,
                         parameter_servers=self.kind.parameter_servers, deadline_hours=deadline,
                         examples=self.remaining if deadline is not None else None)


def workload(types: Sequence[JobType], curves: Mapping[str, list[list[float]]], n: int, load: float,
             capacity: int, seed: int) -> list[Job]:
    """``n`` jobs: arrivals at a rate that keeps ``load`` x capacity busy under fixed requests."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        kind = types[int(rng.integers(len(types)))]
        hours_alone = float(np.clip(rng.lognormal(math.log(1.0), 0.8), 0.1, 8.0))
        examples = kind.throughput(1) * hours_alone * 3600
        requested = int(rng.choice([w for w in kind.truth if w >= 2]))
        run_s = examples / kind.throughput(requested)
        slack = float(rng.uniform(1.5, 3.0)) if rng.random() < DEADLINE_SHARE else None
        curve = tuple(CurvePoint(int(w), t, lo, hi) for w, t, lo, hi in curves[kind.name])
        jobs.append(Job(f"j{i:03d}", kind, curve, 0.0, examples, requested, slack and slack * run_s,
                        remaining=examples))
    demand = statistics.fmean(j.requested * j.examples / j.kind.throughput(j.requested) for j in jobs)
    gaps = rng.exponential(demand / (load * capacity), size=n)
    t = 0.0
    for job, gap in zip(jobs, gaps):
        t += float(gap)
        job.arrival = job.last = t
        job.deadline = None if job.deadline is None else t + job.deadline
    return jobs


class Cluster:
    """The jobs in the system, their workers, and the policy that sets them at every event."""

    def __init__(self, env: simpy.Environment, capacity: int, policy: str) -> None:
        self.env, self.capacity, self.policy = env, capacity, policy
        self.active: list[Job] = []
        self.finished: list[Job] = []

    def arrive(self, jobs: Sequence[Job]) -> simpy.events.ProcessGenerator:
        for job in jobs:
            yield self.env.timeout(job.arrival - self.env.now)
            if self.policy == "per-job":
                job.own = own_optimum(job.demand(self.env.now))
            self.active.append(job)
            self.env.process(self.run(job))
            self.reschedule()

    def run(self, job: Job) -> simpy.events.ProcessGenerator:
        """Wait for the end of the job's work at its current W, or for a change of W."""
        while True:
            job.wake = self.env.event()
            waits = [job.wake]
            if job.workers > 0:
                left = max(job.paused_until - self.env.now, 0.0) + job.remaining / job.kind.throughput(job.workers)
                waits.append(self.env.timeout(left))
            fired = yield self.env.any_of(waits)
            if job.wake in fired:
                continue
            self.settle(job)
            job.remaining, job.done, job.workers = 0.0, self.env.now, 0
            self.active.remove(job)
            self.finished.append(job)
            self.reschedule()
            return

    def settle(self, job: Job) -> None:
        """Progress and cost since ``job.last``."""
        now = self.env.now
        if job.workers > 0:
            held = now - job.last
            job.cost += PRICES.hourly(job.workers, job.kind.parameter_servers) * held / 3600
            job.worker_seconds += job.workers * held
            working = max(0.0, now - max(job.last, job.paused_until))
            job.remaining = max(0.0, job.remaining - working * job.kind.throughput(job.workers))
        job.last = now

    def reschedule(self) -> None:
        for job in self.active:
            self.settle(job)
        wanted = self.decide()
        if sum(wanted.get(j.id, j.workers) for j in self.active) > self.capacity:
            raise RuntimeError(f"{self.policy} asked for more than the {self.capacity} workers of the cluster")
        for job in self.active:
            w = wanted.get(job.id, job.workers)
            if w == job.workers:
                continue
            if job.workers > 0 and w > 0:
                job.paused_until = self.env.now + RESIZE_S
            job.started = job.started or w > 0
            job.workers = w
            if job.wake is not None and not job.wake.triggered:
                job.wake.succeed()

    def decide(self) -> dict[str, int]:
        if self.policy == "allocator":
            previous = {j.id: j.workers for j in self.active if j.workers > 0}
            result = allocate([j.demand(self.env.now) for j in self.active], Capacity(workers=self.capacity),
                              previous=previous)
            return result.workers()
        size: Callable[[Job], int] = (lambda j: j.requested) if self.policy == "fixed" else (lambda j: j.own or 1)
        free = self.capacity - sum(j.workers for j in self.active)
        wanted = {}
        for job in self.active:  # arrival order: start each waiting job that fits
            if job.workers == 0 and size(job) <= free:
                wanted[job.id] = size(job)
                free -= size(job)
        return wanted


@dataclass
class Outcome:
    avg_jct_h: float
    p95_jct_h: float
    makespan_h: float
    cost: float
    utilization: float
    deadline_misses: int
    missed: set[str] = field(default_factory=set)


def simulate(jobs: Sequence[Job], capacity: int, policy: str) -> Outcome:
    env = simpy.Environment()
    cluster = Cluster(env, capacity, policy)
    env.process(cluster.arrive(jobs))
    env.run()
    done = cluster.finished
    if len(done) != len(jobs):
        raise RuntimeError(f"{policy}: {len(jobs) - len(done)} job(s) never finished")
    jct = sorted((j.done or 0.0) - j.arrival for j in done)
    span = max(j.done or 0.0 for j in done) - min(j.arrival for j in done)
    missed = {j.id for j in done if j.deadline is not None and (j.done or 0.0) > j.deadline}
    return Outcome(statistics.fmean(jct) / 3600, float(np.percentile(jct, 95)) / 3600, span / 3600,
                   sum(j.cost for j in done), sum(j.worker_seconds for j in done) / (capacity * span),
                   len(missed), missed)


def fresh(jobs: Sequence[Job]) -> list[Job]:
    return [Job(j.id, j.kind, j.curve, j.arrival, j.examples, j.requested, j.deadline, remaining=j.examples,
                last=j.arrival) for j in jobs]


def run(types: Sequence[JobType], curves: Mapping[str, list[list[float]]], capacity: int, n: int,
        loads: Sequence[float], seeds: Sequence[int]) -> dict[float, dict[str, list[Outcome]]]:
    results: dict[float, dict[str, list[Outcome]]] = {}
    for load in loads:
        results[load] = {p: [] for p in POLICIES}
        for seed in seeds:
            jobs = workload(types, curves, n, load, capacity, seed)
            for policy in POLICIES:
                results[load][policy].append(simulate(fresh(jobs), capacity, policy))
    return results


def table(results: Mapping[float, Mapping[str, list[Outcome]]]) -> str:
    lines = ["| load | policy | avg JCT (h) | p95 JCT (h) | makespan (h) | cost | utilization | deadline misses "
             "| missed where fixed met |", "|---|---|---|---|---|---|---|---|---|"]
    for load, by_policy in results.items():
        fixed = by_policy["fixed"]
        for policy, outs in by_policy.items():
            worse = sum(len(o.missed - f.missed) for o, f in zip(outs, fixed))
            lines.append(f"| {load:g} | {policy} | {_mean(outs, 'avg_jct_h'):.2f} | {_mean(outs, 'p95_jct_h'):.2f} | "
                         f"{_mean(outs, 'makespan_h'):.1f} | {_mean(outs, 'cost'):.0f} | "
                         f"{_mean(outs, 'utilization'):.0%} | {sum(o.deadline_misses for o in outs)} | {worse} |")
    lines.append("")
    for load, by_policy in results.items():
        f, a = by_policy["fixed"], by_policy["allocator"]
        lines.append(f"load {load:g}: allocator vs fixed: average JCT {_mean(a, 'avg_jct_h') / _mean(f, 'avg_jct_h') - 1:+.0%}, "
                     f"cost {_mean(a, 'cost') / _mean(f, 'cost') - 1:+.0%}")
    return "\n".join(lines)


def _mean(outs: Sequence[Outcome], attr: str) -> float:
    return statistics.fmean(getattr(o, attr) for o in outs)


def plot(results: Mapping[float, Mapping[str, list[Outcome]]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for policy in POLICIES:
        for ax, attr in zip(axes, ("avg_jct_h", "p95_jct_h", "cost")):
            ax.plot(loads, [_mean(results[x][policy], attr) for x in loads], marker="o", label=policy)
    for ax, title in zip(axes, ("average JCT (h)", "95th percentile JCT (h)", "total cost")):
        ax.set_title(title)
        ax.set_xlabel("load (share of the capacity the fixed requests ask for)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps-async", type=Path, default=PS_ASYNC,
                        help="folder with condensed/ and measured/ of the async PS runs (default tests/data/ps-async)")
    parser.add_argument("--capacity", type=int, default=16, help="workers in the cluster (default 16)")
    parser.add_argument("--jobs", type=int, default=80, help="jobs per run (default 80)")
    parser.add_argument("--loads", default="0.5,1,2,4,8", help="loads, comma-separated (default 0.5,1,2,4,8)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per load (default 5)")
    parser.add_argument("--plot", type=Path, help="write the figure here (PNG)")
    parser.add_argument("--refresh", action="store_true", help="predict the curves again (else kept ones are used)")
    args = parser.parse_args(argv)
    types = job_types(args.ps_async)
    curves = predicted_curves(types, args.refresh)
    print(f"{len(types)} job types: " + ", ".join(t.name for t in types))
    results = run(types, curves, args.capacity, args.jobs, [float(x) for x in args.loads.split(",")],
                  range(args.seeds))
    print(table(results))
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
