"""Give the heap that a large, short-lived allocation freed back to the kernel.

Why: parsing one trace upload builds some 30 MB of Python objects for under a second. CPython
frees them, but glibc's allocator keeps the pages in its arena (one per thread that served an
upload), so without this the controller's resident memory would settle near the sum of its
peaks rather than its working set. ``malloc_trim(0)`` returns the free pages of every arena
(since glibc 2.8 also those inside the heap, by ``madvise``). It costs a few milliseconds, so
it runs after uploads only. With another C library (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return freed heap pages to the kernel; True if the C library could (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
