"""Accuracy of the ring all-reduce model against real all-reduce runs measured on this machine,
with the model's defaults and held out.

    python3 -m benchmarks.allreduce_accuracy [--markdown] [--steps 1000] [--param latency_s=0.002]
        [--no-holdout] [--data DIR] [--write] [--write-predictions W,... [--config NAME]]

For every ``tests/data/allreduce/<config>/`` (``profile.json.gz``: the one-worker bundle the
framework's hook uploaded; ``measured.json``: examples/s at W = 1..4, for the PS testbed's
programs also 5..8, with how they were taken;
``scripts/record_allreduce_ddp.py`` and ``record_allreduce_mwms.py`` write them) it predicts each
measured W with the ``ring-allreduce`` model from the profile at the recorded link rate (nominal
rate x the product's default TCP goodput, 0.95, as ``advisor predict`` does) and prints predicted
vs measured per W with the error, then per configuration, per framework, over all and over the
points with more than HOST_WORKERS workers the median and maximum |error|.

Every prediction states the testbed's placement as its user would (``TESTBED``: every worker of
a run on one host of 2 cores, ``host_cores`` 2). Two predictions per point:

- **default**: the model's defaults (``--param`` overrides one): the per-round latency, two-way
  share and host figure of the profile's framework (``ring_allreduce.model.FRAMEWORKS``);
- **held out**: ``host_cpu_s`` fitted (``fit``: the smallest mean |error| over the multi-worker
  points) on the OTHER scored configurations of the same framework, never on the one reported,
  so that a figure fitted to the points it is scored on never appears.

A configuration ``X-calm`` is ``X`` measured again on a calm machine: it supersedes ``X``, which
is then still printed but marked as a caveat (``*``), left out of every fit and of the scored
summaries (the loaded runs' TensorFlow CPU work was stretched by other jobs). Likewise the W of a
configuration measured on another day than its profile (``SAME_DAY``: the VM's speed moves from
day to day), where a configuration of the same program measured in one sitting with its profile
sits beside it (``stale``).

The link figures of the defaults are derived here too, from lone all-reduces timed over the same
kind of links (no training), never from these runs: gloo's from W = 2..4 (``gloo_probe_fit``),
TensorFlow's ring's from two workers (``grpc_probe_fit``, ``GRPC_PROBE``), who share none of the
host's two cores. On the runs alone a round's latency and the host's share of the step trade off.
TensorFlow's ring's host figures but the wait a step come from the same probe at W = 2..8 on the
2-core host with every worker's CPU time (``host_probe_fit``, ``GRPC_HOST_PROBE``): the wait per
MB, the CPU per all-reduce, per small collective and per MB, the most of the cores the workers
kept busy, and how a step turns into that bound (``host_bound_exponent``). Only the
wait a step, ``host_cpu_s``, is fitted on the training runs (``fit``, with the host's CPU bound
taken apart and put back by ``shifted``). A configuration with ``predictions-w1-*.json`` was
predicted at every W before any run: it is scored, never fitted on (``predicted_first``).

**From the PS trace** (``PS_TRACES``): the MWMS runs of the parameter-server testbed's programs
are also predicted from the one-worker *PS* trace of the same program, the all-reduce what-if a
user of a PS job asks; the trace's kind (``tf-ps``) takes TF's ring figures. Printed after the
table, with the median and max |error| over W = 2..4 and over W > 4 apart (W = 1 is the PS
trace's compute against another framework's run).

**Predicted before measuring**: the W = 5..8 runs of those programs were predicted before they
were measured, with the model of that time (no host term; ``--write-predictions``,
``predictions-w5-8.json`` beside each configuration's measurements): the last tables hold them
against the runs, with the CPU milliseconds each worker spent per step where the run kept it,
and the prediction with the host stated. A configuration ``X-one-core`` (no profile: never
scored) is ``X`` measured again with every worker on one CPU of the host
(``record_allreduce_mwms.py --cpu-list 0``): printed beside ``X`` at the same W and at twice the W
(as many workers per core), each against the prediction with its cores stated. The last line
(``SAME_DAY``) holds runs measured on another day than their configuration's profile against the
prediction from a profile of the same program taken the day they ran.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from advisor.core.advice import DEFAULT_GOODPUT, AdviceRequest, model_inputs
from advisor.core.curve import CurvePoint, CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.models.ring_allreduce import RingParams
from advisor.core.models.ring_allreduce.model import turned
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import write_model_error
from advisor.importers.uploads import profile_from_upload

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "allreduce"
PS_DATA = DATA.parent / "ps-traces"
# MWMS configurations of the PS testbed's programs (scripts/record_allreduce_mwms.py --model mlp|cnn)
# and the one-worker PS trace of the same program (scripts/record_ps_traces.py --model mlp|cnn)
PS_TRACES = {"mwms-mlp-bw25": "mlp_ps1_bw100", "mwms-cnn-bw25": "cnn_ps1_bw100", "mwms-cnn-bw100": "cnn_ps1_bw100"}
MODEL = "ring-allreduce"
CALM = "-calm"  # a configuration re-measured on a calm machine supersedes the one without the suffix
# The testbed runs every worker of a run on one host of 2 cores: every prediction here states
# that placement (the model's host_cores), so that workers beyond the cores pay the framework's
# host_cpu_s a step. HOST_WORKERS only splits the summaries: up to 4 workers, as many as the
# cluster benchmark's job types use, and beyond.
HOST_CORES = 2
TESTBED: Mapping[str, Any] = {"host_cores": HOST_CORES}
HOST_WORKERS = 4
HOST_GRID = tuple(i * 5e-4 for i in range(61))  # host_cpu_s: 0 to 30 ms a step per worker beyond the cores

# A lone gloo all-reduce (torch.distributed, no DDP, no training) over the testbed's links shaped
# at 200 Mbit/s each way, median of 10 (scripts/record_allreduce_ddp.py probe --config ddp-comm):
# (MiB, W) -> ms. Independent of the DDP training runs, so the gloo defaults fitted to it are
# held out from every DDP configuration by construction.
GLOO_PROBE_RATE_BPS = 200e6
GLOO_PROBE_MS = {(1, 2): 45.0, (1, 3): 65.0, (1, 4): 69.0, (8, 2): 359.0, (8, 3): 479.0, (8, 4): 541.0}
# Lone TensorFlow ring all-reduces (scripts/record_allreduce_mwms.py probe): the gRPC ring's figures
# come from its runs at W = 2, two workers on the host's two cores, so that no sharing of cores is
# in them (its W = 3 and 4 timings are kept, not fitted).
GRPC_PROBE = DATA / "grpc-ring-probe" / "probe.json"


@dataclass(frozen=True)
class Row:
    """One measured point, its prediction with the defaults and held out."""

    config: str
    kind: str
    workers: int
    measured: float  # examples/s
    spread: tuple[float, float]
    predicted: float  # with the model's defaults (and --param)
    held_out: float | None = None  # with latency_s, two_way_share fitted without this configuration
    caveat: bool = False  # superseded by a calm or same-day re-measurement: shown, not scored

    @property
    def crowded(self) -> bool:
        """More co-located workers than HOST_WORKERS: summarised apart."""
        return self.workers > HOST_WORKERS

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0

    @property
    def held_out_error(self) -> float | None:
        """Relative error of the held-out prediction, None without one."""
        return None if self.held_out is None else self.held_out / self.measured - 1.0


def configs(data: Path = DATA) -> list[Path]:
    """The configuration folders that hold both a profile and measurements."""
    if not data.is_dir():
        return []
    return sorted(d for d in data.iterdir() if (d / "profile.json.gz").is_file() and (d / "measured.json").is_file())


def stale(folder: Path) -> set[int]:
    """The W of ``folder`` measured on another day than its profile, where a configuration of the
    same program measured in one sitting with its profile sits beside it (``SAME_DAY``): shown,
    neither fitted nor scored, as a loaded configuration a calm one supersedes. The VM's speed
    moves from day to day, which a profile of another day cannot show."""
    return {w for name, ws, other in SAME_DAY if name == folder.name
            and (folder.with_name(other) / "measured.json").is_file() for w in ws}


def superseded(folders: Sequence[Path]) -> set[str]:
    """Names of the configurations a calm re-measurement (``X-calm``) supersedes."""
    names = {f.name for f in folders}
    return {n[: -len(CALM)] for n in names if n.endswith(CALM) and n[: -len(CALM)] in names}


@cache
def _load(folder: Path) -> tuple[dict[str, Any], Profile]:
    """The configuration's measurements and profile; a configuration not measured yet (its
    predictions are written first) stands on its profile: its kind and recorded link rate."""
    doc = json.loads(gzip.decompress((folder / "profile.json.gz").read_bytes()))
    profile = profile_from_upload(doc, origin=str(folder / "profile.json.gz"))
    path = folder / "measured.json"
    if path.is_file():
        return json.loads(path.read_text()), profile
    if profile.job.recorded_bandwidth_bps is None:
        raise SystemExit(f"{folder}: no measured.json, and the profile records no link rate")
    return {"kind": profile.job.kind.value, "bandwidth_bps": profile.job.recorded_bandwidth_bps,
            "batch_size": profile.job.batch_size, "points": []}, profile


def predict(folder: Path, *, steps: int = 1000, params: Mapping[str, Any] | None = None) -> list[Row]:
    """Predicted vs measured for every measured W of one configuration (seeded: each configuration,
    step count and parameters is simulated once per process, however many fits ask for it)."""
    return list(_predict(folder, steps, tuple(sorted((params or {}).items()))))


@cache
def _predict(folder: Path, steps: int, params: tuple[tuple[str, Any], ...]) -> tuple[Row, ...]:
    measured, _ = _load(folder)
    points = sorted(measured["points"], key=lambda p: p["workers"])
    curve = profile_curve(folder, tuple(p["workers"] for p in points), steps, dict(params))
    return tuple(_rows(folder.name, measured, points, curve))


def _inputs(folder: Path) -> ModelInputs:
    """The ring model's inputs for ``folder``'s program: its profile at its measured (or recorded)
    link rate x the product's default goodput, as ``advisor predict`` states them."""
    measured, profile = _load(folder)
    return ModelInputs(profile=profile, recorded=profile,
                       network=NetworkModel(bandwidth_bps=float(measured["bandwidth_bps"])), goodput=DEFAULT_GOODPUT)


