"""How long the README's first command takes to answer on a fresh install: ``advisor predict``
on the bundled example, first and second run, for an editable install and a wheel install.

    python3 -m benchmarks.first_answer [--install editable,wheel] [--no-cold] [--keep DIR] [--repo CHECKOUT]

What is fresh, as on a new machine: a new virtual environment without the system's packages,
the dependencies from the hashed lock (``requirements/controller.lock``: the package's own, and
``requirements/build.lock`` for the build backend; ``pip install --require-hashes --no-deps``,
from pip's configured index or cache), and advisor installed from a copy of this work tree's
files (tracked and untracked, not ignored: a fresh clone with the current edits, no
``__pycache__`` and no numba cache). The runs see no ``NUMBA_*``, ``ADVISOR_*`` or
``PYTHONPATH`` variable, a new ``HOME``, and start in an empty directory, so numba caches where
it would on a new machine (``__pycache__`` beside the installed sources). Each install mode gets
its own copy and venv. ``--repo`` measures another checkout instead (another version of the
code, for a before-and-after figure; its first run is its cold one if it has no prebuilt engine).

Rows: the first ``advisor predict`` (the engine comes from the package's prebuilt copy, or is
compiled when that does not fit), the second (from the cache the first wrote, or the prebuilt
copy again), and, unless ``--no-cold``, a first run with ``ADVISOR_PREBUILT_ENGINE=off`` in a
fresh install of its own kind: what the first run costs when numba compiles the engine. Wall
time (the machine may be shared: the load average is printed) and CPU time of the command and
its children. The three runs must print the same table (checked).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCKS = ("requirements/controller.lock", "requirements/build.lock")


def source_files(repo: Path = REPO) -> list[str]:
    """The work tree's files a fresh clone with the current edits would have."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         check=True, capture_output=True).stdout
    return sorted(name for name in out.decode().split("\0") if name and (repo / name).is_file())


def copy_tree(dest: Path, repo: Path = REPO) -> Path:
    for name in source_files(repo):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    return dest


def clean_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The caller's environment without what would make a run less fresh than a new machine's;
    with ``home``, a new home directory (no user-wide numba cache; installs keep the caller's,
    where pip keeps the wheels it downloaded)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMBA_", "ADVISOR_", "PYTHON", "VIRTUAL_ENV", "XDG_CACHE"))}
    if home is not None:
        env["HOME"] = str(home)
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def fresh_install(work: Path, mode: str, env: dict[str, str], repo: Path = REPO) -> tuple[Path, float]:
    """A new venv in ``work`` with the locked dependencies and advisor (``editable`` or
    ``wheel``) from a copy of ``repo``'s work tree; (the venv's ``advisor`` script, seconds taken)."""
    started = time.perf_counter()
    src = copy_tree(work / "src", repo)
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], env, work)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, "--require-hashes", "--no-deps", *(a for lock in LOCKS for a in ("-r", str(src / lock)))], env, work)
    if mode == "editable":
        run([*pip, "--no-deps", "--no-build-isolation", "-e", str(src)], env, work)
    else:
        wheels = work / "wheels"
        run([str(venv / "bin" / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "-w", str(wheels), str(src)], env, work)
        run([*pip, "--no-deps", *map(str, wheels.glob("advisor-*.whl"))], env, work)
        shutil.rmtree(src)  # the wheel's install is all there is
    return venv / "bin" / "advisor", time.perf_counter() - started


def timed_predict(advisor: Path, env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and its children, what it printed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(advisor), "predict"], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"advisor predict failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stdout


def measure(root: Path, mode: str, cold: bool, repo: Path = REPO) -> list[tuple[str, float, float, str]]:
    """The rows for one install mode: (label, wall, CPU, output)."""
    rows = []
    kinds = [("first", "second")] + ([("prebuilt off, first",)] if cold else [])
    for i, labels in enumerate(kinds):
        work = root / f"{mode}-{i}"
        (work / "home").mkdir(parents=True)
        (work / "cwd").mkdir()
        advisor, took = fresh_install(work, mode, clean_env(), repo)
        print(f"  {mode}: fresh venv and install in {took:.0f} s", file=sys.stderr, flush=True)
        env = clean_env(work / "home")
        if labels[0].startswith("prebuilt off"):
            env["ADVISOR_PREBUILT_ENGINE"] = "off"
        for label in labels:
            rows.append((label, *timed_predict(advisor, env, work / "cwd")))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", default="editable,wheel", help="comma-separated: editable, wheel")
    parser.add_argument("--no-cold", action="store_true", help="skip the run with ADVISOR_PREBUILT_ENGINE=off")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temporary one)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to install (default: this one)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.install.split(",") if m.strip()]
    if not modes or set(modes) - {"editable", "wheel"}:
        parser.error(f"--install takes editable and/or wheel, got {args.install!r}")
    root = Path(tempfile.mkdtemp(prefix="first-answer-", dir=args.keep))
    outputs = set()
    print(f"advisor predict on the bundled example from {args.repo}, fresh venv per install ({os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start)")
    try:
        for mode in modes:
            for label, wall, cpu, out in measure(root, mode, not args.no_cold, args.repo.resolve()):
                outputs.add(out)
                print(f"{mode:<9} {label:<22} {wall:6.1f} s wall {cpu:6.1f} s CPU", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; "
          f"{'every run printed the same table' if len(outputs) == 1 else 'THE RUNS PRINTED DIFFERENT TABLES'}")
    return 0 if len(outputs) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
