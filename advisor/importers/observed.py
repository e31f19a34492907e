"""Measured multi-worker throughput, for ``advisor compare --observed``.

The format is the testbed's (``tests/data/ps-async/measured``): ``{"results": [{"W": 2, "thr_window":
131.4, ...}, ...]}``, one entry per run; several runs of one W (repeats) are averaged. A plain
``{"2": 131.4, ...}`` mapping of worker count to examples/s is read too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.errors import ObservedThroughputError
from advisor.importers.json_files import read_json_document


def read_observed(path: Path) -> dict[int, float]:
    """Worker count -> measured examples/s (the mean of the repeats); errors name the entry."""
    doc = read_json_document(path, ObservedThroughputError)
    if isinstance(doc, Mapping) and "results" in doc:
        pairs = _results(path, doc["results"])
    elif isinstance(doc, Mapping):
        pairs = [(_workers(path, k, f"key {k!r}"), _throughput(path, v, f"key {k!r}")) for k, v in doc.items()]
    else:
        raise ObservedThroughputError(f"{path}: expected a JSON object with 'results', not {type(doc).__name__}")
    if not pairs:
        raise ObservedThroughputError(f"{path}: no measured throughput in it")
    by_w: dict[int, list[float]] = {}
    for w, thr in pairs:
        by_w.setdefault(w, []).append(thr)
    return {w: sum(v) / len(v) for w, v in sorted(by_w.items())}


def _results(path: Path, results: Any) -> list[tuple[int, float]]:
    if not isinstance(results, list):
        raise ObservedThroughputError(f"{path}: 'results' must be a list, not {type(results).__name__}")
    pairs = []
    for i, r in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(r, Mapping) or "W" not in r or "thr_window" not in r:
            raise ObservedThroughputError(f"{path}: {where} needs 'W' and 'thr_window'")
        pairs.append((_workers(path, r["W"], f"{where}.W"), _throughput(path, r["thr_window"], f"{where}.thr_window")))
    return pairs


def _workers(path: Path, value: Any, where: str) -> int:
    try:
        w = int(value)
    except (TypeError, ValueError):
        raise ObservedThroughputError(f"{path}: {where}: a worker count must be an integer, got {value!r}") from None
    if w < 1 or isinstance(value, bool) or (isinstance(value, float) and value != w):
        raise ObservedThroughputError(f"{path}: {where}: a worker count must be an integer >= 1, got {value!r}")
    return w


def _throughput(path: Path, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ObservedThroughputError(f"{path}: {where}: throughput must be a finite number > 0, got {value!r}")
    return float(value)
