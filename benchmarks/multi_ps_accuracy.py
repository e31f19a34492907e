"""Accuracy of the PS model on jobs with several parameter servers, against real 2-PS runs.

    python -m benchmarks.multi_ps_accuracy [--steps 1000] [--param multi_ps_flow_goodput=0.85]
        [--no-fit] [--order fifo|recorded] [--markdown] [--json out.json] [--write]
        [--phases | --placements | --step-ends | --held-out]

For every measured run in ``tests/data/ps-traces`` with 2 PS (``<trace>.measured.json.gz``,
``<trace>.r<k>.measured.json.gz``: examples/s at each W, one run each; the README says how they
were taken) it predicts every measured W twice with the default model
(``li2020-des+contention``, the run's congestion control and queue as its user would state
them: cubic, the tbf queue):

- **own**: from the run's own 2-PS trace (round-robin or greedy-by-bytes placement), at the
  PS links' 100 Mbit/s (the worker's link is read from the trace, ``worker_link.py``);
- **what-if**: ``--ps 2`` with the same placement from the one-PS trace of the same program,
  the worker's link stated as 10 Gbit/s (the testbed leaves it unshaped; a one-PS trace cannot
  show it).

It prints measured, predicted and error per run and W, the median and maximum |error| per
placement and over all, for both. Then the held-out check of the one constant the 2-PS runs
set, ``multi_ps_flow_goodput`` (contention.py): fitted on one placement's runs alone (own
trace, W >= 2, smallest mean |error| on a grid), it predicts the other placement's runs, both
ways. ``--param`` overrides a model parameter for every prediction (e.g. the one-PS
``multi_ps_flow_goodput=0.85``, the model before it had its own value).

Then the **model error of jobs with several PS** (the scope ``several-ps`` of the default model's
measured error, ``core/model_error.py``): one held-out residual r = measured / predicted - 1 per
measured point, the larger |r| of its two predictions (own trace, what-if) with the constant
fitted on the other placement, and the W = 3 placement runs with two PS carrying bytes, predicted
from their own traces (nothing was fitted on them). Widths per regime of W >= 2 at 95 % as for one PS
(``benchmarks/model_error.py``: split-conformal quantiles; of |r| at W = 2, of -r and r at 97.5 %
each from W = 3 on, where the misses are one-sided by cause; W = 1, one worker on one link whatever
the PS count, keeps the model's width), and their coverage:
in-sample, and cross-conformal (each placement's points inside widths measured without them).
``--write`` ships them as ``advisor/data/model_error/li2020-des+contention@several-ps.json``.

``--held-out`` predicts instead the 2-PS runs recorded after those widths were measured
(``tests/data/ps-traces/held-out``: other programs and link rates, greedy placement), from their
own traces and by the what-if from the one-PS trace of the same program and rate, and says for
each point whether the shipped interval holds it.

``--phases`` prints instead what the step logs show, per run and W (the one-PS run of the same
testbed too): the throughput as a share of what the busiest PS link direction carries at one
flow's goodput (``link_share``: 1.0 = that link never idle, never below one flow's rate), and
the order parameter R1 = |mean over workers of exp(2 pi i theta_w)|, theta_w the elapsed
fraction of worker w's current step, averaged over the measured window: 1 in lockstep, about
1/sqrt(W) for independent random phases (printed beside it), near 0 when the workers are
spread evenly over the step, taking turns on the links.

``--placements`` prints the W = 3 runs of ``tests/data/ps-traces/w3-placements`` (its README):
the same MLP with 1 PS and with 2 PS under placements that move the small variables (the biases,
``global_step``) apart from the weight matrices one at a time, with each run's throughput, R1,
the tbf drops on the busiest PS link's inbound direction and the TCP retransmissions (fast and by
timeout) of every task: which of the small variables sets the 2-PS runs apart.
"""

from __future__ import annotations

import argparse
import bisect
import cmath
import gzip
import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol, TypeVar

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.model_error import SEVERAL_PS, ModelError, ModelErrors, measured_error
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, StreamOrder
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors, shipped_path, write_error_file
from advisor.importers.tf_profile import RECV_LABEL
from benchmarks.model_error import LEVEL
from benchmarks.options import add_order_option, add_param_option, model_params
from benchmarks.paths import REPO

