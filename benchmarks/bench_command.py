"""Whole-command times of ``advisor predict PROFILE --workers 1-32 --json`` (issue 14's figure).

    python -m benchmarks.bench_command [--repeat 3] [--jobs 0] [--versus OTHER_CHECKOUT]

The profile is the synthetic Inception-scale step (``benchmarks/synthetic.py``, 2,600 ops) at
10 Gbit/s, written to a temporary file. Each row is a fresh process, timed from start to exit
(wall and CPU of the process and its children, median of ``--repeat``):
- **cold**: an empty ``NUMBA_CACHE_DIR``: numba compiles the engine in the command;
- **shipped cache**: a cache built beforehand by ``python -m advisor.jit_cache build`` with
  ``NUMBA_CPU_NAME=generic`` (what the image does), given read-only as ``NUMBA_CACHE_DIR``
  (``advisor/jit_cache.py`` copies it to a private directory on start);
- **warm**: the same cache, after a first run;
(the package's prebuilt engine is turned off, ``ADVISOR_PREBUILT_ENGINE=off``, so that these rows
are about numba's cache; ``benchmarks/first_answer.py`` times a fresh install with it)
each with ``--jobs 1`` (one process) and ``--jobs N`` (``--jobs 0``: as many as the CPU quota
allows). Then the like-for-like case of the issue: W = 4, 120 steps per worker, 50 warm-up,
equal shares, compiled engine against the plain transcription of Algorithm 3.1
(``--model-param engine=reference``), as whole commands and in process.
The machine may be shared: the CPU column tells how much of the wall time was this command's.
``--versus DIR`` instead times warm whole commands of this checkout and of another version of
the code in DIR, alternately (to compare two versions under the same load).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from advisor.importers.profile_file import write_profile
from benchmarks.synthetic import inception_like

REPO = Path(__file__).resolve().parents[1]


def command(profile: Path, jobs: int, extra: tuple[str, ...] = (), root: Path = REPO) -> list[str]:
    """``advisor predict ...`` as the console script starts it (``advisor/__main__.py``); for a
    checkout of the code from before that entry, ``advisor.cli`` as a module."""
    entry = "advisor" if (root / "advisor" / "__main__.py").exists() else "advisor.cli"
    return [sys.executable, "-m", entry, "predict", str(profile), "--bandwidth", "10Gbit/s", "--json",
            "--jobs", str(jobs), *extra]


def timed(cmd: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children)."""
    wall, user, sys_s = timed_split(cmd, env, cwd)
    return wall, user + sys_s


