"""Build ``advisor-profiling``: the profiling hook alone, for users' training images.

    python scripts/build_profiling_wheel.py [--out dist]     # writes dist/advisor_profiling-<version>-py3-none-any.whl

Why: ``pip install advisor`` brings the predictor and the controller (numba, llvmlite,
kubernetes, pydantic...: about 300 MB) into a training image that needs only the hook. This
wheel holds ``advisor/profiling`` and nothing else, and requires only prometheus-client
(the hook's throughput exporter); TensorFlow and its protobuf are the training image's own.
``advisor`` is left a namespace package (no ``advisor/__init__.py``); beside the hook the wheel
holds ``advisor/errors.py`` (the exception tree its errors extend; standard library only).
Those files are also in the full distribution: install one or the other.

Built with the standard library only (a wheel is a zip with three metadata files, PEP 427), so
no build backend is needed; the version is pyproject.toml's.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "advisor-profiling"
REQUIRES = ("prometheus-client>=0.20,<1",)
PACKAGE = Path("advisor") / "profiling"
SUMMARY = "The advisor profiling hook (TensorFlow session hook, Keras callback, throughput exporter) alone"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def package_files() -> list[Path]:
    """The hook's modules and the exception tree, relative to the repository (no caches)."""
    return [Path("advisor") / "errors.py", *sorted(p.relative_to(REPO) for p in (REPO / PACKAGE).rglob("*.py"))]


def build(out: Path) -> Path:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    dist_info = f"{NAME.replace('-', '_')}-{version}.dist-info"
    wheel = out / f"{NAME.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = "\n".join([
        "Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}", f"Summary: {SUMMARY}",
        "License: Apache-2.0", "Requires-Python: >=3.9", *(f"Requires-Dist: {r}" for r in REQUIRES), "", "",
    ])
    wheel_meta = "Wheel-Version: 1.0\nGenerator: advisor scripts/build_profiling_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = [(str(p), (REPO / p).read_bytes()) for p in package_files()]
    entries += [(f"{dist_info}/METADATA", metadata.encode()), (f"{dist_info}/WHEEL", wheel_meta.encode()),
                (f"{dist_info}/top_level.txt", b"advisor\n")]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries) + f"{dist_info}/RECORD,,\n"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in [*entries, (f"{dist_info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible: fixed times
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="output directory (default: dist)")
    print(build(parser.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
