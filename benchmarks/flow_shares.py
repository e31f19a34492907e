"""How real TCP flows share the PS link, against the flows of the simulation that predicts them.

    python -m benchmarks.flow_shares [--steps 150] [--param KEY=VALUE ...]
    python -m benchmarks.flow_shares --rounds
    python -m benchmarks.flow_shares --tcp

The contention rules (docs/contention-model.md) were chosen by the throughput they predict.
This looks one level down, at the transfers themselves. Data: ``tests/data/flow-shares`` (its
README says how it was taken): the one-PS MLP and CNN at 100 Mbit/s, asynchronous and
synchronous (``SyncReplicasOptimizer``), W = 2, 4, 8, each run with worker 0 tracing 20 of its
steps (every ``RecvTensor`` with its size, start and end).

For each step of a worker, each direction's **phase**: from the first transfer's start to the
last one's end of the step's pulls (PS -> worker) or pushes (worker -> PS), and its mean rate
(the phase's bytes over its length). TensorFlow multiplexes a step's tensors on one connection,
the simulation sends them one after another; a phase's rate is the same quantity in both. Per
run and W: the median phase rate as a multiple of the fair share (link rate / W) and the spread
of the phase rates over the steps (standard deviation of their logarithm: 0 when every phase
runs at the same rate). Beside them the same figures of the simulation's transfers (the default
model for the program's regime, the run's settings as a user states them: cubic, a 100 ms queue,
every worker's steps after ``WARMUP``), and both throughputs.

``--rounds`` reads the synchronous runs in which every worker traced its steps
(``<program>_sync_bw100[_q<queue ms>]_all<W>[.r<repeat>]``; one host, one clock) and groups the steps into the barrier's
rounds. Per run: how far apart the barrier releases the workers (the spread of their step
starts), how far apart their pulls end, how often the round's first worker to end its pulls was
among the first quarter released, and how long that worker's pushes take against the others'
(shorter if it pushes at the link's rate while the others still pull).

``--tcp`` reads the all-traced runs that also sampled the PS's TCP connections (``*_tcp_all8``,
``tcp_samples_ps0``: ``ss -tin`` about every 45 ms). Per round, the first worker to end its pulls,
from its first push to the others' last pull end: its push rate (the bytes the PS received on its
push connection), the others' pulls together (the bytes they acknowledged), the RTT the PS's
senders see on the pull connections (its outbound queue) and the receiver's RTT estimate on the
pusher's connection. Per run, the medians over rounds, the push also as a multiple of the fair
share (link rate / W).

A phase counts the transfers of at least ``MIN_TRANSFER_BYTES``: the few-byte messages (a
synchronous worker's token, the step counter, control edges) come at other moments of the step
and carry nothing whose rate could be shared; steps whose phase holds less than
``MIN_PHASE_BYTES`` are left out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.core.advice import AdviceRequest, ModelChoice, model_inputs
from advisor.core.curve import CurveSettings
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.importers.tf_profile import RECV_LABEL, label_bytes

TEST_DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DATA = TEST_DATA / "flow-shares"
TRACES = {"async": TEST_DATA / "ps-traces" / "{program}_ps1_bw100.trace.json.gz",  # each program's one-worker trace
          "sync": TEST_DATA / "ps-sync" / "{program}_bw100.trace.json.gz"}
MODELS = {"async": "li2020-des+contention", "sync": "li2020-des-sync+contention"}
RUN = re.compile(r"(?P<program>[a-z0-9]+)_(?P<mode>sync|async)_bw(?P<mbit>\d+)\.traced\.measured\.json\.gz")
ALL_TRACED = re.compile(r"(?P<program>[a-z0-9]+)_sync_bw(?P<mbit>\d+)(?:_q(?P<queue_ms>\d+))?"
                        r"(?:_(?P<variant>ssai0|tcp))?_all(?P<w>\d+)"
                        r"(?:\.r(?P<repeat>\d+))?\.traced\.measured\.json\.gz")
ROUND_GAP_S = 0.15  # steps of different workers starting closer than this belong to one synchronous round
MIN_TRANSFER_BYTES = 1024
MIN_PHASE_BYTES = 10_000
WARMUP = 20  # simulated steps of each worker left out (the run's own skip is 10 untraced steps)


@dataclass(frozen=True)
class Transfer:
    """One tensor crossing the link in one step: its direction, bytes and [start, end] in s."""

    step: int
    pull: bool
    size: float
    start: float
    end: float


@dataclass(frozen=True)
class Shares:
    """A direction's phases over a run's steps: median rate / fair share, spread of log rate."""

    phases: int
    median_share: float
    log_sd: float


def phase_rates(transfers: Iterable[Transfer], pull: bool) -> list[float]:
    """Each step's phase rate in bit/s for one direction (module docstring)."""
    by_step: dict[int, list[Transfer]] = {}
    for t in transfers:
        if t.pull == pull and t.size >= MIN_TRANSFER_BYTES:
            by_step.setdefault(t.step, []).append(t)
    rates = []
    for step in sorted(by_step):
        ts = by_step[step]
        size, (start, end) = sum(t.size for t in ts), _span(ts)
        if size >= MIN_PHASE_BYTES and end > start:
            rates.append(8.0 * size / (end - start))
    return rates


