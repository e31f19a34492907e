"""numba's ``njit`` when numba is installed, otherwise a no-op decorator; and the guard that
keeps a bad on-disk cache of compiled code from stopping a prediction.

The compiled engine is written in the subset of Python numba compiles, so without numba it
still runs, only slowly (and the results are the same).

The engine's functions are cached on disk (``cache=True``), through ``engine_cache.py``: stamped
with the whole engine's source, and also read from the prebuilt copy the package ships, so that
a fresh install does not compile; an image may also ship a cache built at build time
(``advisor/jit_cache.py``). What can go wrong with a cache is handled here, never as a crash:
no writable cache directory and no prebuilt copy that fits (the functions are compiled in every
process, with a warning); a corrupt cache file (``call`` drops the caches and compiles in this
process, with a warning); a cache built for another CPU, numba version or source (numba ignores
it and compiles; ``call`` says so, so that a slow start has a named cause).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from advisor.errors import CACHE_LOAD_ERRORS, EngineCacheWarning

# numba imports scipy when it is imported (a version check) and scipy.linalg's BLAS when it loads
# its function registries (for np.dot and the like, which the engine does not use): some 15 MB
# and 0.2-0.4 s in every process that runs the engine (the prediction worker too). Both are kept
# out unless scipy is already loaded; a later ``import scipy`` works as usual.
_NOT_FOR_NUMBA = ("scipy", "scipy.linalg.cython_blas")


def _import_numba() -> Any:
    """``numba.njit``, imported without scipy (above); None without numba."""
    blocked = [name for name in _NOT_FOR_NUMBA if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # "import name" raises ImportError
    try:
        from numba import njit as numba_njit
        import numba.np.arraymath  # noqa: F401  # its BLAS check runs now, while scipy is kept out
    except ImportError:  # pragma: no cover - exercised only where numba is absent
        return None
    finally:
        for name in blocked:
            sys.modules.pop(name, None)
    return numba_njit


_numba_njit = _import_numba()
try:  # numba's caching internals it builds on (stable since numba 0.5x); without them, numba's own cache
    from advisor.core.models.ps_des.simulator import engine_cache
except (ImportError, AttributeError):  # pragma: no cover - exercised only without numba or with another numba
    engine_cache = None  # type: ignore[assignment]

HAVE_NUMBA = _numba_njit is not None
_DISPATCHERS: list[Any] = []  # every cached numba function made here, so that a bad cache can be dropped
_WARNED_NO_CACHE = False


def njit(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``numba.njit(**kwargs)`` or the identity."""
    if _numba_njit is None:
        return lambda fn: fn

    def decorate(fn: Callable[..., Any]) -> Any:
        if kwargs.get("cache") and engine_cache is not None and engine_cache.covers(fn):
            return _engine_function(engine_cache, fn, args, kwargs)
        try:
            dispatcher = _numba_njit(*args, **kwargs)(fn)
        except RuntimeError as exc:  # "cannot cache function ...: no locator available"
            if not kwargs.get("cache") or "cache" not in str(exc):
                raise
            warnings.warn(f"no writable numba cache directory ({exc}); the engine is compiled in every process: "
                          "set NUMBA_CACHE_DIR to a writable directory", EngineCacheWarning, stacklevel=2)
            dispatcher = _numba_njit(*args, **{**kwargs, "cache": False})(fn)
        if kwargs.get("cache"):
            _DISPATCHERS.append(dispatcher)
        return dispatcher

    return decorate


def inlined(fn: Callable[..., Any]) -> Any:
    """An engine helper that LLVM inlines into its callers (``forceinline``): compiled once, as
    its own function, never called from Python (no wrapper) nor cached (only ``loop.run``, which
    holds it, is). numba's own inlining (``inline="always"``) copies the callee's IR at every call
    site, and took half of the 20 s the main loop took to compile."""
    return njit(_nrt=False, forceinline=True, no_cpython_wrapper=True)(fn)


