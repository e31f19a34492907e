"""Accuracy of the huang-replay model on the real traces and measurements in tests/data/ps-async.

    python -m benchmarks.huang_accuracy [--steps 60]

Prints, per condensed trace: the recorded step time (mean client ``wall_us``), the W = 1 replay
(default: recorded service order; and FIFO), the PS simulator at W = 1 on the same prepared
profile, and the even steps predicted from a database of the odd steps. Then, for every
measured run at 100 Mbit/s (``measured/<cc>/<model>_bw100*.json``, repeats averaged), the
replayed throughput for W = 1..8 against the measured ``thr_window``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from advisor.core.advice import DEFAULT_GOODPUT, AdviceRequest, prepare_profile
from advisor.core.curve import CurveSettings
from advisor.core.huang.opdb import build_database
from advisor.core.models.huang_replay import DEVICE_DB, MODELS
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ps_des.simulator import simulate
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.importers.loader import load_profile
from benchmarks.paths import PS_ASYNC_DATA

MODEL = MODELS[0]


def _prepared(path: Path) -> tuple[Profile, float]:
    bw = float(re.search(r"_bw(\d+)", path.name)[1]) * 1e6  # type: ignore[index]
    request = AdviceRequest(network=NetworkModel(bw), curve=CurveSettings(workers=(1,)))
    return prepare_profile(load_profile(path), request), bw


def _inputs(profile: Profile, bw: float, db: object = None) -> ModelInputs:
    extras = {} if db is None else {DEVICE_DB: db}
    return ModelInputs(profile=profile, network=NetworkModel(bw), goodput=DEFAULT_GOODPUT, extras=extras)


def _w1_step(profile: Profile, bw: float, db: object = None, **params: object) -> float:
    s = MODEL.start(_inputs(profile, bw, db), MODEL.Params(**params), 1, 0).advance(len(profile.steps))
    return float(s.step_ends_s[0][-1]) / len(profile.steps)


def _throughput(profile: Profile, bw: float, workers: int, steps: int) -> float:
    """Examples/s over the window where every worker is past its first quarter of steps."""
    s = MODEL.start(_inputs(profile, bw), MODEL.Params(), workers, 0).advance(steps)
    start = max(e[steps // 4 - 1] for e in s.step_ends_s if len(e) >= steps // 4)
    done = sum(int(((e > start) & (e <= s.until_s)).sum()) for e in s.step_ends_s)
    return done * s.batch_size / (s.until_s - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="replayed steps per worker for W > 1")
    args = parser.parse_args()
    print(f"{'trace':<18} {'recorded ms':>11} {'replay':>8} {'fifo':>8} {'DES':>8} {'fifo/DES':>9} {'odd->even':>9}")
    errs: dict[str, list[float]] = defaultdict(list)
    for path in sorted((PS_ASYNC_DATA / "condensed").glob("*/*.json.gz")):
        profile, bw = _prepared(path)
        recorded = float(np.mean([s.wall_us for s in profile.steps])) * 1e-6
        rep = _w1_step(profile, bw)
        fifo = _w1_step(profile, bw, order="fifo")
        des_run = simulate(profile, NetworkModel(bw * DEFAULT_GOODPUT), SimulationSettings(workers=1, steps=400, warmup_steps=0))
        des = float(np.mean(np.diff((0.0, *des_run.step_ends_s[0]))))
        odd = profile.model_copy(update={"steps": tuple(s for s in profile.steps if s.index % 2 == 1)})
        even = profile.model_copy(update={"steps": tuple(s for s in profile.steps if s.index % 2 == 0)})
        pred = _w1_step(odd, bw, build_database([odd]))
        even_rec = float(np.mean([s.wall_us for s in even.steps])) * 1e-6
        row = {"replay": rep / recorded - 1, "fifo": fifo / recorded - 1, "des": des / recorded - 1,
               "fifo/des": fifo / des - 1, "odd->even": pred / even_rec - 1}
        for k, v in row.items():
            errs[k].append(abs(v))
        name = f"{path.parent.name}/{path.name.removesuffix('.json.gz')}"
        print(f"{name:<18} {recorded * 1e3:>11.1f} " + " ".join(f"{100 * v:>+7.1f}%" for v in row.values()))
    print("mean |error|      " + " " * 12 + " ".join(f"{100 * np.mean(v):>7.1f}%" for v in errs.values()))
    print("\nW > 1 against measured throughput (examples/s; repeats averaged):")
    for path in sorted((PS_ASYNC_DATA / "measured").glob("*/*_bw100*.json")):
        cc, model = path.parent.name, path.name.split("_")[0]
        trace = PS_ASYNC_DATA / "condensed" / ("cubic" if cc.startswith("cubic") else cc) / f"{model}_bw100.json.gz"
        profile, bw = _prepared(trace)
        measured: dict[int, list[float]] = defaultdict(list)
        for r in json.loads(path.read_text())["results"]:
            measured[int(r["W"])].append(float(r["thr_window"]))
        cells = []
        for w in sorted(measured):
            pred = _throughput(profile, bw, w, args.steps)
            m = float(np.mean(measured[w]))
            cells.append(f"W={w}: {pred:.0f}/{m:.0f} ({100 * (pred / m - 1):+.0f}%)")
        print(f"{cc + '/' + path.stem:<28} " + "  ".join(cells))


def leave_one_shape_out() -> None:
    """How well the per-type linear fit predicts a shape it has not seen: for every entry of an op
    type with 3+ shapes (database of the cubic traces), fit without it and compare with its mean."""
    from advisor.core.huang.opdb import elements, fit_linear

    db = build_database([load_profile(p) for p in sorted((PS_ASYNC_DATA / "condensed" / "cubic").glob("*.json.gz"))])
    groups: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for e in db.entries:
        if e.input_shapes is not None and e.node is None:
            groups[(e.op_type, e.device)].append((elements(e.input_shapes), e.mean_us))
    print("\nleave-one-shape-out error of the linear fits (op types with 3+ shapes):")
    for (op_type, device), pts in sorted(groups.items()):
        if len(pts) < 3:
            continue
        errs = []
        for k, (n, t) in enumerate(pts):
            fit = fit_linear(op_type, device, pts[:k] + pts[k + 1:])
            errs.append(abs(fit(n) - t) / t if t > 0 else 0.0)
        print(f"  {op_type:<30} {device:<7} {len(pts):>3} shapes  median {100 * np.median(errs):5.0f}%  max {100 * max(errs):5.0f}%")


if __name__ == "__main__":
    main()
    leave_one_shape_out()
