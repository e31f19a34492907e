"""HTTPS for the controller's one port, with a certificate that may be renewed while it runs.

Why: trace uploads carry a bearer token and a job's trace; on a shared cluster network they
should be encrypted. The Helm chart's ``tls`` option mounts a ``kubernetes.io/tls`` Secret (its
own, or one a cert-manager Certificate keeps renewed) and sets ``ADVISOR_TLS_CERT_FILE`` and
``ADVISOR_TLS_KEY_FILE``; the HTTP server then wraps every accepted connection with
``ServerTls.wrap``. The files are checked for a change (a renewed Secret is swapped in
atomically by the kubelet) at most every ``RECHECK_S`` seconds, so a renewal needs no restart;
a pair that fails to load (caught mid-update) keeps the previous one in service and is logged.
TLS 1.2 at least. The handshake runs in the connection's own thread, on its first read, so a
slow client cannot hold up ``accept``.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping

from advisor.errors import AdvisorError

ENV_CERT = "ADVISOR_TLS_CERT_FILE"
ENV_KEY = "ADVISOR_TLS_KEY_FILE"
RECHECK_S = 10.0

logger = logging.getLogger(__name__)


class TlsError(AdvisorError):
    """The TLS settings or files are unusable."""


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


class ServerTls:
    """A server-side TLS context loaded from a PEM certificate chain and key, reloaded when they change."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        try:
            self._stamps = (_stamp(cert_file), _stamp(key_file))
        except OSError as exc:
            raise TlsError(f"TLS certificate or key not readable: {exc}") from exc
        self._context = self._load()
        self._checked = time.monotonic()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerTls | None:
        """From ``ADVISOR_TLS_CERT_FILE`` and ``ADVISOR_TLS_KEY_FILE``; None (plain HTTP) when neither is set."""
        env = os.environ if environ is None else environ
        cert, key = env.get(ENV_CERT, ""), env.get(ENV_KEY, "")
        if not cert and not key:
            return None
        if not cert or not key:
            raise TlsError(f"set both {ENV_CERT} and {ENV_KEY} for TLS, or neither")
        return cls(cert, key)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load TLS certificate {self.cert_file} with key {self.key_file}: {exc}") from exc
        return context

    def context(self) -> ssl.SSLContext:
        """The current context, reloaded first if the files changed since the last check."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= RECHECK_S:
                self._checked = now
                self._reload_if_changed()
            return self._context

    def _reload_if_changed(self) -> None:
        try:
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        except OSError as exc:
            logger.warning("TLS files not readable, keeping the loaded certificate: %s", exc)
            return
        if stamps == self._stamps:
            return
        try:
            self._context = self._load()
        except TlsError as exc:
            logger.warning("%s; keeping the loaded certificate", exc)
            return
        self._stamps = stamps
        logger.info("TLS certificate reloaded from %s", self.cert_file)

    def wrap(self, sock: socket.socket) -> ssl.SSLSocket:
        """One accepted connection, server side; the handshake happens on its first read."""
        return self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
