r"""Probe what a PS link's direction keeps while the other direction carries data: the cause of
imperfect alternation, measured without any training job.

Why: two workers that alternate on one parameter server (one pulls while the other pushes) should
each run nearly as fast as alone, since the two transfers use opposite directions of the PS link.
On the testbed they reach only 0.82-0.95 of that. A transfer's acknowledgements travel the
opposite direction, and there they queue in the tbf behind the other worker's data, which delays
them by up to the queue's length and slows the transfer's window. How much depends on the
congestion control and the queue, not on the program; this script measures it with plain TCP
messages of a job's size, on the namespace testbed the runs were taken on (``netns_testbed.py``):
a PS namespace whose link is shaped both ways, and two worker namespaces, A and B.

Each round the PS either sends ``size`` bytes to A (a pull) alone, receives ``size`` bytes from B
(a push) alone, or both at once, over persistent connections (as gRPC keeps them); an idle gap
between rounds lets the queues drain, as a step's compute does. The result is, per direction, the
mean time of a transfer while the other direction is busy over its mean time alone.

``--alternate``: two synthetic workers, each a loop of pull, idle gap, push, half a cycle apart:
the efficiency an overlapped transfer keeps in the alternating arrangement (what
``two_way.PROBED`` ships). ``--crowd W ...``: W such workers at random phases, then the same W
pulling only (and, with ``--crowd-modes``, pushing only, in lockstep behind a barrier, or taking
turns one transfer each way at a time): what each direction of the link carries, beside the real
runs (``benchmarks/two_way.py``).

Run as root (namespaces, tc), on a quiet machine; about 20 s a setting (tests/data/two-way/README.md
has the commands that recorded its files):

    python3 scripts/probe_two_way.py --out /tmp/transfers.json

Each setting is ``<cc>/<queue ms>/<Mbit/s>/<bytes>[/<gap ms>]``; the namespaces (``advtw-*``) are deleted at
the end, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import netns_testbed as testbed  # scripts/netns_testbed.py, beside this script

from advisor.core.models.ps_des.arrangements import middle_share
from advisor.core.models.ps_des.two_way import efficiency_of_cycles

PREFIX = "advtw"
SUBNET = "10.213.79"
PORT = 2299
HEADER = 9  # one command byte ('P' pull, 'U' push, 'Q' quit) and the size, 8 bytes big-endian
# the testbed's settings (tests/data/ps-async, tests/data/ps-sync): the sizes are the mlp's and
# the cnn's bytes each way per step
DEFAULT_SETTINGS = ("cubic/100/100/1736744", "cubic/100/100/408616", "cubic/20/100/1736744",
                    "bbr/100/100/1736744", "bbr/100/100/408616", "cubic/100/50/1736744")


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = conn.recv(min(1 << 20, size - got))
        if not chunk:
            raise ConnectionError(f"peer closed after {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def serve_worker(port: int) -> None:
    """A worker's end: answer the PS's commands on one connection until it says quit."""
    with socket.create_server(("0.0.0.0", port)) as server:
        conn, _ = server.accept()
        with conn:
            while True:
                header = _recv_exactly(conn, HEADER)
                cmd, size = header[:1], int.from_bytes(header[1:], "big")
                if cmd == b"Q":
                    return
                if cmd == b"P":  # the PS sends size bytes; say when all arrived
                    _recv_exactly(conn, size)
                    conn.sendall(b"k")
                elif cmd == b"U":  # send size bytes to the PS
                    conn.sendall(bytes(size))


class Transfers:
    """The PS's end of one size of transfer, over a worker's connection (``serve_worker``)."""

    def __init__(self, size: int) -> None:
        self.size, self.header, self.payload = size, size.to_bytes(8, "big"), bytes(size)

    def pull(self, conn: socket.socket) -> None:
        """Send ``size`` bytes to the worker; return when it says all arrived."""
        conn.sendall(b"P" + self.header + self.payload)
        _recv_exactly(conn, 1)

    def push(self, conn: socket.socket) -> None:
        """Ask the worker for ``size`` bytes; return when all arrived."""
        conn.sendall(b"U" + self.header)
        _recv_exactly(conn, self.size)


def _together(loops: Sequence[Callable[[], None]]) -> None:
    """Run each of ``loops`` in a thread of its own, and wait for all."""
    threads = [threading.Thread(target=loop) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _quit(conns: Iterable[socket.socket]) -> None:
    """Tell each worker's end to stop, and close the connections."""
    for conn in conns:
        conn.sendall(b"Q" + bytes(8))
        conn.close()


