"""Where the engine's compiled code is read from and written to: numba's on-disk cache, checked
against the whole engine's source, plus a prebuilt copy shipped in the package.

Compiling the engine costs some 15 s of CPU, most of a first ``advisor predict``. numba caches a
compiled function on disk and trusts the cache while the function's *own* source file is
unchanged; the main loop (``loop.run``) inlines functions of four files, so an edit of
``kernel.py`` alone left numba running the old code. Here every cached engine function is
stamped with ``source_stamp``, a hash of all the engine's source files: an edit anywhere in
the engine makes every cached function stale, and it compiles again.

The package ships the engine compiled for any x86-64 CPU (``NUMBA_CPU_NAME=generic``) in
``prebuilt/<numba version>/``, made by ``python -m advisor.jit_cache prebuild`` and described by
its ``manifest.json`` (stamp, Python versions, target). On its first call an engine function
is looked up in numba's writable cache (``NUMBA_CACHE_DIR``, ``__pycache__`` beside the sources
or the user's cache directory, as numba chooses), then in the prebuilt copy under the key of
generic code. So an install of the same sources with the same numba and Python on x86-64 Linux,
editable or from a wheel, loads the engine instead of compiling it. With another numba, Python,
architecture or source the copy is not used (the manifest says so, and numba's index checks the
stamp and numba version again) and the engine compiles into the writable cache, as without it.
Generic code runs a few per cent slower than code compiled for the host CPU:
``ADVISOR_PREBUILT_ENGINE=off`` ignores the copy (then the engine compiles once for this CPU);
a directory given there is used instead of the package's ``prebuilt`` (tests use it).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core import caching

from advisor.errors import CACHE_LOAD_ERRORS, EngineCacheWarning

ENGINE_DIR = Path(__file__).resolve().parent
PREBUILT = ENGINE_DIR / "prebuilt"
ENV = "ADVISOR_PREBUILT_ENGINE"
MANIFEST = "manifest.json"
GENERIC = ("generic", "")  # numba's (CPU name, features) for NUMBA_CPU_NAME=generic


@functools.cache
def source_stamp() -> str:
    """A hash of every source file of the engine (this folder's ``*.py``), names and contents;
    all but this one, which compiles nothing."""
    digest = hashlib.sha256()
    for path in sorted(ENGINE_DIR.glob("*.py")):
        if path.name != Path(__file__).name:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"advisor-engine-sha256:{digest.hexdigest()}"


def python_tag() -> str:
    """The Python version as numba's cache file names spell it (``py311``)."""
    return f"py{sys.version_info[0]}{sys.version_info[1]}"


def prebuilt_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The prebuilt copy for this numba version (None when ``ADVISOR_PREBUILT_ENGINE=off``)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    if value.lower() == "off":
        return None
    return (Path(value) if value else PREBUILT) / numba.__version__


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """``directory``'s manifest, or None when it has none or it cannot be read."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def prebuilt_problem(directory: Path | None) -> str | None:
    """Why the prebuilt copy in ``directory`` cannot serve this process (None when it can)."""
    if directory is None:
        return f"{ENV}=off"
    manifest = read_manifest(directory)
    if manifest is None:
        return f"no prebuilt engine for numba {numba.__version__} ({directory / MANIFEST} is missing or unreadable)"
    if manifest.get("stamp") != source_stamp():
        return "the prebuilt engine was compiled from other sources"
    if python_tag() not in manifest.get("python", []):
        return f"the prebuilt engine has no code for Python {sys.version_info[0]}.{sys.version_info[1]}"
    if manifest.get("triple") != llvm.get_process_triple():
        return f"the prebuilt engine is for {manifest.get('triple')}, this is {llvm.get_process_triple()}"
    return None


def covers(fn: Any) -> bool:
    """Is ``fn`` an engine function (defined in this folder)?"""
    try:
        return Path(inspect.getfile(fn)).resolve().parent == ENGINE_DIR
    except (TypeError, OSError):
        return False


class _EngineStamp:
    """A locator whose freshness stamp is the whole engine's source, not one file's."""

    def get_source_stamp(self) -> str:
        return source_stamp()


class _UserProvided(_EngineStamp, caching.UserProvidedCacheLocator):
    pass


class _InTree(_EngineStamp, caching.InTreeCacheLocator):
    pass


class _UserWide(_EngineStamp, caching.UserWideCacheLocator):
    pass


class _Nowhere(_EngineStamp, caching._CacheLocator):
    """No writable directory: the cache only reads the prebuilt copy and saves nothing."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno

    def ensure_cache_path(self) -> None:
        raise OSError("no writable directory for the engine's numba cache")

    def get_cache_path(self) -> str:
        return str(PREBUILT)

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> _Nowhere:
        return cls(py_func, py_file)


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_UserProvided, _InTree, _UserWide, _Nowhere]


class EngineCache(caching.FunctionCache):
    """numba's function cache with the engine's stamp, reading the prebuilt copy after the
    writable cache (module docstring)."""

    _impl_class = _Impl

    def __init__(self, py_func: Any, prebuilt: Path | None) -> None:
        super().__init__(py_func)
        self.writable = not isinstance(self._impl.locator, _Nowhere)
        self.prebuilt: Any = None
        if prebuilt is not None:
            self.prebuilt = caching.IndexDataCacheFile(str(prebuilt), self._impl.filename_base, source_stamp())

    def _load_overload(self, sig: Any, target_context: Any) -> Any:
        """The compiled function from the writable cache, else from the prebuilt copy; None
        (compile) when neither has it. A file that cannot be read is skipped with a warning."""
        if not self._enabled:
            return None
        key = self._index_key(sig, target_context.codegen())
        tiers = [(self._cache_file, key)] if self.writable else []
        if self.prebuilt is not None:
            tiers.append((self.prebuilt, (key[0], (key[1][0], *GENERIC), key[2])))
        for cache_file, tier_key in tiers:
            try:
                data = cache_file.load(tier_key)
                if data is not None:
                    return self._impl.rebuild(target_context, data)
            except CACHE_LOAD_ERRORS as exc:
                warnings.warn(f"the numba cache of the simulation engine could not be loaded from "
                              f"{cache_file._index_path} ({type(exc).__name__}: {exc}); ignoring it", EngineCacheWarning,
                              stacklevel=2)
        return None

    def _save_overload(self, sig: Any, data: Any) -> None:
        if self.writable:
            super()._save_overload(sig, data)


@functools.cache
def _usable_prebuilt(directory: Path | None) -> Path | None:
    return None if prebuilt_problem(directory) else directory


def make(py_func: Any) -> EngineCache:
    """The cache of the engine function ``py_func`` (prebuilt copy included when it fits)."""
    return EngineCache(py_func, _usable_prebuilt(prebuilt_dir()))
