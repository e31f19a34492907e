"""The engine's on-disk numba cache (advisor/jit_cache.py, simulator/jit.py): a read-only cache is
used through a private copy, and a corrupt or foreign one is ignored with a warning, never a crash."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from advisor import jit_cache
from advisor.errors import EngineCacheWarning

REPO = Path(__file__).resolve().parents[1]


def _index(path: Path, version: str, payload: bytes | None = None) -> Path:
    """A numba index file as numba writes it: the pickled numba version, then the pickled
    (source stamp, overloads) pair."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = pickle.dumps((b"stamp", {})) if payload is None else payload
    path.write_bytes(pickle.dumps(version) + body)
    return path


def test_unset_cache_dir_is_left_to_numba() -> None:
    env: dict[str, str] = {}
    assert jit_cache.prepare(env) is None
    assert env == {}


def test_a_writable_cache_dir_is_used_as_it_is(tmp_path: Path) -> None:
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    assert jit_cache.prepare(env) == str(tmp_path / "cache")
    assert env["NUMBA_CACHE_DIR"] == str(tmp_path / "cache")


def test_a_read_only_cache_is_copied_to_a_private_writable_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "shipped"
    version = metadata.version("numba")
    _index(shipped / "simulator_abc" / "loop.run-200.py311.nbi", version)
    (shipped / "simulator_abc" / "loop.run-200.py311.1.nbc").write_bytes(b"compiled")
    (shipped / "README").write_text("not a cache file")
    writable = jit_cache._writable
    monkeypatch.setattr(jit_cache, "_writable", lambda p: p != shipped and writable(p))  # root can write anywhere
    env = {"NUMBA_CACHE_DIR": str(shipped)}
    used = jit_cache.prepare(env, tmp=str(tmp_path / "tmp"))
    assert used == env["NUMBA_CACHE_DIR"] != str(shipped)
    copied = sorted(p.relative_to(used).as_posix() for p in Path(used).rglob("*") if p.is_file())
    assert copied == ["simulator_abc/loop.run-200.py311.1.nbc", "simulator_abc/loop.run-200.py311.nbi"]
    # a second process finds the files there and copies nothing
    assert jit_cache.seed(shipped, Path(used)) == 0


def test_corrupt_and_foreign_indexes_are_left_out_with_a_warning(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    version = metadata.version("numba")
    _index(src / "d" / "good.nbi", version)
    _index(src / "d" / "foreign.nbi", "0.1.0")  # another numba wrote it
    _index(src / "d" / "corrupt.nbi", version, payload=b"\x80\x05garbage")  # truncated pickle
    (src / "d" / "empty.nbi").write_bytes(b"")
    with pytest.warns(EngineCacheWarning) as caught:
        assert jit_cache.seed(src, dst) == 1
    messages = " | ".join(str(w.message) for w in caught)
    assert "written by numba 0.1.0" in messages and "corrupt" in messages and "unreadable" in messages
    assert [p.name for p in (dst / "d").iterdir()] == ["good.nbi"]


def test_a_cache_dir_that_is_a_file_warns_and_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    env = {"NUMBA_CACHE_DIR": str(afile)}
    with pytest.warns(EngineCacheWarning, match="not a directory"):
        used = jit_cache.prepare(env, tmp=str(tmp_path / "tmp"))
    assert used == env["NUMBA_CACHE_DIR"] and Path(used).is_dir()


_CHILD = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    from advisor.core.models.ps_des.simulator.jit import call, njit

    @njit(cache=True)
    def twice(x):
        return 2 * x

    print("result", call(twice, 21))
""")


def _child(tmp_path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "child_mod.py"
    script.write_text(_CHILD)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.skipif(not __import__("advisor.core.models.ps_des.simulator.jit", fromlist=["x"]).HAVE_NUMBA,
                    reason="numba is not installed")
def test_a_corrupt_compiled_cache_is_ignored_with_a_warning(tmp_path: Path) -> None:
    """A compiled function's cache files are garbled after the first run wrote them: the next
    process still gets the right answer, and a warning that names the cache."""
    cache = tmp_path / "cache"
    first = _child(tmp_path, cache)
    assert first.returncode == 0, first.stderr
    assert "result 42" in first.stdout
    data = sorted(cache.rglob("*.nbc"))
    assert data, "numba wrote no cache"
    for path in data:
        path.write_bytes(b"\x80\x05not a pickle")
    second = _child(tmp_path, cache)
    assert second.returncode == 0, second.stderr
    assert "result 42" in second.stdout
    assert "could not be loaded" in second.stderr and "EngineCacheWarning" in second.stderr
    for path in sorted(cache.rglob("*.nbi")):  # now the index itself
        path.write_bytes(path.read_bytes()[:20])
    third = _child(tmp_path, cache)
    assert third.returncode == 0, third.stderr
    assert "result 42" in third.stdout


def test_warm_compiles_one_signature_of_the_main_loop() -> None:
    from advisor.core.models.ps_des.simulator.warm import warm

    assert warm() == 1


@pytest.mark.skipif(not __import__("advisor.core.models.ps_des.simulator.jit", fromlist=["x"]).HAVE_NUMBA,
                    reason="numba is not installed")
def test_a_foreign_compiled_cache_is_ignored_with_a_warning(tmp_path: Path) -> None:
    """An index another numba version wrote: numba does not use it; the process compiles and says why."""
    cache = tmp_path / "cache"
    assert _child(tmp_path, cache).returncode == 0
    for index in cache.rglob("*.nbi"):
        with index.open("rb") as f:
            pickle.load(f)  # this numba's version
            rest = f.read()
        index.write_bytes(pickle.dumps("0.0.1") + rest)
    second = _child(tmp_path, cache)
    assert second.returncode == 0, second.stderr
    assert "result 42" in second.stdout
    assert "was built for another CPU, numba version or source" in second.stderr
