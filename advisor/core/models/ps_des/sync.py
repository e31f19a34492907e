"""Synchronous parameter-server training (TF ``SyncReplicasOptimizer``) in Li et al.'s simulator.

Why a model of its own: the same one-worker trace predicts a different curve when the job
aggregates gradients. Each worker's step is the traced one; the PS applies an update once
``replicas_to_aggregate`` = R fresh gradients of the current global step have arrived, drops
later (stale) ones, and a worker whose gradient was counted waits for that update before it
pulls again (``simulator/reference.py`` states the rules; both engines keep them).

What is counted: *examples of aggregated gradients*, R x batch per update, at the instant the
update is applied. That is the training progress a job owner buys: a dropped gradient (a
backup worker's late one) costs compute and link time but does not move the model. With
R = W it is every worker's examples, as the asynchronous model counts them; at W = 1 the two
are the same run. The protocol reports progress per worker (``Samples.step_ends_s``); here
update j's R gradients are dealt to rows ``(j R + i) mod W`` (i < R), so the rows together
hold every counted gradient at its update time and advance evenly (a row is not a worker).

Registered as ``li2020-des-sync`` (equal link shares) and ``li2020-des-sync+contention`` (the
testbed's contention rules), with every input and parameter of the asynchronous models
(heterogeneous workers, PS-count what-if) plus ``replicas_to_aggregate`` or ``backup_workers``.

``barrier_s`` is what a synchronous update costs beyond what the one-worker trace shows (the
token queue's round trips, the chief's bookkeeping): every update from W = 2 on, and all the
work after it, is that much later (update j at its simulated time + (j + 1) x barrier_s). It is
0 unless stated, and it is one of the calibration parameters: a running job's observed
throughput tells it, where a one-worker trace cannot.

**Two workers, one gradient per update** (W = 2, R = 1: one backup worker). No barrier holds the
workers together, and every cycle in which both end a step counts one fresh gradient (the other
is stale, or the two alternate and each is fresh in turn), so what the job achieves is set by
the workers' relative phase. Simulated, the two lock in step (both pull, compute and push
together: the slowest cycle). Real ones mostly do not: of the testbed's thirteen such runs
(``arrangements.ONE_GRADIENT``) seven drifted, their phases wandering over the step, five settled
into alternation, about one step per update, and one held nearly in step. An alternating step is
the one-worker step with its transfers slowed where they overlap the other worker's opposite
transfer (``two_way.py``: the real ones reached 0.83-0.94 of one uncontended step). The point is
the drifting arrangement: with the phase spread evenly and a cycle's length running between its
in-step length (the simulation) and its alternating one, the mean cycle is the mean of the two,
so the throughput is their harmonic mean (``drifting_rate``; ``_DriftingRun`` stretches the
in-step run's time by the ratio, keeping its noise). Alternation is the second outcome
(``PsDesSync.outlook``). Neither is exact: drifting runs lie anywhere from near the in-step cycle
to the harmonic mean, so each outcome ships the width its own repeats measured
(``benchmarks/sync_accuracy.py --write``), and docs/accuracy.md gives the held-out figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from advisor.core.models.protocol import (
    LINK_GOODPUT, Alternative, CalibrationParam, ModelInputs, ModelParams, Outlook, Run, Samples,
)
from advisor.core.models.ps_des.arrangements import ALTERNATING, DRIFTING, ONE_GRADIENT
from advisor.core.models.ps_des.contention import MULTI_FLOW_GOODPUT
from advisor.core.models.ps_des.two_way import step_in_alternation, two_way
from advisor.core.models.ps_des.model import (
    MULTI_FLOW_GOODPUT_CAL, SHARE_SIGMA_CAL, ContentionParams, DesParams, PsDes, worker_regime,
)
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel, SimulationSettings, SimulationSettingsError

SYNC_EQUAL_SHARES = "li2020-des-sync"
SYNC_CONTENTION = "li2020-des-sync+contention"


def replicas(workers: int, replicas_to_aggregate: int | None, backup_workers: int | None) -> int:
    """R at ``workers`` workers: ``replicas_to_aggregate`` (at most W), or W minus the backup
    workers (at least 1), or W."""
    if replicas_to_aggregate is not None:
        return min(replicas_to_aggregate, workers)
    if backup_workers is not None:
        return max(workers - backup_workers, 1)
    return workers


def update_rows(updates_s: np.ndarray, workers: int, replicas: int) -> tuple[np.ndarray, ...]:
    """Each counted gradient at its update time, dealt round-robin to ``workers`` rows (module
    docstring): update j goes to rows (j R + i) mod W for i < R."""
    n = len(updates_s)
    rows = (np.arange(n)[:, None] * replicas + np.arange(replicas)[None, :]) % workers
    return tuple(np.asarray(updates_s, dtype=np.float64)[(rows == w).any(axis=1)] for w in range(workers))


def update_samples(updates_s: np.ndarray, workers: int, replicas: int, until_s: float, steps: int, events: int,
                   batch_size: int) -> Samples:  # fmt: skip
    """The protocol's ``Samples`` of a synchronous run (what ``curve.py`` measures), up to the
    last update by ``until_s``: progress comes in whole updates, so a window that ended between
    two would count the time since the last one without its examples (a bias of half an update
    interval; at W = 1 the last update is the step end the run paused at, as asynchronous)."""
    kept = np.asarray(updates_s, dtype=np.float64)
    kept = kept[kept <= until_s]
    until = float(kept[-1]) if len(kept) else until_s
    return Samples(update_rows(kept, workers, replicas), until, steps, events, batch_size)


def with_barrier(updates_s: np.ndarray, until_s: float, workers: int, barrier_s: float) -> tuple[np.ndarray, float]:
    """Update times (and the window's end) with ``barrier_s`` more per update from W = 2 on:
    update j, and everything after it, (j + 1) x barrier_s later (module docstring)."""
    if workers < 2 or barrier_s <= 0:
        return np.asarray(updates_s, dtype=np.float64), until_s
    updates = np.asarray(updates_s, dtype=np.float64)
    before = int(np.searchsorted(updates, until_s, side="right"))  # updates applied by the window's end
    return updates + barrier_s * np.arange(1, len(updates) + 1), until_s + barrier_s * before


BARRIER_CAL = CalibrationParam("barrier_s", (0.0, 0.001, 0.003, 0.01, 0.03, 0.1),
                               "what each synchronous update costs beyond the trace (s), from W = 2 on")


def engine_steps(steps: int, workers: int, replicas: int) -> int:
    """Engine steps (of the first worker) for rows of about ``steps`` counted gradients: with
    R < W a row gets R/W of the updates."""
    return math.ceil(steps * workers / replicas)


class SyncFields(ModelParams):
    """What the synchronous models add to the asynchronous ones' parameters."""

    replicas_to_aggregate: int | None = Field(
        default=None, ge=1, description="gradients per update (default: every worker's; at W < it, W)")
    backup_workers: int | None = Field(
        default=None, ge=0, description="instead of replicas_to_aggregate: W minus this many gradients per update")
    barrier_s: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                             description="cost of each synchronous update beyond the trace's (s), from W = 2 on")

    @model_validator(mode="after")
    def _one_of(self) -> SyncFields:
        if self.replicas_to_aggregate is not None and self.backup_workers is not None:
            raise ValueError("give replicas_to_aggregate or backup_workers, not both")
        return self

    def replicas(self, workers: int) -> int:
        return replicas(workers, self.replicas_to_aggregate, self.backup_workers)