DATA = REPO / "tests" / "data" / "ps-traces"
PLACEMENTS = DATA / "w3-placements"
HELD_OUT = DATA / "held-out"  # 2-PS programs and rates recorded after the widths were measured: never fitted on
# the W = 3 placement runs, in the order the README explains them: what is on PS 0 (the
# weight matrices are on the last PS in every run)
PLACEMENT_RUNS = {"one-ps": "1 PS: everything", "last-ps": "nothing (PS 0 idle)",
                  "step-apart": "global_step", "biases-apart": "the biases",
                  "round-robin": "global_step and the biases"}
ONE_PS = "mlp_ps1_bw100"
TWO_PS = {"round-robin": "mlp_ps2_bw100", "greedy-bytes": "mlp_ps2greedy_bw100"}  # placement: trace
LINK_BPS = 100e6  # the tbf rate of each PS link direction
WORKER_LINK_BPS = 10e9  # the what-if's worker link (unshaped veth)
MODEL = "li2020-des+contention"
FIT_GRID = (0.8, 0.85, 0.9, 0.95, 1.0)  # multi_ps_flow_goodput values the hold-out fit tries
ONE_FLOW_GOODPUT = 0.95  # the product's default TCP goodput: what one flow gets of the shaped rate


@dataclass(frozen=True)
class Row:
    """One measured point and its two predictions."""

    placement: str
    run: str  # the measured file's name
    workers: int
    measured: float  # examples/s
    own: float  # predicted from the run's own 2-PS trace
    what_if: float  # predicted by --ps 2 from the one-PS trace

    @property
    def own_error(self) -> float:
        return self.own / self.measured - 1.0

    @property
    def what_if_error(self) -> float:
        return self.what_if / self.measured - 1.0


def measured_runs(trace: str, data: Path = DATA) -> list[Path]:
    """The measured files of ``trace``: the first run, then the repeats ``.r<k>``."""
    return sorted(data.glob(f"{trace}.measured.json.gz")) + sorted(data.glob(f"{trace}.r*.measured.json.gz"))


def read_run(path: Path) -> tuple[dict[str, Any], dict[int, float]]:
    """(meta, {W: examples/s}) of one measured file."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc["meta"], {int(r["W"]): float(r["thr_window"]) for r in doc["results"]}


@cache
def trace(name: str, data: Path = DATA) -> Profile:
    return load_profile(data / f"{name}.trace.json.gz")


def curve(profile: Profile, workers: Sequence[int], params: Mapping[str, Any], *, steps: int,
          parameter_servers: int | None = None, worker_bps: float | None = None,
          link_bps: float = LINK_BPS, order: StreamOrder = StreamOrder.FIFO) -> dict[int, float]:
    """The default model's throughput at ``workers`` (fixed steps, seed 0: reproducible)."""
    model = registry.get(MODEL)
    settings = CurveSettings(workers=tuple(workers), steps=steps, warmup_steps=50, seed=0)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=link_bps, worker_bandwidth_bps=worker_bps, order=order),
                            curve=settings, parameter_servers=parameter_servers)
    inputs = model_inputs(profile, request)
    points = predict_curve(model, inputs, registry.params_for(model, dict(params)), settings)
    return {p.workers: p.throughput for p in points}