def conduct(a: str, b: str, size: int, rounds: int, warmup: int, gap_s: float) -> dict[str, list[float]]:
    """The PS's end: per round, a pull to ``a`` alone, a push from ``b`` alone, then both at once;
    each transfer's time in seconds, per kind (``pull``, ``push``, ``pull_both``, ``push_both``)."""
    pull = socket.create_connection((a, PORT))
    push = socket.create_connection((b, PORT))
    transfers = Transfers(size)

    def do_pull() -> float:
        t0 = time.perf_counter()
        transfers.pull(pull)
        return time.perf_counter() - t0

    def do_push() -> float:
        t0 = time.perf_counter()
        transfers.push(push)
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"pull": [], "push": [], "pull_both": [], "push_both": []}
    for k in range(warmup + rounds):
        keep = k >= warmup
        t = do_pull()
        if keep:
            times["pull"].append(t)
        time.sleep(gap_s)
        t = do_push()
        if keep:
            times["push"].append(t)
        time.sleep(gap_s)
        both: dict[str, float] = {}
        thread = threading.Thread(target=lambda: both.__setitem__("push", do_push()))
        thread.start()
        both["pull"] = do_pull()
        thread.join()
        if keep:
            times["pull_both"].append(both["pull"])
            times["push_both"].append(both["push"])
        time.sleep(gap_s)
    _quit((pull, push))
    return times


def alternate(a: str, b: str, size: int, rounds: int, warmup: int, gap_s: float) -> dict[str, list[float]]:
    """The PS's end of two synthetic workers, each a loop of pull, ``gap_s`` of compute, push: first
    worker A alone, then both with B started half a cycle later; each cycle's end time per kind
    (``alone``, ``a``, ``b``), so that the cycles and the phase between the workers can be read."""
    conns = {w: socket.create_connection((addr, PORT)) for w, addr in (("a", a), ("b", b))}
    transfers = Transfers(size)

    def cycle(conn: socket.socket) -> None:
        transfers.pull(conn)
        time.sleep(gap_s)
        transfers.push(conn)

    ends: dict[str, list[float]] = {"alone": [], "a": [], "b": []}
    for _ in range(warmup + rounds):
        cycle(conns["a"])
        ends["alone"].append(time.perf_counter())
    period = (ends["alone"][-1] - ends["alone"][warmup]) / max(rounds - 1, 1)

    def loop(w: str, delay: float) -> None:
        time.sleep(delay)
        for _ in range(warmup + rounds):
            cycle(conns[w])
            ends[w].append(time.perf_counter())

    _together([functools.partial(loop, "a", 0.0), functools.partial(loop, "b", period / 2)])
    _quit(conns.values())
    return ends


CROWD_MODES = ("pull+push", "pull", "push", "barrier", "turns", "pull-turns")


def moves(mode: str) -> tuple[bool, bool]:
    """Whether the workers of a crowd mode pull, and whether they push."""
    return mode != "push", mode not in ("pull", "pull-turns")