def profile_curve(folder: Path, workers: Sequence[int], steps: int,
                  params: Mapping[str, Any]) -> tuple[CurvePoint, ...]:
    """The ring model's points at ``workers`` from the configuration's own MWMS or DDP profile, on
    the testbed's host (``TESTBED``, which ``params`` may override)."""
    model = registry.get(MODEL)
    chosen = registry.params_for(model, {**TESTBED, **params})
    inputs = _inputs(folder)
    model.check(inputs, chosen)
    return predict_curve(model, inputs, chosen, CurveSettings(workers=tuple(workers), steps=steps, seed=1))


def ps_trace_curve(folder: Path, workers: Sequence[int], steps: int, params: Mapping[str, Any],
                   ps_data: Path = PS_DATA) -> tuple[CurvePoint, ...]:
    """The ring model's points at ``workers`` from the PS trace of the program ``folder`` measured
    under MWMS (``PS_TRACES``), prepared as ``advisor predict TRACE --model ring-allreduce
    --bandwidth RATE --model-param host_cores=2`` prepares it (``TESTBED``, which ``params`` may override)."""
    measured, _ = _load(folder)
    profile = _ps_trace(ps_data / f"{PS_TRACES[folder.name]}.trace.json.gz")
    model = registry.get(MODEL)
    settings = CurveSettings(workers=tuple(workers), steps=steps, seed=1)
    network = NetworkModel(bandwidth_bps=float(measured["bandwidth_bps"]))
    inputs = model_inputs(profile, AdviceRequest(network=network, curve=settings))
    return predict_curve(model, inputs, registry.params_for(model, {**TESTBED, **params}), settings)