def network_params(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The run's network as its user would state it (the recorder's meta; the README's defaults)."""
    return {"congestion_control": meta.get("congestion_control", "cubic"),
            "queue_s": float(meta.get("queue_ms", 100)) / 1e3}


def predict(placement: str, params: Mapping[str, Any], *, steps: int, data: Path = DATA,
            what_if: bool = True, order: StreamOrder = StreamOrder.FIFO) -> list[Row]:
    """Every measured point of ``placement``'s runs with its predictions (``what_if`` False: the
    what-if column repeats the own one, for fits that do not need it)."""
    runs = [(path, *read_run(path)) for path in measured_runs(TWO_PS[placement], data)]
    workers = sorted({w for _, _, by_w in runs for w in by_w})
    rows: list[Row] = []
    curves: dict[tuple, tuple[dict[int, float], dict[int, float]]] = {}  # by the runs' stated network
    for path, meta, by_w in runs:
        full = {**network_params(meta), **params}
        key = tuple(sorted(full.items()))
        if key not in curves:
            own = curve(trace(TWO_PS[placement], data), workers, full, steps=steps, order=order)
            other = (curve(trace(ONE_PS, data), workers, {**full, "ps_placement": placement}, steps=steps,
                           parameter_servers=2, worker_bps=WORKER_LINK_BPS, order=order) if what_if else own)
            curves[key] = (own, other)
        own, other = curves[key]
        name = path.name.removesuffix(".json.gz")
        rows += [Row(placement, name, w, m, own[w], other[w]) for w, m in sorted(by_w.items())]
    return rows


def summary(errors: Sequence[float]) -> tuple[float, float]:
    """Median and maximum |error|."""
    return statistics.median(abs(e) for e in errors), max(abs(e) for e in errors)


def fit(placement: str, *, steps: int, data: Path = DATA, grid: Sequence[float] = FIT_GRID) -> float:
    """``multi_ps_flow_goodput`` with the smallest mean |error| over ``placement``'s runs at W >= 2
    (own trace; W = 1 has no shared link); ties to the larger value."""
    def cost(value: float) -> float:
        rows = [r for r in predict(placement, {"multi_ps_flow_goodput": value}, steps=steps, data=data,
                                   what_if=False) if r.workers > 1]
        return statistics.fmean(abs(r.own_error) for r in rows)
    return min(sorted(grid, reverse=True), key=cost)


def link_share(profile: Profile, throughput: float) -> float:
    """``throughput`` over what the busiest PS link direction allows at one flow's goodput."""
    bits: dict[tuple[int, str], float] = {}
    for op in profile.ops:
        if op.resource.is_transfer:
            key = (int(op.ps or 0), op.resource.value)
            bits[key] = bits.get(key, 0.0) + 8.0 * op.bytes
    bound = profile.job.batch_size * LINK_BPS * ONE_FLOW_GOODPUT / max(bits.values())
    return throughput / bound


def order_parameter(logs: Sequence[Sequence[Sequence[float]]], skip: int, samples: int = 1000) -> float:
    """R1 averaged over the window where all workers run, after each one's first ``skip`` steps
    (as ``thr_window``); each log holds (start, end, global step) per step."""
    start = max(log[skip - 1][1] for log in logs)
    end = min(log[-1][1] for log in logs)
    starts = [[step[0] for step in log] for log in logs]
    total = 0.0
    for k in range(samples):
        t = start + (end - start) * (k + 0.5) / samples
        phasors = []
        for log, st in zip(logs, starts):
            i = bisect.bisect_right(st, t) - 1
            s0, e0 = log[i][0], log[i][1]
            phasors.append(cmath.exp(2j * math.pi * (t - s0) / (e0 - s0)))
        total += abs(sum(phasors)) / len(phasors)
    return total / samples


def random_order_parameter(workers: int, draws: int = 20000) -> float:
    """E[R1] for ``workers`` independent uniform phases (Monte Carlo, fixed seed)."""
    rng = random.Random(0)
    return statistics.fmean(abs(sum(cmath.exp(2j * math.pi * rng.random()) for _ in range(workers))) / workers
                            for _ in range(draws))


def phases(data: Path = DATA) -> list[str]:
    """What each measured run's step logs show (``--phases``, module docstring)."""
    lines = [f"{'run':<34} {'W':>2} {'ex/s':>6} {'link_share':>10} {'R1':>5} {'random':>6}"]
    for name in (ONE_PS, *TWO_PS.values()):
        for path in measured_runs(name, data):
            doc = json.loads(gzip.decompress(path.read_bytes()))
            skip = int(doc["meta"].get("window_skips_steps", 20))
            for r in doc["results"]:
                w, thr = int(r["W"]), float(r["thr_window"])
                share = link_share(trace(name, data), thr)
                r1 = f"{order_parameter(r['step_log'], skip):5.2f}" if w > 1 else "    -"
                rnd = f"{random_order_parameter(w):6.2f}" if w > 1 else "     -"
                lines.append(f"{path.name.removesuffix('.json.gz'):<34} {w:>2} {thr:>6.1f} {share:>10.2f} {r1} {rnd}")
    return lines


def placement_trace(placement: str, data: Path = PLACEMENTS) -> Profile:
    """The one-worker trace of a placement run: its own (recorded beside the runs), or for the
    one-PS and round-robin runs the trace of the same program in ``DATA``."""
    shared = {"one-ps": ONE_PS, "round-robin": TWO_PS["round-robin"]}
    return trace(shared[placement]) if placement in shared else load_profile(data / f"{placement}.trace.json.gz")


def placement_rows(data: Path = PLACEMENTS, steps: int = 0) -> list[dict[str, Any]]:
    """One row per W = 3 run of ``data`` (``--placements``): placement, repeat, examples/s, R1, the
    inbound tbf drops of the PS link that carries the weights, fast and timeout retransmissions;
    with ``steps``, also the default model's prediction from the placement's own trace."""
    rows = []
    predicted: dict[str, float] = {}
    for placement, on_ps0 in PLACEMENT_RUNS.items():
        for path in sorted(data.glob(f"{placement}.r*.measured.json.gz")):
            doc = json.loads(gzip.decompress(path.read_bytes()))
            skip = int(doc["meta"].get("window_skips_steps", 20))
            (run,) = doc["results"]
            net = run["network_counters"]
            weights_ps = f"ps{int(doc['meta']['n_ps']) - 1}"
            tcp = [task["tcp"] for task in net.values()]
            if steps and placement not in predicted:
                w = int(run["W"])
                predicted[placement] = curve(placement_trace(placement, data), [w], network_params(doc["meta"]),
                                             steps=steps)[w]
            rows.append({"placement": placement, "on_ps0": on_ps0, "repeat": path.name.split(".")[1],
                         "predicted": predicted.get(placement),
                         "workers": int(run["W"]), "throughput": float(run["thr_window"]),
                         "r1": order_parameter(run["step_log"], skip),
                         "drops_in": int(net[weights_ps]["in"]["dropped"]),
                         "fast_retrans": sum(t["TCPFastRetrans"] for t in tcp),
                         "timeouts": sum(t["TCPTimeouts"] for t in tcp)})
    return rows


def placements(data: Path = PLACEMENTS, steps: int = 1000) -> list[str]:
    """The ``--placements`` table (module docstring)."""
    rows = placement_rows(data, steps)
    if not rows:
        raise SystemExit(f"no W = 3 placement run under {data}")
    lines = [f"{'placement':<13} {'on PS 0':<27} {'run':<4} {'ex/s':>6} {'R1':>5} {'drops':>6} {'fast rtx':>8} "
             f"{'RTO':>4} {'predicted':>9} {'error':>7}  (R1 of random phases at W = 3: "
             f"{random_order_parameter(3):.2f})"]
    for r in rows:
        lines.append(f"{r['placement']:<13} {r['on_ps0']:<27} {r['repeat']:<4} {r['throughput']:>6.1f} {r['r1']:>5.2f} "
                     f"{r['drops_in']:>6} {r['fast_retrans']:>8} {r['timeouts']:>4} {r['predicted']:>9.1f} "
                     f"{r['predicted'] / r['throughput'] - 1:>+7.1%}")
    return lines


def step_end_segments(path: Path) -> dict[str, list[float]]:
    """Per traced step of worker 0 (``--step-ends``): ``apply``, ``trigger`` and ``tail`` in ms."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    out: dict[str, list[float]] = {"apply": [], "trigger": [], "tail": []}
    for step in doc["results"][0]["traced_steps_w0"]:
        arrivals: dict[str, tuple[str, str, float]] = {}
        for _, name, label, _, end in step["nodes"]:
            m = RECV_LABEL.match(label) if name == "RecvTensor" else None
            if m:
                arrivals[m["tensor"]] = (m["src"], m["dst"], end / 1e3)
        pushes = [t for tensor, (src, dst, t) in arrivals.items() if "/job:worker" in src and "grad" in tensor]
        done = [t for tensor, (_, _, t) in arrivals.items() if "GradientDescent/update/NoOp" in tensor]
        trigger = [t for tensor, (_, _, t) in arrivals.items() if tensor.endswith("GradientDescent/update")]
        if not (pushes and done and trigger):
            continue
        last = max(pushes)
        out["apply"].append(max(done) - last)
        out["trigger"].append(trigger[0] - max(done))
        out["tail"].append(step["client"][1] / 1e3 - last)
    return out


def step_ends(data: Path = PLACEMENTS) -> list[str]:
    """The ``--step-ends`` table (module docstring)."""
    lines = [f"{'run':<44} {'ex/s':>6} {'steps':>5}  apply ms (median, max)  trigger ms  tail ms"]
    for path in sorted(data.glob("*.traced.measured.json.gz")):
        seg = step_end_segments(path)
        thr = float(json.loads(gzip.decompress(path.read_bytes()))["results"][0]["thr_window"])
        cells = "  ".join(f"{statistics.median(seg[k]):6.1f} {max(seg[k]):6.1f}" for k in ("apply", "trigger", "tail"))
        lines.append(f"{path.name.removesuffix('.json.gz'):<44} {thr:>6.1f} {len(seg['tail']):>5}  {cells}")
    return lines


@dataclass(frozen=True)
class Residual:
    """One measured 2-PS point's held-out residual r = measured / predicted - 1 (the worse of its
    predictions), and which placement's runs it belongs to (the cross-conformal folds)."""

    placement: str
    run: str
    workers: int
    measured: float
    predicted: float

    @property
    def r(self) -> float:
        return self.measured / self.predicted - 1.0


