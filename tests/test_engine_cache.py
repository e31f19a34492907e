"""The engine's prebuilt copy and source stamp (simulator/engine_cache.py): a copy that fits is
loaded with nothing compiled; one from other sources or another numba is ignored and the engine
compiles, with the same results; one that cannot be read gives a warning, never a crash.

Each case runs in a fresh process (numba loads a function once per process) with an empty
``NUMBA_CACHE_DIR`` and ``ADVISOR_PREBUILT_ENGINE`` naming a copy of the package's prebuilt
engine made for the case. Cases that must compile use ``jit.quantize`` (a one-line engine
function, compiled in a fraction of a second) rather than the main loop.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

jit = pytest.importorskip("advisor.core.models.ps_des.simulator.jit")
if not jit.HAVE_NUMBA:
    pytest.skip("numba is not installed", allow_module_level=True)

import numba  # noqa: E402

from advisor.core.models.ps_des.simulator import engine_cache  # noqa: E402
from advisor.errors import EngineCacheWarning  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED = engine_cache.PREBUILT / numba.__version__
# quantize rounds to a grid of 2**-32 s: 0.1 s is 429496729.6 ticks, rounded to 429496730
QUANTIZED_TENTH = 429496730 / 2**32


def _shipped_fits() -> str | None:
    manifest = engine_cache.read_manifest(SHIPPED)
    if manifest is None:
        return f"the package ships no prebuilt engine for numba {numba.__version__}"
    if engine_cache.python_tag() not in manifest["python"] or platform.machine() != "x86_64":
        return f"the prebuilt engine is not for Python {sys.version_info[:2]} on {platform.machine()}"
    return None


needs_shipped = pytest.mark.skipif(_shipped_fits() is not None, reason=str(_shipped_fits()))

_CHILD = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("always")
    from advisor.core.models.ps_des.simulator import engine_cache
    from advisor.core.models.ps_des.simulator.jit import call, quantize
    if sys.argv[1] == "nowhere":  # as if no directory were writable: rebuild the caches that way
        engine_cache._Impl._locator_classes = [engine_cache._Nowhere]
        quantize._cache = engine_cache.make(quantize.py_func)
    if sys.argv[1] == "engine":
        from advisor.core.models.ps_des.simulator.loop import run
        from advisor.core.models.ps_des.simulator.warm import warm
        warm()
        fn, value = run, None
    elif sys.argv[1] == "direct":  # as inputs.py calls it, without jit.call's guard
        fn, value = quantize, quantize(0.1)
    else:
        fn, value = quantize, call(quantize, 0.1)
    print(json.dumps(dict(value=value, hits=sum(fn.stats.cache_hits.values()),
                          misses=sum(fn.stats.cache_misses.values()))))
""")


def _child(tmp_path: Path, prebuilt: Path | str, case: str = "quantize") -> tuple[dict, str, list[str]]:
    """Run ``_CHILD`` in a fresh process; (its report, its stderr, the files numba wrote)."""
    cache = tmp_path / "numba-cache"
    cache.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(cache), ADVISOR_PREBUILT_ENGINE=str(prebuilt), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _CHILD, case], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in cache.rglob("*") if p.is_file())
    return json.loads(done.stdout.splitlines()[-1]), done.stderr, written


def _copy(tmp_path: Path) -> Path:
    """A copy of the package's prebuilt engine, laid out as the package lays it out."""
    root = tmp_path / "prebuilt"
    shutil.copytree(SHIPPED, root / numba.__version__)
    return root


def _rewrite_index(path: Path, version: str | None = None, stamp: str | None = None) -> None:
    """Rewrite a numba index file (pickled numba version, then pickled (stamp, overloads))."""
    with path.open("rb") as f:
        old_version = pickle.load(f)
        old_stamp, overloads = pickle.loads(f.read())
    path.write_bytes(pickle.dumps(version or old_version) + pickle.dumps((stamp or old_stamp, overloads)))