def _rows(config: str, measured: Mapping[str, Any], points: Sequence[Mapping[str, Any]],
          curve: Sequence[Any]) -> list[Row]:
    """One ``Row`` per measured point (sorted by W) and its predicted point."""
    return [Row(config=config, kind=str(measured["kind"]), workers=int(p["workers"]),
                measured=float(p["examples_per_s"]), spread=(float(p["spread"][0]), float(p["spread"][1])),
                predicted=c.throughput) for p, c in zip(points, curve, strict=True)]


def predict_from_ps_trace(folder: Path, *, steps: int = 1000, params: Mapping[str, Any] | None = None,
                          ps_data: Path = PS_DATA) -> list[Row]:
    """Predicted (the defaults, or ``params``) from the PS trace of the program ``folder`` measured under MWMS
    (``PS_TRACES``) vs measured, for every measured W; [] for a configuration without one."""
    name = PS_TRACES.get(folder.name)
    if name is None:
        return []
    measured, _ = _load(folder)
    points = sorted(measured["points"], key=lambda p: p["workers"])
    curve = ps_trace_curve(folder, [p["workers"] for p in points], steps, params or {}, ps_data)
    return _rows(f"{folder.name} <- {name}", measured, points, curve)


_ps_trace = cache(load_profile)  # each PS trace read once, however many configurations it predicts


def summary(rows: Sequence[Row], held_out: bool = False) -> tuple[float, float]:
    """Median and maximum |error| of ``rows`` (their held-out errors with ``held_out``)."""
    errors = [abs(e) for e in ((r.held_out_error if held_out else r.error) for r in rows) if e is not None]
    return statistics.median(errors), max(errors)


def shifted(throughput: float, workers: int, batch: int, host_cpu_s: float, host_cores: int = HOST_CORES,
            floor_s: float = 0.0, exponent: float | None = None) -> float:
    """``throughput`` (examples/s at ``workers``, predicted without the host's step term and CPU
    bound) with every step ``host_cpu_s`` longer per worker beyond ``host_cores`` and held by the
    bound ``floor_s`` (``RingParams.bounded`` with ``exponent``): what the model gives with that
    ``host_cpu_s``, since the term lengthens every barrier-ended step alike (exactly, a test holds
    it, where there is no bound; near it, the bound applied to the mean step)."""
    params = RingParams(host_cores=host_cores, host_cpu_s=host_cpu_s, host_bound_exponent=exponent)
    step = workers * batch / throughput + params.host_seconds(workers)
    return workers * batch / float(params.bounded(np.float64(step), workers, floor_s))


# what a prediction without the host's CPU bound states (the step term apart, for ``shifted``)
UNBOUND: Mapping[str, Any] = {"transfer_cpu_s_per_mb": 0.0, "transfer_cpu_s_per_call": 0.0, "collective_cpu_s": 0.0,
                              "cpu_s_per_step": 0.0}


def host_bound(folder: Path, workers: int, params: Mapping[str, Any]) -> tuple[float, float | None]:
    """The host's CPU bound on a step of ``folder``'s program at ``workers`` with ``params`` (the
    testbed's host, ``TESTBED``), as the model states it (``RingParams.host_floor``), and the
    exponent the step turns to it with (``host_bound_exponent``)."""
    model = registry.get(MODEL)
    inputs = _inputs(folder)
    chosen = registry.params_for(model, {**TESTBED, **params})
    details = model.outlook(inputs, chosen, {}).details
    host = details["host"]
    resolved = model.resolved(inputs, chosen)
    assert isinstance(resolved, RingParams)
    floor = resolved.host_floor(workers, host["megabytes"], host["calls"], len(details["collectives"]["bytes"]))
    return floor, resolved.host_bound_exponent


def _cost(folders: Sequence[Path], steps: int, base: Mapping[str, Any]) -> Callable[[float], float]:
    """Mean |error| over the multi-worker points of ``folders`` at a ``host_cpu_s``: each point
    predicted once without it and without the host's CPU bound, then shifted (``shifted``)."""
    params = {**base, **UNBOUND, "host_cpu_s": 0.0}
    found = []
    for f in folders:
        batch, late = int(_load(f)[0]["batch_size"]), stale(f)
        found += [(r, batch, *host_bound(f, r.workers, base)) for r in predict(f, steps=steps, params=params)
                  if r.workers > 1 and r.workers not in late]

    def cost(host_cpu_s: float) -> float:
        return statistics.fmean(abs(shifted(r.predicted, r.workers, b, host_cpu_s, floor_s=f, exponent=k)
                                    / r.measured - 1) for r, b, f, k in found)
    return cost


def fit(folders: Sequence[Path], *, steps: int = 300, base: Mapping[str, Any] | None = None) -> dict[str, float]:
    """``host_cpu_s`` with the smallest mean |error| over the multi-worker points of ``folders``
    (W = 1 has no other worker on its host), from 0 to 30 ms by 0.5 ms; the link figures are the
    framework's, from its probe (``base`` may set them)."""
    return dict(_fit(tuple(sorted(folders)), steps, tuple(sorted((base or {}).items()))))


@cache
def _fit(folders: tuple[Path, ...], steps: int, base: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, float], ...]:
    cost = _cost(folders, steps, dict(base))
    return (("host_cpu_s", min(HOST_GRID, key=cost)),)


def predicted_first(folders: Sequence[Path]) -> set[str]:
    """Names of the configurations whose every W was predicted before any was measured
    (``predictions-w1-*.json``): held out of every fit, for good."""
    return {f.name for f in folders if any(f.glob("predictions-w1-*.json"))}


def held_out_fits(folders: Sequence[Path], *, steps: int = 300,
                  base: Mapping[str, Any] | None = None) -> dict[str, tuple[dict[str, float], tuple[str, ...]] | None]:
    """Per configuration, the figures fitted on the scored configurations of its framework other
    than itself, and their names; None when there is no other."""
    dropped = superseded(folders) | predicted_first(folders)
    kinds = {f.name: str(_load(f)[0]["kind"]) for f in folders}
    out: dict[str, tuple[dict[str, float], tuple[str, ...]] | None] = {}
    for folder in folders:
        others = [f for f in folders if f.name != folder.name and kinds[f.name] == kinds[folder.name]
                  and f.name not in dropped and f.name != folder.name + CALM]
        out[folder.name] = (fit(others, steps=steps, base=base), tuple(f.name for f in others)) if others else None
    return out