def inlined_ir(fn: Callable[..., Any]) -> Any:
    """A small engine helper that numba inlines (``inline="always"``): for those called with
    constant arguments, which numba compiles once per constant (literal types) when it compiles
    the helper as a function (``inlined``)."""
    return njit(_nrt=False, inline="always")(fn)


def _engine_function(cache_module: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``numba.njit`` with the engine's cache (``engine_cache.py``) in place of numba's own; with
    neither a writable cache directory nor a prebuilt copy that fits, a warning (once)."""
    global _WARNED_NO_CACHE
    dispatcher = _numba_njit(*args, **{**kwargs, "cache": False})(fn)
    cache = cache_module.make(fn)
    if not cache.writable and cache.prebuilt is None and not _WARNED_NO_CACHE:
        _WARNED_NO_CACHE = True
        problem = cache_module.prebuilt_problem(cache_module.prebuilt_dir())
        warnings.warn(f"no writable numba cache directory and {problem}: the engine is compiled in every process; "
                      "set NUMBA_CACHE_DIR to a writable directory", EngineCacheWarning, stacklevel=4)
    dispatcher._cache = cache
    _DISPATCHERS.append(dispatcher)
    return dispatcher


def call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` for a compiled engine function, whose first call loads it from the cache:
    a cache file that cannot be loaded is dropped with a warning and the function compiled here
    (once; an error of the engine itself is raised again by the compiled retry)."""
    if not HAVE_NUMBA or getattr(fn, "signatures", None):
        return fn(*args)
    cached_before = _has_index(fn)
    try:
        result = fn(*args)
    except CACHE_LOAD_ERRORS as exc:
        warnings.warn(f"the numba cache of the simulation engine could not be loaded ({type(exc).__name__}: {exc}); "
                      f"ignoring it and compiling in this process{_where()}", EngineCacheWarning, stacklevel=2)
        drop_caches()
        return fn(*args)
    if cached_before:
        _warn_if_missed(fn)
    return result


def drop_caches() -> None:
    """Stop every engine function from reading or writing its on-disk cache (this process only)."""
    from numba.core.caching import NullCache

    for dispatcher in _DISPATCHERS:
        dispatcher._cache = NullCache()


def _index_path(fn: Any) -> str | None:
    return getattr(getattr(getattr(fn, "_cache", None), "_cache_file", None), "_index_path", None)


def _has_index(fn: Any) -> bool:
    index = _index_path(fn)
    return index is not None and os.path.exists(index) and os.path.getsize(index) > 0


def _warn_if_missed(fn: Any) -> None:
    """A cache that was there but not used was built for another CPU, numba version or source."""
    misses = sum(getattr(getattr(fn, "stats", None), "cache_misses", {}).values())
    if misses:
        warnings.warn(f"the numba cache {_index_path(fn)} was built for another CPU, numba version or source; "
                      "compiled the engine in this process instead (build the cache where it runs, or with "
                      "NUMBA_CPU_NAME=generic for any CPU)", EngineCacheWarning, stacklevel=3)


def _where() -> str:
    where = os.environ.get("NUMBA_CACHE_DIR")
    return f" (NUMBA_CACHE_DIR={where})" if where else ""


TIME_GRID = 4294967296.0  # 2**32 ticks per second (about 0.23 ns)


@njit(cache=True)
def quantize(t: float) -> float:
    """``t`` rounded to the time grid.

    Both engines round every completion time to a grid of 2**-32 s, so chunks that finish
    together in exact arithmetic finish at the *same* float time in both engines even though
    they reach it by different float operations; such ties are then broken by ``seq``
    identically. The grid is far below any duration a trace records.

    ``np.floor`` rather than ``math.floor``: the same value, but compiled it stays a float,
    where ``math.floor`` went to an integer and back on every completion (the engine ran
    about 12 % faster without that round trip).
    """
    return np.floor(t * TIME_GRID + 0.5) / TIME_GRID
