"""The bundled GPU table: the hardware figures Pei et al.'s instruction-queue model needs.

It is data, kept as a Python mapping so the pure core can read it without file I/O. Every figure
names its source. Counts and memory bandwidth come from NVIDIA's whitepapers and board
specifications; the latencies of the P40 are the paper's own (Pei et al. 2019, Table 2), the
others are rounded from the microbenchmark papers named beside them (the model is insensitive to
them: a latency enters once per block or once per kernel, see ``docs/models-pei.md``).

``clock_mhz`` is the clock the card holds under a sustained load with its default settings, which
is what a training step sees:
- Pascal and later boost automatically (GPU Boost), so the table gives the boost clock;
- the K80 autoboosts (enabled by default, NVIDIA K80 board specification BD-07317-001), up to
  875 MHz per GK210;
- the K40 runs its default application clock, 745 MHz; its higher clocks (810/875 MHz) must be
  selected by the administrator (NVIDIA K40 board specification BD-06902-001).
The base clock is noted in each comment.

``ldst_per_sm`` counts load/store units per SM: 32 (4 partitions x 8) on GK110/GK210, GP102,
GV100, GA100 and GH100; 16 (4 x 4) on the Ada SM (AD104).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

# Field names match advisor.core.spec.GpuSpec.
_TABLE: dict[str, dict[str, Any]] = {
    # Tesla P40 (GP102): NVIDIA Tesla P40 datasheet and GP102/GP104 (GTX 1080) whitepaper:
    # 30 SMs x 128 FP32 cores = 3840, 32 LD/ST per SM; base 1303 MHz, boost 1531 MHz;
    # 384-bit GDDR5 at 7.2 Gb/s = 346 GB/s. Latencies: Pei et al. Table 2 (shared load 92 cycles,
    # global load 374 cycles; the paper gives no global store latency, taken equal to the load's).
    "P40": dict(
        sm_count=30, sp_per_sm=128, ldst_per_sm=32, clock_mhz=1531, memory_bandwidth_gbps=346,
        shared_load_latency=92, global_load_latency=374, global_store_latency=374,
    ),
    # Tesla K80, one GK210 (the paper uses one of its two): K80 board specification BD-07317-001
    # and the Kepler GK110/GK210 whitepaper: 13 SMX x 192 cores = 2496, 32 LD/ST per SMX; base
    # 560 MHz, autoboost to 875 MHz; 240 GB/s per GK210 (480 GB/s for the board).
    # Latencies: Jia et al. 2018, "Dissecting the NVIDIA Volta GPU architecture via
    # microbenchmarking" (K80 column), rounded: shared 26 cycles, global about 300 cycles.
    "K80": dict(
        sm_count=13, sp_per_sm=192, ldst_per_sm=32, clock_mhz=875, memory_bandwidth_gbps=240,
        shared_load_latency=26, global_load_latency=300, global_store_latency=300,
    ),
    # Tesla K40 (GK110B): K40 board specification BD-06902-001: 15 SMX x 192 = 2880 cores,
    # 32 LD/ST per SMX; base (default application) clock 745 MHz; 288 GB/s.
    # Latencies: as the K80 (same Kepler SMX), Jia et al. 2018.
    "K40": dict(
        sm_count=15, sp_per_sm=192, ldst_per_sm=32, clock_mhz=745, memory_bandwidth_gbps=288,
        shared_load_latency=26, global_load_latency=300, global_store_latency=300,
    ),
    # GeForce GTX 1080 Ti (GP102): NVIDIA product specifications: 28 SMs x 128 = 3584 cores;
    # base 1480 MHz, boost 1582 MHz; 484 GB/s. Latencies: same GP102 chip as the P40 (Table 2).
    "1080Ti": dict(
        sm_count=28, sp_per_sm=128, ldst_per_sm=32, clock_mhz=1582, memory_bandwidth_gbps=484,
        shared_load_latency=92, global_load_latency=374, global_store_latency=374,
    ),
    # Tesla V100 SXM2 (GV100): NVIDIA Tesla V100 whitepaper (WP-08608-001): 80 SMs x 64 FP32 =
    # 5120 cores, 32 LD/ST per SM; boost 1530 MHz; 900 GB/s HBM2.
    # Latencies: Jia et al. 2018: shared 19 cycles, global about 400 cycles.
    "V100": dict(
        sm_count=80, sp_per_sm=64, ldst_per_sm=32, clock_mhz=1530, memory_bandwidth_gbps=900,
        shared_load_latency=19, global_load_latency=400, global_store_latency=400,
    ),
    # A100 SXM4 40 GB (GA100): NVIDIA A100 Tensor Core GPU architecture whitepaper: 108 SMs x 64
    # FP32 = 6912 cores, 32 LD/ST per SM; boost 1410 MHz; 1555 GB/s HBM2.
    # Latencies: Abdelkhalik et al. 2022, "Demystifying the Nvidia Ampere architecture through
    # microbenchmarking", rounded: shared 23 cycles, global about 470 cycles.
    "A100": dict(
        sm_count=108, sp_per_sm=64, ldst_per_sm=32, clock_mhz=1410, memory_bandwidth_gbps=1555,
        shared_load_latency=23, global_load_latency=470, global_store_latency=470,
    ),
    # H100 SXM5 (GH100): NVIDIA H100 Tensor Core GPU architecture whitepaper: 132 SMs x 128 FP32 =
    # 16896 cores, 32 LD/ST per SM; boost 1980 MHz; 3350 GB/s HBM3.
    # Latencies: Luo et al. 2024, "Benchmarking and dissecting the Nvidia Hopper GPU
    # architecture", rounded: shared 30 cycles, global about 480 cycles.
    "H100": dict(
        sm_count=132, sp_per_sm=128, ldst_per_sm=32, clock_mhz=1980, memory_bandwidth_gbps=3350,
        shared_load_latency=30, global_load_latency=480, global_store_latency=480,
    ),
    # L4 (AD104): NVIDIA L4 datasheet and Ada GPU architecture whitepaper: 58 SMs x 128 FP32 =
    # 7424 cores, 16 LD/ST per SM; base 795 MHz, boost 2040 MHz; 300 GB/s GDDR6.
    # Latencies: no published microbenchmark we rely on; taken as the A100's (rounded).
    "L4": dict(
        sm_count=58, sp_per_sm=128, ldst_per_sm=16, clock_mhz=2040, memory_bandwidth_gbps=300,
        shared_load_latency=23, global_load_latency=470, global_store_latency=470,
    ),
}

GPU_TABLE: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {name: MappingProxyType(values) for name, values in _TABLE.items()}
)

# Spellings people use for the same card.
ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"1080 TI": "1080Ti", "GTX1080TI": "1080Ti", "GTX 1080 TI": "1080Ti", "1080TI": "1080Ti"}
)


def lookup(name: str) -> Mapping[str, Any] | None:
    """The table's figures for ``name`` (case and the 'Tesla '/'NVIDIA ' prefixes ignored), or None."""
    key = name.strip().upper().removeprefix("NVIDIA ").removeprefix("TESLA ").strip()
    key = ALIASES.get(key, key)
    for known, values in GPU_TABLE.items():
        if known.upper() == key.upper():
            return values
    return None


def known_names() -> tuple[str, ...]:
    return tuple(GPU_TABLE)