def rows_with_holdout(folders: Sequence[Path], *, steps: int = 1000, params: Mapping[str, Any] | None = None,
                      holdout: bool = True, fit_steps: int = 300) -> tuple[list[Row], dict[str, Any]]:
    """Every point with its default and held-out prediction, and the held-out fits by configuration."""
    dropped = superseded(folders)
    fits = held_out_fits(folders, steps=fit_steps, base=params) if holdout else {}
    rows: list[Row] = []
    for folder in folders:
        default = predict(folder, steps=steps, params=params)
        got = fits.get(folder.name)
        held = predict(folder, steps=steps, params={**(params or {}), **got[0]}) if got else [None] * len(default)
        late = stale(folder)
        for row, h in zip(default, held, strict=True):
            rows.append(replace(row, held_out=None if h is None else h.predicted,
                                caveat=folder.name in dropped or row.workers in late))
    return rows, fits


def link_seconds(rate_bps: float, workers: int, size: float, latency_s: float, share: float) -> float:
    """A lone ring all-reduce of ``size`` bytes at ``workers`` on links of ``rate_bps``: 2(W-1)
    rounds of the latency and 8 bytes / (W rate 0.95 share), as the ring model times a bucket."""
    return 2 * (workers - 1) * (latency_s + 8 * size / (workers * rate_bps * DEFAULT_GOODPUT * share))


def probe_fit(timings: Sequence[tuple[float, int, float, float]], latency_step: float,
              share_step: float) -> tuple[float, float, float]:
    """(latency_s, two_way_share, mean |error|) of the ring's time 2(W-1)(lat + 8 bytes/(W rate
    0.95 share)) least off lone all-reduce ``timings`` ((link rate bit/s, W, bytes, seconds)), on a
    grid of 0 to 3 ms by ``latency_step`` and 0.9 to 1 by ``share_step``."""
    def err(lat: float, share: float) -> float:
        return statistics.fmean(abs(link_seconds(rate, w, size, lat, share) / seconds - 1)
                                for rate, w, size, seconds in timings)
    grid = itertools.product((i * latency_step for i in range(round(3e-3 / latency_step) + 1)),
                             (round(0.9 + i * share_step, 4) for i in range(round(0.1 / share_step) + 1)))
    lat, share = min(grid, key=lambda v: err(*v))
    return lat, share, err(lat, share)


def gloo_probe_fit(step_s: float = 2.5e-5, share_step: float = 0.005) -> tuple[float, float, float]:
    """``probe_fit`` of the lone gloo all-reduce probe (``GLOO_PROBE_MS``): where the gloo defaults come from."""
    return probe_fit([(GLOO_PROBE_RATE_BPS, w, mib * 2**20, ms / 1e3) for (mib, w), ms in GLOO_PROBE_MS.items()],
                     step_s, share_step)


def grpc_probe_timings(path: Path = GRPC_PROBE) -> list[tuple[float, int, float, float]]:
    """The W = 2 timings of the lone TensorFlow ring all-reduce probe (``GRPC_PROBE``), for ``probe_fit``."""
    doc = json.loads(path.read_text())
    return [(float(run["bandwidth_bps"]), int(t["workers"]), float(t["bytes"]), float(t["median_s"]))
            for run in doc["runs"] for t in run["timings"] if t["workers"] == 2]


def grpc_probe_fit(step_s: float = 5e-5, share_step: float = 0.005) -> tuple[float, float, float]:
    """``probe_fit`` of ``grpc_probe_timings``: where TensorFlow's ring defaults come from."""
    return probe_fit(grpc_probe_timings(), step_s, share_step)


# The same probe at W = 2..8, every worker on the testbed's 2-core host, with each worker's CPU time
# per call (scripts/record_allreduce_mwms.py probe, the line-up all-reduce included): where the
# host figures of TensorFlow's ring come from (``host_probe_fit``).
GRPC_HOST_PROBE = DATA / "grpc-ring-probe" / "probe-host.json"
# The same for gloo (scripts/record_allreduce_ddp.py probe --config ddp-slow: lone gloo all-reduces
# of 1 and 8 MiB at W = 2..8 over 100 Mbit/s links, workers at real-time priority as in the DDP runs).
GLOO_HOST_PROBE = DATA / "gloo-ring-probe" / "probe-host.json"
HOST_PER_MB_GRID = tuple(i * 5e-4 for i in range(41))  # host_cpu_s_per_mb: 0 to 20 ms per MB
# host_bound_exponent: 2 to 12, or None, the sharp max (the step no shorter than the CPU bound)
EXPONENT_GRID: tuple[float | None, ...] = (*(float(k) for k in range(2, 13)), None)
BUSIEST = 0.95  # the probe's large timings whose cores were this close to the busiest set the CPU bound
LARGE = 2e6  # bytes: timings this large tell the CPU per MB from the CPU per call


@dataclass(frozen=True)
class HostTiming:
    """One lone all-reduce of the host probe: its link rate, W, bytes, worker 0's median seconds,
    and the CPU seconds a worker spent on it (mean over the workers, the line-up call's taken off)."""

    rate_bps: float
    workers: int
    bytes: float
    seconds: float
    cpu_s: float
    run: int = 0  # which run of the probe

    def utilization(self, cores: int = HOST_CORES) -> float:
        """The share of the host's cores the workers kept busy during the call."""
        return self.workers * self.cpu_s / (cores * self.seconds)


@dataclass(frozen=True)
class HostFigures:
    """The host's figures of a framework's ring, from its probe (``host_probe_fit``)."""

    host_cpu_s: float
    host_cpu_s_per_mb: float
    transfer_cpu_s_per_mb: float
    transfer_cpu_s_per_call: float
    host_utilization: float
    host_bound_exponent: float | None = None
    collective_cpu_s: float | None = None
    mean_error: float = 0.0  # of the ring's time with them, over the probe's timings beyond the cores
    max_error: float = 0.0
    timings: int = 0

    def params(self, cores: int = HOST_CORES) -> RingParams:
        """The ring's parameters on a ``cores``-core host with these figures (no CPU of its own a step)."""
        return RingParams(host_cores=cores, host_cpu_s=self.host_cpu_s, host_cpu_s_per_mb=self.host_cpu_s_per_mb,
                          transfer_cpu_s_per_mb=self.transfer_cpu_s_per_mb,
                          transfer_cpu_s_per_call=self.transfer_cpu_s_per_call,
                          host_utilization=self.host_utilization, host_bound_exponent=self.host_bound_exponent,
                          collective_cpu_s=self.collective_cpu_s, cpu_s_per_step=0.0)