def residuals(held_rows: Sequence[Row], placement_runs: Sequence[Mapping[str, Any]]) -> list[Residual]:
    """The held-out residuals of the several-PS scope: each held-out row by the prediction
    further from it (own trace or what-if), and every W = 3 placement run with two PS carrying
    bytes (``--placements`` rows with a prediction from their own trace)."""
    out = [Residual(r.placement, r.run, r.workers, r.measured,
                    max((r.own, r.what_if), key=lambda p: abs(p / r.measured - 1))) for r in held_rows]
    out += [Residual("w3-" + p["placement"], f"{p['placement']}.{p['repeat']}", p["workers"], p["throughput"],
                     p["predicted"]) for p in placement_runs if p["placement"] in SEVERAL_PS_PLACEMENTS]
    return out


# the W = 3 placement runs whose bytes go to two PS (one-ps has one; last-ps leaves PS 0 idle: the
# model predicts both as one-PS jobs, with the one-PS widths)
SEVERAL_PS_PLACEMENTS = ("step-apart", "biases-apart", "round-robin")


# W >= 2 only: one worker alone loads one link whatever the PS count, so W = 1 keeps the model's
# width (measured on seven jobs; these runs' six W = 1 points come from two traces). W = 2 is
# symmetric (six residuals say nothing of each tail apart); from W = 3 on each side has its own
# width, because the misses are one-sided by cause: runs whose workers take turns on the busiest
# link beat the prediction by up to 31 %, runs that do not fall short of it by at most 16 %.
SYMMETRIC_REGIMES: tuple[tuple[int, int | None], ...] = ((2, 2),)
ONE_SIDED_REGIMES: tuple[tuple[int, int | None], ...] = ((3, None),)


