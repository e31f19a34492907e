"""Does the closed loop reach the truly cheapest worker count when the prediction is wrong?

    python -m benchmarks.closed_loop [--rule posterior] [--window-s 900] [--noise 0.03] [--seed 0]

Each scenario is a job whose true throughput is a measured curve of the repository
(``benchmarks/real_curves.py``), predicted from its own one-worker profile with one thing
stated wrong. The job starts at 2 workers in ``auto`` mode and runs until it has trained
``LIFE_HOURS`` hours' worth of examples at its truly cheapest W. Three policies run it:

- **closed loop**: the controller's own code in simulated time: its ``Refitter`` looks at the
  job every ``--window-s`` (its ``refit_min_observation_s`` and ``refit_interval_s``), reading
  the job's pods' ``advisor_training_examples_total`` counters through the same Prometheus
  queries (``observed.py`` against ``tests/controller/simulated_job.py``'s samples, each window's
  throughput the measured mean times a log-normal noise of ``--noise``); the prediction worker's
  ``run_prediction`` (calibration, then the curve) predicts again; the policy's ``recommend``
  and ``resize_target`` (hysteresis ``MIN_GAIN``, cooldown ``COOLDOWN_S``) decide. Only the
  cluster, the store and the clock are stand-ins;
- **open loop**: the first prediction's decision, kept for the job's life;
- **oracle**: the truly cheapest W (measured means, the scenario's prices) from the start.

Printed per scenario: the W the open loop and the closed loop chose in turn, the observation
windows until the closed loop's last resize, its reversals (changes of direction), whether it
ended at the truly cheapest W, and each policy's cost over the job's life, in the scenario's
price units and relative to the oracle.

The deadline scenarios give the job a deadline of ``LIFE_HOURS`` for examples that need a share
of the best measured throughput (85 %: tight), asked with confidence ``CONFIDENCE``. The truly
cheapest W is then the cheapest measured one that meets it; the open loop decides once, alone;
the closed loop's decisions count on one resize (``core/correction.py``, as the controller's do
in ``auto`` mode with the closed loop on: after the window or the cooldown, whichever is longer;
a W already observed planned alone) and, once the refit has read the examples the pods counted
since the job started (``observed.trained``, from the same samples), are for the examples left in
the hours left (``deadline.remaining``); every resize loses ``RESIZE_LOSS_S`` of progress (its time
is paid, its examples are not trained). Converged also asks that the job finished by its deadline.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.controller.jobs.tfjob import TFJobView, parse_tfjob
from advisor.controller.pipeline.deadline import (DEADLINE, EXAMPLES, DeadlineOver, JobDeadline, remaining,
                                                  resize_correction)
from advisor.controller.pipeline.observed import PrometheusClient
from advisor.controller.pipeline.policy import Limits, recommend, resize_target
from advisor.controller.pipeline.predictions import prediction_key, prediction_params, run_prediction
from advisor.controller.pipeline.refit import Refitter
from advisor.controller.settings import Mode, load_settings
from advisor.controller.web.metrics import Metrics
from advisor.core.advice import ModelChoice
from advisor.core.cost import Prices, cost_per_example
from advisor.importers.profile_file import profile_to_json
from benchmarks.real_curves import RealCurve, allreduce, ps_async, ps_sync, ps_traces
from tests.controller.simulated_job import Counters, SimulatedJob, opener
from tests.controller.tfjobs import tfjob, with_uid

START_WORKERS = 2
LIFE_HOURS = 48.0  # the job's size: this long at its truly cheapest W
MIN_GAIN = 0.05  # auto_min_gain: the least expected saving per example worth a resize
COOLDOWN_S = 1800.0  # auto_cooldown_s
SCRAPE_S = 30.0  # Prometheus' scrape interval of the training pods
TOLERANCE = 0.1  # refit_tolerance
NS, NAME, SHA = "ml", "job", "0" * 64
CONFIDENCE = 0.9  # decision_confidence, for the deadline scenarios
RESIZE_LOSS_S = 600.0  # deadline_resize_loss_s: the progress a resize loses (charged in the deadline scenarios)


@dataclass(frozen=True)
class Scenario:
    name: str
    curve: Callable[[], RealCurve]
    wrong: str  # what is stated wrong (and the truth), for the table; sigma, eta: share_sigma, multi_flow_goodput
    prices: Prices
    bandwidth_factor: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)
    deadline_share: float | None = None  # a deadline that needs this share of the best measured throughput

    def needed(self) -> float | None:
        """The throughput the deadline needs (None: no deadline)."""
        if self.deadline_share is None:
            return None
        curve = self.curve()
        return self.deadline_share * max(curve.truth(w) for w in range(1, curve.max_workers + 1))


def _curve(source: Callable[[], list[RealCurve]], name: str) -> Callable[[], RealCurve]:
    return lambda: next(c for c in source() if c.name == name)


SCENARIOS = (
    Scenario("cnn, bandwidth 2x", _curve(ps_async, "ps-async/cubic/cnn_bw100"), "bandwidth 200 Mbit/s (100)",
             Prices(1.0, 2.0), bandwidth_factor=2.0),
    Scenario("cnn bbr, bandwidth 2x", _curve(ps_async, "ps-async/bbr/cnn_bw100"), "bandwidth 200 Mbit/s (100)",
             Prices(1.0, 1.0), bandwidth_factor=2.0),
    Scenario("cnn, other constants", _curve(ps_async, "ps-async/cubic/cnn_bw100"),
             "sigma 1.5, eta 1.0 (1.0, 0.85)", Prices(1.0, 1.0),
             params={"share_sigma": 1.5, "multi_flow_goodput": 1.0}),
    Scenario("ddp, ring latency 10x", _curve(allreduce, "allreduce/ddp-comm"), "latency_s 3 ms (0.3)",
             Prices(1.0, 0.0), params={"latency_s": 3e-3}),  # 10x gloo's default (ring_allreduce.model.GLOO)
    # synchronous PS (SyncReplicasOptimizer): four calibration parameters, the barrier's cost among them
    Scenario("sync cnn, bandwidth 2x", _curve(ps_sync, "ps-sync/cnn_bw100"), "bandwidth 200 Mbit/s (100)",
             Prices(1.0, 2.0), bandwidth_factor=2.0),
    Scenario("sync cnn, backup worker, bw 2x", _curve(ps_sync, "ps-sync/cnn_bw100_backup1"),
             "bandwidth 200 Mbit/s (100)", Prices(1.0, 2.0), bandwidth_factor=2.0),
    # tight deadlines (85 % of the best measured), at benchmarks/accuracy.py's prices
    Scenario("mlp, tight deadline", _curve(ps_async, "ps-async/cubic/mlp_bw100"), "none",
             Prices(3.06, 0.40), deadline_share=0.85),
)
# What the loop cannot do, shown with --limits and not part of the verdict: it observes only the W
# it runs, so a prediction too pessimistic at a W it never runs stays so. Here the 2-PS MLP is
# measured at 161 examples/s with 2 workers and 212 with 3; the shipped constants predict 147 and
# 163, so the job stays at 2, runs a little faster there than predicted, and the posterior lifts
# W = 3 only by what W = 2 says about it: not enough to try it.
#
# A wrong curve makes a deadline's search wander: the CNN with its bandwidth stated 2x too high and
# a tight deadline starts at 8 workers (the first plan's start), where it meets the deadline, and
# once 8 is observed the refitted curve promises its lower W too much (its shape, from one
# observation, is the model's). Kept from trials while on course, it stays at 8 until, ahead of
# its deadline, 3 alone makes the rest; 3 runs short, and the job goes 3 > 4 > 3 for what is
# left: in time, 7 % under the oracle (the open loop, at 8: 6 % over), but with three reversals.
LIMITS = (
    Scenario("mlp 2 PS, shipped constants", _curve(ps_traces, "ps-traces/mlp_ps2_bw100"),
             "none (W = 3 predicted 23 % low)", Prices(1.0, 4.0), params={}),
    Scenario("cnn, bandwidth 2x, tight deadline", _curve(ps_async, "ps-async/cubic/cnn_bw100"),
             "bandwidth 200 Mbit/s (100)", Prices(3.06, 0.40), bandwidth_factor=2.0, deadline_share=0.85),
)


@dataclass
class Life:
    """One policy's run of the job: the W it trained at, in order, and what it cost."""

    workers: list[int]
    windows: int  # observation windows until the last resize (0: none after the first decision)
    cost: float
    hours: float
    met: bool | None = None  # with a deadline: whether the job finished by it

    @property
    def reversals(self) -> int:
        steps = [b - a for a, b in zip(self.workers, self.workers[1:])]
        return sum(1 for a, b in zip(steps, steps[1:]) if a * b < 0)


