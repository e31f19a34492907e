"""Remove from an installed virtual environment what the controller image never runs.

    python scripts/slim_venv.py /opt/advisor          # the Dockerfile's build stage runs this

Why: the image's size is mostly its dependencies (benchmarks/image_size.py measures them).
Removed, each checked by that benchmark's smoke run (the CLI, the controller's imports, a
calibrated prediction through numba) in an environment slimmed by this very script:

- the installers (pip, setuptools, wheel and their scripts): the image installs nothing at run time;
- the test suites packages ship (``tests`` directories of numpy, numba...), never imported;
- the Kubernetes client's asyncio variant (``kubernetes/aio``, 68 MB) and the aiohttp family it
  alone needs: the controller uses the synchronous client (urllib3);

Shared libraries are not stripped: ``strip`` would free ~28 MB but breaks the libraries
auditwheel patched (numpy's OpenBLAS: "ELF load command address/offset not page-aligned"),
as this benchmark's smoke run showed.

Only the standard library; prints what it removed and the MB freed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# Distributions removed whole (their packages, metadata and console scripts).
REMOVED_DISTRIBUTIONS = ("pip", "setuptools", "wheel",
                         # needed only by kubernetes.aio (pip show: required by aiohttp or kubernetes)
                         "aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist",
                         "multidict", "propcache", "yarl")
REMOVED_PATHS = ("kubernetes/aio", "_distutils_hack", "distutils-precedence.pth", "pkg_resources")
TEST_DIRS = ("tests", "testing/_private/tests")


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def _remove(path: Path) -> int:
    size = _size(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return size


def _distribution_files(site: Path, name: str) -> list[Path]:
    """The files a distribution installed, from its RECORD (its dist-info directory included)."""
    normalized = name.replace("-", "_").lower()
    files: list[Path] = []
    for info in site.glob("*.dist-info"):
        if info.name.split("-")[0].lower() != normalized:
            continue
        record = info / "RECORD"
        if record.is_file():
            for line in record.read_text().splitlines():
                rel = line.split(",")[0]
                if rel:
                    files.append((site / rel).resolve())
        files.append(info)
    return files


def slim(venv: Path) -> dict[str, int]:
    """Remove everything this module's docstring lists; bytes freed by kind."""
    (site,) = venv.glob("lib/python3*/site-packages")
    freed: dict[str, int] = {}
    for name in REMOVED_DISTRIBUTIONS:
        for path in _distribution_files(site, name):
            if path.exists() or path.is_symlink():
                freed[name] = freed.get(name, 0) + _remove(path)
    for rel in REMOVED_PATHS:
        path = site / rel
        if path.exists():
            freed[rel] = _remove(path)
    for package in sorted(p for p in site.iterdir() if p.is_dir() and not p.name.endswith("-info")):
        for tests in sorted(package.rglob("tests")):
            if tests.is_dir() and tests.exists():
                freed["tests"] = freed.get("tests", 0) + _remove(tests)
    # Empty package directories left by RECORD removals (their __pycache__ went with the files).
    for path in sorted(site.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return freed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path, help="the virtual environment (e.g. /opt/advisor)")
    args = parser.parse_args(argv)
    freed = slim(args.venv)
    for what, size in sorted(freed.items(), key=lambda kv: -kv[1]):
        print(f"{size / 1e6:8.1f} MB  {what}")
    print(f"{sum(freed.values()) / 1e6:8.1f} MB  freed in total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
