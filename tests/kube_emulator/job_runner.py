"""A stand-in for the Job controller and the kubelet: runs batch/v1 Jobs of the emulator for real.

The emulator stores Jobs but nothing runs them. ``JobRunner`` watches the Jobs of one namespace
and, for each, does what kube-controller-manager's Job controller and a kubelet would: creates a
pod from the template (owned by the Job, with the template's labels), resolves the container's
environment (``value`` and ``secretKeyRef``, waiting with ``CreateContainerConfigError`` while the
Secret is missing), runs the container's ``command`` + ``args`` as a real subprocess, records its
output as the pod's log, sets the pod's status (``terminated`` with the exit code, and for a
failure under ``terminationMessagePolicy: FallbackToLogsOnError`` the output's tail, at most 80
lines and 2048 bytes, as the message) and the Job's status as Kubernetes v1.31 writes it
(``startTime``, ``active``, ``failed``/``succeeded``; conditions SuccessCriteriaMet + Complete, or
FailureTarget + Failed with reason ``BackoffLimitExceeded``, ``DeadlineExceeded`` or
``PodFailurePolicy``). A failed pod is replaced until ``backoffLimit`` is exceeded (without the
real controller's 10 s, 20 s... backoff); ``activeDeadlineSeconds`` kills the running pod;
deleting the Job kills it too. ``podFailurePolicy`` is applied as pkg/controller/job/
pod_failure_policy.go does: the first rule matching the failed pod decides; ``FailJob`` fails the
Job at once (with its message text), ``Ignore`` replaces the pod without counting it, ``Count``
(and no match) counts it.

An image not in ``images`` is not pulled: the pod waits in ``ImagePullBackOff`` (until the Job's
deadline or deletion), as a kubelet does for an image it cannot get. ``hold()`` keeps new Jobs
from starting (the Job controller has not got to them yet) until ``release()``; ``command``
rewrites a container's argv (e.g. to make it fail); ``evict(job, times)`` evicts the Job's
running pod (or its next ones, once they run) as the Eviction API does: condition ``DisruptionTarget``
(``EvictionByEvictionAPI``), SIGTERM, phase Failed. Not emulated: several containers or
completions, indexed Jobs (``FailIndex``), suspend, ``ttlSecondsAfterFinished``, the
``/dev/termination-log`` file (only the logs fallback), resource limits, scheduling (every pod
runs on one node whatever its nodeSelector, tolerations or priority).

It works on the emulator's store in-process (as the emulator's other actors do), so its own
requests do not appear in ``KubeEmulator.calls()``, which record the client under test.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.kube_emulator import status as st
from tests.kube_emulator.server import KubeEmulator
from tests.kube_emulator.store import CLOSE_ABRUPT, CLOSE_CLEAN, now_rfc3339

Obj = dict[str, Any]
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # kubelet's FallbackToLogsOnError limits


@dataclass(frozen=True)
class PodRun:
    """One container run: the Job, the pod, what ran and how it ended."""

    job: str
    pod: str
    argv: tuple[str, ...]
    exit_code: int
    output: str


class _Gone(Exception):
    """The Job was deleted, its deadline passed, or the runner is stopping."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class JobRunner:
    def __init__(self, emu: KubeEmulator, namespace: str, *, images: Iterable[str] = ("advisor:test",),
                 command: Callable[[list[str]], list[str]] | None = None) -> None:
        self.emu, self.namespace = emu, namespace
        self.images = frozenset(images)
        self.command = command
        self.runs: list[PodRun] = []
        self._jobs = emu.resource("jobs.batch")
        self._stop = threading.Event()
        self._go = threading.Event()
        self._go.set()
        self._seen: set[str] = set()
        self._evict: dict[str, int] = {}  # Job name -> how many of its pods are to be evicted
        self._threads: list[threading.Thread] = []
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._home = tempfile.TemporaryDirectory(prefix="job-runner-")

    # --- controls ------------------------------------------------------------------------------
    def __enter__(self) -> JobRunner:
        self._spawn(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._go.set()
        with self._lock:
            for proc in self._procs:
                proc.kill()
        for t in list(self._threads):
            t.join(timeout=10)
        self._home.cleanup()

    def hold(self) -> None:
        """New Jobs wait (no pod) until ``release()``."""
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def evict(self, job_name: str, times: int = 1) -> None:
        """Evict the Job's running pod, or its next one once it runs; ``times`` pods in a row."""
        with self._lock:
            self._evict[job_name] = self._evict.get(job_name, 0) + times

    # --- the Job controller ----------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.is_set():
            watcher = self.emu.store.open_watch(self._jobs, self.namespace, "0", None, None)
            try:
                while not self._stop.is_set():
                    try:
                        line = watcher.queue.get(timeout=0.05)
                    except queue.Empty:
                        continue
                    if line in (CLOSE_ABRUPT, CLOSE_CLEAN):
                        break
                    event = json.loads(line)
                    if event["type"] == "ADDED":
                        self._adopt(event["object"])
            finally:
                self.emu.store.close_watch(watcher)

    def _adopt(self, job: Obj) -> None:
        uid = job["metadata"]["uid"]
        conditions = (job.get("status") or {}).get("conditions") or []
        finished = any(c.get("type") in ("Complete", "Failed") for c in conditions)
        with self._lock:
            if uid in self._seen or finished:
                return
            self._seen.add(uid)
        self._spawn(lambda: self._run_job(job))

    def _run_job(self, job: Obj) -> None:
        spec = job["spec"]
        while not self._go.wait(0.05):
            if self._stop.is_set():
                return
        started = time.monotonic()
        deadline = started + spec["activeDeadlineSeconds"] if spec.get("activeDeadlineSeconds") else None
        self._job_status(job, {"startTime": now_rfc3339(), "active": 1})
        failed = 0
        try:
            while True:
                pod = self._run_pod(job, deadline)
                if pod.exit_code == 0:
                    return self._finish(job, "Complete", "CompletionsReached",
                                        "Reached expected number of succeeded pods", succeeded=1, failed=failed or None)
                action, message = policy_action(spec.get("podFailurePolicy"), pod)
                if action == "FailJob":
                    return self._finish(job, "Failed", "PodFailurePolicy", message, failed=failed + 1)
                if action == "Ignore":
                    continue
                failed += 1
                if failed > spec.get("backoffLimit", 6):
                    return self._finish(job, "Failed", "BackoffLimitExceeded",
                                        "Job has reached the specified backoff limit", failed=failed)
                self._job_status(job, {"failed": failed})
        except _Gone as gone:
            if gone.why == "deadline":
                self._finish(job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline",
                             failed=failed + 1)

    def _finish(self, job: Obj, kind: str, reason: str, message: str, **counts: int | None) -> None:
        now = now_rfc3339()
        first = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        conditions = [{"type": t, "status": "True", "reason": reason, "message": message, "lastProbeTime": now,
                       "lastTransitionTime": now} for t in (first, kind)]
        status: Obj = {"conditions": conditions, "active": None, **counts}
        if kind == "Complete":
            status["completionTime"] = now
        self._job_status(job, status)

    def _job_status(self, job: Obj, status: Obj) -> None:
        meta = job["metadata"]
        try:
            self.emu.patch("jobs.batch", meta["namespace"], meta["name"], {"status": status}, subresource="status")
        except st.ApiError:  # the Job was deleted meanwhile: nothing to record on
            pass

    # --- the kubelet ---------------------------------------------------------------------------
    def _run_pod(self, job: Obj, deadline: float | None) -> EndedPod:
        template, meta = job["spec"]["template"], job["metadata"]
        suffix = "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        pod_name = f"{meta['name']}-{suffix}"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        self.emu.store.create(self.emu.resource("pods"), self.namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": self.namespace,
                         "labels": dict(template["metadata"].get("labels") or {}), "ownerReferences": [owner]},
            "spec": {**template["spec"], "nodeName": "emulated-node"}})
        container = template["spec"]["containers"][0]
        if container["image"] not in self.images:
            self._container_waiting(pod_name, container, "ImagePullBackOff",
                                    f'Back-off pulling image "{container["image"]}"')
            while True:
                self._check(job, deadline)
                time.sleep(0.05)
        env = self._environment(job, pod_name, container, deadline)
        self._pod_status(pod_name, "Running", container, {"running": {"startedAt": now_rfc3339()}})
        argv = [*container.get("command", []), *container.get("args", [])]
        argv = self.command(argv) if self.command else argv
        code, output, evicted = self._exec(job, argv, env, deadline)
        self.emu.set_pod_log(self.namespace, pod_name, output)
        terminated: Obj = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                           "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}
        if code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            terminated["message"] = _tail(output)
        conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                       "message": "Eviction API: evicting", "lastTransitionTime": now_rfc3339()}] if evicted else []
        self._pod_status(pod_name, "Succeeded" if code == 0 else "Failed", container, {"terminated": terminated},
                         conditions)
        with self._lock:
            self.runs.append(PodRun(meta["name"], pod_name, tuple(argv), code, output))
        return EndedPod(self.namespace, pod_name, container["name"], code, tuple(c["type"] for c in conditions))

    def _environment(self, job: Obj, pod: str, container: Obj, deadline: float | None) -> dict[str, str]:
        bin_dir = os.path.dirname(sys.executable)  # the image's PATH: the advisor console script first
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": self._home.name,
               "LANG": "C.UTF-8",
               # this checkout's package, not the one the console script was installed from
               "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            ref = item["valueFrom"]["secretKeyRef"]
            while (secret := self.emu.get("secrets", self.namespace, ref["name"])) is None:
                self._container_waiting(pod, container, "CreateContainerConfigError",
                                        f'secret "{ref["name"]}" not found')
                self._check(job, deadline)
                time.sleep(0.05)
            env[item["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _exec(self, job: Obj, argv: list[str], env: dict[str, str],
              deadline: float | None) -> tuple[int, str, bool]:
        """(exit code as a container reports it, output, whether it was evicted)."""
        name, evicted = job["metadata"]["name"], False
        with tempfile.TemporaryFile(mode="w+") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                    cwd=self._home.name)
            with self._lock:
                self._procs.add(proc)
            try:
                while proc.poll() is None:
                    try:
                        self._check(job, deadline)
                    except _Gone:
                        proc.kill()
                        proc.wait()
                        raise
                    with self._lock:
                        if self._evict.get(name, 0) > 0 and not evicted:
                            self._evict[name] -= 1
                            evicted = True
                            proc.terminate()  # the kubelet's SIGTERM (the grace period is not waited out)
                    time.sleep(0.05)
            finally:
                with self._lock:
                    self._procs.discard(proc)
            out.seek(0)
            code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode  # killed by a signal
            return code, out.read(), evicted

    def _check(self, job: Obj, deadline: float | None) -> None:
        if self._stop.is_set():
            raise _Gone("stopping")
        current = self.emu.get("jobs.batch", self.namespace, job["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != job["metadata"]["uid"]:
            raise _Gone("deleted")
        if deadline is not None and time.monotonic() > deadline:
            raise _Gone("deadline")

    def _container_waiting(self, pod: str, container: Obj, reason: str, message: str) -> None:
        self._pod_status(pod, "Pending", container, {"waiting": {"reason": reason, "message": message}})

    def _pod_status(self, pod: str, phase: str, container: Obj, state: Obj,
                    conditions: list[Obj] | None = None) -> None:
        status: Obj = {"phase": phase, "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": "running" in state,
            "started": "running" in state, "restartCount": 0, "state": state}]}
        if conditions:
            status["conditions"] = conditions
        try:
            self.emu.patch("pods", self.namespace, pod, {"status": status}, subresource="status")
        except st.ApiError:  # deleted with its Job
            pass

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name="job-runner", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()