class SyncDesParams(DesParams, SyncFields):
    """Li et al.'s simulation with a synchronous barrier (equal link shares)."""


# How unevenly TCP connections share a contended link when a barrier releases them together.
# The asynchronous rules' 1.0 (contention.SHARE_SIGMA) was measured on flows that join a busy
# link at random moments, where a newcomer meets a queue the others filled; a synchronous update
# releases every worker at once, their pulls start together and share more evenly. Chosen from
# (0.25, 0.5, 0.75, 1.0) leave-one-job-out on tests/data/ps-sync (the smallest median |error|
# over the other jobs) before the window rule below: every held-out job chose 0.75. With the
# window, chosen together with it (``python -m benchmarks.sync_accuracy --fit
# share_sigma=0.5,0.75,1.0 --fit window_gain=1.0,1.25,1.5``), four of the six held-out jobs choose
# 1.0 and the two with a backup worker 0.75; it stays 0.75, which the 2-PS synchronous runs, fitted
# on nothing, bear out (their MLP: median 2.0 % with 0.75, 5.8 % with 1.0; docs/accuracy.md).
# The multi-flow goodput stays the asynchronous one: several workers still share the link.
SYNC_SHARE_SIGMA = 0.75
# ... and so it does with several PS. The asynchronous rules' several-PS value (1.0, no loss:
# contention.MULTI_PS_FLOW_GOODPUT) calibrates asynchronous 2-PS runs whose workers take turns on
# the busiest link, where one flow at a time runs near its own goodput (docs/contention-model.md,
# section 7). A barrier leaves no turns to take: it releases every worker's pulls at once, and
# their pushes end within one step's spread, so each PS link direction is shared as on one PS,
# at the one-PS value measured on the asynchronous testbed (0.85). Checked, not fitted, on real
# synchronous 2-PS runs (tests/data/ps-sync/two-ps; python -m benchmarks.sync_several_ps).
SYNC_MULTI_PS_FLOW_GOODPUT = MULTI_FLOW_GOODPUT
# A connection's window (NetworkModel.window_gain, simulator/reference.py). Under a barrier the
# first worker to end its pulls could push into an idle inbound link, and with shares alone the
# simulation lets it (the MLP's prediction climbed to +9.5 % at W = 8 where the real job is flat).
# Real TCP does not: the push's acknowledgements wait in the PS's outbound queue behind the others'
# pulled data, and it moves one window per round trip, the window it kept from the last round:
# 10 Mbit/s over a 72 ms round trip, 0.8 of the fair share, on the testbed (tests/data/flow-shares,
# python -m benchmarks.flow_shares --tcp). The cap is this multiple of the rate the connection's
# last transfer ended at, chosen from (1.0, 1.25, 1.5) leave-one-job-out on tests/data/ps-sync
# (every held-out job chose 1.25; python -m benchmarks.sync_accuracy --fit window_gain=1.0,1.25,1.5).
# The asynchronous rules keep it off: their constants were fitted without it and meet their aims.
SYNC_WINDOW_GAIN = 1.25


