"""The worker's own link, as a multi-PS trace shows it: does it limit the worker or not?

Why: with M > 1 parameter servers a worker talks to several PS at once, and the simulator caps
its flows to all of them together by its own link (``NetworkModel.worker_bandwidth_bps``,
``simulator/sharing.py``). Unset, that link is taken to be as fast as one PS link: Li et al.'s
rule for M = 2 (section 5: "up to 1 - 1/n on the PS it has alone"), right for a cluster whose
nodes all have the same NIC. But a trace recorded with 2 PS where only the PS links are the
bottleneck (the testbed: each PS link shaped, the worker's not) shows the worker moving data
from both PS at once, each at its PS link's rate: 145 Mbit/s summed over two 100 Mbit/s links
(tests/data/ps-traces). Simulating that worker behind a 100 Mbit/s link serialised its two
PS's transfers and predicted its own W = 1 step rate 28 % low.

So the trace decides. Per step and direction, the worker's rate is the bytes of all its
transfers of that direction over the length of the union of their spans (a record spans from
the sender starting its response to the receiver having it all, so this is a lower bound on
what the link carried); the trace's figure is the median over steps of the faster direction.
If it exceeds one PS link (the recorded rate, else the simulated one) by more than
``WIDER_THAN_ONE_LINK`` (the spread of single-flow rates in the traces is a few percent), the
worker's link did not bind: it is simulated as carrying all M PS links at full rate
(``M x bandwidth``, where it never binds). Otherwise, and with one PS (where the worker's link
cannot show), the paper's rule stands. A rate the caller gives (``worker_bandwidth_bps``) wins.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from advisor.core.profile import Profile, Resource
from advisor.core.sim_types import NetworkModel

WIDER_THAN_ONE_LINK = 1.15  # the worker's traced rate over one PS link's above which it did not bind


def traced_worker_rate_bps(profile: Profile) -> float | None:
    """The worker's rate summed over its PS links (bits/s, module docstring), or None when no
    direction carries bytes of two or more PS (the trace cannot show the worker's link)."""
    rates = []
    for direction in (Resource.DOWNLINK, Resource.UPLINK):
        ops = [i for i, op in enumerate(profile.ops) if op.resource is direction and op.bytes > 0]
        if len({profile.ops[i].ps for i in ops}) < 2:
            continue
        bits = 8.0 * sum(profile.ops[i].bytes for i in ops)
        spans = [_union_us([(s.start_us[i], s.start_us[i] + s.duration_us[i]) for i in ops]) for s in profile.steps]
        per_step = [bits / (us * 1e-6) for us in spans if us > 0]
        if per_step:
            rates.append(statistics.median(per_step))
    return max(rates) if rates else None


def with_traced_worker_link(profile: Profile, network: NetworkModel) -> NetworkModel:
    """``network`` with the worker's link the trace shows (module docstring): unchanged when the
    caller set it, with one PS, or when the trace shows it binding; else ``M x bandwidth``."""
    if network.worker_bandwidth_bps is not None or profile.job.parameter_servers < 2:
        return network
    if not worker_link_was_wider(profile, network):
        return network
    return replace(network, worker_bandwidth_bps=profile.job.parameter_servers * network.bandwidth_bps)


def worker_link_was_wider(profile: Profile, network: NetworkModel) -> bool:
    """Whether the traced worker moved data faster than one PS link carries (module docstring)."""
    rate = traced_worker_rate_bps(profile)
    one_link = profile.job.recorded_bandwidth_bps or network.bandwidth_bps
    return rate is not None and rate > WIDER_THAN_ONE_LINK * one_link


def worker_link_note(profile: Profile, network: NetworkModel) -> str | None:
    """For the output: why the worker's link is not simulated as a limit, when that is so."""
    if network.worker_bandwidth_bps is not None or profile.job.parameter_servers < 2:
        return None
    rate = traced_worker_rate_bps(profile)
    if rate is None or not worker_link_was_wider(profile, network):
        return None
    one_link = profile.job.recorded_bandwidth_bps or network.bandwidth_bps
    return (f"the trace's worker moved {rate / 1e6:.0f} Mbit/s over its {profile.job.parameter_servers} PS links "
            f"at once, more than one PS link ({one_link / 1e6:.0f} Mbit/s): its own link did not limit it, "
            "so it is not simulated as a limit")


def _union_us(spans: list[tuple[float, float]]) -> float:
    """Total length covered by ``spans`` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if a >= end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total