def crowd(addresses: list[str], size: int, seconds: float, gap_s: float, mode: str) -> list[list[float]]:
    """The PS's end of len(addresses) synthetic workers at random phases (each starts within its
    first cycle), each a loop of pull (unless ``mode`` is "push"), ``gap_s`` idle and push (unless
    it is "pull"), for ``seconds``: every worker's cycle end times. "turns": pulling and pushing,
    one pull at a time and one push at a time (a lock per direction), the arrangement in which
    workers take turns on the link; "pull-turns": one pull at a time, no pushes."""
    pull, push = moves(mode)
    one_at_a_time = {"pull": threading.Lock(), "push": threading.Lock()} if "turns" in mode else {}
    conns = [socket.create_connection((address, PORT)) for address in addresses]
    transfers = Transfers(size)
    ends: list[list[float]] = [[] for _ in conns]
    stop = time.perf_counter() + seconds

    def loop(k: int) -> None:
        time.sleep(random.Random(k).uniform(0.0, 0.3))
        conn = conns[k]
        while time.perf_counter() < stop:
            if pull:
                with one_at_a_time.get("pull", contextlib.nullcontext()):
                    transfers.pull(conn)
            time.sleep(gap_s)
            if push:
                with one_at_a_time.get("push", contextlib.nullcontext()):
                    transfers.push(conn)
            ends[k].append(time.perf_counter())

    _together([functools.partial(loop, k) for k in range(len(conns))])
    _quit(conns)
    return ends


def barrier(addresses: list[str], size: int, seconds: float, gap_s: float) -> list[list[list[float]]]:
    """The PS's end of len(addresses) synchronous workers: each round all pull at once, each idles
    ``gap_s`` and pushes, and the next round starts when every push has arrived (the barrier of a
    synchronous update), for ``seconds``: per worker, each round's [pull start, pull end, push
    start, push end]."""
    conns = [socket.create_connection((address, PORT)) for address in addresses]
    transfers = Transfers(size)
    rounds: list[list[list[float]]] = [[] for _ in conns]
    stop = time.perf_counter() + seconds
    done = threading.Event()

    def check() -> None:  # run by one thread each time all reach the barrier
        if time.perf_counter() >= stop:
            done.set()

    gate = threading.Barrier(len(conns), action=check)

    def loop(k: int) -> None:
        conn = conns[k]
        while True:
            gate.wait()
            if done.is_set():
                return
            t0 = time.perf_counter()
            transfers.pull(conn)
            t1 = time.perf_counter()
            time.sleep(gap_s)
            t2 = time.perf_counter()
            transfers.push(conn)
            rounds[k].append([t0, t1, t2, time.perf_counter()])

    _together([functools.partial(loop, k) for k in range(len(conns))])
    _quit(conns)
    return rounds


def burst_efficiency(rounds: list[list[list[float]]], size: int, mbit: float) -> tuple[float, float]:
    """(pull, push) efficiency of a barrier run: the time W transfers of ``size`` bytes need at the
    link's rate over the time the burst took (first start to last end), averaged over the rounds
    after the first fifth (warm-up)."""
    n = min(len(r) for r in rounds)
    ideal = len(rounds) * size * 8 / (mbit * 1e6)
    found = []
    for i in range(n // 5, n):
        pull = max(r[i][1] for r in rounds) - min(r[i][0] for r in rounds)
        push = max(r[i][3] for r in rounds) - min(r[i][2] for r in rounds)
        found.append((ideal / pull, ideal / push))
    return statistics.fmean(f[0] for f in found), statistics.fmean(f[1] for f in found)


def utilisation(ends: list[list[float]], size: int, mbit: float) -> tuple[float, float]:
    """(cycles/s of all workers together, each direction's data rate as a share of ``mbit``) over
    the last 80 % of the run (the first fifth is warm-up)."""
    first = min(e[0] for e in ends if e)
    last = max(e[-1] for e in ends if e)
    start = first + 0.2 * (last - first)
    rate = sum(1 for e in ends for t in e if t >= start) / (last - start)
    return rate, rate * size * 8 / (mbit * 1e6)


def _on_testbed(cc: str, queue_ms: float, mbit: float, workers: Sequence[str],
                conductor: Callable[[dict[str, str]], list[str]]) -> tuple[str, dict[str, object]]:
    """Build the testbed (a PS whose link is shaped both ways, ``workers`` beside it, congestion
    control ``cc`` on every connection), serve a worker's end in each worker's namespace, run this
    script in the PS's with the arguments ``conductor(addresses)`` gives, and tear it all down: the
    conductor's output and the PS's TCP and tbf counters."""
    names = ["ps", *workers]
    try:
        addresses = testbed.setup_network(PREFIX, SUBNET, names, mbit=mbit, queue_ms=queue_ms,
                                          shaped=lambda name: name == "ps")
        for name in names:
            testbed.ns_exec(f"{PREFIX}-{name}", "ip", "route", "replace", f"{SUBNET}.0/24", "dev", "eth0",
                            "congctl", "lock", cc)
        script = str(Path(__file__).resolve())
        servers = [subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-{w}", sys.executable, script, "--serve"])
                   for w in workers]
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-ps", sys.executable, script, *conductor(addresses)],
                             capture_output=True, text=True, check=True).stdout
        for server in servers:
            server.wait(timeout=30)
        return out, testbed.network_counters(PREFIX, ["ps"])["ps"]
    finally:
        testbed.teardown_network(PREFIX)