def host_timings(path: Path = GRPC_HOST_PROBE) -> list[HostTiming]:
    """The 1 and 8 MiB timings of a host probe; each worker's CPU per call less the line-up's where
    the probe timed one (TF's: half the CPU of the 4-byte row, which times a 4-byte call after a
    4-byte line-up; gloo's line-up is a barrier, counted in)."""
    doc = json.loads(path.read_text())
    out = []
    for k, run in enumerate(doc["runs"]):
        rows = run["timings"]
        line_up = {int(t["workers"]): statistics.fmean(t["cpu_s"]) / 2 for t in rows if t["bytes"] <= 8}
        out += [HostTiming(float(run["bandwidth_bps"]), int(t["workers"]), float(t["bytes"]), float(t["median_s"]),
                           statistics.fmean(t["cpu_s"]) - line_up.get(int(t["workers"]), 0.0), k)
                for t in rows if t["bytes"] > 8]
    return out


def small_call_cpu_s(path: Path = GRPC_HOST_PROBE) -> list[float]:
    """A worker's CPU seconds per 4-byte all-reduce of TF's host probe, one per run and W: half
    the 4-byte row's (a 4-byte call after a 4-byte line-up, ``host_timings``)."""
    doc = json.loads(path.read_text())
    return [statistics.fmean(t["cpu_s"]) / 2 for run in doc["runs"] for t in run["timings"] if t["bytes"] <= 8]


def ring_seconds(t: HostTiming, latency_s: float, share: float, figures: HostFigures | None,
                 cores: int = HOST_CORES) -> float:
    """The model's time of one lone all-reduce of the probe on its ``cores``-core host: the ring's
    link time (``probe_fit``'s), longer per worker beyond the cores by the host term (a lone call
    is one step), held by the host's CPU bound (``RingParams.bounded``)."""
    link = link_seconds(t.rate_bps, t.workers, t.bytes, latency_s, share)
    if figures is None:
        return link
    params, megabytes = figures.params(cores), t.bytes / 1e6
    step = link + params.host_seconds(t.workers, megabytes)
    return float(params.bounded(np.float64(step), t.workers, params.host_floor(t.workers, megabytes, 1)))


def _least_mean_error(timings: Sequence[HostTiming], latency_s: float, share: float,
                      bound: HostFigures) -> tuple[float, float, float | None]:
    """The (``host_cpu_s``, ``host_cpu_s_per_mb``, ``host_bound_exponent``) of the grids with the
    smallest mean |error| of ``ring_seconds`` over ``timings`` (all beyond the cores), with the CPU
    bound's figures of ``bound``: ``ring_seconds`` over the whole grid at once."""
    params = bound.params()
    link = np.array([link_seconds(t.rate_bps, t.workers, t.bytes, latency_s, share) for t in timings])
    mb = np.array([t.bytes / 1e6 for t in timings])
    beyond = np.array([max(0, t.workers - HOST_CORES) for t in timings], dtype=np.float64)
    floor = np.array([params.host_floor(t.workers, t.bytes / 1e6, 1) for t in timings])
    seconds = np.array([t.seconds for t in timings])
    a = np.array(HOST_GRID)[:, None, None]
    b = np.array(HOST_PER_MB_GRID)[None, :, None]
    step = link + (a + b * mb) * beyond  # (A, B, T)
    means = []
    for k in EXPONENT_GRID:
        held = turned(step, floor, k)  # as RingParams.bounded beyond the cores
        means.append(np.abs(held / seconds - 1).mean(axis=-1))  # (A, B)
    grid = np.stack(means, axis=-1)  # (A, B, K), the order of itertools.product
    i, j, m = np.unravel_index(int(np.argmin(grid)), grid.shape)
    return HOST_GRID[i], HOST_PER_MB_GRID[j], EXPONENT_GRID[m]