class Store:
    """The controller store's one read the refit makes, and the worker's results put in it."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def prediction(self, sha: str, key: str) -> str | None:
        return self.texts.get(key)


def running(workers: int, deadline: JobDeadline | None = None) -> TFJobView:
    """The job at ``workers``, started at the simulated clock's 0, with ``deadline``'s annotations."""
    notes = {} if deadline is None else {EXAMPLES: f"{deadline.examples:.6g}", DEADLINE: f"{deadline.hours:g}h"}
    obj = with_uid(tfjob(NAME, NS, workers=workers, dynamic=True, annotations=notes))
    obj["status"] = {"startTime": "1970-01-01T00:00:00Z", "conditions": [{"type": "Running", "status": "True"}]}
    return parse_tfjob(obj)


def live(scenario: Scenario, policy: str, args: argparse.Namespace, log: Callable[[str], None]) -> Life:
    """Run the job under ``policy`` (closed, open, oracle) until its examples are trained."""
    curve = scenario.curve()
    ps = curve.parameter_servers
    truth = {w: curve.truth(w) for w in range(1, curve.max_workers + 1)}
    needed = scenario.needed()
    best = min((w for w in truth if needed is None or truth[w] >= needed),
               key=lambda w: cost_per_example(scenario.prices, w, ps, truth[w]))
    examples = (needed or truth[best]) * LIFE_HOURS * 3600
    deadline = None if needed is None else JobDeadline(examples, LIFE_HOURS, CONFIDENCE)
    loss_s = RESIZE_LOSS_S if deadline is not None else 0.0
    profile_doc = profile_to_json(curve.load())
    store, counters = Store(), Counters()
    job = SimulatedJob(NS, NAME, curve.truth, counters, noise=args.noise, window_s=args.window_s, seed=args.seed)
    settings = load_settings(refit_enabled=True, refit_prometheus_url="http://prometheus.invalid:9090",
                             refit_min_observation_s=args.window_s, refit_interval_s=args.window_s,
                             refit_tolerance=TOLERANCE, refit_rule=args.rule, max_workers=curve.max_workers)
    refitter = Refitter(settings=lambda: settings, store=store, running=lambda key: False, metrics=Metrics(),
                        enqueue_after=lambda key, delay: None, clock=lambda: now,
                        client=lambda cfg: PrometheusClient(cfg.prometheus_url, opener=opener(counters)))
    base = prediction_params(curve.bandwidth_bps, scenario.prices,
                             bandwidth_bps=curve.bandwidth_bps * scenario.bandwidth_factor,
                             max_workers=curve.max_workers, target=0.05, seed=0, saturation_threshold=0.05,
                             model=ModelChoice(curve.model, {**curve.params, **scenario.params}))
    limits = Limits(1, curve.max_workers, Mode.AUTO)
    now, workers, last_resize = 0.0, START_WORKERS, None
    trained, cost, window, last_change = 0.0, 0.0, 0, 0

    def predicted(params: Any) -> Mapping[str, Any]:
        key = prediction_key(SHA, params)
        if key not in store.texts:
            store.texts[key] = run_prediction(profile_doc, params.as_dict())
        return json.loads(store.texts[key])

    def decide(prediction: Mapping[str, Any]) -> None:
        nonlocal workers, last_resize, now, cost
        view = running(workers, deadline)
        correction, left = None, deadline  # the controller's: a decision counts on one resize (reconcile._correction)
        if deadline is not None and policy == "closed":
            correction = resize_correction(prediction, args.window_s, COOLDOWN_S, RESIZE_LOSS_S)
            try:  # for what is left, once the refit has read the job's progress (reconcile._apply)
                left = remaining(deadline, refitter.progress(view))
            except DeadlineOver:
                return  # passed, or trained: the last decision stays
        moving = left is not None and left.progress is not None  # the reconcile's: a move loses a resize's time
        rec = recommend(prediction, scenario.prices, limits, left, correction, running=workers if moving else None,
                        switch_hours=RESIZE_LOSS_S / 3600)
        target = resize_target(limits, view, rec, prediction, scenario.prices, last_resize=last_resize, now=now,
                               min_gain=MIN_GAIN, cooldown_s=COOLDOWN_S)
        if target is not None:
            log(f"    {now / 3600:5.2f} h: {workers} -> {target} workers")
            workers, last_resize = target, now
            cost += scenario.prices.hourly(workers, ps) * loss_s / 3600  # the restart: paid, nothing trained
            now += loss_s

    def event(view: TFJobView, type_: str, reason: str, message: str) -> None:
        log(f"    {now / 3600:5.2f} h: {reason}: {message}")

    if policy == "oracle":
        workers = best
    else:
        decide(predicted(base))
    refitter.params(running(workers, deadline), SHA, base, event)  # the reconcile asks it whenever it applies a curve
    history = [START_WORKERS, workers] if workers != START_WORKERS else [workers]
    while trained < examples:
        done = job.run(now, now + args.window_s, workers, SCRAPE_S)
        share = min(1.0, (examples - trained) / done)
        trained += done * share
        cost += scenario.prices.hourly(workers, ps) * args.window_s / 3600 * share
        now += args.window_s * share
        window += 1
        if share < 1.0 or policy != "closed":
            continue
        before = workers
        params = refitter.params(running(workers, deadline), SHA, base, event)
        if params.refit:  # the reconcile submits it; once stored, the next reconcile applies it
            predicted(params)
            params = refitter.params(running(workers, deadline), SHA, base, event)
        decide(predicted(params))
        if workers != before:
            history.append(workers)
            last_change = window
            refitter.params(running(workers, deadline), SHA, base, event)
    return Life(history, last_change, cost, now / 3600, None if deadline is None else now / 3600 <= LIFE_HOURS)


def true_excess(scenario: Scenario, workers: int) -> float:
    """How much more ``workers`` cost per example than the truly cheapest W (measured means) that
    meets the scenario's deadline, if it has one."""
    curve = scenario.curve()
    needed = scenario.needed()
    costs = {w: cost_per_example(scenario.prices, w, curve.parameter_servers, curve.truth(w))
             for w in range(1, curve.max_workers + 1)}
    return costs[workers] / min(c for w, c in costs.items() if needed is None or curve.truth(w) >= needed) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", default="posterior", help="refit_rule (docs/decisions.md#the-closed-loop-how-a-running-job-corrects-its-own-curve)")
    parser.add_argument("--window-s", type=float, default=900.0, help="observation window (s)")
    parser.add_argument("--noise", type=float, default=0.03, help="relative noise of a window's throughput")
    parser.add_argument("--seed", type=int, default=0, help="seed of the windows' noise")
    parser.add_argument("--limits", action="store_true", help="also run the scenarios of what the loop cannot do "
                                                               "(not part of the verdict)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the closed loop's events and resizes")
    args = parser.parse_args()
    log: Callable[[str], None] = print if args.verbose else (lambda line: None)
    print(f"rule {args.rule}, window {args.window_s:.0f} s, noise {args.noise:g}, hysteresis {MIN_GAIN:.0%}, "
          f"cooldown {COOLDOWN_S:.0f} s, start at {START_WORKERS} workers, life {LIFE_HOURS:g} h at the best W\n")
    print(f"{'scenario':<34} {'stated wrong (true)':<30} {'best':>4} {'open':>4} {'closed loop W':<14} {'windows':>7} "
          f"{'rev':>3} {'end +cost':>9} {'deadline':>8} {'conv':>4} {'cost oracle':>11} {'open':>13} {'closed':>13} "
          f"{'s':>5}")
    failed = 0
    for scenario in SCENARIOS + (LIMITS if args.limits else ()):
        started = time.perf_counter()
        if args.verbose:
            print(f"  {scenario.name}:")
        lives = {p: live(scenario, p, args, log if p == "closed" else (lambda line: None))
                 for p in ("oracle", "open", "closed")}
        best, open_w, closed = lives["oracle"].workers[-1], lives["open"].workers[-1], lives["closed"]
        excess = true_excess(scenario, closed.workers[-1])
        converged = excess <= MIN_GAIN and closed.reversals <= 1 and closed.met is not False
        failed += not converged and scenario in SCENARIOS
        base = lives["oracle"].cost

        def money(life: Life) -> str:
            return f"{life.cost:7.1f} {life.cost / base - 1:+5.0%}"

        name = scenario.name + (" (limit)" if scenario in LIMITS else "")
        print(f"{name:<34} {scenario.wrong:<30} {best:>4} {open_w:>4} "
              f"{'>'.join(map(str, closed.workers)):<14} {closed.windows:>7} {closed.reversals:>3} {excess:>+9.0%} "
              f"{_met(closed.met, lives['open'].met):>8} {'yes' if converged else 'NO':>4} {base:>11.1f} {money(lives['open']):>13} {money(closed):>13} "
              f"{time.perf_counter() - started:>5.0f}", flush=True)
    print(f"\nwindows: observation windows until the last resize; rev: reversals; end +cost: what the closed loop's "
          f"last W costs per example beyond the best (measured; with a deadline, the cheapest W that meets it); "
          f"deadline: whether the closed loop / the open loop finished by it; conv: at most {MIN_GAIN:.0%} beyond "
          "the best (the hysteresis: a smaller saving is never worth a resize) with at most one reversal, and the "
          "deadline met; cost: over the job's life, and relative to the oracle")
    if failed:
        raise SystemExit(f"{failed} scenario(s) did not converge")


def _met(closed: bool | None, open_: bool | None) -> str:
    """The deadline column: met / missed by the closed loop and the open loop, "-" without one."""
    if closed is None:
        return "-"
    return f"{'met' if closed else 'MISS'}/{'met' if open_ else 'MISS'}"


if __name__ == "__main__":
    main()
