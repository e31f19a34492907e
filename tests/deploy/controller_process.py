"""``advisor controller`` as its own OS process, connected to the API emulator, as a user runs it.

The benchmark (the controller's memory, measured alone) and the dashboard test (a real
Prometheus scraping a whole running controller) need the controller exactly as deployed: the
``advisor`` console script, its settings in a YAML file (what the chart's ConfigMap holds), a
kubeconfig, one process with its own memory and its own spawned prediction workers. The
emulator (``tests.kube_emulator``) runs in the calling process; ``ControllerProcess`` writes the
two files, starts the controller, waits for a probe, reads its /metrics over HTTP and its memory
from /proc, and stops it with SIGTERM as the kubelet does. Nothing here edits the controller.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.controller.harness import NS, free_port
from tests.kube_emulator import KubeEmulator

MB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]


def controller_command() -> list[str]:
    """The console script installed beside this interpreter (what ``pip install`` gives a user)."""
    script = Path(sys.executable).with_name("advisor")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "advisor.cli"]


def settings_for_process(workdir: Path, **overrides: Any) -> dict[str, Any]:
    """The settings YAML for a controller watching ``NS`` in the emulator, on a free loopback port."""
    port = overrides.pop("http_port", None) or free_port()
    settings: dict[str, Any] = {
        "namespaces": [NS], "store_path": str(workdir / "advisor.db"), "http_port": port,
        "metrics_port": overrides.pop("metrics_port", None) or free_port(),
        "ingest_url": f"http://127.0.0.1:{port}", "leader_election": False, "lease_namespace": NS,
        "identity": "advisor-0", "max_workers": 4, "prediction_target": 0.05, "log_level": "WARNING",
        "prices": {"worker_per_hour": 1.0, "ps_per_hour": 1.0},
        "ingest_key": "a-test-key-of-at-least-16-bytes",  # one key, so a restart keeps runs' tokens valid
    }
    settings.update(overrides)
    return settings


@dataclass(frozen=True)
class ProcessMemory:
    """One process's resident memory from /proc/PID/status: now (VmRSS) and its peak (VmHWM)."""

    pid: int
    role: str
    rss_bytes: int
    peak_bytes: int

    @property
    def rss_mb(self) -> float:
        return self.rss_bytes / MB

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / MB


class ControllerProcess:
    """``with ControllerProcess(emu, workdir, settings) as ctl: ctl.wait_for_probe("/readyz")``."""

    def __init__(self, emu: KubeEmulator, workdir: Path, settings: Mapping[str, Any], *,
                 env: Mapping[str, str] | None = None) -> None:
        self.emu, self.workdir, self.settings = emu, workdir, dict(settings)
        self.extra_env = dict(env or {})
        # the metrics port: /metrics and the probes (uploads go to settings["http_port"])
        self.url = f"http://127.0.0.1:{self.settings.get('metrics_port') or self.settings['http_port']}"
        self.log_path = workdir / "controller.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ControllerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the controller is not running")
        return self._process.pid

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.emu.write_kubeconfig(self.workdir / "kubeconfig", namespace=NS)
        config = self.workdir / "advisor.yaml"
        config.write_text(yaml.safe_dump(self.settings))
        # The user's environment, minus any ADVISOR_* setting of the caller's (the YAML is the whole story).
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
        # This checkout's package, not whichever one the console script was installed from (an
        # editable install of another worktree would otherwise run other code).
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
        env.update(self.extra_env)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [*controller_command(), "controller", "--config", str(config), "--kubeconfig", str(kubeconfig)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait (the controller stops its threads and its pool); SIGKILL if it hangs."""
        if self._process is None:
            return None
        process, self._process = self._process, None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        return process.returncode

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_for_probe(self, path: str = "/readyz", timeout_s: float = 60.0) -> None:
        """Until ``path`` answers 200; fails with the controller's log if it exits or never does."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise RuntimeError(f"the controller exited ({code}):\n{self.log_tail()}")
            try:
                status, body = self.get(path, timeout_s=2)
                if status == 200:
                    return
                last = f"{status} {body.decode(errors='replace').strip()}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise RuntimeError(f"{path} not 200 within {timeout_s} s (last: {last}):\n{self.log_tail()}")

    def metrics_text(self) -> str:
        status, body = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return body.decode()

    def memory(self) -> list[ProcessMemory]:
        """The controller first, then every process it started (prediction workers, the resource tracker)."""
        return [read_memory(pid, "controller" if pid == self.pid else role_of(pid))
                for pid in [self.pid, *descendants(self.pid)]]


def read_memory(pid: int, role: str) -> ProcessMemory:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024  # reported in kB
    return ProcessMemory(pid, role, fields.get("VmRSS", 0), fields.get("VmHWM", 0))


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``, in pid order (from each /proc/N/stat's parent field)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:  # it ended meanwhile
            continue
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])  # after "pid (comm) state"
    found, frontier = [], [pid]
    while frontier:
        children = sorted(p for p, parent in parents.items() if parent in frontier)
        found += children
        frontier = children
    return found


def role_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "resource_tracker" in cmdline:
        return "resource tracker"
    if "spawn_main" in cmdline:
        return "prediction worker"
    return cmdline[:60]