def host_probe_fit(timings: Sequence[HostTiming] | None = None, latency_s: float | None = None,
                   share: float | None = None) -> HostFigures:
    """TensorFlow's ring's host figures from the host probe (``GRPC_HOST_PROBE``), never from
    training runs. The CPU bound: the share of the cores of the large timings whose cores were
    busiest (within BUSIEST of the busiest), and a worker's CPU per call and per MB, the line
    through those timings' CPU and that of the smaller ones of the same runs and W (the least
    squares of CPU = per call + per MB x MB). Then ``host_cpu_s`` (0 to 30 ms by
    0.5), ``host_cpu_s_per_mb`` (``HOST_PER_MB_GRID``) and ``host_bound_exponent``
    (``EXPONENT_GRID``) with the smallest mean |error| of ``ring_seconds`` over the timings with
    more workers than cores; the link figures are ``grpc_probe_fit``'s, from two workers. A small
    collective's CPU (``collective_cpu_s``): the mean of the probe's 4-byte calls
    (``small_call_cpu_s``), which the line through the large ones overstates three-fold."""
    timings = host_timings() if timings is None else list(timings)
    if latency_s is None or share is None:
        latency_s, share, _ = grpc_probe_fit()
    large = [t for t in timings if t.bytes >= LARGE]
    top = max(t.utilization() for t in large)
    busiest = [t for t in large if t.utilization() >= BUSIEST * top]
    utilization = round(min(1.0, statistics.fmean(t.utilization() for t in busiest)), 3)
    pairs = {(t.run, t.workers) for t in busiest}
    points = [(t.bytes / 1e6, t.cpu_s) for t in timings if (t.run, t.workers) in pairs]
    slope, intercept = statistics.linear_regression([m for m, _ in points], [c for _, c in points])
    transfer, per_call = round(slope, 4), round(max(0.0, intercept), 4)  # to 0.1 ms
    crowded = [t for t in timings if t.workers > HOST_CORES]

    def errors(a: float, b: float, k: float | None) -> list[float]:
        figures = HostFigures(a, b, transfer, per_call, utilization, k)
        return [abs(ring_seconds(t, latency_s, share, figures) / t.seconds - 1) for t in crowded]
    a, b, k = _least_mean_error(crowded, latency_s, share, HostFigures(0.0, 0.0, transfer, per_call, utilization))
    found = errors(a, b, k)
    small = round(statistics.fmean(small_call_cpu_s()), 4)
    return HostFigures(a, b, transfer, per_call, utilization, k, small, statistics.fmean(found), max(found),
                       len(crowded))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def table(rows: Sequence[Row], markdown: bool) -> str:
    """Every point: measured (spread), predicted with the defaults and held out, the errors."""
    lines = []
    if markdown:
        lines += [("| configuration | kind | W | measured ex/s (spread) | predicted ex/s | error | held out ex/s | "
                   "held-out error |"), "|---|---|---|---|---|---|---|---|"]
    else:
        lines.append(f"{'configuration':<24} {'kind':<12} {'W':>2} {'measured':>10} {'spread':>19} "
                     f"{'predicted':>10} {'error':>7} {'held out':>9} {'error':>7}")
    for r in rows:
        spread = f"[{r.spread[0]:.1f}, {r.spread[1]:.1f}]"
        name = r.config + (" *" if r.caveat else "")
        held = "-" if r.held_out is None else f"{r.held_out:.1f}"
        if markdown:
            lines.append(f"| {name} | {r.kind} | {r.workers} | {r.measured:.1f} {spread} | {r.predicted:.1f} | "
                         f"{r.error:+.1%} | {held} | {_pct(r.held_out_error)} |")
        else:
            lines.append(f"{name:<24} {r.kind:<12} {r.workers:>2} {r.measured:>10.1f} {spread:>19} "
                         f"{r.predicted:>10.1f} {r.error:>+7.1%} {held:>9} {_pct(r.held_out_error):>7}")
    return "\n".join(lines)


def summaries(rows: Sequence[Row], fits: Mapping[str, Any]) -> list[str]:
    """Per configuration, per framework and over all scored points, then the scored points with
    more workers than HOST_WORKERS on the host: points, median and max |error|, default and held out."""
    def line(label: str, mine: Sequence[Row], note: str = "") -> str:
        med, worst = summary(mine)
        text = f"{label}: {len(mine)} points, median |error| {med:.1%}, max {worst:.1%}"
        if any(r.held_out is not None for r in mine):
            hmed, hworst = summary(mine, held_out=True)
            text += f"; held out: median {hmed:.1%}, max {hworst:.1%}"
        return text + note

    out = []
    for config in dict.fromkeys(r.config for r in rows):
        mine = [r for r in rows if r.config == config]
        got = fits.get(config)
        note = "" if not got else (f" (held out: host_cpu_s {got[0]['host_cpu_s'] * 1e3:.1f} ms, "
                                   f"fitted on {', '.join(got[1])})")
        late = [r.workers for r in mine if r.caveat]
        label = (" [caveat: superseded by a calm re-measurement]" if len(late) == len(mine) else
                 f" [caveat at W = {', '.join(map(str, late))}: measured on another day than its profile, superseded "
                 "by a same-day re-measurement]" if late else "")
        out.append(line(config + label, mine, note))
    scored = [r for r in rows if not r.caveat]
    for kind in dict.fromkeys(r.kind for r in scored):
        out.append(line(f"{kind} (scored)", [r for r in scored if r.kind == kind]))
    if scored:
        out.append(line("all scored", scored))
    crowded = [r for r in scored if r.crowded]
    if crowded:
        out.append(line(f"of which W > {HOST_WORKERS} workers on the host's {HOST_CORES} cores", crowded))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per point")
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="override a ring-allreduce parameter (a float), e.g. latency_s=0.002")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of configurations")
    parser.add_argument("--no-holdout", action="store_true", help="skip the held-out fits (faster)")
    parser.add_argument("--write", action="store_true",
                        help=f"ship {MODEL}'s measured error: split-conformal widths of the held-out residuals")
    parser.add_argument("--write-predictions", type=lambda t: [int(w) for w in t.split(",")], metavar="W,...",
                        help="before measuring these W: write each PS-program configuration's predictions at them "
                             "(from its profile and from its PS trace) to predictions-w<first>-<last>.json, and stop")
    parser.add_argument("--config", action="append", metavar="NAME",
                        help="--write-predictions: for this configuration (repeatable; default the PS testbed's)")
    args = parser.parse_args(argv)
    params = {k: float(v) for k, v in (p.split("=", 1) for p in args.param)}
    folders = configs(args.data)
    if not folders:
        raise SystemExit(f"no configuration with profile.json.gz and measured.json under {args.data}")
    if args.write_predictions:
        unmeasured = [args.data / n for n in args.config or () if (args.data / n / "profile.json.gz").is_file()
                      and not (args.data / n / "measured.json").is_file()]
        chosen = [f for f in folders if f.name in (args.config or PS_TRACES)] + unmeasured
        for path in write_predictions(chosen, args.write_predictions, args.steps):
            print(f"wrote {path}")
        return
    for name, (lat, share, err), timings in (("gloo", gloo_probe_fit(), len(GLOO_PROBE_MS)),
                                             ("TensorFlow ring", grpc_probe_fit(), len(grpc_probe_timings()))):
        print(f"{name} defaults from the lone all-reduce probe: latency_s {lat * 1e3:.3f} ms, two_way_share "
              f"{share:.3f} (mean |error| {err:.1%} over {timings} timings)")
    gloo = [t for t in host_timings(GLOO_HOST_PROBE) if t.bytes >= LARGE]
    lat, share, _ = gloo_probe_fit()
    off = [abs(ring_seconds(t, lat, share, None) / t.seconds - 1) for t in gloo]
    print(f"gloo's probe at W = 2..8 on the {HOST_CORES}-core host: its {len(gloo)} 8 MiB calls take the link time "
          f"alone within {max(off):.1%} (mean {statistics.fmean(off):.1%}) with the cores up to "
          f"{max(t.utilization() for t in gloo):.0%} busy: no CPU bound for gloo")
    host = host_probe_fit()
    print(f"TensorFlow ring host figures from the probe at W = 2..8 on the {HOST_CORES}-core host: host_cpu_s "
          f"{host.host_cpu_s * 1e3:.1f} ms + {host.host_cpu_s_per_mb * 1e3:.1f} ms per MB a worker beyond the cores, "
          f"transfer CPU {host.transfer_cpu_s_per_call * 1e3:.1f} ms per all-reduce + "
          f"{host.transfer_cpu_s_per_mb * 1e3:.1f} ms per MB ({host.collective_cpu_s * 1e3:.1f} ms per 4-byte one), "
          f"cores at most {host.host_utilization:.1%} "
          f"busy, the step turning to that bound with exponent {host.host_bound_exponent or 'none (a sharp max)'} "
          f"(mean |error| {host.mean_error:.1%}, max {host.max_error:.1%} over the {host.timings} timings "
          f"beyond the cores)")
    rows, fits = rows_with_holdout(folders, steps=args.steps, params=params, holdout=not args.no_holdout)
    print(f"{MODEL}" + (f" with {params}" if params else " (default parameters)")
          + f", link rate x goodput {DEFAULT_GOODPUT}; * = caveat, not scored")
    print(table(rows, args.markdown))
    print()
    for text in summaries(rows, fits):
        print(text)
    from_ps = [r for folder in folders for r in predict_from_ps_trace(folder, steps=args.steps, params=params)]
    if from_ps:
        print(f"\nfrom the PS trace of the same program ({MODEL}, the defaults; W = 1 is the PS trace's compute):")
        print(table(from_ps, args.markdown))
        for label, mine in ((f"W = 2..{HOST_WORKERS}", [r for r in from_ps if 1 < r.workers and not r.crowded]),
                            (f"W > {HOST_WORKERS}", [r for r in from_ps if r.crowded])):
            if mine:
                med, worst = summary(mine)
                print(f"from the PS trace, {label}: {len(mine)} points, median |error| {med:.1%}, max {worst:.1%}")
    print()
    print("\n".join(committed_lines(folders, args.steps)))
    print()
    print("\n".join(one_core_lines(folders, args.steps)))
    print("\n".join(same_day_lines(folders)))
    if args.write:
        write_error(rows)