def _span(transfers: Sequence[Transfer]) -> tuple[float, float]:
    """A phase: from its first transfer's start to its last one's end."""
    return min(t.start for t in transfers), max(t.end for t in transfers)


def both_shares(transfers: Sequence[Transfer], link_bps: float, workers: int) -> tuple[Shares, Shares]:
    """``shares`` of the pull phases and of the push phases of ``transfers``."""
    return (shares(phase_rates(transfers, True), link_bps, workers),
            shares(phase_rates(transfers, False), link_bps, workers))


def shares(rates: Sequence[float], link_bps: float, workers: int) -> Shares:
    """``rates`` summarised against the fair share ``link_bps / workers``."""
    if not rates:
        return Shares(0, math.nan, math.nan)
    logs = [math.log(r) for r in rates]
    return Shares(len(rates), statistics.median(rates) / (link_bps / workers),
                  statistics.pstdev(logs) if len(logs) > 1 else 0.0)


def measured_transfers(traced_steps: Sequence[dict[str, Any]]) -> list[Transfer]:
    """A worker's transfers from its traced steps (step k of the list numbered k): every
    ``RecvTensor`` between a PS and that worker."""
    out = []
    for k, step in enumerate(traced_steps):
        for _, name, label, start_us, end_us in step["nodes"]:
            m = RECV_LABEL.match(label) if name == "RecvTensor" else None
            size = label_bytes(m["size"]) if m else None
            if m is None or size is None or ("/job:ps" in m["src"]) == ("/job:ps" in m["dst"]):
                continue
            out.append(Transfer(k, "/job:ps" in m["src"], float(size), start_us / 1e6, end_us / 1e6))
    return out


def simulated_transfers(chrome_trace: dict[str, Any], sizes: dict[str, int], workers: int,
                        warmup: int = WARMUP) -> list[Transfer]:
    """Every worker's link transfers from a simulated timeline (``PsDes.timeline``, a Chrome
    trace), ``sizes`` the bytes of each transfer op by name; each worker's steps numbered
    apart, its first ``warmup`` steps left out."""
    out = []
    for e in chrome_trace["traceEvents"]:
        if e.get("ph") != "X" or e["pid"] >= workers or e["cat"] not in ("downlink", "uplink"):
            continue
        worker, step = e["args"]["worker"], e["args"]["step"]
        if step >= warmup:
            out.append(Transfer(worker * 1_000_000 + step, e["cat"] == "downlink", float(sizes.get(e["name"], 0)),
                                e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6))
    return out


@dataclass(frozen=True)
class Row:
    """One run at one W: measured and simulated throughput and shares per direction."""

    run: str
    workers: int
    measured: float
    simulated: float
    real: tuple[Shares, Shares]  # pulls, pushes
    sim: tuple[Shares, Shares]