def _first_line(module: str, name: str) -> int:
    """The line numba names a function's cache files after (its first line, the decorator's)."""
    import importlib

    fn = getattr(importlib.import_module(f"advisor.core.models.ps_des.simulator.{module}"), name)
    return int(fn.py_func.__code__.co_firstlineno)


def test_the_shipped_prebuilt_engine_is_compiled_from_these_sources() -> None:
    """Fails after an edit of the engine until ``python -m advisor.jit_cache prebuild`` has
    compiled it again (else the copy is ignored and every fresh install compiles)."""
    manifest = engine_cache.read_manifest(SHIPPED)
    locked = re.search(r"^numba==([\w.]+)", (REPO / "requirements" / "test.lock").read_text(), re.M)
    assert locked, "requirements/test.lock pins no numba"
    if manifest is None:
        assert numba.__version__ != locked.group(1), f"no prebuilt engine for the locked numba {locked.group(1)}"
        pytest.skip(f"this numba ({numba.__version__}) is not the locked one ({locked.group(1)}), which is shipped")
    assert manifest["stamp"] == engine_cache.source_stamp(), (
        "the prebuilt engine was compiled from other sources: run python -m advisor.jit_cache prebuild")
    assert manifest["cpu"] == "generic" and "py311" in manifest["python"]
    files = {p.name for p in SHIPPED.iterdir()}
    for module, name in (("loop", "run"), ("jit", "quantize")):
        assert f"{module}.{name}-{_first_line(module, name)}.py311.nbi" in files


def test_the_stamp_covers_every_source_file_of_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit of kernel.py (inlined into loop.run) changes the stamp of every engine function."""
    fake = tmp_path / "simulator"
    shutil.copytree(engine_cache.ENGINE_DIR, fake, ignore=shutil.ignore_patterns("prebuilt", "__pycache__"))
    monkeypatch.setattr(engine_cache, "ENGINE_DIR", fake)
    engine_cache.source_stamp.cache_clear()
    try:
        before = engine_cache.source_stamp()
        engine_cache.source_stamp.cache_clear()
        (fake / "kernel.py").write_text((fake / "kernel.py").read_text() + "\n# edited\n")
        after = engine_cache.source_stamp()
    finally:
        engine_cache.source_stamp.cache_clear()
    assert before != after


def test_a_prebuilt_copy_from_other_sources_or_for_another_python_is_not_used(tmp_path: Path) -> None:
    import llvmlite.binding as llvm

    fits = dict(numba=numba.__version__, stamp=engine_cache.source_stamp(), python=[engine_cache.python_tag()],
                triple=llvm.get_process_triple(), cpu="generic")
    manifest = tmp_path / "manifest.json"
    for changed, problem in ((dict(), None), (dict(stamp="advisor-engine-sha256:0"), "compiled from other sources"),
                             (dict(python=["py27"]), "no code for Python"),
                             (dict(triple="aarch64-unknown-linux-gnu"), "is for aarch64")):
        manifest.write_text(json.dumps({**fits, **changed}))
        found = engine_cache.prebuilt_problem(tmp_path)
        assert found is None if problem is None else problem in str(found), (changed, found)
    manifest.write_text("{not json")
    assert "missing or unreadable" in str(engine_cache.prebuilt_problem(tmp_path))
    assert "missing or unreadable" in str(engine_cache.prebuilt_problem(tmp_path / "elsewhere"))
    assert engine_cache.prebuilt_problem(None) == "ADVISOR_PREBUILT_ENGINE=off"


@needs_shipped
def test_a_prebuilt_engine_that_fits_is_loaded_with_nothing_compiled(tmp_path: Path) -> None:
    """The main loop and quantize come from the copy, in a process whose CPU is the host's
    (no NUMBA_CPU_NAME): the copy's generic code is looked up under its own key."""
    report, stderr, written = _child(tmp_path, _copy(tmp_path), "engine")
    assert (report["hits"], report["misses"]) == (1, 0), stderr
    assert written == [], "nothing compiled, so numba saved nothing"
    report, stderr, written = _child(tmp_path, _copy(tmp_path / "again"))
    assert report == dict(value=QUANTIZED_TENTH, hits=1, misses=0) and written == []
    assert "EngineCacheWarning" not in stderr


