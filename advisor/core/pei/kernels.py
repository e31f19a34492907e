"""Pei et al.'s abstract instruction-queue model of one CUDA kernel (2019, eq. 6-19).

A kernel is ``blocks`` identical blocks; a block issues I global loads, M shared loads, K compute
(CP) and L global stores, counted in warp instructions of 128 bytes (loads, stores) or 32 lanes
(compute). An SM runs N_iter = ceil(blocks / sm_num) blocks one after the other, issuing one
instruction per cycle:

    storage-intensive   C_b = I + M + L                          (eq. 8)
    compute-intensive   C_b = I + 1 + L_S + ceil(K / m) + L      (eq. 14), m = SP / LDST per SM
    C_k = C_b * N_iter + L_GS                                    (eq. 7, 13)
    t_k = C_k * t_clock                                          (eq. 6)

Choices the paper leaves open, made here and stated in ``docs/models-pei.md``:
- a kernel is compute-intensive when ceil(K / m) exceeds M (CP covers the shared loads, Fig. 3);
  a kernel without shared loads is compute-intensive only when ceil(K / m) exceeds I + L;
- the degree of parallelism DOP in (0, 1] is the share of the SMs the block partition keeps busy:
  N_iter = ceil(blocks / (DOP * sm_num)) (DOP = 1 is the ideal partition);
- a load/store warp instruction takes 32 / LDST cycles (1 on every GPU the paper used);
- the kernel cannot beat device memory: t = max(C_k * t_clock, compulsory bytes / bandwidth)
  (Table 4 lists the memory bandwidth among the inputs; the instruction queue alone would let an
  element-wise kernel move 128 bytes per SM per cycle, 15x a P40's DRAM);
- GEMM block partitions are searched (section III-C: "a loop search under the bandwidth
  limitation"): block tiles, per-thread register tiles within the hardware limits (at most
  1024 threads and 255 registers per thread, 48 KB of shared memory per block) and a split of
  the k range over several blocks (split-K, as cuBLAS does for thin products such as weight
  gradients; partial tiles are summed by atomic adds, counted as the blocks' global stores),
  keeping the one with the fewest cycles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from advisor.core.spec import GpuSpec

WARP = 32
INSTRUCTION_BYTES = 128  # one warp load/store at full width (Pei et al. section III-B)
MAX_THREADS = 1024
MAX_REGISTERS = 255
SHARED_BYTES = 48 * 1024
K_TILE = 8  # depth of the shared-memory stage of a GEMM block (double-buffered)
ELEMENTWISE_PER_BLOCK = 1024  # 256 threads x 4 values
SPLIT_K = (1, 2, 4, 8, 16, 32, 64)  # k-range splits; partial tiles are summed by atomic adds in L2


@dataclass(frozen=True)
class Kernel:
    """One kernel as instruction counts per block (warp instructions) and its compulsory DRAM bytes."""

    name: str
    blocks: int
    gl: float  # I: global loads per block
    sl: float  # M: shared loads per block
    cp: float  # K: compute instructions per block
    gs: float  # L: global stores per block
    dram_bytes: float
    flops: float = 0.0  # multiply-adds x 2, for reports


@dataclass(frozen=True)
class KernelTime:
    kernel: Kernel
    n_iter: int
    block_cycles: float
    cycles: float
    compute_intensive: bool
    memory_bound: bool
    seconds: float


def is_compute_intensive(gl: float, sl: float, cp: float, gs: float, m: float) -> bool:
    exposed_cp = math.ceil(cp / m)
    return exposed_cp > sl if sl > 0 else exposed_cp > gl + gs


def block_cycles(gl: float, sl: float, cp: float, gs: float, gpu: GpuSpec) -> tuple[float, bool]:
    """C_b of one block (eq. 8 or eq. 14) and whether the block is compute-intensive."""
    m = gpu.sp_per_sm / gpu.ldst_per_sm
    unit = WARP / gpu.ldst_per_sm  # cycles per load/store warp instruction
    if is_compute_intensive(gl, sl, cp, gs, m):
        return unit * (gl + 1 + math.ceil(cp / m) + gs) + gpu.shared_load_latency, True
    return unit * (gl + sl + gs), False


def kernel_time(kernel: Kernel, gpu: GpuSpec, dop: float = 1.0, sms: int | None = None,
                memory_floor: bool = True) -> KernelTime:
    """Time of ``kernel`` on ``gpu`` (eq. 6-19), with the device-memory floor unless ``memory_floor``
    is False (the paper's queue alone); ``sms`` overrides the SM count."""
    sm_num = gpu.sm_count if sms is None else sms
    n_iter = math.ceil(kernel.blocks / (dop * sm_num)) if kernel.blocks > 0 else 0
    c_b, compute = block_cycles(kernel.gl, kernel.sl, kernel.cp, kernel.gs, gpu)
    cycles = c_b * n_iter + gpu.global_store_latency if n_iter else 0.0
    t_issue = cycles / (gpu.clock_mhz * 1e6)
    t_memory = kernel.dram_bytes / (gpu.memory_bandwidth_gbps * 1e9) if memory_floor else 0.0
    return KernelTime(kernel, n_iter, c_b, cycles, compute, t_memory > t_issue, max(t_issue, t_memory))


# --- GEMM (im2col convolution, fully connected, the complex products of FFT convolution) ---------


@dataclass(frozen=True)
class _Tiles:
    tm: np.ndarray
    tn: np.ndarray
    rm: np.ndarray
    rn: np.ndarray


@cache
def _tile_candidates(data_bytes: int) -> _Tiles:
    """Block tiles (tm x tn outputs) and register tiles (rm x rn outputs per thread) within the limits."""
    rows = []
    for tm in (16, 32, 64, 96, 128, 192, 256):
        for tn in (16, 32, 64, 96, 128, 192, 256):
            if 2 * (tm + tn) * K_TILE * data_bytes > SHARED_BYTES:
                continue
            for rm in (1, 2, 4, 6, 8, 12, 16):
                for rn in (1, 2, 4, 6, 8, 12, 16):
                    if tm % rm or tn % rn:
                        continue
                    threads = (tm // rm) * (tn // rn)
                    registers = rm * rn + rm + rn + 16  # accumulators, operands, addressing
                    if threads % WARP or not 64 <= threads <= MAX_THREADS or registers > MAX_REGISTERS:
                        continue
                    rows.append((tm, tn, rm, rn))
    arr = np.array(rows, dtype=float)
    return _Tiles(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3])


def gemm(name: str, m: int, n: int, k: int, data_bytes: int, gpu: GpuSpec, dop: float = 1.0, batch: int = 1,
         dram_values: float | None = None) -> Kernel:
    """The fastest block partition of ``batch`` products [m x k] . [k x n] under the queue model.

    ``dram_values`` is the compulsory traffic in values (default: both operands and the result once);
    an implicit-im2col convolution reads its input tensor, not the m x k matrix.
    """
    tiles = _tile_candidates(data_bytes)
    per_instr = INSTRUCTION_BYTES / data_bytes  # values one load/store warp instruction moves
    splits = np.array([s for s in SPLIT_K if s == 1 or k / s >= 4 * K_TILE], dtype=float)
    tm, tn = tiles.tm[:, None], tiles.tn[:, None]
    rm, rn = tiles.rm[:, None], tiles.rn[:, None]
    depth = np.ceil(k / splits)[None, :]  # the k-range one block covers
    gl = (tm + tn) * depth / per_instr
    sl = tm * tn * depth * (1 / rm + 1 / rn) / per_instr
    cp = tm * tn * depth / WARP
    gs = np.broadcast_to(tm * tn / per_instr, cp.shape)
    blocks = np.ceil(m / tm) * np.ceil(n / tn) * batch * splits[None, :]
    ratio = gpu.sp_per_sm / gpu.ldst_per_sm
    unit = WARP / gpu.ldst_per_sm
    exposed = np.ceil(cp / ratio)
    compute = exposed > sl
    c_b = np.where(compute, unit * (gl + 1 + exposed + gs) + gpu.shared_load_latency, unit * (gl + sl + gs))
    cycles = c_b * np.ceil(blocks / (dop * gpu.sm_count))
    best = np.unravel_index(int(np.argmin(cycles)), cycles.shape)
    dram = (dram_values if dram_values is not None else (m * k + k * n + m * n) * batch) * data_bytes
    return Kernel(name, int(blocks[best]), float(gl[best]), float(sl[best]), float(cp[best]), float(gs[best]),
                  float(dram), flops=2.0 * m * n * k * batch)


# --- element-wise and reduction kernels (pooling, batch norm, ReLU, sums, updates) --------------


def elementwise(name: str, elements: int, reads: float, writes: float, ops: float, data_bytes: int) -> Kernel:
    """A kernel that streams ``elements`` values: ``reads``/``writes`` values read/written per element,
    ``ops`` arithmetic operations per element; no shared memory (storage-intensive)."""
    blocks = max(1, math.ceil(elements / ELEMENTWISE_PER_BLOCK))
    per_block = elements / blocks
    per_instr = INSTRUCTION_BYTES / data_bytes
    return Kernel(name, blocks, gl=reads * per_block / per_instr, sl=0.0, cp=ops * per_block / WARP,
                  gs=writes * per_block / per_instr, dram_bytes=(reads + writes) * elements * data_bytes,
                  flops=ops * elements)


# --- FFT convolution (Mathieu, Henaff and LeCun 2013, the paper's [26]) --------------------------


def fft_size(n: int) -> int:
    """Transform length for an n-point padded map: the next power of two."""
    return 1 << max(0, math.ceil(math.log2(n)))


def fft(name: str, maps: int, n_h: int, n_w: int, in_values: int, out_values: int, data_bytes: int) -> Kernel:
    """``maps`` 2-D real transforms of n_h x n_w points, one block per map, staged through shared
    memory: every radix-2 stage reads the map's n_h * (n_w / 2 + 1) complex values; 2.5 N log2 N
    real operations per transform (real-input split-radix estimate used by Mathieu et al.)."""
    points = n_h * n_w
    stages = math.log2(points) if points > 1 else 1.0
    complex_values = 2 * n_h * (n_w // 2 + 1)
    per_instr = INSTRUCTION_BYTES / data_bytes
    return Kernel(name, maps, gl=in_values / per_instr, sl=stages * complex_values / per_instr,
                  cp=2.5 * points * stages / WARP, gs=out_values / per_instr,
                  dram_bytes=(in_values + out_values) * maps * data_bytes, flops=2.5 * points * stages * maps)
