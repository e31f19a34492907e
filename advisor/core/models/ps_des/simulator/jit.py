"""numba's ``njit`` when numba is installed, otherwise a no-op decorator.

The compiled engine is written in the subset of Python numba compiles, so without numba it
still runs, only slowly (and the results are the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

try:
    from numba import njit as _numba_njit
except ImportError:  # pragma: no cover - exercised only where numba is absent
    _numba_njit = None  # type: ignore[assignment]  # the check below tells the two apart

HAVE_NUMBA = _numba_njit is not None


def njit(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``numba.njit(**kwargs)`` or the identity."""
    if _numba_njit is not None:
        return _numba_njit(*args, **kwargs)
    return lambda fn: fn

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
