"""Synchronised or alternating? Predicted throughput with request-path queueing and staggered starts.

Run from the repository root: ``python -m benchmarks.regimes``. Evidence, not a test: for the
recorded mlp and cnn traces (cubic, 100 Mbit/s) it prints the predicted examples/s for each W,
each ``NetworkModel.queue_delay_s`` and two starts (all workers at 0, or spread evenly over one
1-worker step), next to the throughput measured on the testbed with cubic (100 ms queue), bbr
and cubic with a 20 ms queue. The profile is prepared as ``advisor predict`` prepares it
(goodput 0.95, client gap on, FIFO, no HTTP/2 window).
"""

from __future__ import annotations

import json
from pathlib import Path

from advisor.core.advice import AdviceRequest, effective_network, prepare_profile
from advisor.core.predict import CurveSettings
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.simulator import simulate
from advisor.core.simulator.stagger import even_stagger
from advisor.importers.loader import load_profile

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WORKERS = (1, 2, 3, 4, 6, 8)
DELAYS_S = (0.0, 0.005, 0.02, 0.1)
CONGESTION = ("cubic", "bbr", "cubic_q20ms")
STEPS, WARMUP = 1000, 50


def prepared(model: str) -> tuple[Profile, NetworkModel]:
    """The cubic 100 Mbit/s trace as the product simulates it, and the effective network."""
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=CurveSettings(workers=(1,)))
    profile = load_profile(DATA / "condensed" / "cubic" / f"{model}_bw100.json.gz")
    return prepare_profile(profile, request), effective_network(request)


def throughput(profile: Profile, network: NetworkModel, workers: int, offsets: tuple[float, ...] = ()) -> float:
    settings = SimulationSettings(workers=workers, steps=STEPS, warmup_steps=WARMUP, start_offsets_s=offsets)
    return simulate(profile, network, settings).throughput(WARMUP)


def one_worker_step_s(profile: Profile, network: NetworkModel) -> float:
    """Mean step time of one worker alone: the period the stagger spreads workers over."""
    ends = simulate(profile, network, SimulationSettings(workers=1, steps=STEPS, warmup_steps=WARMUP)).step_ends_s[0]
    return (ends[-1] - ends[WARMUP - 1]) / (STEPS - WARMUP)


def measured(model: str) -> dict[str, dict[int, list[float]]]:
    """congestion control -> W -> every measured thr_window (all files and repeats)."""
    out: dict[str, dict[int, list[float]]] = {}
    for cc in CONGESTION:
        for path in sorted((DATA / "measured" / cc).glob(f"{model}_bw100*.json")):
            for r in json.loads(path.read_text())["results"]:
                out.setdefault(cc, {}).setdefault(int(r["W"]), []).append(float(r["thr_window"]))
    return out


def _span(values: list[float] | None) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def table(model: str) -> None:
    profile, network = prepared(model)
    period = one_worker_step_s(profile, network)
    real = measured(model)
    print(f"\n{model} (batch {profile.job.batch_size}): predicted ex/s, sync = all start at 0, "
          f"stag = even stagger over {period * 1e3:.1f} ms; measured thr_window (min-max over runs)")
    head = " ".join(f"{f'd={d * 1e3:g}ms':>17}" for d in DELAYS_S)
    print(f"{'W':>3} {head}   " + " ".join(f"{cc:>11}" for cc in CONGESTION))
    print(f"{'':>3} " + " ".join(f"{'sync':>8} {'stag':>8}" for _ in DELAYS_S))
    for w in WORKERS:
        cells = []
        for d in DELAYS_S:
            net = NetworkModel(**{**_fields(network), "queue_delay_s": d})
            cells.append(f"{throughput(profile, net, w):>8.1f} {throughput(profile, net, w, even_stagger(w, period)):>8.1f}")
        print(f"{w:>3} " + " ".join(cells) + "   " + " ".join(f"{_span(real.get(cc, {}).get(w)):>11}" for cc in CONGESTION))


def _fields(network: NetworkModel) -> dict:
    return {name: getattr(network, name) for name in network.__slots__}


def main() -> None:
    for model in ("mlp", "cnn"):
        table(model)


if __name__ == "__main__":
    main()
