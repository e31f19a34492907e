"""The layers stay apart: the core imports no adapter, Kubernetes, HTTP, metrics or TensorFlow; the
controller's rooms import one way, and only its Kubernetes seam imports the client (pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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


def test_the_controller_contracts_catch_an_upward_import_a_cycle_and_a_stray_client_import(tmp_path: Path) -> None:
    """The controller's contracts in pyproject.toml bite: in a copy of the package with one break
    of each rule, lint-imports names each break."""
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    for path in (REPO / "advisor").rglob("*.py"):
        copy = tmp_path / path.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    breaks = {
        "kube/informer.py": "from advisor.controller.jobs import kinds",  # the seam learning job kinds
        "pipeline/predictions.py": "from advisor.controller.pipeline import refit",  # refit imports predictions
        "web/metrics.py": "import kubernetes",  # the client outside the seam
    }
    for module, line in breaks.items():
        with (tmp_path / "advisor" / "controller" / module).open("a") as f:
            f.write(f"\n\ndef _broken() -> None:\n    {line}\n")
    # lint-imports puts its working directory first on sys.path, so it reads the copy.
    run = subprocess.run([exe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 1 kept, 3 broken." in run.stdout
    assert "advisor.controller.kube is not allowed to import advisor.controller.jobs" in run.stdout
    assert "No cycles are allowed in advisor.controller.pipeline." in run.stdout
    assert "advisor.controller.web.metrics -> kubernetes" in run.stdout


def test_the_package_type_checks() -> None:
    """mypy over advisor/ (settings in pyproject.toml): the annotations on public functions hold."""
    import subprocess
    import sys

    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
