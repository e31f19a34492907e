"""A clone is enough: no code reads data from beside the repository (the ``shared`` folder the
testbed runs were first kept in). Tests, benchmarks and scripts read the copies in
tests/data/ps-async; a comment or docstring may still name where something came from."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

SCANNED = ("advisor", "benchmarks", "scripts", "tests")
OUTSIDE = re.compile(r"(^|[/\\])\.\./shared\b|\bshared/data\b")  # a path into ../shared


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements (prose, not code)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def outside_reads(source: str) -> list[int]:
    """Line numbers of the string constants in code that point beside the repository: a path
    containing ``../shared`` or ``shared/data``, or a ``"shared"`` path part (``REPO.parent / "shared"``)."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if node.value == "shared" or OUTSIDE.search(node.value):
                lines.add(node.lineno)
    return sorted(lines)


def _shell_reads(text: str) -> list[int]:
    """Line numbers of a shell script's non-comment lines that name a path beside the repository."""
    return [n for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line.split("#", 1)[0])]


def test_the_detector_finds_paths_beside_the_repository_and_leaves_prose_alone() -> None:
    code = ('"""Replays the runs of ../shared/data (a docstring: prose)."""\n'
            "# the cnn of shared/data/README.md (a comment)\n"
            'DATA = REPO.parent / "shared" / "data"\n'
            'TRACE = "../shared/data/condensed/cubic/mlp_bw100.json.gz"\n'
            'MEASURED = Path("x").joinpath("shared", "data")\n'
            'NOTE = f"fitted over shared/data/measured ({n} jobs)"\n'
            'OK = {"shared_load_latency": 92, "ps": "a shared link"}\n')
    assert outside_reads(code) == [3, 4, 5, 6]
    assert _shell_reads("cp ../shared/data/x y\n# ../shared/data in a comment\necho ok\n") == [1]


def test_no_code_reads_beside_the_repository() -> None:
    found = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" in path.parts or rel == "tests/test_self_contained.py" or not path.is_file():
                continue  # this file's examples are the patterns themselves
            if path.suffix == ".py":
                lines = outside_reads(path.read_text())
            elif path.suffix == ".sh":
                lines = _shell_reads(path.read_text())
            else:
                continue
            found += [f"{rel}:{n}" for n in lines]
    assert not found, "code reads data from beside the repository (copy it into tests/data): " + ", ".join(found)