def probe_crowd(setting: str, workers: int, mode: str, seconds: float) -> dict[str, object]:
    """``workers`` synthetic workers at random phases on one setting's shaped PS link (``mode``: one
    of ``CROWD_MODES``)."""
    cc, queue_ms, mbit, size, *gap = setting.split("/")
    gap_s = float(gap[0]) / 1e3 if gap else 0.025
    names = [f"w{k}" for k in range(workers)]
    out, _ = _on_testbed(cc, float(queue_ms), float(mbit), names, lambda addresses: [
        "--crowd-conduct", json.dumps([addresses[w] for w in names]), size, str(seconds), str(gap_s),
        mode])
    ends = json.loads(out)
    common = {"setting": setting, "mode": "crowd", "workers": workers, "congestion_control": cc,
              "queue_ms": float(queue_ms), "mbit": float(mbit), "bytes": int(size), "gap_s": gap_s,
              "seconds": seconds, "load_1min": os.getloadavg()[0]}
    if mode == "barrier":
        pull, push = burst_efficiency(ends, int(size), float(mbit))
        return common | {"barrier": True, "burst_efficiency": {"pull": pull, "push": push}, "rounds_s": ends}
    rate, share = utilisation(ends, int(size), float(mbit))
    pull, push = moves(mode)
    return common | {"pull": pull, "push": push, "cycles_per_s": rate, "direction_share": share, "ends_s": ends} \
        | ({"turns": True} if "turns" in mode else {})


