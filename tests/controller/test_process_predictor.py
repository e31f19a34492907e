"""The process backend survives its worker processes: real workers, really killed (SIGKILL, as the
OOM killer does).

A dead worker breaks a ``ProcessPoolExecutor`` for good; these tests check that the predictor
replaces the pool, runs the predictions that were in it again, reports the one that kills its
worker every time (with how it died) instead of retrying it forever, and says so on ``health``
when no worker can start at all.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from advisor.controller.web.metrics import Metrics
from advisor.controller.pipeline.predictions import PredictionParams, ProcessPredictor
from tests.controller.harness import (
    NS, canned_prediction, create_tfjob, phase, profiling_jobs, settings_for, start_controller, trace_body,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator

PARAMS = PredictionParams(bandwidth_bps=1e8, max_workers=4, target_rel_halfwidth=0.05, seed=0, worker_price=1.0,
                          ps_price=1.0, saturation_threshold=0.05)
TIMEOUT_S = 90.0  # spawning a worker imports the package: slow on a loaded machine


def scripted(profile_doc: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """A runner (module-level: the worker imports it) that appends its worker's pid to
    ``profile_doc["pids"]``, then does what ``profile_doc["acts"]`` says for this attempt (the
    last act repeats): ``ok`` answers, ``wait`` waits to be killed, ``die`` kills its worker."""
    pids = Path(profile_doc["pids"])
    with pids.open("a") as fh:
        fh.write(f"{os.getpid()}\n")
    acts = profile_doc["acts"]
    act = acts[min(len(pids.read_text().split()), len(acts)) - 1]
    if act == "wait":
        time.sleep(TIMEOUT_S)
    elif act == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return canned_prediction(profile_doc, params)


def killed_once(profile_doc: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """``scripted`` for the controller, whose profiles are real: pids go to ``$TEST_WORKER_PIDS``
    and the first attempt waits to be killed."""
    return scripted({"pids": os.environ["TEST_WORKER_PIDS"], "acts": ["wait", "ok"]}, params)


class Reports:
    """The predictor's ``on_done`` calls, by key."""

    def __init__(self) -> None:
        self.done: dict[str, tuple[str | None, str | None]] = {}
        self.lock = threading.Lock()

    def __call__(self, key: str, result: str | None, error: str | None) -> None:
        with self.lock:
            assert key not in self.done, f"{key} reported twice"
            self.done[key] = (result, error)

    def wait(self, key: str) -> tuple[str | None, str | None]:
        wait_until(f"{key} reported", lambda: key in self.done)
        return self.done[key]


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:  # dead and reaped (by the pool)
        return True
    return False


@pytest.fixture
def predictor() -> Any:
    reports = Reports()
    p = ProcessPredictor(1, Metrics(), reports, runner=scripted)
    p.reports = reports  # type: ignore[attr-defined]
    yield p
    p.shutdown()


def job(tmp_path: Path, key: str, *acts: str) -> dict[str, Any]:
    return {"pids": str(tmp_path / f"{key}.pids"), "acts": list(acts)}


def outcomes(p: ProcessPredictor) -> dict[str, float]:
    counter = p._metrics.predictions  # noqa: SLF001 - the counter the predictor was given
    return {o: counter.labels(o)._value.get() for o in ("succeeded", "failed", "retried")}


def test_a_worker_killed_mid_prediction_is_replaced_and_the_prediction_runs_again(predictor, tmp_path) -> None:
    a = job(tmp_path, "a", "wait", "ok")
    assert predictor.submit("a", a, PARAMS)
    first = wait_until("the worker to start a", lambda: pids(Path(a["pids"])))[0]
    os.kill(first, signal.SIGKILL)
    result, error = predictor.reports.wait("a")
    assert error is None and result is not None, error
    assert len(pids(Path(a["pids"]))) == 2 and pids(Path(a["pids"]))[1] != first  # a new worker ran it
    wait_until("a forgotten once reported", lambda: not predictor.running("a"))
    # the pool works for new predictions too
    assert predictor.submit("b", job(tmp_path, "b", "ok"), PARAMS)
    assert predictor.reports.wait("b")[1] is None
    assert outcomes(predictor) == {"succeeded": 2, "failed": 0, "retried": 1}
    assert predictor.health() == (True, "ok")