# the ring's regimes of W for its model error: W = 1 reduces nothing (the profile's own rate),
# W >= 2 all-reduces; beyond HOST_WORKERS more workers than twice the testbed's cores share it,
# where a program whose transfers need more CPU than the host has runs far below the host term
ERROR_REGIMES: tuple[tuple[int, int | None], ...] = ((1, 1), (2, HOST_WORKERS), (HOST_WORKERS + 1, None))


def predictions_path(folder: Path, workers: Sequence[int]) -> Path:
    """Where ``write_predictions`` puts a configuration's predictions at ``workers``."""
    return folder / f"predictions-w{min(workers)}-{max(workers)}.json"


def write_predictions(folders: Sequence[Path], workers: Sequence[int], steps: int = 1000) -> list[Path]:
    """Each configuration's predictions at ``workers`` with the defaults and the testbed's host
    (``TESTBED``), from its own profile and, for a PS testbed program, from its PS trace (else
    null), written beside its measurements before those W are measured (``--write-predictions``),
    so that they are scored as predictions the runs could not have shaped."""
    written = []
    for folder in folders:
        ps = PS_TRACES.get(folder.name)
        doc = {"model": MODEL, "steps": steps, "seed": 1, "workers": list(workers), "params": dict(TESTBED),
               "from_profile": [round(c.throughput, 3) for c in profile_curve(folder, workers, steps, {})],
               "from_ps_trace": None if ps is None else [round(c.throughput, 3)
                                                         for c in ps_trace_curve(folder, workers, steps, {})],
               "ps_trace": ps,
               "command": f"python3 -m benchmarks.allreduce_accuracy --write-predictions "
                          f"{','.join(map(str, workers))} --config {folder.name}"}
        path = predictions_path(folder, workers)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append(path)
    return written


def cpu_per_step_ms(folder: Path) -> dict[int, list[float]]:
    """Per W, each run's mean CPU milliseconds a worker spent per measured step (the runs that
    kept ``cpu_s`` in ``step_logs.json.gz``)."""
    path = folder / "step_logs.json.gz"
    if not path.is_file():
        return {}
    doc = json.loads(gzip.decompress(path.read_bytes()))
    steps = doc.get("measure_steps")
    return {int(w): [statistics.fmean(run) / steps * 1e3 for run in runs]
            for w, runs in doc.get("cpu_s", {}).items()} if steps else {}


def committed(folder: Path) -> list[tuple[int, float, float | None, float]]:
    """The predictions each ``predictions-w*.json`` of ``folder`` committed before its W were
    measured, against the measurement: (W, from the profile, from the PS trace or None, measured)."""
    measured = {int(p["workers"]): float(p["examples_per_s"]) for p in _load(folder)[0]["points"]}
    found = []
    for path in sorted(folder.glob("predictions-w*.json")):
        doc = json.loads(path.read_text())
        from_ps = doc["from_ps_trace"] or [None] * len(doc["workers"])
        for w, own, ps in zip(doc["workers"], doc["from_profile"], from_ps, strict=True):
            if w in measured:
                found.append((int(w), float(own), None if ps is None else float(ps), measured[w]))
    return found


