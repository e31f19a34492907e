"""The console script's entry (advisor/__main__.py): the command line, its imports made with the
cyclic garbage collector paused, and the collector on again for the command itself."""

from __future__ import annotations

import gc
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import advisor.__main__ as entry

ROOT = Path(__file__).resolve().parents[1]


def test_the_console_script_is_this_entry() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["advisor"] == "advisor.__main__:main"


def test_the_command_runs_with_the_collector_on(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """What the command does (here: list the models) sees the collector on, not left off by the
    imports' pause; and after it, the collector is as it was."""
    seen: list[bool] = []
    import advisor.cli

    real = advisor.cli.main

    def spy() -> int:
        seen.append(gc.isenabled())
        return real(["models"])

    monkeypatch.setattr(advisor.cli, "main", spy)
    assert gc.isenabled()
    assert entry.main() == 0
    assert seen == [True]
    assert gc.isenabled()
    assert "li2020-des" in capsys.readouterr().out


def test_a_failed_import_leaves_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "advisor.cli", None)  # "from advisor.cli import ..." raises ImportError
    with pytest.raises(ImportError):
        entry.main()
    assert gc.isenabled()


def test_python_dash_m_advisor_is_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "advisor", "models"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ring-allreduce" in done.stdout
