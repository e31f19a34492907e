"""Controller at scale: 1,000 opted-in TFJobs in the API emulator, the controller in its own process.

    python -m benchmarks.bench_controller [--jobs 1000] [--uploads 50] [--env NAME=VALUE ...]

The controller runs as a user runs it: the ``advisor controller`` console script with a
settings YAML and a kubeconfig (``tests/deploy/controller_process.py``), talking over HTTP to
the API emulator served by this process. Printed, each beside the issue's target:
- latency: a TFJob's creation to its profiling run (p50/p99), a trace upload to the
  ``Predicted`` annotation (p50/p99), the reconcile duration (p50/p99 bucket bounds of the
  controller's own ``/metrics`` histogram). The times are taken in this process by a watcher
  registered in the emulator's store, at the moment each write is committed;
- memory: the controller process alone (VmRSS from /proc/PID/status when idle before any job,
  with the jobs, steady after the uploads; VmHWM, its peak), and its child processes (the
  spawned prediction worker and multiprocessing's resource tracker), each and summed.

Predictions are real (the controller's process pool and the simulator). The first upload is
predicted from scratch and reported on its own line; every other upload sends the same trace,
hence the same profile and prediction key, so it reuses the stored prediction: the upload to
annotation figure excludes simulation, as the target says. ``--env`` passes variables to the
controller process only, e.g. ``MALLOC_ARENA_MAX=2``, or ``PYTHONPATH=DIR`` to measure a
changed copy of ``advisor``. ``python -m benchmarks.controller_memory`` says where the idle
memory goes, import by import.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from advisor.controller.jobs.tfjob import PREFIX, PROFILING_FOR_LABEL, ROLE_LABEL
from tests.controller.harness import NS, create_tfjob, trace_body, upload_as_profiling_pod, wait_for
from tests.controller.tfjobs import tfjob
from tests.deploy.controller_process import ControllerProcess, ProcessMemory, read_memory, settings_for_process
from tests.kube_emulator import KubeEmulator
from tests.kube_emulator.store import Event, Watcher

TARGET_RECONCILE_P99_S = 1.0
TARGET_RSS_MB = 150.0


@dataclass(eq=False)
class _Recorder(Watcher):
    """A watcher in the emulator's store that notes when each job's profiling run appeared and when
    the job was first annotated Predicted. ``offer`` runs under the store's lock at every commit,
    so a time is when the write happened, not when someone polled for it."""

    profiled: dict[str, float] = field(default_factory=dict)  # job name -> its profiling run was created
    predicted: dict[str, float] = field(default_factory=dict)  # job name -> phase first became Predicted

    def offer(self, ev: Event) -> None:
        now = time.monotonic()
        meta = ev.obj["metadata"]
        labels = meta.get("labels") or {}
        if ev.type == "ADDED" and labels.get(ROLE_LABEL) == "profiling":
            self.profiled.setdefault(labels[PROFILING_FOR_LABEL], now)
        if (meta.get("annotations") or {}).get(PREFIX + "phase") == "Predicted":
            self.predicted.setdefault(meta["name"], now)


@dataclass
class Result:
    jobs: int
    to_profile: list[float]
    first_prediction: float
    to_annotation: list[float]
    reconciles: int
    reconcile_bounds: tuple[float, float]  # p50, p99 upper bucket bounds
    rss: dict[str, float]  # controller VmRSS (MB) at: idle, jobs, steady
    memory: list[ProcessMemory]  # at the end: the controller first, then its children
    bench_peak_mb: float


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--uploads", type=int, default=50,
                        help="jobs that also get a trace, at least 2 (the first is predicted from scratch)")
    parser.add_argument("--env", action="append", default=[], type=_env_item, metavar="NAME=VALUE",
                        help="an environment variable for the controller process (repeatable)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of quiet before an RSS reading")
    args = parser.parse_args()
    if not 2 <= args.uploads <= args.jobs:
        parser.error("--uploads must be between 2 and --jobs")
    env = dict(args.env)
    print(report(run(args.jobs, args.uploads, env, args.settle), env))


def _env_item(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not (sep and name):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def run(jobs: int, uploads: int, env: Mapping[str, str], settle_s: float) -> Result:
    body = trace_body("mlp_bw100")
    with KubeEmulator(namespaces=[NS], history_limit=100_000) as emu, tempfile.TemporaryDirectory() as tmp:
        recorder = _Recorder(emu.resource("tfjobs"), NS, None, None)
        with emu.store.lock:
            emu.store.watchers.setdefault(recorder.res, set()).add(recorder)
        settings = settings_for_process(Path(tmp), resync_period_s=3600, gc_period_s=3600)
        with ControllerProcess(emu, Path(tmp), settings, env=env) as ctl:
            ctl.wait_for_probe("/readyz")
            rss = {"idle": _steady_rss(ctl.pid, settle_s)}
            created = {}
            for i in range(jobs):
                name = f"job-{i:04d}"
                created[name] = time.monotonic()
                create_tfjob(emu, tfjob(name, workers=2))
            wait_for("every profiling run", lambda: len(recorder.profiled) == jobs, timeout_s=600)
            rss["jobs"] = _steady_rss(ctl.pid, settle_s)
            names = list(created)[:uploads]
            first_prediction, *to_annotation = [_upload(emu, recorder, name, body) for name in names]
            rss["steady"] = _steady_rss(ctl.pid, settle_s)
            memory = ctl.memory()
            reconciles, bounds = _reconcile_quantiles(ctl.metrics_text())
    return Result(jobs, [recorder.profiled[n] - created[n] for n in created], first_prediction, to_annotation,
                  reconciles, bounds, rss, memory, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _upload(emu: KubeEmulator, recorder: _Recorder, name: str, body: bytes) -> float:
    """What the profiling pod does, then the seconds until the job is annotated Predicted."""
    profiling_job = emu.get("tfjobs", NS, f"{name}-prof-g1")
    start = time.monotonic()
    result = upload_as_profiling_pod(emu, profiling_job, body)
    if not result.ok:
        raise RuntimeError(f"upload for {name}: {result.status} {result.message}")
    wait_for(f"{name} Predicted", lambda: name in recorder.predicted, timeout_s=180)
    return recorder.predicted[name] - start


def _steady_rss(pid: int, settle_s: float) -> float:
    """VmRSS (MB) after ``settle_s`` seconds, the median of five readings 0.2 s apart."""
    time.sleep(settle_s)
    readings = []
    for _ in range(5):
        readings.append(read_memory(pid, "controller").rss_mb)
        time.sleep(0.2)
    return statistics.median(readings)


def _reconcile_quantiles(exposition: str) -> tuple[int, tuple[float, float]]:
    """(count, (p50, p99)) of ``advisor_reconcile_duration_seconds``: the upper bound of the bucket
    holding each quantile, as exact as the histogram allows."""
    family = next(f for f in text_string_to_metric_families(exposition) if f.name == "advisor_reconcile_duration_seconds")
    buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
    total = buckets[-1][1]

    def bound(q: float) -> float:
        return next(le for le, count in buckets if count >= q * total)

    return int(total), (bound(0.5), bound(0.99))


def report(r: Result, env: Mapping[str, str]) -> str:
    controller, children = r.memory[0], r.memory[1:]
    p50, p99 = r.reconcile_bounds
    lines = [
        f"controller at scale: {r.jobs} opted-in TFJobs; `advisor controller` in its own process (pid {controller.pid})"
        + (f" with {' '.join(f'{k}={v}' for k, v in env.items())}" if env else "")
        + f"; {os.cpu_count()} cores shared with whatever else runs, so timings are noisy",
        "latency",
        f"  creation -> profiling run       p50 {_q(r.to_profile, 50):7.3f} s   p99 {_q(r.to_profile, 99):7.3f} s"
        "   (creations one after another, as fast as this process makes them)",
        f"  first upload -> Predicted       {r.first_prediction:7.3f} s   (a real prediction: worker spawn + simulation)",
        f"  upload -> Predicted             p50 {_q(r.to_annotation, 50):7.3f} s   p99 {_q(r.to_annotation, 99):7.3f} s"
        f"   ({len(r.to_annotation)} uploads; trace import included, simulation excluded: stored prediction)",
        f"  reconcile                       p50 <= {p50:g} s   p99 <= {p99:g} s   target p99 < {TARGET_RECONCILE_P99_S:g} s:"
        f" {_verdict(p99 < TARGET_RECONCILE_P99_S)}   ({r.reconciles} reconciles, the controller's /metrics histogram)",
        "memory (VmRSS now, VmHWM peak, from /proc/PID/status)",
        f"  controller process              idle {r.rss['idle']:.0f} MB, with {r.jobs} jobs {r.rss['jobs']:.0f} MB, "
        f"steady after the uploads {r.rss['steady']:.0f} MB, peak {controller.peak_mb:.0f} MB",
        f"                                  target < {TARGET_RSS_MB:.0f} MB RSS: steady {_verdict(r.rss['steady'] < TARGET_RSS_MB)},"
        f" peak {_verdict(controller.peak_mb < TARGET_RSS_MB)}",
        f"  its {len(children)} child processes           RSS {sum(c.rss_mb for c in children):.0f} MB, "
        f"peaks summed {sum(c.peak_mb for c in children):.0f} MB (not the controller's; no target)",
    ]
    lines += [f"    pid {c.pid:<7d} {c.role:<20s} RSS {c.rss_mb:4.0f} MB, peak {c.peak_mb:4.0f} MB" for c in children]
    lines.append(f"  this process (emulator + client, not the controller): peak {r.bench_peak_mb:.0f} MB")
    return "\n".join(lines)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _q(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1] if len(values) > 1 else values[0]


if __name__ == "__main__":
    main()