class SyncContentionParams(ContentionParams, SyncFields):
    """The synchronous simulation with the testbed's contention rules, flows released together
    by the barrier sharing more evenly (``SYNC_SHARE_SIGMA``), with the one-PS multi-flow loss on
    several PS too (``SYNC_MULTI_PS_FLOW_GOODPUT``) and each connection's window
    (``SYNC_WINDOW_GAIN``)."""

    share_sigma: float = Field(default=SYNC_SHARE_SIGMA, ge=0, allow_inf_nan=False,
                               description="spread of TCP shares (lognormal sigma) among flows a barrier released")
    multi_ps_flow_goodput: float = Field(default=SYNC_MULTI_PS_FLOW_GOODPUT, gt=0, le=1,
                                         description="capacity of a link direction several workers share, for a job "
                                                     "with several PS (a barrier leaves no turns to take)")
    window_gain: float = Field(default=SYNC_WINDOW_GAIN, ge=0, allow_inf_nan=False,
                               description="a connection starting while another worker uses its PS link's other "
                                           "direction moves at most this x the rate its last transfer ended at "
                                           "(its window; 0: off)")


class PsDesSync(PsDes):
    """The PS simulation with ``SyncReplicasOptimizer``'s barrier (module docstring)."""

    synchronous = True  # reads a trace of either regime: a synchronous one, or an asynchronous one as a what-if

    def __init__(self, contention: bool) -> None:
        super().__init__(contention)
        self.name = SYNC_CONTENTION if contention else SYNC_EQUAL_SHARES
        self.Params = SyncContentionParams if contention else SyncDesParams
        self.description = (
            "synchronous PS (SyncReplicasOptimizer, backup workers) in Li et al.'s simulation, with contention rules"
            if contention else "synchronous PS (SyncReplicasOptimizer, backup workers) in Li et al.'s simulation"
        )  # fmt: skip
        self.calibration = ((BARRIER_CAL, SHARE_SIGMA_CAL, MULTI_FLOW_GOODPUT_CAL, LINK_GOODPUT) if contention
                            else (BARRIER_CAL, LINK_GOODPUT))

    def start(self, inputs: ModelInputs, params: ModelParams, workers: int, seed: int) -> Run:
        profile, net = self._profile(inputs, params), self.network(inputs, params)
        regime = worker_regime(inputs, self.name)
        r = self.sync_replicas(params, workers)
        barrier = params.barrier_s if isinstance(params, SyncFields) else 0.0
        drifting = workers == 2 and r == 1 and not any(regime)  # the drifting arrangement (module docstring)
        if getattr(params, "engine", "compiled") == "reference":
            run: Run = _SyncReferenceRun(profile, net, workers, seed, r, regime, barrier)
            if not drifting:
                return run
            alone: Run = _SyncReferenceRun(profile, net, 1, seed, 1, regime)
        else:
            from advisor.core.models.ps_des.simulator.fast import FastRun  # loads numba: only when predicting

            compiled = self._compile(profile, net, regime)
            run = _SyncRun(FastRun(compiled, workers, seed, sync_replicas=r), workers, r, barrier)
            if not drifting:
                return run
            alone = _SyncRun(FastRun(compiled, 1, seed, sync_replicas=1), 1, 1)
        return _DriftingRun(run, alone, self._alternating_step(profile, net, params))

    @staticmethod
    def _alternating_step(profile: Profile, net: NetworkModel, params: ModelParams) -> Callable[[float], float]:
        """A one-worker step's length (s) to its length in alternation: its transfers overlapping
        the other worker's lose what the stated network's two-way efficiency says (``two_way.py``);
        nothing with equal shares (the paper's links carry both directions at full rate)."""
        efficiency = two_way(params.contention()).efficiency if isinstance(params, ContentionParams) else 1.0
        return step_in_alternation(profile, net.bandwidth_bps, efficiency)

    def sync_replicas(self, params: ModelParams, workers: int) -> int:
        return params.replicas(workers) if isinstance(params, SyncFields) else workers

    def outlook(self, inputs: ModelInputs, params: ModelParams, curve: Mapping[int, float]) -> Outlook:
        """The contention notes and the placement, if any. Where an update takes a single gradient
        (R = 1 < W) no barrier holds the workers in step: at W = 2 the point reports the
        alternating outcome beside the drifting one (module docstring; ``arrangements.ONE_GRADIENT``);
        at larger W a note says the arrangement is not predicted."""
        details: dict[str, Any] = dict(self._placement_details(inputs, params))
        notes: tuple[str, ...] = ()
        others: dict[int, Alternative] = {}
        if isinstance(params, SyncFields):
            details["sync"] = {"replicas_to_aggregate": params.replicas_to_aggregate,
                               "backup_workers": params.backup_workers, "counted": "examples of aggregated gradients"}
            single = sorted(w for w in curve if w >= 2 and params.replicas(w) == 1)
            other = self._one_gradient_alternative(inputs, params, curve) if 2 in single else None
            if other is not None:
                others[2] = other
                notes += (f"W=2: two outcomes. An update takes one gradient, so no barrier holds the workers in step: "
                          f"{curve[2]:.0f} ex/s if their phases drift (one fresh gradient a cycle, the cycle between "
                          f"its in-step and its alternating length), up to {other.throughput:.0f} ex/s if they "
                          f"alternate (every gradient fresh, each update one uncontended step), with probability "
                          f"{other.probability:.0%} ({other.basis})",)
            rest = [w for w in single if w not in others]
            if rest:
                notes += (f"at W = {', '.join(map(str, rest))} an update takes one gradient: no barrier holds the "
                          "workers in step, and real ones can take turns (one pulls after another's update), "
                          "which this model does not predict there (measured at W = 2 only: docs/accuracy.md)",)
        scope, what_if = self.error_scope(self.simulated_ps(inputs)), self._what_if(inputs)
        if isinstance(params, ContentionParams):
            return Outlook(params.contention().notes() + notes, others, details=details, error_scope=scope,
                           what_if=what_if)
        return Outlook(notes, others, details=details, error_scope=scope, what_if=what_if)

    def _one_gradient_alternative(self, inputs: ModelInputs, params: ModelParams,
                                  curve: Mapping[int, float]) -> Alternative | None:
        """At W = 2 with R = 1: the alternating outcome, one uncontended step per update (T(1)),
        however close to the drifting one (unlike the asynchronous models' ``BIMODAL_RATIO``: the
        testbed's runs alternated as often where the two are 1.2x apart as where they are 1.3x);
        None for uneven workers or a PS-count what-if (the bound assumes two identical traced
        workers), or when it would not lie above the drifting point."""
        if 1 not in curve or inputs.worker_speeds or inputs.worker_bandwidths_bps or self._what_if(inputs):
            return None
        profile = inputs.recorded or self._profile(inputs, params)
        batch = profile.job.batch_size
        alternating = batch / self._alternating_step(profile, self.network(inputs, params), params)(batch / curve[1])
        if alternating <= curve[2]:
            return None
        count = ONE_GRADIENT
        basis = f"{count.alternated} of {count.runs} testbed runs with {count.setting} alternated"
        return Alternative(ALTERNATING, alternating, count.probability, DRIFTING, basis, True)


