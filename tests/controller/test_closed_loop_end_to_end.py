"""The closed loop end to end: the real controller over the API emulator (real HTTP), the real
prediction worker process (simulation, calibration), and a Prometheus that stores the job's pods'
counters as it would scrape them (``simulated_job.py``).

The job is the testbed's CNN (cubic, 100 Mbit/s): its one-worker trace is what the profiling pod
uploads, and its true throughput is what the testbed measured (``tests/data/ps-async/measured/
cubic/cnn_bw100.json``, the mean of its two runs per W; W = 5 between 4 and 6). The controller is
told the links run at 200 Mbit/s: twice what they do. Prices: a worker 1/h, the PS 2/h, so a
worker count costs (W + 2) / throughput per example. On the measurements (W = 1..6: 52.3, 90.5,
115.1, 134.1, 142.4, 150.7 examples/s) that is 0.0574, 0.0442, 0.0434, 0.0447, 0.0492, 0.0531:
W = 3 is the cheapest. The prediction at 200 Mbit/s would scale far better (its cheapest 5 or 6
workers), but its W = 1 contradicts the profile's own rate, so the first curve is anchored on
the profile (core/profile_check.py) and already points at 3 or 4; and where a window at 2 workers
is observed before the first curve is applied, the first curve is the refitted one. Either way
the job, created with 2 workers, leaves 2 for 3 or 4 with at most one reversal, the model
calibrated on what it observes, and stays where it settles: W = 2 and 4 cost 1.7 % and 3.0 % more
per example than 3, under the 5 % a resize must promise (``auto_min_gain``), so no W among them
is worth a move from another. Then a pod's counter restarts (a reset in the window) and a pod's
series goes missing: each is a Warning event, and the job stays where it is.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from advisor.controller.jobs.tfjob import PREFIX
from tests.conftest import ps_async_data
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, settings_for, start_controller, trace_body,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.simulated_job import Counters, PrometheusOnCounters, SimulatedJob
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator

WINDOW_S = 2.0  # refit_min_observation_s and refit_interval_s: one observation window
SCRAPE_S = 0.1


def measured_cnn() -> dict[int, float]:
    by_w: dict[int, list[float]] = {}
    for r in json.loads((ps_async_data("measured", "cubic") / "cnn_bw100.json").read_text())["results"]:
        by_w.setdefault(int(r["W"]), []).append(float(r["thr_window"]))
    means = {w: statistics.mean(v) for w, v in by_w.items()}
    means[5] = (means[4] + means[6]) / 2
    return {w: means[w] for w in range(1, 7)}


TRUTH = measured_cnn()


def cost(w: int) -> float:
    return (w + 2) / TRUTH[w]


# the counts within the hysteresis (auto_min_gain 5 %) of the cheapest: none of them promises a resize
NEAR_CHEAPEST = {w for w in TRUTH if cost(w) <= 1.05 * min(map(cost, TRUTH))}


def test_the_truth_makes_three_workers_the_cheapest() -> None:
    # the docstring's figures, from the measured file
    assert [round(TRUTH[w], 1) for w in range(1, 7)] == [52.3, 90.5, 115.1, 134.1, 142.4, 150.7]
    assert min(TRUTH, key=cost) == 3
    # 4/90.5 = 0.0442 and 6/134.1 = 0.0447 per example-hour, against 5/115.1 = 0.0434: 1.7 % and 3.0 % more
    assert NEAR_CHEAPEST == {2, 3, 4}


def test_the_simulated_prometheus_answers_what_the_controller_asks() -> None:
    """Every query of ``observed.py`` over the in-process opener (as benchmarks/closed_loop.py
    asks them), by hand: two pods at 10 and 20 ex/s scraped every 10 s for 60 s, the second
    restarted at 30 s. A deadline's progress (no pod exports the gauge) is the counters' increase."""
    from advisor.controller.pipeline.observed import PrometheusClient, observe, trained
    from tests.controller.simulated_job import opener

    counters = Counters()
    for k in range(7):
        counters.scrape((NS, "job", "job-worker-0"), 10.0 * k, 100.0 * k)
        counters.scrape((NS, "job", "job-worker-1"), 10.0 * k, 200.0 * (k if k < 3 else k - 3))
    client = PrometheusClient("http://simulated", opener=opener(counters))
    # pod 0: 600; pod 1: 400 before its restart, 0 at it, 600 after (what it trained between 20 and 30 s is lost)
    assert trained(client, NS, "job", since_s=61, at=60.0) == 600 + 400 + 600
    point = observe(client, NS, "job", 2, window_s=25, at=60.0)  # the samples at 40, 50, 60
    assert point is not None and point.examples_per_s == pytest.approx(30.0)
    assert (point.samples, point.series, point.resets) == (6, 2, 0)


class Trainer:
    """Runs the simulated job at the worker count the emulator's TFJob says, scraping as it goes."""

    def __init__(self, emu: KubeEmulator, job: SimulatedJob) -> None:
        self.emu, self.job = emu, job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def workers(self) -> int:
        return int(self.emu.get("tfjobs", NS, self.job.name)["spec"]["tfReplicaSpecs"]["Worker"]["replicas"])

    def _run(self) -> None:
        last = time.time()
        while not self._stop.wait(SCRAPE_S):
            now = time.time()
            self.job.run(last, now, self.workers(), SCRAPE_S)
            last = now

    def __enter__(self) -> Trainer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def counters() -> Counters:
    return Counters()


@pytest.fixture
def prom(counters: Counters) -> Iterator[PrometheusOnCounters]:
    with PrometheusOnCounters(counters) as p:
        yield p


