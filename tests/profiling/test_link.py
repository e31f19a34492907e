"""The link rate an all-reduce profiling run records (``advisor.profiling.link``): the controller's
setting first, else the reported speed of a device-backed interface the collective library uses,
else nothing; on a fake ``/sys/class/net`` and ``/proc/net/route``."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.profiling.link import default_route_interface, interface_name, link_rate

ROUTES = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t0011A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
"""


@pytest.fixture
def net(tmp_path: Path) -> tuple[Path, Path]:
    """eth0: a NIC at 25,000 Mbit/s; eth1: a NIC whose link is down (speed -1); veth0: virtual, 10,000."""
    sys_net = tmp_path / "net"
    for name, speed, device in (("eth0", "25000", True), ("eth1", "-1", True), ("veth0", "10000", False)):
        (sys_net / name).mkdir(parents=True)
        (sys_net / name / "speed").write_text(speed + "\n")
        if device:
            (sys_net / name / "device").mkdir()
    routes = tmp_path / "route"
    routes.write_text(ROUTES)
    return sys_net, routes


def test_the_controller_setting_comes_first(net: tuple[Path, Path]) -> None:
    sys_net, routes = net
    assert link_rate(100.0, {}, sys_net=sys_net, routes=routes) == {"rate_bps": 100e6, "source": "controller-setting"}


def test_else_the_default_route_interface_speed(net: tuple[Path, Path]) -> None:
    sys_net, routes = net
    assert default_route_interface(routes) == "eth0"
    assert link_rate(None, {}, sys_net=sys_net, routes=routes) == {
        "rate_bps": 25_000e6, "source": "interface-speed", "interface": "eth0"}


@pytest.mark.parametrize(("environ", "expected"), [
    ({"GLOO_SOCKET_IFNAME": "eth1"}, "eth1"),
    ({"NCCL_SOCKET_IFNAME": "=veth0,eth0"}, "veth0"),
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, "eth0"),  # an exclusion list names none: the default route's
    ({"GLOO_SOCKET_IFNAME": "ib0"}, "eth0"),  # no such interface here
])
def test_the_interface_the_collective_library_is_told_to_use(net: tuple[Path, Path], environ: dict[str, str],
                                                             expected: str) -> None:
    sys_net, routes = net
    assert interface_name(environ, sys_net, routes) == expected


@pytest.mark.parametrize("name", ["eth1", "veth0"])
def test_a_down_or_virtual_interface_gives_no_rate(net: tuple[Path, Path], name: str) -> None:
    """eth1 reports -1 (link down); veth0 reports 10,000 Mbit/s, which a veth always says and
    which says nothing about the path between nodes: neither is recorded."""
    sys_net, routes = net
    assert link_rate(None, {"GLOO_SOCKET_IFNAME": name}, sys_net=sys_net, routes=routes) is None


def test_without_a_default_route_or_routes_file_no_rate(tmp_path: Path) -> None:
    routes = tmp_path / "route"
    routes.write_text(ROUTES.splitlines()[0] + "\n")
    assert link_rate(None, {}, sys_net=tmp_path, routes=routes) is None
    assert link_rate(None, {}, sys_net=tmp_path, routes=tmp_path / "absent") is None
