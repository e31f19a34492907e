"""The controller's HTTP port over TLS (advisor/tls.py): served with the mounted certificate,
plain HTTP refused, a renewed certificate picked up without a restart, bad settings named."""

from __future__ import annotations

import http.client
import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor import tls
from advisor.controller.web.http_api import HttpApi
from advisor.controller.web.metrics import Metrics


def make_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 with common name ``name`` (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HttpApi, Path, Path]]:
    """An HttpApi whose environment points at tls.crt/tls.key in ``tmp_path`` (as the chart mounts them)."""
    cert, key = make_cert(tmp_path, "first")
    shutil.copy(cert, tmp_path / "tls.crt")
    shutil.copy(key, tmp_path / "tls.key")
    monkeypatch.setenv(tls.ENV_CERT, str(tmp_path / "tls.crt"))
    monkeypatch.setenv(tls.ENV_KEY, str(tmp_path / "tls.key"))
    api = HttpApi("127.0.0.1", 0, metrics=Metrics(), verify_token=lambda *a: False, accept_trace=lambda *a: None,
                  healthy=lambda: (True, ""), ready=lambda: (True, ""), max_bytes=1024, max_inflated_bytes=1024)
    api.start()
    try:
        yield api, tmp_path / "tls.crt", tmp_path / "tls.key"
    finally:
        api.stop()


def get_healthz(api: HttpApi, trust: Path) -> tuple[int, str]:
    """GET /healthz over HTTPS trusting only ``trust``; (status, the server certificate's common name)."""
    context = ssl.create_default_context(cafile=str(trust))
    conn = http.client.HTTPSConnection("127.0.0.1", api.port, context=context, timeout=10)
    try:
        conn.request("GET", "/healthz")
        subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])  # type: ignore[union-attr]
        return conn.getresponse().status, subject["commonName"]
    finally:
        conn.close()


def test_serves_https_with_the_mounted_certificate(served: tuple[HttpApi, Path, Path]) -> None:
    api, cert, _ = served
    assert get_healthz(api, cert) == (200, "first")


def test_plain_http_gets_no_answer(served: tuple[HttpApi, Path, Path]) -> None:
    api, _, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.getresponse()
    finally:
        conn.close()


def test_a_renewed_certificate_is_served_without_a_restart(served: tuple[HttpApi, Path, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    api, cert, key = served
    new_cert, new_key = make_cert(cert.parent, "renewed")
    # the kubelet swaps a Secret volume's files at once; here: replace both, then let the recheck time pass
    os.replace(new_key, key)
    os.replace(new_cert, cert)
    monkeypatch.setattr(tls, "RECHECK_S", 0.0)
    assert get_healthz(api, cert) == (200, "renewed")


def test_a_broken_renewal_keeps_the_loaded_certificate(served: tuple[HttpApi, Path, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    api, cert, key = served
    trusted = cert.parent / "trusted.crt"
    shutil.copy(cert, trusted)
    key.write_text("-----BEGIN PRIVATE KEY-----\nhalf written\n")
    monkeypatch.setattr(tls, "RECHECK_S", 0.0)
    assert get_healthz(api, trusted) == (200, "first")


@pytest.mark.parametrize(("env", "message"), [
    ({tls.ENV_CERT: "/x.crt"}, "set both"),
    ({tls.ENV_CERT: "/nonexistent/tls.crt", tls.ENV_KEY: "/nonexistent/tls.key"}, "not readable"),
])
def test_bad_settings_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(tls.TlsError, match=message):
        tls.ServerTls.from_env(env)


def test_no_settings_means_plain_http() -> None:
    assert tls.ServerTls.from_env({}) is None