def committed_lines(folders: Sequence[Path], steps: int = 1000) -> list[str]:
    """The table of ``committed`` for every configuration that has one, with the runs' CPU per
    worker step, the step's missing time against the committed prediction per worker beyond the
    host's cores, and the prediction now, with the testbed's host stated (``TESTBED``)."""
    lines = ["predicted before measuring (predictions-w*.json: the PS testbed's programs with no host stated, the "
             "later ones with the testbed's) against the runs, the CPU a worker spent a step, the step's missing "
             f"time per worker beyond {HOST_CORES} cores, and the prediction now with the host stated "
             f"({', '.join(f'{k}={v}' for k, v in TESTBED.items())}):",
             f"{'configuration':<16} {'W':>2} {'measured':>9} {'profile':>8} {'error':>7} {'PS trace':>8} {'error':>7}"
             f" {'CPU ms/step':>11} {'ms/worker':>9} {'host':>7} {'error':>7}"]
    missing = []
    whole = predicted_first(folders)  # their W <= the cores have no worker beyond them; their bound is stated
    for folder in folders:
        cpu, batch = cpu_per_step_ms(folder), int(_load(folder)[0]["batch_size"])
        found = committed(folder)
        if not found:
            continue
        now = {r.workers: r.predicted for r in predict(folder, steps=steps)}  # the table's own, already simulated
        for w, own, ps, real in found:
            used = "/".join(f"{c:.0f}" for c in cpu.get(w, [])) or "-"
            extra = (None if w <= HOST_CORES or folder.name in whole
                     else (w * batch / real - w * batch / own) * 1e3 / (w - HOST_CORES))
            if extra is not None:
                missing.append(extra)
            from_ps = f"{'-':>8} {'-':>7}" if ps is None else f"{ps:>8.1f} {ps / real - 1:>+7.1%}"
            beyond = f"{'-':>9}" if extra is None else f"{extra:>9.1f}"
            lines.append(f"{folder.name:<16} {w:>2} {real:>9.1f} {own:>8.1f} {own / real - 1:>+7.1%} {from_ps}"
                         f" {used:>11} {beyond} {now[w]:>7.1f} {now[w] / real - 1:>+7.1%}")
    if missing:
        lines.append(f"missing step time per worker beyond {HOST_CORES}: {min(missing):.0f}-{max(missing):.0f} ms, "
                     f"median {statistics.median(missing):.0f} ms")
    return lines


ONE_CORE = "-one-core"  # a configuration measured again with every worker on one CPU of the host


def one_core_lines(folders: Sequence[Path], steps: int = 1000) -> list[str]:
    """Each ``X-one-core`` measurement (every worker pinned to one CPU, ``--cpu-list 0``) beside
    ``X``'s runs on both cores at the same W and at twice the W (as many workers per core), each
    as measured / predicted with the cores it had stated (``host_cores`` 1 and 2)."""
    lines = []
    for folder in folders:
        alone = folder.with_name(folder.name + ONE_CORE) / "measured.json"
        if not alone.is_file():
            continue
        pinned = {int(p["workers"]): float(p["examples_per_s"]) for p in json.loads(alone.read_text())["points"]}
        both = {int(p["workers"]): float(p["examples_per_s"]) for p in _load(folder)[0]["points"]}
        on_one = {c.workers: c.throughput for c in profile_curve(folder, sorted(pinned), steps, {"host_cores": 1})}
        on_two = {r.workers: r.predicted for r in predict(folder, steps=steps)}  # the table's own, already simulated
        lines.append(f"{folder.name}: every worker on one CPU against both, measured / predicted with those cores")
        lines.append(f"{'W':>3} {'one CPU':>8} {'two CPUs':>9} {'2W on two CPUs':>15}")
        for w in sorted(pinned):
            twice = f"{both[2 * w] / on_two[2 * w]:15.2f}" if 2 * w in both else f"{'-':>15}"
            lines.append(f"{w:>3} {pinned[w] / on_one[w]:8.2f} {both[w] / on_two[w]:9.2f} {twice}")
    return lines


# Runs measured on another day than their configuration's profile, and a profile of the same
# program and links taken on the day they ran: (configuration, its W of that day, the other).
# The VM's speed moves from day to day (the 4.2 MB MLP's W = 1: 451.9 examples/s on 2026-11-27,
# 398.8-407.1 on 2026-11-29); mwms-mlp4m-bw100-calm's W = 5..8 ran on 2026-11-29, its profile on
# 2026-11-27.
SAME_DAY: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("mwms-mlp4m-bw100-calm", (5, 6, 7, 8), "mwms-mlp4m-bw100-same-day"),)


def same_day_lines(folders: Sequence[Path]) -> list[str]:
    """Each ``SAME_DAY`` configuration's runs of another day against the prediction from its own
    profile and from the profile of the day they ran (the other configuration's, its predictions
    as the table's: same program, links and host)."""
    by_name = {f.name: f for f in folders}
    lines = []
    for name, ws, other in SAME_DAY:
        if name not in by_name or other not in by_name:
            continue
        own = {r.workers: r for r in predict(by_name[name])}
        theirs = {r.workers: r.predicted for r in predict(by_name[other])}
        errors = ", ".join(f"W = {w}: {own[w].error:+.1%} / {theirs[w] / own[w].measured - 1:+.1%}" for w in ws)
        lines.append(f"{name}, runs of another day than its profile, predicted from its profile / from {other}'s, "
                     f"taken the day they ran: {errors}")
    return lines


def write_error(rows: Sequence[Row]) -> None:
    """Ship the ring's model error: per regime of W (``ERROR_REGIMES``: W = 1, 2..4, 5 and more), the
    split-conformal width of the scored points' |residual| (measured / predicted - 1), each
    predicted with the testbed's host stated and the framework's host step figure fitted without
    its configuration (the link figures and TF's other host figures come from probes, so nothing
    else was fitted on the points)."""
    residuals = []
    for r in rows:
        if r.caveat:
            continue
        predicted = r.held_out if r.held_out is not None else r.predicted
        residuals.append((r.workers, r.measured / predicted - 1.0, None))
    error, path = write_model_error(
        MODEL, 0.95, residuals, ERROR_REGIMES,
        f"benchmarks/allreduce_accuracy.py --write: {len(residuals)} points of tests/data/allreduce "
        "(PyTorch DDP over gloo, Keras MWMS over gRPC rings on a calm machine; every worker on the testbed's "
        "2-core host, stated as host_cores 2), held-out predictions",
        {"points": [{"config": r.config, "workers": r.workers, "measured": r.measured, "residual": round(res, 4)}
                    for r, (_, res, _) in zip([r for r in rows if not r.caveat], residuals)]})
    print(f"wrote {path}: " + ", ".join(f"{g.label} -{g.down:.1%}/+{g.up:.1%} (n={g.n})" for g in error.regimes))


if __name__ == "__main__":
    main()
