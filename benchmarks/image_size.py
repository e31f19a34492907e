"""What the controller image's Python environment weighs, measured the way the Dockerfile builds it.

    python -m benchmarks.image_size            # needs the package registry (pip downloads the lock)

Where no Docker daemon is available this stands in for ``docker image ls``: it builds the
image's virtual environment in a scratch directory exactly as the Dockerfile's build stage does
(``pip install --require-hashes --no-deps -r requirements/controller.lock``, the advisor wheel
with ``--no-deps``, then ``scripts/slim_venv.py``), prints its size before and after slimming
and by package, and runs the image's smoke checks in it (the CLI, the controller's imports, a
calibrated prediction through numba). The image is that environment plus the base image
(python:3.11.13-slim-bookworm, whose size ``BASE_IMAGE_MB`` is Docker Hub's figure, not measured
here) minus the base's pip and setuptools (a layer cannot shrink the one below it, so they still
count). docs/deploy.md "The image" quotes the output.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import slim_venv  # noqa: E402

BASE_IMAGE_MB = 125  # python:3.11-slim-bookworm, uncompressed, as `docker image ls` reports it (about 41 MB compressed)


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def by_package(site: Path, top: int = 8) -> list[tuple[str, int]]:
    sizes: dict[str, int] = {}
    for entry in site.iterdir():
        name = entry.name.split("-")[0].split(".")[0].lower()
        sizes[name] = sizes.get(name, 0) + (du(entry) if entry.is_dir() else entry.stat().st_size)
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:top]


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="advisor-image-") as tmp:
        root = Path(tmp)
        venv, build, wheels = root / "advisor", root / "build", root / "wheels"
        run(sys.executable, "-m", "venv", venv)
        run(sys.executable, "-m", "venv", build)
        run(venv / "bin" / "pip", "install", "-q", "--require-hashes", "--no-deps", "-r",
            REPO / "requirements" / "controller.lock")
        run(build / "bin" / "pip", "install", "-q", "--require-hashes", "--no-deps", "-r", REPO / "requirements" / "build.lock")
        run(build / "bin" / "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, REPO)
        (wheel,) = wheels.glob("advisor-*.whl")
        run(venv / "bin" / "pip", "install", "-q", "--no-deps", wheel)
        (site,) = venv.glob("lib/python3*/site-packages")
        before = du(venv)
        freed = slim_venv.slim(venv)
        after = du(venv)
        print(f"virtual environment, as installed from the lock: {before / 1e6:6.1f} MB")
        for what, size in sorted(freed.items(), key=lambda kv: -kv[1])[:6]:
            print(f"  removed {what:<26} {size / 1e6:6.1f} MB")
        print(f"virtual environment in the image (slimmed):      {after / 1e6:6.1f} MB")
        for name, size in by_package(site):
            print(f"  {name:<28} {size / 1e6:6.1f} MB")
        print(f"base image python:3.11.13-slim-bookworm:         {BASE_IMAGE_MB:6.1f} MB (Docker Hub figure)")
        print(f"image, estimated:                                {BASE_IMAGE_MB + after / 1e6:6.1f} MB")
        # The smoke checks (outside the source tree, so the installed package is the one imported).
        run(venv / "bin" / "advisor", "--help", cwd=root)
        run(venv / "bin" / "python", "-c", "import advisor.cli, advisor.controller.main, advisor.controller.app",
            cwd=root)
        # the controller's periodic work (apscheduler finds its triggers through package metadata)
        run(venv / "bin" / "python", "-c", "import time; from apscheduler.schedulers.background import "
            "BackgroundScheduler as B; s = B(); hits = []; s.add_job(lambda: hits.append(1), 'interval', "
            "seconds=0.1); s.start(); time.sleep(0.5); s.shutdown(); assert hits", cwd=root)
        out = run(venv / "bin" / "advisor", "predict", "--workers", "1-2", "--steps", "200", "--calibrate", cwd=root)
        assert "recommended" in out, out
        leftovers = [p for p in ("pip", "setuptools", "scipy", "aiohttp") if (site / p).exists()]
        assert not leftovers, leftovers
        print("smoke checks passed: advisor --help, the controller's imports and scheduler, a calibrated prediction (numba)")
        shutil.rmtree(root / "wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