def several_ps_error(found: Sequence[Residual], source: str = "") -> ModelError:
    """The widths of the several-PS scope from ``found`` at ``benchmarks/model_error.py``'s level:
    W = 2 symmetric, W >= 3 one quantile per side (comment above)."""
    rows = [(x.workers, x.r, None) for x in found]
    both = measured_error(MODEL, LEVEL, rows, SYMMETRIC_REGIMES, scope=SEVERAL_PS).regimes
    each = measured_error(MODEL, LEVEL, rows, ONE_SIDED_REGIMES, symmetric=False, scope=SEVERAL_PS).regimes
    return ModelError(MODEL, LEVEL, both + each, source, SEVERAL_PS)


@cache
def model_widths(model: str = MODEL) -> ModelError:
    """A model's shipped unscoped error (read once per model)."""
    error = load_model_errors().of(model)
    assert error is not None, f"no shipped model error of {model}"
    return error


def as_predicted(error: ModelError) -> ModelError:
    """The several-PS ``error`` of its model as a prediction takes it: with the model's own widths
    at the W it leaves out (W = 1; ``ModelErrors.of``)."""
    widths = ModelErrors((model_widths(error.model), error)).of(error.model, SEVERAL_PS)
    assert widths is not None
    return widths


class Measured(Protocol):
    """A measured point and its prediction (``Residual`` here, ``sync_several_ps.Residual``)."""

    @property
    def workers(self) -> int: ...
    @property
    def measured(self) -> float: ...
    @property
    def predicted(self) -> float: ...


