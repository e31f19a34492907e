"""What counting costs a training worker: the calls every step makes when ``ADVISOR_METRICS_PORT``
is set, and a scrape.

    python -m benchmarks.counting_cost [--steps N]

A worker's hook or callback calls, per step, ``StepCounter.step`` (the TF1 hook, the step
profiler, PyTorch's optimizer hook) or ``BatchEndSteps.batch_end`` (the Keras callbacks), and
``GlobalStepProgress.due`` (whether to read the global step now: once every 10 s); once per read,
``GlobalStepProgress.seen``. Prometheus scrapes ``/metrics`` every 15-60 s. Each call is timed
here over ``--steps`` calls in one thread (the median of 5 rounds, nanoseconds per call), then a
scrape over HTTP from the exporter's own server (the median of 50). No TensorFlow: the framework's
own read of the global step (an 8-byte fetch, once every 10 s) is not in these figures.
docs/performance.md has them.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
import urllib.request
from collections.abc import Callable

from advisor.profiling.throughput import BatchEndSteps, GlobalStepProgress, StepCounter, ThroughputExporter


def per_call_ns(call: Callable[[int], object], calls: int, rounds: int = 5) -> float:
    """The median over ``rounds`` of the wall time per call of ``call(i)`` for i in range(calls)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for i in range(calls):
            call(i)
        times.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(times)


def scrape_ms(port: int, scrapes: int = 50) -> float:
    times = []
    for _ in range(scrapes):
        start = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            response.read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="calls per round (default 200000)")
    args = parser.parse_args()
    exporter = ThroughputExporter(0, addr="127.0.0.1")
    try:
        counter = StepCounter(exporter, 32.0)
        batches = BatchEndSteps(counter)
        progress = GlobalStepProgress(counter)
        batch = itertools.count()  # every round's batches go on from the last: each call counts a step
        rows = [
            ("StepCounter.step (the hook, the step profiler, PyTorch)", per_call_ns(lambda i: counter.step(), args.steps)),
            ("BatchEndSteps.batch_end (the Keras callbacks)", per_call_ns(lambda i: batches.batch_end(next(batch)),
                                                                          args.steps)),
            ("GlobalStepProgress.due (every step)", per_call_ns(lambda i: progress.due(), args.steps)),
            ("GlobalStepProgress.seen (every read)", per_call_ns(lambda i: progress.seen(i, 32.0), args.steps)),
        ]
        print(f"{'call':<58} {'ns per call':>12}")
        for name, ns in rows:
            print(f"{name:<58} {ns:>12.0f}")
        steps, _, _ = exporter.snapshot()
        print(f"\na scrape of /metrics over HTTP (median of 50): {scrape_ms(exporter.port):.2f} ms "
              f"({steps} steps counted)")
    finally:
        exporter.close()


if __name__ == "__main__":
    main()
