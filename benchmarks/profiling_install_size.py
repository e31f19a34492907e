"""What installing the profiling hook adds to a TensorFlow training image: the slim wheel vs the
full ``advisor`` distribution.

    python -m benchmarks.profiling_install_size

Sizes are those of the installed files (each distribution's RECORD, as this environment has
them installed, bytecode caches excluded since pip writes them at install time in both cases).
The full install's packages are those of requirements/controller.lock; the ones a TensorFlow
image already has (``IN_TENSORFLOW_IMAGE``: tensorflow-cpu's own Requires-Dist and theirs) add
nothing and are left out of both figures. docs/profiling.md quotes the output.
"""

from __future__ import annotations

import re
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import build_profiling_wheel  # noqa: E402

# tensorflow-cpu 2.16-2.20 requires numpy, protobuf, requests (-> urllib3, idna, certifi,
# charset-normalizer), typing-extensions, packaging, six, setuptools, among others.
IN_TENSORFLOW_IMAGE = {"numpy", "protobuf", "requests", "urllib3", "idna", "certifi", "charset-normalizer",
                       "typing-extensions", "packaging", "six", "setuptools"}


def installed_size(name: str) -> int:
    """Bytes of a distribution's installed files in this environment, bytecode excluded."""
    dist = metadata.distribution(name)
    total = 0
    for file in dist.files or ():
        if "__pycache__" in file.parts:
            continue
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def locked_names() -> list[str]:
    text = (REPO / "requirements" / "controller.lock").read_text()
    return sorted({m.lower() for m in re.findall(r"^([A-Za-z0-9_.\-]+)==", text, flags=re.M)})


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_profiling_wheel.build(Path(tmp))
        with zipfile.ZipFile(wheel) as zf:
            hook = sum(i.file_size for i in zf.infolist())
    prom = installed_size("prometheus-client")
    print(f"slim: advisor-profiling wheel {hook / 1e3:8.1f} kB + prometheus-client {prom / 1e6:5.2f} MB "
          f"= {(hook + prom) / 1e6:6.2f} MB added to a TensorFlow image")
    full, missing, rows = installed_size("advisor"), [], []
    for name in locked_names():
        if name in IN_TENSORFLOW_IMAGE:
            continue
        try:
            size = installed_size(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        full += size
        rows.append((size, name))
    print(f"full: pip install advisor adds {full / 1e6:6.1f} MB (advisor and {len(rows)} dependencies), largest:")
    for size, name in sorted(rows, reverse=True)[:6]:
        print(f"  {name:<22} {size / 1e6:6.1f} MB")
    if missing:
        print(f"  (not installed here, not counted: {', '.join(missing)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
