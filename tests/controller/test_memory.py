"""``release_free_heap`` gives freed heap back to the kernel (glibc), where ``free`` alone does not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from advisor.controller.memory import release_free_heap

# A thread fills 200 MB of heap with 4 KB blocks (below glibc's mmap threshold) and frees all but
# the last: that survivor pins the top of the heap, so free() cannot shrink it; malloc_trim can
# still hand back the free pages below it.
PROGRAM = """
import sys, threading
from advisor.controller.memory import release_free_heap
def rss_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024
keep = []
def work():
    blocks = [bytearray(4096) for _ in range(50_000)]
    keep.append(blocks[-1])
thread = threading.Thread(target=work)
thread.start()
thread.join()
before = rss_mb()
if sys.argv[1] == "trim":
    release_free_heap()
print(before, rss_mb())
"""


def rss_before_after(mode: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    return before, after


def test_freed_heap_goes_back_to_the_kernel() -> None:
    if not release_free_heap():
        pytest.skip("not glibc: release_free_heap is a no-op here")
    kept_before, kept_after = rss_before_after("keep")
    trimmed_before, trimmed_after = rss_before_after("trim")
    assert kept_before > 150 and trimmed_before > 150  # the 200 MB were resident
    assert kept_after > 150  # free() alone kept them
    assert trimmed_after < trimmed_before - 150  # the trim returned them