def rows(data: Path = DATA, steps: int = 150, seed: int = 0, params: dict[str, Any] | None = None) -> list[Row]:
    """Every recorded run and W against its simulation (module docstring), ``params`` added to
    the model's settings."""
    out = []
    for path in sorted(data.glob("*.traced.measured.json.gz")):
        m = RUN.fullmatch(path.name)
        if m is None:  # the runs with every worker traced: ``--rounds``
            continue
        doc = json.loads(gzip.decompress(path.read_bytes()))
        link = float(m["mbit"]) * 1e6
        profile = load_profile(Path(str(TRACES[m["mode"]]).format(program=m["program"])))
        sizes = {op.name: op.bytes for op in profile.ops if op.bytes}
        for result in doc["results"]:
            w = int(result["W"])
            choice = ModelChoice(MODELS[m["mode"]], {"congestion_control": "cubic", "queue_s": 0.1, **(params or {})})
            request = AdviceRequest(network=NetworkModel(bandwidth_bps=link), side_by_side=(), model=choice,
                                    curve=CurveSettings(workers=(w,), steps=steps, seed=seed))
            model, settings = request.model.resolve()
            timeline = model.timeline(model_inputs(profile, request), settings, w, steps + WARMUP,  # type: ignore[attr-defined]
                                      seed)
            out.append(Row(path.name.split(".")[0], w, float(result["thr_window"]),
                           _throughput(timeline, w, profile.job.batch_size),
                           both_shares(measured_transfers(result["traced_steps_w0"]), link, w),
                           both_shares(simulated_transfers(timeline, sizes, w), link, w)))
    return out


def _throughput(chrome_trace: dict[str, Any], workers: int, batch_size: int) -> float:
    """Examples per second of a simulated timeline after the warm-up: each worker's steps from
    the end of its ``WARMUP``-th to its last, summed over the workers."""
    ends: dict[int, dict[int, float]] = {}
    for e in chrome_trace["traceEvents"]:
        if e.get("ph") == "X" and e["pid"] < workers:
            w, k = e["args"]["worker"], e["args"]["step"]
            ends.setdefault(w, {})[k] = max(ends.get(w, {}).get(k, 0.0), (e["ts"] + e["dur"]) / 1e6)
    total = 0.0
    for by_step in ends.values():
        last = max(by_step)
        if last > WARMUP:
            total += (last - WARMUP) * batch_size / (by_step[last] - by_step[WARMUP])
    return total


@dataclass(frozen=True)
class Phases:
    """One worker's step in a synchronous round: when it started, its pull and push phases (s)."""

    worker: int
    start: float
    pull: tuple[float, float]
    push: tuple[float, float]


def step_phases(worker: int, step: dict[str, Any]) -> Phases | None:
    """A traced step's phases (transfers of at least ``MIN_TRANSFER_BYTES``), None without both."""
    ts = [t for t in measured_transfers([step]) if t.size >= MIN_TRANSFER_BYTES]
    pulls, pushes = [t for t in ts if t.pull], [t for t in ts if not t.pull]
    if not pulls or not pushes:
        return None
    return Phases(worker, step["client"][0] / 1e6, _span(pulls), _span(pushes))


def sync_rounds(result: dict[str, Any], gap_s: float = ROUND_GAP_S) -> list[list[Phases]]:
    """Every worker's traced steps (``traced_steps_w<k>``) grouped into the barrier's rounds: a
    step starting within ``gap_s`` of the round's first belongs to it; only whole rounds (one
    step of every worker) are kept."""
    workers = int(result["W"])
    steps = sorted((p for w in range(workers) for st in result.get(f"traced_steps_w{w}", ())
                    if (p := step_phases(w, st)) is not None), key=lambda p: p.start)
    rounds: list[list[Phases]] = []
    for p in steps:
        if rounds and p.start - rounds[-1][0].start < gap_s:
            rounds[-1].append(p)
        else:
            rounds.append([p])
    return [r for r in rounds if sorted(p.worker for p in r) == list(range(workers))]


@dataclass(frozen=True)
class RoundFigures:
    """What a run's rounds show (``round_figures``); times in ms."""

    rounds: int
    release_spread: float  # median over rounds: last step start - first
    pull_end_spread: float  # median: last pull end - first
    first_out_started_early: float  # share of rounds whose first pull to end began in the first quarter of starts
    first_push: float  # median push phase of the round's first worker to end its pulls
    other_push: float  # median push phase of the others