@needs_shipped
def test_without_a_writable_directory_the_prebuilt_engine_is_still_loaded(tmp_path: Path) -> None:
    report, stderr, written = _child(tmp_path, _copy(tmp_path), "nowhere")
    assert report == dict(value=QUANTIZED_TENTH, hits=1, misses=0), stderr
    assert written == [] and "EngineCacheWarning" not in stderr


@needs_shipped
@pytest.mark.parametrize("change", ["numba version", "source stamp"])
def test_a_prebuilt_index_for_another_numba_or_source_is_ignored_and_the_engine_compiles(
        tmp_path: Path, change: str) -> None:
    """The manifest says the copy fits, but numba's own index check says otherwise: numba
    compiles (the right value) and saves what it compiled in the writable cache."""
    root = _copy(tmp_path)
    index = next((root / numba.__version__).glob(f"jit.quantize-*.{engine_cache.python_tag()}.nbi"))
    _rewrite_index(index, **({"version": "0.0.1"} if change == "numba version" else {"stamp": "old sources"}))
    report, stderr, written = _child(tmp_path, root)
    assert report == dict(value=QUANTIZED_TENTH, hits=0, misses=1), stderr
    assert any(name.startswith("jit.quantize-") and name.endswith(".nbc") for name in written)


@needs_shipped
@pytest.mark.parametrize("damaged", ["data", "index"])
@pytest.mark.parametrize("caller", ["quantize", "direct"])
def test_an_unreadable_prebuilt_engine_warns_and_compiles(tmp_path: Path, damaged: str, caller: str) -> None:
    """Through jit.call or called directly from Python, a damaged file is a warning naming it
    and a compile, never a crash."""
    root = _copy(tmp_path)
    suffix = "1.nbc" if damaged == "data" else "nbi"
    for path in (root / numba.__version__).glob(f"jit.quantize-*.{engine_cache.python_tag()}.{suffix}"):
        path.write_bytes(path.read_bytes()[:40] if damaged == "index" else b"\x80\x05not a pickle")
    report, stderr, _ = _child(tmp_path, root, caller)
    assert report == dict(value=QUANTIZED_TENTH, hits=0, misses=1), stderr
    assert "EngineCacheWarning" in stderr and "could not be loaded" in stderr and "jit.quantize-" in stderr


@needs_shipped
def test_an_unreadable_writable_cache_falls_back_to_the_prebuilt_engine(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    first, _, written = _child(tmp_path, "off")  # compiles into the writable cache
    assert first["misses"] == 1 and written
    for path in cache.rglob("*.nbc"):
        path.write_bytes(b"\x80\x05not a pickle")
    report, stderr, _ = _child(tmp_path, _copy(tmp_path))
    assert report == dict(value=QUANTIZED_TENTH, hits=1, misses=0), stderr
    assert "could not be loaded" in stderr


def test_no_writable_directory_and_no_prebuilt_engine_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_PREBUILT_ENGINE", "off")
    monkeypatch.setattr(engine_cache._Impl, "_locator_classes", [engine_cache._Nowhere])
    monkeypatch.setattr(jit, "_WARNED_NO_CACHE", False)
    with pytest.warns(EngineCacheWarning, match="no writable numba cache directory and ADVISOR_PREBUILT_ENGINE=off"):
        dispatcher = jit._engine_function(engine_cache, jit.quantize.py_func, (), {"cache": True})
    jit._DISPATCHERS.remove(dispatcher)
    assert not dispatcher._cache.writable and dispatcher._cache.prebuilt is None
    assert math.isclose(dispatcher.py_func(0.1), QUANTIZED_TENTH)


def test_functions_outside_the_engine_keep_numbas_own_cache() -> None:
    assert engine_cache.covers(jit.quantize.py_func)
    assert not engine_cache.covers(test_functions_outside_the_engine_keep_numbas_own_cache)
