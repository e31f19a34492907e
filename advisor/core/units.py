"""Bandwidth and size quantities as people write them ("10Gbit/s", "100 Mbps", "1.5e9")."""

from __future__ import annotations

import math
import re

from advisor.errors import AdvisorError

_BANDWIDTH = re.compile(
    r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*(?P<prefix>[kKmMgGtT]?)(?P<unit>bit/s|bps|b/s|Bps|B/s|bit|)\s*$"
)
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


class UnitError(AdvisorError, ValueError):
    """A quantity that cannot be read, or is not positive."""


def parse_bandwidth(text: str) -> float:
    """Bits per second from "10Gbit/s", "100Mbps", "12.5MB/s" (bytes), or a plain number of bit/s."""
    m = _BANDWIDTH.match(text)
    if not m:
        raise UnitError(f"cannot read bandwidth {text!r}; write e.g. 10Gbit/s, 100Mbps or 1e9")
    value = float(m["num"]) * _PREFIX[m["prefix"].lower()]
    if m["unit"] in ("Bps", "B/s"):
        value *= 8
    if not math.isfinite(value) or value <= 0:
        raise UnitError(f"bandwidth must be > 0, got {text!r}")
    return value


def format_bandwidth(bps: float) -> str:
    """The inverse of ``parse_bandwidth`` for display: 1e8 -> '100 Mbit/s'."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {prefix}bit/s"
    return f"{bps:g} bit/s"