M = TypeVar("M", bound=Measured)


def coverage(found: Sequence[Measured], error: ModelError) -> float:
    """The share of ``found`` whose measured value lies within the prediction widened by ``error``
    as predictions take it (``as_predicted``; the simulation's own noise left out: about 1 %, so
    this slightly undercounts)."""
    widths = as_predicted(error)
    inside = 0
    for x in found:
        low, high = widths.widen(error.model, x.workers, x.predicted, x.predicted)
        inside += low <= x.measured <= high
    return inside / len(found)


def stored_residuals() -> list[Residual]:
    """The held-out residuals the shipped several-PS widths were measured from (stored with them by ``--write``)."""
    doc = json.loads(shipped_path(MODEL, SEVERAL_PS).read_text())
    return [Residual(**{k: p[k] for k in ("placement", "run", "workers", "measured", "predicted")})
            for p in doc["validation"]["points"]]


def fold(x: Residual) -> str:
    """The cross-conformal fold of a residual: its placement's runs, or the W = 3 placement runs."""
    return "w3" if x.placement.startswith("w3-") else x.placement


def cross_coverage(found: Sequence[M], fold_of: Callable[[M], str] = fold,  # type: ignore[assignment]
                   error_of: Callable[[Sequence[M]], ModelError] = several_ps_error,  # type: ignore[assignment]
                   ) -> float:
    """Each group's points (``fold_of``: here the two placements' runs, and the W = 3 placement
    runs) inside widths measured without them (``error_of``): the honest figure, as
    ``benchmarks/model_error.py``'s cross-conformal one."""
    inside = 0
    for g in {fold_of(x) for x in found}:
        mine = [x for x in found if fold_of(x) == g]
        others = [x for x in found if fold_of(x) != g]
        inside += round(coverage(mine, error_of(others)) * len(mine))
    return inside / len(found)


def table(rows: Sequence[Row], markdown: bool) -> str:
    lines = (["| placement | run | W | measured | own trace | error | `--ps 2` what-if | error |",
              "|---|---|---|---|---|---|---|---|"] if markdown else
             [f"{'placement':<13} {'run':<34} {'W':>2} {'measured':>8} {'own':>7} {'error':>7} {'what-if':>8} {'error':>7}"])
    for r in rows:
        if markdown:
            lines.append(f"| {r.placement} | {r.run} | {r.workers} | {r.measured:.1f} | {r.own:.1f} | "
                         f"{r.own_error:+.1%} | {r.what_if:.1f} | {r.what_if_error:+.1%} |")
        else:
            lines.append(f"{r.placement:<13} {r.run:<34} {r.workers:>2} {r.measured:>8.1f} {r.own:>7.1f} "
                         f"{r.own_error:>+7.1%} {r.what_if:>8.1f} {r.what_if_error:>+7.1%}")
    return "\n".join(lines)


def summaries(rows: Sequence[Row]) -> list[str]:
    out = []
    for label, chosen in [*((p, [r for r in rows if r.placement == p]) for p in TWO_PS), ("all", list(rows))]:
        if not chosen:
            continue
        own, other = summary([r.own_error for r in chosen]), summary([r.what_if_error for r in chosen])
        out.append(f"{label:<13} {len(chosen):>2} points: own trace median |error| {own[0]:.1%}, max {own[1]:.1%}; "
                   f"what-if median {other[0]:.1%}, max {other[1]:.1%}")
    return out


