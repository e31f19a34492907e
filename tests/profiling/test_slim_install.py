"""The slim ``advisor-profiling`` wheel (scripts/build_profiling_wheel.py): it holds the hook alone,
requires only prometheus-client, and works installed into an environment that has nothing else
(no numpy, numba, scipy, kubernetes or pydantic), as a user's training image would have."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import prometheus_client
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import build_profiling_wheel  # noqa: E402

# What a TensorFlow image already provides to the hook's lazily imported modules, and what a
# PyTorch image provides to the DDP hook (advisor.profiling.torch, imported only by its user).
FROM_TENSORFLOW = {"tensorflow", "google", "keras", "torch"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_profiling_wheel.build(tmp_path_factory.mktemp("dist"))


def test_the_wheel_holds_the_hook_and_requires_only_prometheus_client(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    code = {n for n in names if not n.startswith("advisor_profiling-")}
    assert code == {"advisor/errors.py"} | {str(p) for p in build_profiling_wheel.package_files()}
    assert all(n.startswith(("advisor/profiling/", "advisor/errors.py")) for n in code)
    assert "advisor/__init__.py" not in names  # a namespace package: no file of the full distribution's __init__
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["prometheus-client>=0.20,<1"]
    assert {line.split(",")[0] for line in record.splitlines()} == set(names)


def test_the_hooks_modules_import_only_the_stdlib_prometheus_client_and_tensorflow(wheel: Path) -> None:
    """Every import in the wheel's code: the standard library, the wheel itself, the one
    requirement, or what TensorFlow brings (imported only when the hook is used)."""
    allowed = set(sys.stdlib_module_names) | {"advisor", "prometheus_client"} | FROM_TENSORFLOW
    with zipfile.ZipFile(wheel) as zf:
        for name in (n for n in zf.namelist() if n.endswith(".py")):
            for node in ast.walk(ast.parse(zf.read(name))):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                for module in modules:
                    top = module.split(".")[0]
                    assert top in allowed, f"{name} imports {module}"
                    if top == "advisor":
                        assert module.startswith(("advisor.profiling", "advisor.errors")), f"{name} imports {module}"


def test_installed_alone_the_hook_counts_and_serves_and_asks_for_tensorflow(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300, capture_output=True)
    # The one requirement, from this environment (no registry in tests): only its package is visible.
    (site,) = venv.glob("lib/python3*/site-packages")
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "prometheus_client").symlink_to(Path(prometheus_client.__file__).parent)
    (site / "deps.pth").write_text(str(deps) + "\n")
    code = (
        "import importlib.util, urllib.request\n"
        "from advisor.profiling.throughput import ThroughputExporter\n"
        "import advisor.profiling as p\n"
        "heavy = ('numpy', 'numba', 'scipy', 'kubernetes', 'pydantic', 'advisor.core')\n"
        "print('present:', [m for m in heavy if importlib.util.find_spec(m) is not None])\n"
        "e = ThroughputExporter(0, addr='127.0.0.1')\n"
        "e.record_step(32); e.record_step(32)\n"
        "body = urllib.request.urlopen(f'http://127.0.0.1:{e.port}/metrics', timeout=5).read().decode()\n"
        "print([l for l in body.splitlines() if l.startswith('advisor_training_examples_total')])\n"
        "try:\n    p.AdvisorProfilingHook\nexcept ModuleNotFoundError as exc:\n    print('needs', exc.name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "present: []"
    assert lines[1] == "['advisor_training_examples_total 64.0']"
    assert lines[2] == "needs tensorflow"
