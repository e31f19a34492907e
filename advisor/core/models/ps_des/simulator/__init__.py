"""Discrete-event simulation of asynchronous parameter-server training with W workers.

Li, Yan, Paolieri, Golubchik, "Throughput Prediction of Asynchronous SGD in TensorFlow"
(ICPE'20), Algorithm 3.1: each worker runs steps sampled from a 1-worker profile; transfers
share the PS links (max-min fair, ``sharing.py``), HTTP/2 multiplexing gives a stream a first
service of at most WIN bytes (``reference.py`` states the exact rules); computation runs on
per-worker resources. Optional: request-path queueing delay (``NetworkModel.queue_delay_s``)
and staggered first starts (``SimulationSettings.start_offsets_s``, ``stagger.py``).
``simulate`` uses the compiled engine (``loop.py``); ``reference.py`` is the slow oracle it
is tested against.
"""

from __future__ import annotations

from typing import Any

from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationResult, SimulationSettings
from advisor.core.models.ps_des.simulator.fast import simulate_fast
from advisor.core.models.ps_des.simulator.inputs import prepare
from advisor.core.models.ps_des.simulator.reference import simulate_reference

__all__ = ["simulate", "simulate_reference_engine"]


def simulate(
    profile: Profile, network: NetworkModel, settings: SimulationSettings, **regime: Any
) -> SimulationResult:
    """Simulate ``settings.workers`` workers for ``settings.steps`` steps each (fast engine).
    ``regime``: ``worker_speeds``, ``worker_bandwidths_bps``, ``sync_replicas`` (``inputs.prepare``)."""
    return simulate_fast(profile, prepare(profile, network, settings, **regime), settings.record_timeline)


def simulate_reference_engine(
    profile: Profile, network: NetworkModel, settings: SimulationSettings, **regime: Any
) -> SimulationResult:
    """The same simulation with the slow reference engine (for tests and comparisons)."""
    return simulate_reference(profile, prepare(profile, network, settings, **regime), settings.record_timeline)
