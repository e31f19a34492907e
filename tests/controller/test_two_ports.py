"""The wired controller: ingest on ``http_port``, metrics and probes on ``metrics_port``, or both
on one port when the two settings name the same one."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from tests.controller.harness import free_port, settings_for, start_controller, wait_for
from tests.kube_emulator import KubeEmulator


def status(port: int, path: str, method: str = "GET") -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"{}" if method == "POST" else None,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_metrics_and_probes_are_on_their_own_port(emu: KubeEmulator, tmp_path: Path) -> None:
    controller = start_controller(emu, settings_for(tmp_path))
    try:
        ingest, ops = controller.http.port, controller.ops_http.port
        assert ingest != ops
        wait_for("ready", lambda: status(ops, "/readyz") == 200)
        assert status(ops, "/metrics") == 200 and status(ops, "/healthz") == 200
        assert status(ingest, "/metrics") == 404 and status(ingest, "/readyz") == 404
        assert status(ingest, "/v1/traces/ml/mnist/1", "POST") == 401  # ingest answers: a token is needed
        assert status(ops, "/v1/traces/ml/mnist/1", "POST") == 404
    finally:
        controller.stop()


def test_one_port_serves_everything_when_both_settings_name_it(emu: KubeEmulator, tmp_path: Path) -> None:
    port = free_port()
    controller = start_controller(emu, settings_for(tmp_path, http_port=port, metrics_port=port))
    try:
        assert controller.ops_http is None and controller.http.port == port
        wait_for("ready", lambda: status(port, "/readyz") == 200)
        assert status(port, "/metrics") == 200
        assert status(port, "/v1/traces/ml/mnist/1", "POST") == 401
    finally:
        controller.stop()