def held_out_rows(data: Path = HELD_OUT, steps: int = 1000) -> list[Row]:
    """Every measured point of the held-out 2-PS runs (``--held-out``), predicted by the default
    model from the run's own 2-PS trace and by the ``--ps 2`` what-if from the one-PS trace of the
    same program and rate (in ``data``, else beside the other traces), at the run's own link rate."""
    rows: list[Row] = []
    for path in sorted(data.glob("*.r*.measured.json.gz")):
        name = path.name.split(".r", 1)[0]
        meta, by_w = read_run(path)
        placement = "greedy-bytes" if meta.get("placement") == "greedy" else "round-robin"
        one_ps = name.replace("ps2greedy", "ps1").replace("ps2", "ps1")
        one_ps_data = data if (data / f"{one_ps}.trace.json.gz").exists() else DATA
        link = float(meta["bw_mbit"]) * 1e6
        workers = sorted(by_w)
        own = curve(trace(name, data), workers, network_params(meta), steps=steps, link_bps=link)
        other = curve(trace(one_ps, one_ps_data), workers, {**network_params(meta), "ps_placement": placement},
                      steps=steps, parameter_servers=2, worker_bps=WORKER_LINK_BPS, link_bps=link)
        rows += [Row(placement, path.name.removesuffix(".json.gz"), w, m, own[w], other[w]) for w, m in by_w.items()]
    return rows


