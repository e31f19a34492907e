"""How fast two alternating workers really are: each transfer shares its link with the other
direction's, and loses to it.

Two workers alternate on one parameter server when one pulls while the other pushes. The two
transfers use opposite directions of the PS link, so each could run as fast as alone, and the
pair at twice one worker's rate (``contention.alternating_bound``). Real alternating runs reach
0.82-0.95 of that (the asynchronous MLP under BBR and under cubic with a 20 ms queue, the
synchronous jobs with one backup worker). The cause is the network, not TensorFlow: a
transfer's acknowledgements travel the opposite direction, where they queue in the bottleneck
behind the other worker's data, and the late acknowledgements slow the transfer's window.

``scripts/probe_two_way.py --alternate`` measures it with no training job: two plain-TCP
"workers" on the testbed's shaped PS link, each a loop of pull, idle gap, push, started half a
cycle apart. A run that holds the alternation (``arrangements.alternated``) gives the
*efficiency* ``e`` of an overlapped transfer: each second of a transfer that overlaps the other
direction's takes ``1 / e`` seconds (``efficiency_of_cycles``). ``PROBED`` is its mean per
network setting, the settings ``arrangements.py`` counts; tests/core/test_two_way.py recomputes
it from ``tests/data/two-way``. Nothing in it was fitted to a training run.

A job's alternating step is then its one-worker step plus, for each of its pull and its push,
the part that overlaps the other worker's opposite transfer times ``1 / e - 1``
(``alternating_rate``). The overlap follows from the step's phases: with the two workers half a
step apart, a pull ``[0, p]`` meets the other's push ``[T/2 - s, T/2]`` (``overlap_s``). A
compute-bound step overlaps little, a transfer-bound one almost wholly.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from advisor.core.models.ps_des.arrangements import setting_of
from advisor.core.models.ps_des.contention import Contention
from advisor.core.phases import phases, ps_link_bound
from advisor.core.profile import Profile


@dataclass(frozen=True, slots=True)
class Probed:
    """A network setting's two-way efficiency: the mean of the probe's alternating runs."""

    setting: str
    efficiencies: tuple[float, ...]  # one per alternating probe run

    @property
    def efficiency(self) -> float:
        return statistics.fmean(self.efficiencies)


# tests/core/test_two_way.py recomputes these from tests/data/two-way/probe.json: the runs of each
# setting, at 100 and 50 Mbit/s, that held the alternation (BBR at 50 Mbit/s did not, twice)
PROBED = {
    "bbr": Probed("bbr, 100 ms queue", (0.8209, 0.8435)),
    "loss-based, short queue": Probed("cubic with a 20 ms queue", (0.7370, 0.8128, 0.8517, 0.7966)),
    "loss-based, deep queue": Probed("cubic with a 100 ms queue", (0.8771, 0.8307, 0.8193, 0.7717)),
}


@dataclass(frozen=True, slots=True)
class TwoWay:
    """The efficiency an alternating pair's overlapped transfers keep, and where it comes from."""

    efficiency: float
    known: bool
    basis: str


def overlap_s(pull_s: float, push_s: float, step_s: float) -> float:
    """How long one worker's pull overlaps the other's push (and, by symmetry, its push the
    other's pull) when two workers with steps of ``step_s`` (pull first, push last) run half a
    step apart."""
    half = step_s / 2
    return max(0.0, min(pull_s, half) - max(0.0, half - push_s))


def efficiency_of_cycles(alone_s: float, both_s: float, gap_s: float) -> float:
    """The efficiency ``e`` a probe run shows: a synthetic worker's cycle of ``alone_s`` (pull and
    push of equal size around ``gap_s`` idle) grew to ``both_s`` while a second one alternated
    with it, and the growth is ``2 overlap (1 / e - 1)``."""
    transfer = (alone_s - gap_s) / 2
    grown = both_s - alone_s
    overlap = overlap_s(transfer, transfer, alone_s)
    if overlap <= 0:
        return 1.0
    return 1.0 / (1.0 + max(grown, 0.0) / (2 * overlap))


def two_way(contention: Contention | None) -> TwoWay:
    """The probed efficiency for the stated congestion control and queue; for a setting the probe
    did not run, or none stated, the mean over every probed setting, said to be unknown."""
    key = setting_of(contention) if contention is not None else None
    if key is not None and key in PROBED:
        probed = PROBED[key]
        return TwoWay(probed.efficiency, True, f"{probed.setting}: {len(probed.efficiencies)} alternating probe runs")
    every = [e for p in PROBED.values() for e in p.efficiencies]
    return TwoWay(statistics.fmean(every) if every else 1.0, False,
                  f"network setting not probed: the mean of every probed setting ({len(every)} runs)")


def alternating_step_s(step_s: float, pull_s: float, push_s: float, efficiency: float) -> float:
    """A worker's step in alternation: ``step_s`` alone plus its pull's and its push's overlapped
    part (``overlap_s``) slowed to ``efficiency``."""
    if not (0 < efficiency <= 1):
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    return step_s + 2 * overlap_s(pull_s, push_s, step_s) * (1 / efficiency - 1)


def step_in_alternation(profile: Profile, link_bps: float, efficiency: float) -> Callable[[float], float]:
    """A one-worker step's length (s) to its length in alternation (``alternating_step_s``), for
    ``profile``'s pull and push at ``link_bps``."""
    ph = phases(profile, link_bps)
    return lambda step_s: alternating_step_s(step_s, ph.downlink_s, ph.uplink_s, efficiency)


def alternating_rate(profile: Profile, one_worker: float, link_bps: float, efficiency: float,
                     other_worker: float | None = None) -> float:
    """Examples/s of two workers in alternation (module docstring): each step longer than alone
    (``one_worker``; the second at ``other_worker`` when it runs at another speed) by its
    overlapped transfers' loss, never above what the busiest PS link direction carries."""
    slowed, batch = step_in_alternation(profile, link_bps, efficiency), profile.job.batch_size
    pair = sum(batch / slowed(batch / rate) for rate in (one_worker, one_worker if other_worker is None
                                                         else other_worker))
    return min(pair, ps_link_bound(profile, link_bps))
