"""Where the simulation engine's compiled code lives on disk, so that no pod compiles it.

numba compiles the engine (``advisor/core/models/ps_des/simulator``) on first use, about 15 s of
CPU, and caches the result in ``NUMBA_CACHE_DIR``. An image builds that cache once
(``python -m advisor.jit_cache build DIR``, with ``NUMBA_CPU_NAME=generic`` so that it serves any
x86-64 CPU) and ships it in a directory that is read-only at run time. numba itself refuses a
cache directory it cannot write, so ``prepare`` (run by the CLI before anything imports numba)
copies a read-only cache into a private directory under the temporary directory and points
``NUMBA_CACHE_DIR`` there; a writable directory is used as it is. Index files that cannot be
read, or that another numba version wrote, are not copied: a warning names them and the engine
compiles in the process (``simulator/jit.py`` also guards the load itself).

The package itself ships the engine compiled for any x86-64 CPU (``simulator/engine_cache.py``),
which serves any install of the same sources, numba and Python without an image's cache;
``python -m advisor.jit_cache prebuild [--python PYTHON]`` makes it again after the engine's
sources change (a test fails until it has been), once per Python version the package ships it
for (3.11, the image's and CI's, is required; 3.12 and 3.13 are shipped too).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import MutableMapping, Sequence
from importlib import metadata
from pathlib import Path

from advisor.errors import CACHE_LOAD_ERRORS, EngineCacheWarning

ENV = "NUMBA_CACHE_DIR"


def prepare(environ: MutableMapping[str, str] | None = None, tmp: str | None = None) -> str | None:
    """Make ``NUMBA_CACHE_DIR`` usable before numba is imported; returns the directory in use
    (None when it is not set: numba then caches beside the sources)."""
    env = os.environ if environ is None else environ
    configured = env.get(ENV)
    if not configured:
        return None
    source = Path(configured)
    if _writable(source):
        return configured
    target = Path(tmp or tempfile.gettempdir()) / f"advisor-numba-cache-{os.getuid()}"
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _writable(target):
            raise PermissionError(f"cannot write in {target}")
    except OSError as exc:
        warnings.warn(f"{ENV}={configured} is read-only and {target} cannot be made ({exc}): the simulation engine "
                      "is compiled in every process", EngineCacheWarning, stacklevel=2)
        return configured
    env[ENV] = str(target)
    if source.is_dir():
        seed(source, target)
    elif source.exists():
        warnings.warn(f"{ENV}={configured} is not a directory; compiling the engine into {target}",
                      EngineCacheWarning, stacklevel=2)
    return str(target)


def seed(source: Path, target: Path) -> int:
    """Copy ``source``'s cache files into ``target`` (those not there yet); returns how many.
    A numba index that cannot be read or that another numba version wrote is left out, with a
    warning (its data files are then never read)."""
    copied = 0
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.suffix not in (".nbi", ".nbc"):
            continue
        dest = target / path.relative_to(source)
        if dest.exists() and dest.stat().st_size == path.stat().st_size:
            continue
        if path.suffix == ".nbi":
            problem = index_problem(path)
            if problem:
                warnings.warn(f"ignoring the numba cache index {path}: {problem}; the engine compiles in this process",
                              EngineCacheWarning, stacklevel=2)
                continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(f".{dest.name}.{os.getpid()}")
        shutil.copyfile(path, partial)
        os.replace(partial, dest)  # atomic: a concurrent process sees the whole file or none
        copied += 1
    return copied


def index_problem(path: Path) -> str | None:
    """Why numba could not use the index file at ``path`` (None when it can)."""
    try:
        with path.open("rb") as f:
            version = pickle.load(f)
            rest = f.read()
    except CACHE_LOAD_ERRORS as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"
    mine = metadata.version("numba")
    if version != mine:
        return f"written by numba {version}, this is numba {mine}"
    try:
        pickle.loads(rest)
    except CACHE_LOAD_ERRORS as exc:
        return f"corrupt ({type(exc).__name__}: {exc})"
    return None


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def build(directory: Path | None) -> tuple[int, float]:
    """Compile the engine into ``directory`` (or the configured cache); (signatures, seconds)."""
    if directory is not None:
        if "numba" in sys.modules:
            raise RuntimeError("build the cache in a fresh process: numba was imported before its directory was set")
        os.environ[ENV] = str(directory)
        directory.mkdir(parents=True, exist_ok=True)
    from advisor.core.models.ps_des.simulator.warm import warm

    start = time.perf_counter()
    signatures = warm()
    return signatures, time.perf_counter() - start


def prebuild(python: str = sys.executable) -> tuple[Path, list[str], list[str]]:
    """Compile the engine for any x86-64 CPU with ``python`` and store it in the package's
    prebuilt copy (``simulator/engine_cache.py``); returns the directory, the files written and
    the Python versions whose files were removed. Another Python version's files stay when they
    were compiled from the same sources, and are removed when not (they would never load)."""
    from advisor.core.models.ps_des.simulator import engine_cache

    with tempfile.TemporaryDirectory(prefix="advisor-prebuild-") as tmp:
        env = {**os.environ, "NUMBA_CPU_NAME": "generic", engine_cache.ENV: "off"}
        env.pop("NUMBA_CPU_FEATURES", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                        env.get("PYTHONPATH")) if p)
        script = ("import json, pathlib, sys\n"
                  "from advisor.jit_cache import build\n"
                  "build(pathlib.Path(sys.argv[1]))\n"
                  "import numba, llvmlite.binding as ll\n"
                  "from advisor.core.models.ps_des.simulator import engine_cache as e\n"
                  "print(json.dumps(dict(stamp=e.source_stamp(), python=e.python_tag(), "
                  "triple=ll.get_process_triple(), numba=numba.__version__)))\n")
        done = subprocess.run([python, "-c", script, tmp], env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"compiling the engine with {python} failed:\n{done.stderr}")
        built = json.loads(done.stdout.splitlines()[-1])
        files = sorted(p for p in Path(tmp).rglob("*") if p.suffix in (".nbi", ".nbc"))
        target = engine_cache.PREBUILT / built["numba"]
        manifest = engine_cache.read_manifest(target) or {}
        others = set(manifest.get("python", [])) - {built["python"]}
        keep = others if manifest.get("stamp") == built["stamp"] else set()
        target.mkdir(parents=True, exist_ok=True)
        for old in target.iterdir():  # stale sources, or this Python's previous files
            if old.name != engine_cache.MANIFEST and not any(f".{tag}." in old.name for tag in keep):
                old.unlink()
        for path in files:
            shutil.copyfile(path, target / path.name)
    manifest = {"numba": built["numba"], "stamp": built["stamp"], "python": sorted(keep | {built["python"]}),
                "triple": built["triple"], "cpu": "generic"}
    (target / engine_cache.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return target, [p.name for p in files], sorted(others - keep)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m advisor.jit_cache", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the simulation engine into a cache directory (an image build runs it)")
    b.add_argument("directory", type=Path, nargs="?", help=f"the cache directory (default: ${ENV})")
    p = sub.add_parser("prebuild", help="compile the engine for any x86-64 CPU into the package's prebuilt copy "
                                        "(after editing the engine; once per Python version shipped)")
    p.add_argument("--python", default=sys.executable, help="the interpreter to compile with (default: this one)")
    args = parser.parse_args(argv)
    if args.command == "prebuild":
        from advisor.core.models.ps_des.simulator.engine_cache import read_manifest

        target, names, dropped = prebuild(args.python)
        shipped = read_manifest(target) or {}
        print(f"wrote {len(names)} files to {target}; it holds the engine for {', '.join(shipped.get('python', []))}")
        if dropped:
            print(f"removed {', '.join(dropped)}, compiled from other sources: compile them again with "
                  "--python (an interpreter of that version with numba and pydantic)")
        return 0
    directory = args.directory
    if directory is None and not os.environ.get(ENV):
        parser.error(f"name the directory, or set {ENV}")
    signatures, seconds = build(directory)
    where = directory or Path(os.environ[ENV])
    files = [p for p in where.rglob("*") if p.suffix in (".nbi", ".nbc")]
    size = sum(p.stat().st_size for p in files)
    cpu = os.environ.get("NUMBA_CPU_NAME", "host")
    if not files:
        print(f"loaded the engine in {seconds:.1f} s from the package's prebuilt copy (simulator/engine_cache.py): "
              f"nothing to compile into {where}")
        return 0
    print(f"compiled the engine in {seconds:.1f} s: {signatures} signature(s) of the main loop, {len(files)} files, "
          f"{size / 1e6:.1f} MB in {where} (CPU {cpu})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
