"""Bandwidths, durations, deadlines and Kubernetes resource quantities as people write them
("10Gbit/s", "100 Mbps", "1.5e9", "20ms", "36h", "2030-06-01T18:00Z", "500m", "4Gi")."""

from __future__ import annotations

import datetime as dt
import math
import re

from advisor.errors import AdvisorError

# The sign is read so that a negative rate or duration is refused as such, not as unreadable.
_BANDWIDTH = re.compile(
    r"^\s*(?P<num>[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*"
    r"(?P<prefix>[kKmMgGtT]?)(?P<unit>bit/s|bps|b/s|Bps|B/s|bit|)\s*$"
)
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_DURATION = re.compile(r"^\s*(?P<num>[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*(?P<unit>us|ms|s|)\s*$")
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}
_DEADLINE_SPAN = re.compile(r"^\s*(?P<num>[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*(?P<unit>h|)\s*$")
_QUANTITY = re.compile(r"^\s*(?P<num>[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|)\s*$")
_QUANTITY_SCALE = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
                   "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


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


def parse_duration(text: str) -> float:
    """Seconds from "20ms", "0.1s", "500us" or a plain number of seconds (zero allowed, negative refused)."""
    m = _DURATION.match(text)
    if not m:
        raise UnitError(f"cannot read duration {text!r}; write e.g. 20ms, 0.1s or 500us")
    value = float(m["num"]) * _SECONDS[m["unit"]]
    if not math.isfinite(value):
        raise UnitError(f"duration must be finite, got {text!r}")
    if value < 0:
        raise UnitError(f"duration must be >= 0, got {text!r}")
    return value or 0.0  # not -0.0


def parse_quantity(text: str | float) -> float:
    """A Kubernetes resource quantity as a number: "500m" -> 0.5 (cpu), "4Gi" -> 4 x 2^30 (bytes), 2 -> 2."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _QUANTITY.match(str(text))
        if not m:
            raise UnitError(f"cannot read the resource quantity {text!r}; write e.g. 500m, 2, 4Gi")
        value = float(m["num"]) * _QUANTITY_SCALE[m["suffix"]]
    if not (math.isfinite(value) and value >= 0):
        raise UnitError(f"a resource quantity must be >= 0, got {text!r}")
    return value


def parse_deadline(text: str, now: float) -> float:
    """Hours until a deadline: a number of hours ("36", "36h", "0.5") or an ISO 8601
    time ("2030-06-01T18:00Z", "2030-06-01 18:00+02:00"; without a zone it is UTC), counted from
    ``now`` (seconds since the epoch). It must lie in the future."""
    m = _DEADLINE_SPAN.match(text)
    if m:
        hours = float(m["num"])
        if not (math.isfinite(hours) and hours > 0):
            raise UnitError(f"deadline must be a time in the future or a number of hours > 0, got {text!r}")
        return hours
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UnitError(f"cannot read deadline {text!r}; write hours (e.g. 36 or 36h) or a time "
                        "(e.g. 2030-06-01T18:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    hours = (when.timestamp() - now) / 3600
    if hours <= 0:
        raise UnitError(f"deadline {text!r} is in the past (it is now {rfc3339(now)})")
    return hours


def rfc3339(t: float) -> str:
    """Unix seconds as the Kubernetes API writes a time (a metav1.Time), to the second:
    2026-01-01T00:00:00Z. The one writer of the form, for messages and the controller alike."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
