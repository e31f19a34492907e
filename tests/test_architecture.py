"""The layers stay apart: the core imports no adapter, Kubernetes, HTTP, metrics or TensorFlow."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    run = subprocess.run([exe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_controller_process_loads_neither_the_engine_nor_scipy() -> None:
    # `advisor controller` imports the CLI and the controller; numba and scipy (about 110 MB of
    # its RSS, benchmarks/controller_memory.py) belong in the prediction workers only.
    import subprocess
    import sys

    code = ("import sys, advisor.cli, advisor.controller.app; "
            "print(sorted(m for m in ('numba', 'scipy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_the_kube_adapter_imports_the_kubernetes_client() -> None:
    """One module speaks to the API server (advisor/controller/kube/client.py); the rest of the controller
    calls it, so an emulator, a fake or a newer client changes one file."""
    import ast

    importers = set()
    for path in (REPO / "advisor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n == "kubernetes" or n.startswith("kubernetes.") for n in names):
                importers.add(path.relative_to(REPO).as_posix())
    assert importers == {"advisor/controller/kube/client.py"}


def test_the_package_type_checks() -> None:
    """mypy over advisor/ (settings in pyproject.toml): the annotations on public functions hold."""
    import subprocess
    import sys

    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