def round_figures(rounds: Sequence[Sequence[Phases]]) -> RoundFigures:
    """The release spread, how far apart the pulls end, whether the first out was released
    early, and how long its pushes take against the others' (``--rounds`` in the module
    docstring)."""
    ms = 1e3
    release, spread, early, first_push, other_push = [], [], 0, [], []
    for r in rounds:
        starts = sorted(p.start for p in r)
        first = min(r, key=lambda p: p.pull[1])
        release.append((starts[-1] - starts[0]) * ms)
        spread.append((max(p.pull[1] for p in r) - first.pull[1]) * ms)
        early += first.start <= starts[max(len(starts) // 4 - 1, 0)]
        first_push.append((first.push[1] - first.push[0]) * ms)
        other_push += [(p.push[1] - p.push[0]) * ms for p in r if p is not first]
    return RoundFigures(len(rounds), statistics.median(release), statistics.median(spread), early / len(rounds),
                        statistics.median(first_push), statistics.median(other_push))


def all_traced_results(data: Path = DATA) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(run name, meta, result) of every run whose every worker traced its steps (``ALL_TRACED``)."""
    for path in sorted(data.glob("*.traced.measured.json.gz")):
        if ALL_TRACED.fullmatch(path.name) is None:
            continue
        doc = json.loads(gzip.decompress(path.read_bytes()))
        for result in doc["results"]:
            yield path.name.removesuffix(".traced.measured.json.gz"), doc["meta"], result


def all_traced(data: Path = DATA) -> list[str]:
    """The ``--rounds`` lines: per run whose every worker traced its steps, ``round_figures``."""
    lines = [f"{'run':<27} {'W':>2} rounds  release spread  pull ends spread  first out released early"
             "  push phase: first out / others (ms)"]
    for run, _, result in all_traced_results(data):
        f = round_figures(sync_rounds(result))
        lines.append(f"{run:<27} {result['W']:>2} {f.rounds:>6} {f.release_spread:>12.0f} ms"
                     f" {f.pull_end_spread:>14.0f} ms {f.first_out_started_early:>24.0%}"
                     f"  {f.first_push:>6.0f} / {f.other_push:.0f}")
    return lines


# The recorder's ``tcp_samples_ps0`` rows (scripts/record_ps_traces.py, --tcp-sample-ms): ``ss -tin``
# in the PS's namespace, [t, worker, connection, *TCP_FIELDS]. Pulls arrive on connection 0 (the
# PS sends: its RTT is the PS's outbound queue plus the way back), pushes on connection 1 (the PS
# receives: bytes_received, and the receiver's RTT estimate).
TCP_FIELDS = ("rtt", "cwnd", "bytes_acked", "bytes_received", "unacked", "rcv_rtt", "retrans")
PULL_CONNECTION, PUSH_CONNECTION = 0, 1
MIN_OVERLAP_S = 0.1  # a shorter overlap holds too few samples (about one each 45 ms) for a rate


def tcp_counter(samples: Sequence[Sequence[Any]], worker: int, connection: int,
                field: str) -> tuple[list[float], list[float]]:
    """One field of one connection over time: (times, values), samples without it left out."""
    k = 3 + TCP_FIELDS.index(field)
    found = [(r[0], r[k]) for r in samples if r[1] == worker and r[2] == connection and r[k] is not None]
    return [t for t, _ in found], [v for _, v in found]


def _at(series: tuple[list[float], list[float]], t: float) -> float:
    """A cumulative counter at ``t``, linearly between its samples."""
    times, values = series
    return float(np.interp(t, times, values))


def _median_within(series: tuple[list[float], list[float]], a: float, b: float) -> float:
    inside = [v for t, v in zip(*series) if a <= t <= b]
    return statistics.median(inside) if inside else math.nan


@dataclass(frozen=True)
class EarlyPush:
    """One round: the first worker out pushing while the others still pull (rates in Mbit/s, ms)."""

    overlap_ms: float  # from its first push to the others' last pull end
    push_mbit: float  # its push rate meanwhile (bytes the PS received on its push connection)
    pulls_mbit: float  # the others' pulls together meanwhile (bytes they acknowledged)
    pull_rtt_ms: float  # median RTT of the others' pull connections: the PS's outbound queue
    push_rtt_ms: float  # median receiver's RTT estimate on its push connection


def early_pushes(result: dict[str, Any]) -> list[EarlyPush]:
    """Per round of an all-traced run with TCP samples, the first worker out's push while the
    others pull; rounds whose overlap is shorter than ``MIN_OVERLAP_S`` are left out."""
    samples = result.get("tcp_samples_ps0") or []
    if not samples:
        return []
    found = []
    for r in sync_rounds(result):
        first = min(r, key=lambda p: p.pull[1])
        others = [p for p in r if p is not first]
        a, b = first.push[0], max(p.pull[1] for p in others)
        if b - a < MIN_OVERLAP_S:
            continue
        pushed = tcp_counter(samples, first.worker, PUSH_CONNECTION, "bytes_received")
        pulled = [tcp_counter(samples, p.worker, PULL_CONNECTION, "bytes_acked") for p in others]
        rtts = [v for p in others for t, v in zip(*tcp_counter(samples, p.worker, PULL_CONNECTION, "rtt"))
                if a <= t <= b]
        mbit = 8 / (b - a) / 1e6
        found.append(EarlyPush((b - a) * 1e3, (_at(pushed, b) - _at(pushed, a)) * mbit,
                               sum(_at(c, b) - _at(c, a) for c in pulled) * mbit,
                               statistics.median(rtts) if rtts else math.nan,
                               _median_within(tcp_counter(samples, first.worker, PUSH_CONNECTION, "rcv_rtt"), a, b)))
    return found


def tcp_lines(data: Path = DATA) -> list[str]:
    """The ``--tcp`` lines: per all-traced run with TCP samples, the medians of ``early_pushes``."""
    lines = [f"{'run':<27} {'W':>2} rounds  overlap  its push (x fair share)  others' pulls  "
             "pull RTT  push RTT (receiver)"]
    for run, meta, result in all_traced_results(data):
        found = early_pushes(result)
        if not found:
            continue
        fair = float(meta["bw_mbit"]) / int(result["W"])
        med = {f: statistics.median(getattr(e, f) for e in found) for f in EarlyPush.__dataclass_fields__}
        lines.append(f"{run:<27} {result['W']:>2} {len(found):>6} {med['overlap_ms']:>5.0f} ms"
                     f" {med['push_mbit']:>6.1f} Mbit/s ({med['push_mbit'] / fair:.2f})"
                     f" {med['pulls_mbit']:>8.1f} Mbit/s {med['pull_rtt_ms']:>6.0f} ms {med['push_rtt_ms']:>6.0f} ms")
    return lines


def table(found: Sequence[Row]) -> list[str]:
    """The printed table: per run and W, throughput and each direction's share and spread."""
    lines = [f"{'run':<16} {'W':>2} {'ex/s real':>9} {'sim':>6}   pulls: share real/sim, log-sd real/sim"
             "   pushes: share real/sim, log-sd real/sim"]
    for r in found:
        cells = "   ".join(f"{a.median_share:5.2f}/{b.median_share:5.2f}  {a.log_sd:5.2f}/{b.log_sd:5.2f}"
                           for a, b in zip(r.real, r.sim))
        lines.append(f"{r.run:<16} {r.workers:>2} {r.measured:>9.1f} {r.simulated:>6.1f}   {cells}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="simulated steps per worker after the warm-up")
    parser.add_argument("--param", action="append", default=[], metavar="K=V", help="a model parameter (JSON value)")
    parser.add_argument("--rounds", action="store_true",
                        help="the synchronous runs with every worker traced, round by round")
    parser.add_argument("--tcp", action="store_true",
                        help="the all-traced runs with TCP samples: the first worker out's push while the others pull")
    args = parser.parse_args()
    if args.rounds:
        print("\n".join(all_traced()))
        return
    if args.tcp:
        print("\n".join(tcp_lines()))
        return
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    print("\n".join(table(rows(steps=args.steps, params=params))))


if __name__ == "__main__":
    main()