def drifting_rate(in_step: float, alone: float) -> float:
    """The throughput of two workers whose phases drift (module docstring): the harmonic mean of
    the in-step rate and the one-worker rate, never below the in-step one."""
    if in_step <= 0 or alone <= in_step:
        return in_step
    return 2 * in_step * alone / (in_step + alone)


def _rate(samples: Samples) -> float:
    """Step ends per second over the samples' last three quarters (the first is warm-up)."""
    ends = np.sort(np.concatenate([np.asarray(e, dtype=np.float64) for e in samples.step_ends_s]))
    if len(ends) < 4:
        return math.nan
    start = int(len(ends) // 4)
    span = ends[-1] - ends[start]
    return (len(ends) - 1 - start) / span if span > 0 else math.nan


class _DriftingRun:
    """W = 2 with one gradient per update: the simulated in-step run with its time stretched so
    that its rate is the drifting one (``drifting_rate`` of it and of the alternating rate, one
    worker alone's step slowed by ``alternating``: a step's length alone to its length in
    alternation, ``two_way.alternating_step_s``): the curve measures it, and its batch means keep
    the in-step run's noise."""

    def __init__(self, in_step: Run, alone: Run, alternating: Callable[[float], float]) -> None:
        self._in_step, self._alone, self._alternating = in_step, alone, alternating

    def advance(self, steps: int) -> Samples:
        pair, one = self._in_step.advance(steps), self._alone.advance(steps)
        assert isinstance(pair, Samples) and isinstance(one, Samples)
        together, alone = _rate(pair), _rate(one)
        if not (math.isfinite(together) and math.isfinite(alone)):
            return pair
        stretch = together / drifting_rate(together, 1 / self._alternating(1 / alone))
        return replace(pair, step_ends_s=tuple(np.asarray(e) * stretch for e in pair.step_ends_s),
                       until_s=pair.until_s * stretch)


class _SyncRun:
    """The compiled engine's synchronous run: counted gradients at their updates (module docstring)."""

    def __init__(self, run: Any, workers: int, replicas: int, barrier_s: float = 0.0) -> None:
        self._run, self._w, self._r, self._barrier = run, workers, replicas, barrier_s

    def advance(self, steps: int) -> Samples:
        seen = self._run.advance(engine_steps(steps, self._w, self._r))
        updates, until = with_barrier(seen.updates_s, seen.until_s, self._w, self._barrier)
        return update_samples(updates, self._w, self._r, until, steps, seen.events, seen.batch_size)


class _SyncReferenceRun:
    """The reference engine's synchronous run (no pause: each ``advance`` starts over, same seed)."""

    def __init__(self, profile: Profile, network: NetworkModel, workers: int, seed: int, replicas: int,
                 regime: tuple[tuple[float, ...], ...], barrier_s: float = 0.0) -> None:  # fmt: skip
        self._args = (profile, network, workers, seed)
        self._r, self._regime, self._barrier = replicas, regime, barrier_s

    def advance(self, steps: int) -> Samples:
        from advisor.core.models.ps_des.simulator import simulate_reference_engine

        profile, network, workers, seed = self._args
        settings = SimulationSettings(workers, engine_steps(steps, workers, self._r), 0, seed)
        result = simulate_reference_engine(profile, network, settings, worker_speeds=self._regime[0],
                                           worker_bandwidths_bps=self._regime[1], sync_replicas=self._r)  # fmt: skip
        # the window ends when the first worker has run all its steps, as for the asynchronous run
        until = min((e[-1] for e in result.step_ends_s if len(e)), default=math.inf)
        if not math.isfinite(until):
            raise SimulationSettingsError("the measurement window is empty: simulate more steps")
        updates, until = with_barrier(np.asarray(result.updates_s or ()), until, workers, self._barrier)
        return update_samples(updates, workers, self._r, until, steps, result.events, result.batch_size)
