"""Give the heap that a large, short-lived allocation freed back to the kernel; and, in the
prediction worker, the pages of LLVM's code that only numba's start-up ran.

Why: parsing one trace upload builds some 30 MB of Python objects for under a second. CPython
frees them, but glibc's allocator keeps the pages in its arena (one per thread that served an
upload), so without this the controller's resident memory would settle near the sum of its
peaks rather than its working set. ``malloc_trim(0)`` returns the free pages of every arena
(since glibc 2.8 also those inside the heap, by ``madvise``). It costs a few milliseconds, so
it runs after uploads only. With another C library (musl, macOS) it is a no-op.

The prediction worker loads the engine's compiled code from numba's cache, but numba first
initialises LLVM's compiler, which touches some 70 MB of ``libllvmlite.so``'s code that a
worker running cached code never runs again (measured: ``benchmarks/controller_memory.py
--worker-only``). ``release_library_pages`` drops those pages from the process
(``madvise(MADV_DONTNEED)`` on the library's read-only mappings: private, unmodified file
pages, so nothing is lost; a page needed again is read back from the page cache, as at
start-up). Writable mappings (the library's data) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable
from pathlib import Path

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


MADV_DONTNEED = 4  # linux/mman.h


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return madvise


def release_library_pages(name: str = "libllvmlite", smaps: Path = Path("/proc/self/smaps")) -> int:
    """Drop this process's resident pages of the mappings of the shared library whose file name
    contains ``name`` that hold the file's bytes unchanged: read-only and without a page of their
    own (``Anonymous: 0 kB``; relocated data that was made read-only afterwards has such pages
    and is left alone). The number of mappings released (0 where there is no ``/proc`` or no
    ``madvise``); module docstring."""
    madvise = _madvise()
    try:
        lines = smaps.read_text().splitlines()
    except OSError:
        return 0
    released = 0
    for start, end, path in _unchanged_mappings(lines, name):
        if madvise is not None and madvise(start, end - start, MADV_DONTNEED) == 0:
            released += 1
        elif madvise is not None:
            log.debug("madvise of %s failed: errno %d", path, ctypes.get_errno())
    return released


def _unchanged_mappings(smaps: list[str], name: str) -> list[tuple[int, int, str]]:
    """(start, end, path) of the read-only mappings of ``name`` with no anonymous pages."""
    out: list[tuple[int, int, str]] = []
    current: tuple[int, int, str] | None = None
    for line in smaps:
        fields = line.split()
        if not fields:
            continue
        if "-" in fields[0] and ":" not in fields[0]:  # a mapping's first line: range perms offset dev inode [path]
            path = fields[5] if len(fields) > 5 else ""
            ours = name in Path(path).name and "w" not in fields[1]
            current = (*(int(x, 16) for x in fields[0].split("-")), path) if ours else None  # type: ignore[assignment]
        elif fields[0] == "Anonymous:" and current is not None:
            if int(fields[1]) == 0:
                out.append(current)
            current = None
    return out
