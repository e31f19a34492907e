"""A real Prometheus server on loopback, scraping one target every second, for tests.

``PrometheusServer`` writes a temporary config (one static target, or the scrape configs given,
e.g. ``operator_scrape``'s copies of what the Prometheus Operator generates; optional rule files), starts
the ``prometheus`` binary (Debian's package: ``apt-get install -y --no-install-recommends
prometheus``) with its own data directory and a free port on 127.0.0.1, and answers PromQL
through the HTTP API. ``controller_flow`` points it at a whole running controller. Nothing here
reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

SCRAPE_INTERVAL_S = 1
JOB = "advisor"


class PrometheusError(RuntimeError):
    pass


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """``with PrometheusServer(workdir, "127.0.0.1:8080") as prom: prom.query("up")``."""

    def __init__(self, workdir: Path, target: str, *, rule_files: Sequence[Path] = (),
                 binary: str | None = None, startup_timeout_s: float = 30.0,
                 extra_targets: Sequence[tuple[str, Mapping[str, str]]] = (),
                 scrape_configs: Sequence[Mapping[str, Any]] = ()) -> None:
        """``extra_targets``: (host:port, target labels) scraped as job ``training``.
        ``scrape_configs``: when given, they replace the static job ``advisor`` for ``target``
        (which must then be scraped by one of them with ``job="advisor"``)."""
        self.workdir, self.target, self.rule_files = workdir, target, list(rule_files)
        self.extra_targets = list(extra_targets)
        self.scrape_configs = [dict(c) for c in scrape_configs]
        self.binary = binary or prometheus_binary()
        if self.binary is None:
            raise PrometheusError("the prometheus binary is not installed")
        self.startup_timeout_s = startup_timeout_s
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        config = {
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
                       "scrape_timeout": f"{SCRAPE_INTERVAL_S}s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [{"job_name": JOB, "metrics_path": "/metrics",
                                "static_configs": [{"targets": [self.target]}]}],
        }
        if self.scrape_configs:
            config["scrape_configs"] = self.scrape_configs
        if self.extra_targets:
            config["scrape_configs"].append({"job_name": "training", "metrics_path": "/metrics", "static_configs": [
                {"targets": [target], "labels": dict(labels)} for target, labels in self.extra_targets]})
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self._log = (self.workdir / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [self.binary, f"--config.file={config_file}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self._process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus not ready within {self.startup_timeout_s} s: {self.log_tail()}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
            self._log.close()

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the "data" of a successful answer, else PrometheusError."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}")
        return list(data["result"])

    def label_values(self, label: str, selector: str | None = None) -> list[str]:
        params = {"match[]": selector} if selector else {}
        return list(self.api(f"label/{label}/values", **params))

    def scrapes(self) -> int:
        """How many samples of ``up`` the target has: one per scrape."""
        result = self.query(f'count_over_time(up{{job="{JOB}"}}[1h])')
        return int(float(result[0]["value"][1])) if result else 0

    def wait_for_scrapes(self, count: int, timeout_s: float = 30.0) -> None:
        """Until the target has been scraped ``count`` more times, successfully."""
        goal = self.scrapes() + count
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.scrapes() >= goal:
                up = self.query(f'up{{job="{JOB}"}}')
                if not up or up[0]["value"][1] != "1":
                    raise PrometheusError(f"target {self.target} is down: {self.api('targets')}")
                return
            time.sleep(0.2)
        raise PrometheusError(f"fewer than {count} scrapes of {self.target} in {timeout_s} s: {self.log_tail()}")

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    values = [float(s["value"][1]) for s in result if "value" in s]
    values += [float(v[1]) for s in result for v in s.get("values", [])]
    return [v for v in values if math.isfinite(v)]
