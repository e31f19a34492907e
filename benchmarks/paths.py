"""Where the benchmarks read the repository's recorded runs: one definition, so every benchmark
reads the same files the tests check (tests/data/ps-async/README.md says how they were taken)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PS_ASYNC_DATA = REPO / "tests" / "data" / "ps-async"  # real TF parameter-server traces and throughput
