"""``release_free_heap`` gives freed heap back to the kernel (glibc), where ``free`` alone does not;
``release_library_pages`` drops LLVM code pages the prediction worker no longer runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from advisor.controller.web.memory import release_free_heap, release_library_pages

# A thread fills 200 MB of heap with 4 KB blocks (below glibc's mmap threshold) and frees all but
# the last: that survivor pins the top of the heap, so free() cannot shrink it; malloc_trim can
# still hand back the free pages below it.
PROGRAM = """
import sys, threading
from advisor.controller.web.memory import release_free_heap, release_library_pages
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


# The engine is loaded (numba initialises LLVM), its LLVM code pages are dropped, and the engine
# runs again: the same step ends as before, and LLVM's resident code shrank.
ENGINE = """
from pathlib import Path
from advisor.controller.web.memory import release_library_pages
from advisor.core.models.ps_des.simulator import simulate
from advisor.core.sim_types import NetworkModel, SimulationSettings
from benchmarks.synthetic import tiny_mlp
def llvm_mb():
    mb, path = 0.0, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and ":" not in head[0]:
            path = head[5] if len(head) > 5 else ""
        elif head[0] == "Rss:" and "libllvmlite" in path:
            mb += int(head[1]) / 1024
    return mb
net = NetworkModel(bandwidth_bps=1e8, share_sigma=1.0, request_queue_s=0.005, multi_flow_goodput=0.85)
sim = SimulationSettings(workers=3, steps=20, warmup_steps=0, seed=1)
first = simulate(tiny_mlp(), net, sim).step_ends_s
before = llvm_mb()
released = release_library_pages()
after = llvm_mb()
again = simulate(tiny_mlp(), net, sim).step_ends_s
print(released, before, after, first == again)
"""


def test_llvm_code_pages_are_dropped_and_the_engine_still_runs() -> None:
    pytest.importorskip("numba")
    out = subprocess.run([sys.executable, "-c", ENGINE], capture_output=True, text=True, check=True).stdout.split()
    released, before, after, same = int(out[0]), float(out[1]), float(out[2]), out[3] == "True"
    assert released >= 1  # the library's read-only mappings (code, constants)
    assert before > 20 and after < before / 2  # numba's start-up had touched tens of MB of LLVM
    assert same  # the compiled engine runs on, with the same results


def test_only_unchanged_read_only_mappings_of_the_library_are_released(tmp_path) -> None:  # type: ignore[no-untyped-def]
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\nRss: 4 kB\nAnonymous: 0 kB\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /x/libllvmlite.so\nRss: 4 kB\nAnonymous: 0 kB\n"
        # relocated data made read-only afterwards (RELRO): its pages differ from the file
        "7f0000004000-7f0000005000 r--p 00001000 08:01 2 /x/libllvmlite.so\nRss: 4 kB\nAnonymous: 4 kB\n"
        "7f0000006000-7f0000007000 rw-p 00002000 08:01 2 /x/libllvmlite.so\nRss: 4 kB\nAnonymous: 0 kB\n")
    from advisor.controller.web.memory import _unchanged_mappings

    assert _unchanged_mappings(smaps.read_text().splitlines(), "libllvmlite") == [
        (0x7F0000002000, 0x7F0000003000, "/x/libllvmlite.so")]
    assert release_library_pages("libllvmlite", tmp_path / "missing") == 0