def probe(setting: str, rounds: int, warmup: int, gap_s: float, mode: str = "transfers") -> dict[str, object]:
    """Build the testbed for one setting, run the rounds in its namespaces (``mode``: "transfers"
    or "alternate"), tear it down."""
    cc, queue_ms, mbit, size, *gap = setting.split("/")
    gap_s = float(gap[0]) / 1e3 if gap else gap_s
    out, counters = _on_testbed(cc, float(queue_ms), float(mbit), ("a", "b"), lambda addresses: [
        "--conduct", mode, addresses["a"], addresses["b"], size, str(rounds), str(warmup), str(gap_s)])
    times = json.loads(out)
    common = {"setting": setting, "mode": mode, "congestion_control": cc, "queue_ms": float(queue_ms),
              "mbit": float(mbit), "bytes": int(size), "rounds": rounds, "gap_s": gap_s,
              "load_1min": os.getloadavg()[0], "ps_link": counters}
    if mode == "alternate":
        def cycle(ends: list[float]) -> float:
            kept = ends[warmup:]
            return (kept[-1] - kept[0]) / (len(kept) - 1)
        alone = cycle(times["alone"])
        both = (cycle(times["a"]) + cycle(times["b"])) / 2
        share = middle_share(times["a"][warmup:], times["b"][warmup:])
        return common | {"cycle_s": {"alone": alone, "both": both}, "rate_share": alone / both,
                         "middle_share": share, "ends_s": times}
    pull, push = statistics.fmean(times["pull"]), statistics.fmean(times["push"])
    pull_both, push_both = statistics.fmean(times["pull_both"]), statistics.fmean(times["push_both"])
    return common | {"mean_s": {"pull": pull, "push": push, "pull_both": pull_both, "push_both": push_both},
                     "share": {"pull": pull / pull_both, "push": push / push_both}, "times_s": times}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="*", default=list(DEFAULT_SETTINGS),
                        help="<cc>/<queue ms>/<Mbit/s>/<bytes>[/<gap ms>] each (default: the testbed's)")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--gap", type=float, default=0.03, help="idle seconds between transfers (a step's compute)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--alternate", action="store_true",
                        help="two synthetic workers (pull, gap, push) half a cycle apart instead of single transfers")
    parser.add_argument("--crowd", type=int, nargs="*", metavar="W",
                        help="W synthetic workers at random phases each (pull, gap, push), then pulling only: "
                             "each direction's data rate as a share of the link")
    parser.add_argument("--crowd-modes", nargs="*", choices=CROWD_MODES, default=["pull+push", "pull"],
                        help="what the --crowd workers do (default: pull+push, then pull)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of a --crowd run")
    parser.add_argument("--conduct", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--crowd-conduct", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_worker(PORT)
        return
    if args.crowd_conduct:
        addresses, size, seconds, gap, kind = args.crowd_conduct
        run = barrier if kind == "barrier" else functools.partial(crowd, mode=kind)
        print(json.dumps(run(json.loads(addresses), int(size), float(seconds), float(gap))))
        return
    if args.conduct:
        mode, a, b, size, rounds, warmup, gap = args.conduct
        run = alternate if mode == "alternate" else conduct
        print(json.dumps(run(a, b, int(size), int(rounds), int(warmup), float(gap))))
        return
    if os.geteuid() != 0:
        raise SystemExit("run as root: the probe makes network namespaces and tc qdiscs")
    results = []
    for setting in args.settings if args.crowd else ():
        for workers in args.crowd:
            for mode in args.crowd_modes:
                result = probe_crowd(setting, workers, mode, args.seconds)
                results.append(result)
                if mode == "barrier":
                    burst = result["burst_efficiency"]
                    print(f"{setting:26s} W={workers} barrier: a burst of W transfers at {burst['pull']:.3f} of the "
                          f"link pulling, {burst['push']:.3f} pushing, load {result['load_1min']:.2f}", flush=True)
                    continue
                print(f"{setting:26s} W={workers} {mode:9s} "
                      f"{result['cycles_per_s']:6.2f} cycles/s: each direction carrying data at "
                      f"{result['direction_share']:.3f} of the link, load {result['load_1min']:.2f}", flush=True)
    for setting in args.settings if not args.crowd else ():
        result = probe(setting, args.rounds, args.warmup, args.gap, "alternate" if args.alternate else "transfers")
        if args.alternate:
            cycle = result["cycle_s"]
            efficiency = efficiency_of_cycles(cycle["alone"], cycle["both"], result["gap_s"])
            print(f"{setting:26s} cycle {cycle['alone'] * 1e3:6.1f} -> {cycle['both'] * 1e3:6.1f} ms "
                  f"(each worker at {result['rate_share']:.3f} of alone; an overlapped transfer at {efficiency:.3f}), "
                  f"middle share {result['middle_share']:.2f}, load {result['load_1min']:.2f}", flush=True)
            results.append(result)
            continue
        mean, share = result["mean_s"], result["share"]
        print(f"{setting:26s} pull {mean['pull'] * 1e3:6.1f} -> {mean['pull_both'] * 1e3:6.1f} ms "
              f"(share {share['pull']:.3f}), push {mean['push'] * 1e3:6.1f} -> {mean['push_both'] * 1e3:6.1f} ms "
              f"(share {share['push']:.3f}), load {result['load_1min']:.2f}", flush=True)
        results.append(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"script": "scripts/probe_two_way.py", "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