@dataclass(frozen=True)
class EndedPod:
    """How a pod ended, as podFailurePolicy looks at it (its one container)."""

    namespace: str
    name: str
    container: str
    exit_code: int
    conditions: tuple[str, ...]  # types of the pod's conditions with status True


def policy_action(policy: Obj | None, pod: EndedPod) -> tuple[str, str]:
    """(action, message) of the first podFailurePolicy rule matching the failed pod; ("Count", "")
    when none does. Messages as the Job controller writes them (pod_failure_policy.go)."""
    for index, rule in enumerate((policy or {}).get("rules") or []):
        codes = rule.get("onExitCodes")
        if codes is not None:
            if codes.get("containerName") not in (None, pod.container):
                continue
            listed = pod.exit_code in codes["values"]
            if pod.exit_code != 0 and listed == (codes["operator"] == "In"):
                return rule["action"], (f"Container {pod.container} for pod {pod.namespace}/{pod.name} failed with "
                                        f"exit code {pod.exit_code} matching {rule['action']} rule at index {index}")
        for pattern in rule.get("onPodConditions") or []:
            if pattern.get("status", "True") == "True" and pattern["type"] in pod.conditions:
                return rule["action"], (f"Pod {pod.namespace}/{pod.name} has condition {pattern['type']} matching "
                                        f"{rule['action']} rule at index {index}")
    return "Count", ""


def _tail(output: str) -> str:
    text = "".join(output.splitlines(keepends=True)[-LOG_TAIL_LINES:])
    return text.encode()[-LOG_TAIL_BYTES:].decode(errors="ignore")
