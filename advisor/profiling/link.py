"""The link rate an all-reduce profiling run records with its bundle, and where it came from.

Why: a parameter-server trace times its transfers, so a prediction can measure the link rate
from it (``advisor.core.bandwidth``) when nobody states it; a one-worker all-reduce trace has
nothing to measure (the worker reduces with nobody, so its gradients take no time on the wire).
The rate must therefore come with the bundle, or from the user at prediction time. Two sources
are known inside the training pod, tried in this order:

- ``controller-setting``: ``ADVISOR_BANDWIDTH_MBIT``, which the controller puts into every
  profiling pod from its ``bandwidth`` setting (``ProfilingConfig.bandwidth_mbit``);
- ``interface-speed``: the speed the kernel reports for the network interface the workers talk
  over (``/sys/class/net/<if>/speed``, Mbit/s, each way), taken only where it means something:
  a device-backed interface (``/sys/class/net/<if>/device`` exists) reporting a speed > 0.
  Virtual interfaces (a pod's veth, bridges, loopback, tunnels) report a fixed figure or none,
  which says nothing about the path between nodes. The interface is the one the collective
  library is told to use (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``: the first name of the
  list), else the one of the default route (``/proc/net/route``).

Without either the bundle records no rate (``link`` null) and the prediction asks for one.
Standard library only: it runs inside the user's training image.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONTROLLER_SETTING = "controller-setting"
INTERFACE_SPEED = "interface-speed"
SOURCES = (CONTROLLER_SETTING, INTERFACE_SPEED)
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
SYS_NET = Path("/sys/class/net")
ROUTES = Path("/proc/net/route")


def link_rate(bandwidth_mbit: float | None, environ: Mapping[str, str], *, sys_net: Path = SYS_NET,
              routes: Path = ROUTES) -> dict[str, Any] | None:
    """The bundle's ``link``: ``{"rate_bps", "source"}`` (and ``"interface"`` for an interface's
    speed), or None when neither source knows the rate (module docstring)."""
    if bandwidth_mbit is not None:
        return {"rate_bps": float(bandwidth_mbit) * 1e6, "source": CONTROLLER_SETTING}
    name = interface_name(environ, sys_net, routes)
    speed = None if name is None else interface_speed_mbit(sys_net / name)
    if speed is None:
        return None
    return {"rate_bps": speed * 1e6, "source": INTERFACE_SPEED, "interface": name}


def interface_name(environ: Mapping[str, str], sys_net: Path = SYS_NET, routes: Path = ROUTES) -> str | None:
    """The interface the collective library uses: the first name ``GLOO_SOCKET_IFNAME`` or
    ``NCCL_SOCKET_IFNAME`` lists that exists under ``sys_net`` (NCCL's ``=`` exact-match mark is
    dropped; a ``^`` exclusion list names none), else the default route's, else None."""
    for variable in IFNAME_VARIABLES:
        first = (environ.get(variable) or "").split(",")[0].strip().removeprefix("=")
        if first and not first.startswith("^") and "/" not in first and (sys_net / first).exists():
            return first
    return default_route_interface(routes)


def default_route_interface(routes: Path = ROUTES) -> str | None:
    """The interface of the IPv4 default route (destination 00000000) in ``/proc/net/route``."""
    try:
        lines = routes.read_text().splitlines()[1:]
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000" and "/" not in fields[0]:
            return fields[0]
    return None


def interface_speed_mbit(device: Path) -> float | None:
    """The reported speed of a device-backed interface in Mbit/s, or None (virtual, down, unknown)."""
    if not (device / "device").exists():
        return None
    try:
        value = float((device / "speed").read_text().strip())
    except (OSError, UnicodeDecodeError, ValueError):  # EINVAL while the link is down
        return None
    return value if math.isfinite(value) and value > 0 else None
