"""The repository's real throughput curves, each with the one-worker profile of the same program and
the request the product makes for it: what the closed-loop benchmarks observe and predict.

Four sets (their READMEs say how each was taken):

- ``tests/data/ps-async``: TensorFlow asynchronous PS, 1 PS, W = 1..8 (with gaps), two models
  under three congestion-control settings, predicted by ``li2020-des+contention``;
- ``tests/data/ps-traces``: the MLP with 1 and 2 PS, W = 1..4, by the same model;
- ``tests/data/ps-sync``: TensorFlow synchronous PS (``SyncReplicasOptimizer``), 1 PS, W = 1..8,
  two models at two link rates, with and without a backup worker, by ``li2020-des-sync+contention``
  (not in ``every_curve``, whose figures in docs/decisions.md were measured without them:
  ``calibration_rules --sync`` and ``profile_check --sync`` score them apart);
- ``tests/data/allreduce``: PyTorch DDP and Keras MultiWorkerMirroredStrategy, W = 1..4 (the PS
  testbed's programs 1..8), by ``ring-allreduce``.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from advisor.core.advice import AdviceRequest, ModelChoice
from advisor.core.cost import Prices
from advisor.core.curve import CurveSettings
from advisor.core.model_error import ModelError, ModelErrors
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from benchmarks.allreduce_accuracy import TESTBED, configs
from benchmarks.paths import PS_ASYNC_DATA, REPO
from benchmarks.sync_accuracy import DATA as PS_SYNC, MODEL as SYNC_MODEL, job_settings, runs

PS_TRACES = REPO / "tests" / "data" / "ps-traces"
ALLREDUCE = REPO / "tests" / "data" / "allreduce"
PS_MODEL = "li2020-des+contention"
RING_MODEL = "ring-allreduce"


@dataclass(frozen=True)
class RealCurve:
    """One program: its measured examples/s per W (every run), its profile, and how to ask for it."""

    name: str
    model: str
    params: Mapping[str, Any]  # the model's parameters as the job's owner states them
    bandwidth_bps: float  # the link rate the runs were shaped to
    measured: Mapping[int, tuple[float, ...]]
    load: Callable[[], Profile] = field(compare=False, repr=False)
    parameter_servers: int = 1

    def means(self) -> dict[int, float]:
        return {w: statistics.mean(v) for w, v in sorted(self.measured.items())}

    @property
    def max_workers(self) -> int:
        return max(self.measured)

    def request(self, *, bandwidth_bps: float | None = None, params: Mapping[str, Any] | None = None,
                prices: Prices = Prices(), model_error: ModelErrors | ModelError | None = None, seed: int = 0,
                target: float = 0.05) -> AdviceRequest:
        """The request for W = 1..max measured, with the stated (or ``params``-overridden) values."""
        return AdviceRequest(
            network=NetworkModel(bandwidth_bps=bandwidth_bps or self.bandwidth_bps),
            curve=CurveSettings(workers=tuple(range(1, self.max_workers + 1)), seed=seed, target_rel_halfwidth=target),
            model=ModelChoice(self.model, {**self.params, **(params or {})}), prices=prices, model_error=model_error)

    def truth(self, workers: int) -> float:
        """The measured mean at ``workers``; between measured W, linear in W (W = 5, 7 of ps-async)."""
        means = self.means()
        if workers in means:
            return means[workers]
        below = max(w for w in means if w < workers)
        above = min(w for w in means if w > workers)
        return means[below] + (means[above] - means[below]) * (workers - below) / (above - below)


@cache
def _profile(path: str) -> Profile:
    from advisor.importers.loader import load_profile

    return load_profile(Path(path))


@cache
def _upload_profile(path: str) -> Profile:
    from advisor.importers.uploads import profile_from_upload

    return profile_from_upload(json.loads(gzip.decompress(Path(path).read_bytes())), origin=path)


PS_ASYNC_RUNS = (  # (measured file, congestion control, queue (s)): tests/data/ps-async/README.md
    ("cubic/mlp_bw100", "cubic", 0.1), ("cubic/mlp_bw100_repeat", "cubic", 0.1), ("cubic/cnn_bw100", "cubic", 0.1),
    ("bbr/mlp_bw100", "bbr", 0.1), ("bbr/mlp_bw100_repeat", "bbr", 0.1), ("bbr/cnn_bw100", "bbr", 0.1),
    ("cubic_q20ms/mlp_bw100", "cubic", 0.02),
)


def ps_async() -> list[RealCurve]:
    out = []
    for name, cc, queue in PS_ASYNC_RUNS:
        by_w: dict[int, list[float]] = {}
        for r in json.loads((PS_ASYNC_DATA / "measured" / f"{name}.json").read_text())["results"]:
            by_w.setdefault(int(r["W"]), []).append(float(r["thr_window"]))
        program = name.split("/")[1].split("_")[0]
        trace = str(PS_ASYNC_DATA / "condensed" / ("bbr" if cc == "bbr" else "cubic") / f"{program}_bw100.json.gz")
        out.append(RealCurve(f"ps-async/{name}", PS_MODEL, {"congestion_control": cc, "queue_s": queue}, 100e6,
                             {w: tuple(v) for w, v in by_w.items()}, lambda t=trace: _profile(t)))
    return out


def ps_traces() -> list[RealCurve]:
    out = []
    for path in sorted(PS_TRACES.glob("*_bw100.measured.json.gz")):  # the W = 1..4 runs; repeats are .r<k>.
        name = path.name.removesuffix(".measured.json.gz")
        doc = json.loads(gzip.decompress(path.read_bytes()))
        by_w = {int(r["W"]): (float(r["thr_window"]),) for r in doc["results"]}
        trace = str(PS_TRACES / f"{name}.trace.json.gz")
        # the testbed's tc tbf queue of about 100 ms, cubic (tests/data/ps-traces/README.md)
        out.append(RealCurve(f"ps-traces/{name}", PS_MODEL, {"congestion_control": "cubic", "queue_s": 0.1}, 100e6,
                             by_w, lambda t=trace: _profile(t), parameter_servers=2 if "ps2" in name else 1))
    return out


def ps_sync() -> list[RealCurve]:
    """One curve per synchronous job of ``tests/data/ps-sync`` (its top folder), every repeat of each W."""
    measured = runs(PS_SYNC)
    out = []
    for job, by_w in sorted(measured.items()):
        trace, bps, backup = job_settings(job)
        if 1 not in by_w:  # one worker with a backup aggregates its own gradient: the job without one
            by_w = {1: measured[trace][1], **by_w}
        # cubic, the tbf queue of about 100 ms (tests/data/ps-sync/README.md); a backup worker as stated
        params = {"congestion_control": "cubic", "queue_s": 0.1, **({"backup_workers": backup} if backup else {})}
        path = str(PS_SYNC / f"{trace}.trace.json.gz")
        out.append(RealCurve(f"ps-sync/{job}", SYNC_MODEL, params, bps, {w: tuple(v) for w, v in by_w.items()},
                             lambda t=path: _profile(t)))
    return out


def allreduce() -> list[RealCurve]:
    out = []
    for folder in configs(ALLREDUCE):  # a diagnostic without a profile (X-one-core) is no curve
        doc = json.loads((folder / "measured.json").read_text())
        # the recorded value per W: the median over fresh runs (the folder's README)
        by_w = {int(p["workers"]): (float(p["examples_per_s"]),) for p in doc["points"]}
        # every worker of a run on the testbed's one 2-core host, as its owner would state it
        out.append(RealCurve(f"allreduce/{folder.name}", RING_MODEL, dict(TESTBED), float(doc["bandwidth_bps"]), by_w,
                             lambda f=str(folder / "profile.json.gz"): _upload_profile(f), parameter_servers=0))
    return out


def every_curve(sync: bool = False) -> list[RealCurve]:
    """The curves the closed-loop benchmarks score: the asynchronous-PS, PS-trace and all-reduce
    sets, or with ``sync`` the synchronous set alone (its own tables, so that the others' stay
    comparable with the figures measured before it was added)."""
    return ps_sync() if sync else ps_async() + ps_traces() + allreduce()