def held_out_table(data: Path = HELD_OUT, steps: int = 1000) -> list[str]:
    """The ``--held-out`` table: each point's errors and whether the shipped interval (the
    several-PS widths, the simulation's own noise left out) holds it."""
    rows = held_out_rows(data, steps)
    if not rows:
        raise SystemExit(f"no measured 2-PS run under {data}")
    widths = load_model_errors().of(MODEL, SEVERAL_PS)
    assert widths is not None
    lines = [f"{'run':<36} {'W':>2} {'measured':>8} {'own':>7} {'error':>7} {'in':>3} {'what-if':>8} {'error':>7} {'in':>3}"]
    inside = {"own": 0, "what_if": 0}
    for r in rows:
        marks = {}
        for key, value in (("own", r.own), ("what_if", r.what_if)):
            low, high = widths.widen(MODEL, r.workers, value, value)
            marks[key] = low <= r.measured <= high
            inside[key] += marks[key]
        lines.append(f"{r.run:<36} {r.workers:>2} {r.measured:>8.1f} {r.own:>7.1f} {r.own_error:>+7.1%} "
                     f"{'yes' if marks['own'] else 'NO':>3} {r.what_if:>8.1f} {r.what_if_error:>+7.1%} "
                     f"{'yes' if marks['what_if'] else 'NO':>3}")
    own, other = summary([r.own_error for r in rows]), summary([r.what_if_error for r in rows])
    lines.append(f"{len(rows)} points: own trace median |error| {own[0]:.1%}, max {own[1]:.1%}, inside the interval "
                 f"{inside['own']} of {len(rows)}; what-if median {other[0]:.1%}, max {other[1]:.1%}, inside "
                 f"{inside['what_if']} of {len(rows)}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=1000, help="simulated steps per worker (default 1000)")
    add_order_option(parser, " for the runs' table")
    add_param_option(parser)
    parser.add_argument("--no-fit", action="store_true", help="skip the held-out fit (its 20 curves)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", type=Path, help="also write the rows and the fits here")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of traces and measured runs")
    parser.add_argument("--phases", action="store_true", help="print what the step logs show instead (docstring)")
    parser.add_argument("--placements", action="store_true",
                        help="print the W = 3 placement runs instead (docstring)")
    parser.add_argument("--step-ends", action="store_true",
                        help="print where the traced W = 3 steps' ends went instead (docstring)")
    parser.add_argument("--held-out", action="store_true",
                        help="print the held-out 2-PS runs (tests/data/ps-traces/held-out) instead (docstring)")
    parser.add_argument("--write", action="store_true",
                        help=f"write the several-PS model error into the shipped advisor/data/model_error ({MODEL}@"
                             f"{SEVERAL_PS}.json)")
    args = parser.parse_args(argv)
    if args.write and (args.no_fit or args.param or args.data != DATA or args.order != StreamOrder.FIFO.value):
        raise SystemExit("--write measures the shipped widths: with the held-out fit, the default parameters and data")
    if args.step_ends:
        print("\n".join(step_ends()))
        return
    if args.held_out:
        print("\n".join(held_out_table(steps=args.steps)))
        return
    if args.placements:
        print("\n".join(placements(steps=args.steps)))
        return
    if args.phases:
        print("\n".join(phases(args.data)))
        return
    params = model_params(args.param)
    rows = [r for p in TWO_PS for r in predict(p, params, steps=args.steps, data=args.data,
                                               order=StreamOrder(args.order))]
    if not rows:
        raise SystemExit(f"no measured 2-PS run under {args.data}")
    print(f"{MODEL}" + (f" with {params}" if params else " (default parameters)")
          + f"; PS links {LINK_BPS / 1e6:g} Mbit/s; what-if worker link {WORKER_LINK_BPS / 1e9:g} Gbit/s")
    print(table(rows, args.markdown))
    print()
    print("\n".join(summaries(rows)))
    fits: dict[str, Any] = {}
    held_out: list[Row] = []
    if not args.no_fit:
        print("\nheld out: multi_ps_flow_goodput fitted on one placement (own trace, W >= 2), the other predicted")
        for fit_on, held in (("round-robin", "greedy-bytes"), ("greedy-bytes", "round-robin")):
            value = fit(fit_on, steps=args.steps, data=args.data)
            held_rows = predict(held, {**params, "multi_ps_flow_goodput": value}, steps=args.steps, data=args.data)
            held_out += held_rows
            own, other = summary([r.own_error for r in held_rows]), summary([r.what_if_error for r in held_rows])
            fits[fit_on] = {"value": value, "held_out": held, "own": own, "what_if": other}
            print(f"  fitted on {fit_on}: {value:g}; {held} ({len(held_rows)} points): own trace median |error| "
                  f"{own[0]:.1%}, max {own[1]:.1%}; what-if median {other[0]:.1%}, max {other[1]:.1%}")
        error_doc = model_error_report(held_out, args.steps, args.write)
        fits["model_error"] = error_doc
    if args.json:
        args.json.write_text(json.dumps({"params": params, "rows": [asdict(r) for r in rows], "fits": fits}, indent=2))


def model_error_report(held_out: Sequence[Row], steps: int, write: bool) -> dict[str, Any]:
    """Print (and with ``write`` ship) the several-PS scope's widths from the held-out rows and
    the W = 3 placement runs, with their coverage; returns the validation stored with them."""
    found = residuals(held_out, placement_rows(steps=steps))
    source = (f"python -m benchmarks.multi_ps_accuracy --write: {len(found)} held-out points of tests/data/ps-traces "
              f"(2 PS: the two placements' runs, {MODEL} with multi_ps_flow_goodput fitted on the other placement, "
              f"the worse of own trace and --ps 2 what-if; the W = 3 placement runs with two PS carrying bytes)")
    return report_widths(several_ps_error(found, source), found, cross_coverage(found), "held-out points",
                         "each placement's points by widths measured without them", write)


def report_widths(error: ModelError, found: Sequence[Any], cross: float, what: str, folds: str,
                  write: bool) -> dict[str, Any]:
    """Print (and with ``write`` ship) a model's several-PS widths measured from the residuals
    ``found`` (dataclasses with an ``r``), with their in-sample and cross-conformal (``cross``,
    over ``folds``) coverage; returns the validation stored with them."""
    validation = {"coverage": {"in_sample": coverage(found, error), "cross_conformal": cross, "points": len(found)},
                  "points": [{**asdict(x), "r": x.r} for x in found]}
    print(f"\nmodel error with several PS ({len(found)} {what}, {LEVEL:.0%}):")
    for g in error.regimes:
        print(f"  {g.label:<6} n={g.n:<3} -{g.down:.1%} / +{g.up:.1%}"
              + ("" if g.exact else " (largest residual: too few for the conformal rank)"))
    print(f"  coverage: in-sample {validation['coverage']['in_sample']:.0%}, cross-conformal ({folds}) {cross:.0%}")
    if write:
        _, out = write_error_file(error, validation)
        print(f"  wrote {out}")
    return validation


if __name__ == "__main__":
    main()