def events(emu: KubeEmulator, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e.get("message", "")) for e in emu.list("events", NS)
            if e.get("involvedObject", {}).get("name") == name]


def test_a_bandwidth_stated_twice_too_high_converges_to_the_cheapest_workers(
        emu: KubeEmulator, prom: PrometheusOnCounters, counters: Counters, tmp_path) -> None:
    settings = settings_for(tmp_path, leader_election=False, mode="auto", max_workers=6, bandwidth="200Mbit/s",
                            congestion_control="cubic", queue="100ms",
                            prices={"worker_per_hour": 1.0, "ps_per_hour": 2.0},
                            refit_enabled=True, refit_prometheus_url=prom.url, refit_min_observation_s=WINDOW_S,
                            refit_interval_s=WINDOW_S, refit_tolerance=0.1, auto_min_gain=0.05, auto_cooldown_s=0)
    job = SimulatedJob(NS, "cnn", TRUTH.__getitem__, counters, noise=0.03, window_s=WINDOW_S, seed=1)
    controller = start_controller(emu, settings, canned=False)
    try:
        create_tfjob(emu, tfjob("cnn", workers=2, dynamic=True))
        pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
        assert upload_as_profiling_pod(emu, pj, trace_body("cnn_bw100")).ok
        emu.patch("tfjobs", NS, "cnn", {"status": {"startTime": "2026-01-01T00:00:00Z", "conditions": [
            {"type": "Running", "status": "True", "reason": "TFJobRunning"}]}}, subresource="status")
        with Trainer(emu, job) as trainer:
            wait_for("Predicted", lambda: phase(emu, "cnn") == "Predicted", timeout_s=180)
            notes = annotations(emu, "cnn")
            if notes[PREFIX + "curve-source"] == "profile":  # anchored on the profile, not the stated links
                first = json.loads(notes[PREFIX + "curve"])
                assert min(range(1, 7), key=lambda w: (w + 2) / first[w - 1][1]) in (3, 4)
            # the job leaves 2 for a count within the hysteresis of the cheapest (3; 4 costs 3.0 % more
            # per example, under the 5 % a resize must promise), once what it does is known
            wait_for("the calibrated resize", lambda: trainer.workers() in NEAR_CHEAPEST - {2}
                     and len(job.workers_seen) > 1, timeout_s=300)
            # and settles: the count it runs observed, and no resize for 4 windows (a first count
            # of 4, once observed, may still move to 3: that is its one reversal)
            last = {"w": trainer.workers(), "since": time.time()}

            def settled() -> int | None:
                w = trainer.workers()
                if w != last["w"]:
                    last.update(w=w, since=time.time())
                observed = [p["workers"] for p in json.loads(annotations(emu, "cnn").get(PREFIX + "refit", "{}"))
                            .get("points", [])]
                return w if w in observed and time.time() - last["since"] >= 4 * WINDOW_S else None

            chosen = wait_for("the job settled", settled, timeout_s=240)
            assert chosen in NEAR_CHEAPEST
            # the refitted curve's annotations are a patch of their own beside the resize: wait for them
            notes = wait_for("the refitted curve noted", lambda: (lambda n: n if n.get(PREFIX + "curve-source") == "refit"
                                                                  else None)(annotations(emu, "cnn")), timeout_s=30)
            assert notes[PREFIX + "curve-source"] == "refit"
            refit = json.loads(notes[PREFIX + "refit"])
            assert refit["rule"] == "posterior"
            for p in refit["points"]:
                assert p["observed"] == pytest.approx(TRUTH[p["workers"]], rel=0.15)
            curve = json.loads(notes[PREFIX + "curve"])
            for p in refit["points"]:  # narrowed to about the observation's noise where observed
                w, thr, low, high = curve[p["workers"] - 1]
                # around what was observed (one window's 3 % noise can put the truth just outside)
                assert low <= p["observed"] <= high and (high - low) / thr < 0.2
                assert thr == pytest.approx(TRUTH[w], rel=0.15)
            # the link's goodput took the blame for the 2x: well below the stated 0.95. (Not asked of
            # a refit on W = 2 alone: 2 workers at 200 Mbit/s are predicted within the model's W = 2
            # error of the truth, so one noisy window there can leave the stated values likelier.)
            refit = json.loads(annotations(emu, "cnn")[PREFIX + "refit"])
            assert refit["parameters"]["goodput"]["after"] <= 0.7, refit
            # at most one reversal, ending within the hysteresis of the cheapest
            seen = [w for _, w in job.workers_seen]
            steps = [b - a for a, b in zip(seen, seen[1:])]
            assert seen[0] == 2 and seen[-1] == chosen and sum(1 for a, b in zip(steps, steps[1:]) if a * b < 0) <= 1
            assert sum(1 for _, r, _ in events(emu, "cnn") if r == "Resized") == len(seen) - 1

            # bad input: a pod that restarts (its counter back to 0; again and again, since a
            # restart between two observation windows is in neither) ...
            def restarted() -> bool:
                job.restart(0)
                return ("Warning", "ObservedCounterReset") in {(t, r) for t, r, _ in events(emu, "cnn")}

            wait_for("the reset event", restarted, timeout_s=60)
            # ... and a pod whose series stops (its exporter or scrape broke)
            job.silence(1)
            wait_for("the missing-series event", lambda: ("Warning", "ObservedSeriesMissing") in {
                (t, r) for t, r, _ in events(emu, "cnn")}, timeout_s=60)
            time.sleep(2 * WINDOW_S)
            assert trainer.workers() == chosen  # the last good decision stays
            assert phase(emu, "cnn") == "Predicted"
    finally:
        controller.stop()
