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
