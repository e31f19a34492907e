"""Controller at scale: 1,000 opted-in TFJobs in the API emulator.

    python -m benchmarks.bench_controller [--jobs 1000] [--uploads 50]

Prints the time from a TFJob's creation to its profiling run (p50/p99), from a trace upload to
the Predicted annotation (p50/p99, with the canned prediction runner, so simulation time is
excluded as the target says), the reconcile duration (p50/p99 from the controller's own
histogram buckets) and the controller process's peak RSS. Targets (issue 4): p99 reconcile
under 1 s excluding simulation, under 150 MB RSS. The emulator runs in the same process, so the
RSS figure includes it (an upper bound for the controller alone).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from tests.controller.harness import NS, create_tfjob, phase, settings_for, start_controller, trace_body, \
    upload_as_profiling_pod, wait_for
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--uploads", type=int, default=50, help="jobs that also get a trace (importing costs CPU)")
    args = parser.parse_args()
    body = trace_body("mlp_bw100")
    with KubeEmulator(namespaces=[NS], history_limit=100_000) as emu, tempfile.TemporaryDirectory() as tmp:
        controller = start_controller(emu, settings_for(Path(tmp), leader_election=False, resync_period_s=3600))
        try:
            created: dict[str, float] = {}
            for i in range(args.jobs):
                name = f"job-{i:04d}"
                created[name] = time.monotonic()
                create_tfjob(emu, tfjob(name, workers=2))
            profiled: dict[str, float] = {}

            def all_profiled() -> bool:
                for name in created:
                    if name not in profiled and emu.get("tfjobs", NS, f"{name}-prof-g1") is not None:
                        profiled[name] = time.monotonic()
                return len(profiled) == len(created)

            wait_for("every profiling run", all_profiled, timeout_s=600)
            to_profile = [profiled[n] - created[n] for n in created]
            to_annotation = []
            for name in list(created)[: args.uploads]:
                pj = emu.get("tfjobs", NS, f"{name}-prof-g1")
                start = time.monotonic()
                assert upload_as_profiling_pod(emu, pj, body).ok
                wait_for("Predicted", lambda: phase(emu, name) == "Predicted", timeout_s=120)
                to_annotation.append(time.monotonic() - start)
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            p50, p99 = _histogram_quantiles(controller)
        finally:
            controller.stop()
    print(f"jobs {args.jobs}: creation -> profiling run p50 {_q(to_profile, 50):.3f} s, p99 {_q(to_profile, 99):.3f} s "
          "(the creations themselves are sequential, so later jobs wait behind earlier ones)")
    print(f"uploads {len(to_annotation)}: trace -> Predicted annotation p50 {_q(to_annotation, 50):.3f} s, "
          f"p99 {_q(to_annotation, 99):.3f} s (trace import included, simulation excluded)")
    print(f"reconcile duration p50 <= {p50:g} s, p99 <= {p99:g} s (histogram bucket bounds)")
    print(f"peak RSS {rss_mb:.0f} MB (controller + emulator + test client in one process)")


def _q(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1] if len(values) > 1 else values[0]


def _histogram_quantiles(controller) -> tuple[float, float]:
    samples = controller.metrics.reconcile_duration.collect()[0].samples
    buckets = [(float(s.labels["le"]), s.value) for s in samples if s.name.endswith("_bucket")]
    total = buckets[-1][1]
    def bound(q: float) -> float:
        return next(le for le, count in buckets if count >= q * total)
    return bound(0.5), bound(0.99)


if __name__ == "__main__":
    main()