def test_a_key_stays_running_until_its_outcome_is_handed_over(tmp_path) -> None:
    """While ``on_done`` stores the outcome, a reconcile of a job waiting for it must find the key
    running (or the outcome stored): forgotten before, the reconcile finds neither and starts the
    same prediction again (seen on a loaded machine: three predictions where two were due)."""
    seen: list[tuple[bool, bool]] = []
    predictor: ProcessPredictor

    def on_done(key: str, result: str | None, error: str | None) -> None:
        time.sleep(0.2)  # a slow store write
        seen.append((predictor.running(key), predictor.submit(key, job(tmp_path, "again", "ok"), PARAMS)))

    predictor = ProcessPredictor(1, Metrics(), on_done, runner=scripted)
    try:
        assert predictor.submit("a", job(tmp_path, "a", "ok"), PARAMS)
        wait_until("a reported", lambda: seen)
        assert seen == [(True, False)]  # still running while handed over; a second submit does not start it
        wait_until("a forgotten", lambda: not predictor.running("a"))
        assert not Path(tmp_path / "again.pids").exists()  # the prediction ran once
        assert outcomes(predictor)["succeeded"] == 1
    finally:
        predictor.shutdown()


def test_a_worker_killed_while_idle_is_replaced_at_the_next_submit(predictor, tmp_path) -> None:
    a = job(tmp_path, "a", "ok")
    assert predictor.submit("a", a, PARAMS)
    assert predictor.reports.wait("a")[1] is None
    worker = pids(Path(a["pids"]))[0]
    os.kill(worker, signal.SIGKILL)
    wait_until("the pool to see its worker die", lambda: gone(worker))  # the pool is broken now
    b = job(tmp_path, "b", "ok")
    assert predictor.submit("b", b, PARAMS)
    result, error = predictor.reports.wait("b")
    assert error is None and result is not None, error
    assert pids(Path(b["pids"]))[0] != worker
    assert outcomes(predictor) == {"succeeded": 2, "failed": 0, "retried": 0}


def test_a_profile_that_kills_its_worker_fails_and_the_others_complete(predictor, tmp_path) -> None:
    # One worker: "innocent" waits behind "killer" in the pool and breaks with it the first time.
    assert predictor.submit("killer", job(tmp_path, "killer", "die"), PARAMS)
    assert predictor.submit("innocent", job(tmp_path, "innocent", "ok"), PARAMS)
    assert not predictor.submit("killer", job(tmp_path, "killer", "die"), PARAMS)  # one run per key
    result, error = predictor.reports.wait("killer")
    assert result is None and error is not None
    assert "the prediction worker process died (killed by SIGKILL) twice" in error
    assert len(pids(tmp_path / "killer.pids")) == 2  # tried twice, not forever
    result, error = predictor.reports.wait("innocent")
    assert error is None and result is not None, error
    assert outcomes(predictor) == {"succeeded": 1, "failed": 1, "retried": 2}


def test_health_says_when_no_worker_can_start(predictor, tmp_path, monkeypatch) -> None:
    a = job(tmp_path, "a", "ok")
    assert predictor.submit("a", a, PARAMS)
    assert predictor.reports.wait("a")[1] is None
    worker = pids(Path(a["pids"]))[0]
    os.kill(worker, signal.SIGKILL)
    wait_until("the pool to see its worker die", lambda: gone(worker))

    def no_processes() -> Any:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(predictor, "_new_pool", no_processes)
    assert predictor.submit("b", job(tmp_path, "b", "ok"), PARAMS)
    result, error = predictor.reports.wait("b")
    assert result is None and error == "prediction not started: OSError: [Errno 24] Too many open files"
    assert predictor.health() == (False, "prediction workers cannot start: OSError: [Errno 24] Too many open files")
    monkeypatch.undo()  # processes can start again: so can predictions, and health is back
    assert predictor.submit("c", job(tmp_path, "c", "ok"), PARAMS)
    assert predictor.reports.wait("c")[1] is None
    assert predictor.health() == (True, "ok")


def test_the_controller_predicts_a_job_whose_worker_was_killed(tmp_path, monkeypatch) -> None:
    """Through the whole controller: the job is Predicted, not Failed, and /healthz stays ok."""
    worker_pids = tmp_path / "workers.pids"
    monkeypatch.setenv("TEST_WORKER_PIDS", str(worker_pids))  # before the pool spawns its worker
    with KubeEmulator(namespaces=[NS], bookmark_interval_s=0.5) as emu:
        controller = start_controller(emu, settings_for(tmp_path, leader_election=False), runner=killed_once)
        try:
            create_tfjob(emu, tfjob("oom"))
            pj = wait_for("the profiling run", lambda: profiling_jobs(emu))[0]
            assert upload_as_profiling_pod(emu, pj, trace_body("mlp_bw100")).ok
            first = wait_until("the worker to start the prediction", lambda: pids(worker_pids))[0]
            wait_for("Predicting", lambda: phase(emu, "oom") == "Predicting")
            os.kill(first, signal.SIGKILL)
            wait_for("Predicted", lambda: phase(emu, "oom") == "Predicted", timeout_s=TIMEOUT_S)
            assert controller.metrics.predictions.labels("retried")._value.get() == 1
            assert controller.healthy() == (True, "ok")
        finally:
            controller.stop()
