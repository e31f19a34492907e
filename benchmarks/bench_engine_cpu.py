"""The compiled engine's CPU time on a fixed workload, and a digest of what it computed.

    python -m benchmarks.bench_engine_cpu [--repeat 3]

For the synthetic Inception-scale step at 10 Gbit/s: one run of 200 steps per worker (a curve
point's first look) at W = 1, 4, 8, 16 and 32, with the default model's network (the contention
rules) and with equal shares. Each run is timed as CPU time of this process (``process_time``,
less sensitive than wall time to other work on a shared machine; the fastest of ``--repeat``),
and the step ends of all runs are hashed: two versions of the engine that print the same digest
computed the same step ends, bit for bit. To compare with another version of the code, run this
file from that version's checkout (``cd OTHER && python -m benchmarks.bench_engine_cpu``).
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ps_des.simulator.fast import FastRun, compile_profile
from advisor.core.sim_types import NetworkModel
from benchmarks.synthetic import inception_like

WORKERS = (1, 4, 8, 16, 32)
STEPS = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="time each run this many times (the fastest counts)")
    args = parser.parse_args()
    profile = inception_like()
    model = registry.get("li2020-des+contention")
    contention = model.network(ModelInputs(network=NetworkModel(bandwidth_bps=10e9)),  # type: ignore[attr-defined]
                               registry.params_for(model))
    networks = {"contention rules (default)": contention, "equal shares": NetworkModel(bandwidth_bps=10e9)}
    start = time.perf_counter()
    for net in networks.values():
        FastRun(compile_profile(profile, net), 2, 0).advance(3)
    print(f"engine loaded (or compiled) in {time.perf_counter() - start:.1f} s")
    for name, net in networks.items():
        compiled = compile_profile(profile, net)
        digest, total, events = hashlib.sha256(), 0.0, 0
        cells = []
        for workers in WORKERS:
            best = float("inf")
            for _ in range(args.repeat):
                run = FastRun(compiled, workers, 0)
                cpu = time.process_time()
                seen = run.advance(STEPS)
                best = min(best, time.process_time() - cpu)
            total += best
            events += seen.events
            for ends in seen.step_ends_s:
                digest.update(np.ascontiguousarray(ends, dtype=np.float64).tobytes())
            cells.append(f"W{workers} {best * 1e3:.0f} ms")
        print(f"{name:<28} {total:6.3f} s CPU  {events / total / 1e6:5.1f} Mevents/s  ({', '.join(cells)})  "
              f"step ends {digest.hexdigest()[:12]}")


if __name__ == "__main__":
    main()