def timed_split(cmd: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, float, float]:
    """(wall s, user CPU s, system CPU s of the process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def versus(other: Path, repeat: int, jobs: int) -> None:
    """Warm whole commands (W = 1..32) of this checkout and of ``other`` (another version of the
    code), one after the other ``repeat`` times, so that both see the same load; each with its
    own numba cache, warmed by a first run. User and system CPU apart: on a loaded machine the
    system time follows the load more than the code."""
    work = Path(tempfile.mkdtemp(prefix="bench-versus-"))
    profile = work / "inception.json.gz"
    write_profile(inception_like(), profile)
    sides = {"this checkout": REPO, f"{other}": other.resolve()}
    envs = {name: {**os.environ, "PYTHONPATH": str(root), "NUMBA_CACHE_DIR": str(work / f"cache-{i}")}
            for i, (name, root) in enumerate(sides.items())}
    cmds = {name: command(profile, jobs, ("--workers", "1-32"), root) for name, root in sides.items()}
    for name, root in sides.items():
        timed_split(cmds[name], envs[name], root)  # warm its numba cache
    for _ in range(repeat):
        for name, root in sides.items():
            wall, user, sys_s = timed_split(cmds[name], envs[name], root)
            print(f"warm W=1..32 --jobs {jobs} {name:<40} {wall:7.2f} s wall {user:6.2f} s user {sys_s:6.2f} s sys "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def row(name: str, runs: list[tuple[float, float]]) -> None:
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    print(f"{name:<52} {wall:7.2f} s wall  {cpu:7.2f} s CPU  (n={len(runs)}, fastest {min(w for w, _ in runs):.2f} s)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=0, help="the pool's size for the parallel rows (0: auto)")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--only-in-process", action="store_true", help="only the in-process like-for-like ratio")
    parser.add_argument("--overlap", action="store_true", help="only: how busy each process of the pool is")
    parser.add_argument("--versus", type=Path, metavar="CHECKOUT",
                        help="only: warm whole commands of this checkout and CHECKOUT, alternately")
    args = parser.parse_args()
    if args.versus:
        versus(args.versus, args.repeat, args.jobs)
        return
    if args.only_in_process:
        in_process(args.repeat)
        return
    if args.overlap:
        pool_overlap(args.jobs)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-command-"))
    profile = work / "inception.json.gz"
    write_profile(inception_like(), profile)
    base = {**os.environ, "NUMBA_CPU_NAME": "generic", "TMPDIR": str(work / "tmp"), "PYTHONPATH": str(REPO),
            "ADVISOR_PREBUILT_ENGINE": "off"}
    (work / "tmp").mkdir()
    curve = ("--workers", "1-32")
    shipped = work / "shipped"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "advisor.jit_cache", "build", str(shipped)], env=base, cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    print(f"built the shipped cache in {time.perf_counter() - started:.1f} s "
          f"({sum(p.stat().st_size for p in shipped.rglob('*') if p.is_file()) / 1e6:.1f} MB)")
    for jobs in (1, args.jobs):
        if not args.skip_cold:
            runs = []
            for i in range(args.repeat):
                cold = work / f"cold-{jobs}-{i}"
                runs.append(timed(command(profile, jobs, curve), {**base, "NUMBA_CACHE_DIR": str(cold)}))
            row(f"cold (no cache), --jobs {jobs}", runs)
        runs = []
        for i in range(args.repeat):
            copy = work / f"shipped-{jobs}-{i}"  # a fresh copy: as a new pod sees it
            shutil.copytree(shipped, copy)
            runs.append(timed(command(profile, jobs, curve), {**base, "NUMBA_CACHE_DIR": str(copy)}))
        row(f"shipped cache, first run, --jobs {jobs}", runs)
        env = {**base, "NUMBA_CACHE_DIR": str(shipped)}
        row(f"warm, --jobs {jobs}", [timed(command(profile, jobs, curve), env) for _ in range(args.repeat)])
    env = {**base, "NUMBA_CACHE_DIR": str(shipped)}
    like = ("--workers", "4", "--steps", "120", "--warmup", "50", "--equal-shares")
    fast = [timed(command(profile, 1, like), env) for _ in range(args.repeat)]
    ref = [timed(command(profile, 1, (*like, "--model-param", "engine=reference")), env) for _ in range(args.repeat)]
    row("like-for-like W=4 120 steps, compiled engine", fast)
    row("like-for-like W=4 120 steps, plain transcription", ref)
    print(f"whole-command ratio: x{statistics.median(w for w, _ in ref) / statistics.median(w for w, _ in fast):.1f}")
    in_process(args.repeat)
    shutil.rmtree(work, ignore_errors=True)


def _timed_point(task: Any) -> tuple[int, int, float, float, float]:
    from advisor.core.curve import compute_point

    t0, c0 = time.time(), time.process_time()
    compute_point(task)
    return task.workers, os.getpid(), t0, time.time(), time.process_time() - c0


def pool_overlap(jobs: int) -> None:
    """Is the pool's every process busy for the whole curve, and with how much of a core? Per
    process: the points it computed, its busy wall time, its CPU time (a CPU/wall ratio below 1
    means other work on the machine took the rest)."""
    from advisor.core.advice import AdviceRequest, model_inputs
    from advisor.core.curve import CurveSettings, PointTask
    from advisor.core.models import registry
    from advisor.core.sim_types import NetworkModel
    from advisor.parallel import PointPool

    profile = inception_like()
    cfg = CurveSettings(workers=tuple(range(1, 33)), target_rel_halfwidth=0.02)
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=10e9), curve=cfg)
    model = registry.get("li2020-des+contention")
    inputs = model_inputs(profile, request)
    tasks = [PointTask(model.name, inputs, registry.params_for(model), w, cfg) for w in cfg.workers]
    start = time.time()
    with PointPool(jobs) as pool:
        done = list(pool(_timed_point, tasks))
    wall = time.time() - start
    by: dict[int, list[tuple[float, float, float]]] = {}
    for _, pid, a, b, cpu in done:
        by.setdefault(pid, []).append((a - start, b - start, cpu))
    for pid, rows in by.items():
        busy, cpu = sum(b - a for a, b, _ in rows), sum(c for *_, c in rows)
        print(f"  process {pid}: {len(rows):>2} points, busy {busy:5.1f} s from {min(r[0] for r in rows):4.1f} to "
              f"{max(r[1] for r in rows):4.1f} s, CPU {cpu:5.1f} s ({cpu / busy:.0%} of a core)")
    print(f"pool of {PointPool(jobs).jobs}: the curve's points in {wall:.1f} s wall (engine loaded in the parent)")


def in_process(repeat: int) -> None:
    """The same like-for-like case in this process: the engines alone, no start-up or profile load."""
    from advisor.core.models.ps_des.simulator import simulate, simulate_reference_engine
    from advisor.core.sim_types import NetworkModel, SimulationSettings

    profile = inception_like()
    net = NetworkModel(bandwidth_bps=10e9 * 0.95)
    sim = SimulationSettings(workers=4, steps=120, warmup_steps=50)
    simulate(profile, net, SimulationSettings(workers=2, steps=2, warmup_steps=0))  # load the compiled engine
    fast, ref = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a = simulate(profile, net, sim)
        fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = simulate_reference_engine(profile, net, sim)
        ref.append(time.perf_counter() - t0)
    same = a.step_ends_s == b.step_ends_s
    print(f"in process, W=4 120 steps: compiled {statistics.median(fast) * 1e3:.0f} ms, plain transcription "
          f"{statistics.median(ref):.1f} s: x{statistics.median(ref) / statistics.median(fast):.0f} "
          f"(same step ends: {same})")


if __name__ == "__main__":
    main()
