"""Upload tokens of profiling runs, derived from one controller key instead of stored per run.

Why: a token kept per run (in the controller's store and a Secret in the job's namespace) needs
cluster-wide rights on Secrets, and is lost with the store when another replica takes over. A
token derived as ``HMAC-SHA256(key, "profiling-run/v1", uid, generation)`` needs neither: every
replica holding the key computes the same token for a job's run, the key lives in ONE Secret in
the controller's own namespace (mounted as a file, so no API right at all), and the token only
opens the upload of that job (uid) and generation, and only while its run is live (ingest checks
that). Rotating the key invalidates the tokens of runs in flight; those runs' uploads are refused
(403) and the jobs end as ``NoTrace`` / time out, nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from pathlib import Path

from advisor.controller.settings import ControllerSettings, SettingsError

log = logging.getLogger(__name__)
MIN_KEY_BYTES = 16
_CONTEXT = b"advisor/profiling-run/v1"
_PREDICTION_CONTEXT = b"advisor/prediction-job/v1"


def run_token(key: bytes, uid: str, generation: int) -> str:
    """The upload token of the profiling run of job ``uid`` at ``generation`` (URL-safe text)."""
    message = b"\x00".join((_CONTEXT, uid.encode(), str(int(generation)).encode()))
    return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode().rstrip("=")


def token_matches(key: bytes, uid: str, generation: int, token: str) -> bool:
    """Constant-time comparison of ``token`` with the run's token."""
    return hmac.compare_digest(run_token(key, uid, generation).encode(), token.encode())


def prediction_token(key: bytes, prediction_key: str, attempt_id: str) -> str:
    """The bearer token of one attempt at a prediction (its Job's, job backend), derived as the
    upload tokens are: a new leader that adopts the attempt from the cluster knows it without the
    old leader's store. ``attempt_id`` names the attempt (the Job's prediction-attempt annotation)."""
    message = b"\x00".join((_PREDICTION_CONTEXT, prediction_key.encode(), attempt_id.encode()))
    return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode().rstrip("=")


def load_key(settings: ControllerSettings) -> bytes:
    """The key from ``ingest_key_file`` (wins) or ``ingest_key``; a random one, with a warning,
    when neither is set (one replica for development: a restart invalidates runs in flight)."""
    if settings.ingest_key_file is not None:
        path = Path(settings.ingest_key_file)
        try:
            key = path.read_bytes().strip()
        except OSError as exc:
            raise SettingsError(f"ingest_key_file {path}: cannot read the ingest key: {exc}") from exc
        where = f"ingest_key_file {path}"
    elif settings.ingest_key is not None:
        key = settings.ingest_key.get_secret_value().strip().encode()
        where = "ingest_key"
    else:
        log.warning("no ingest_key_file or ingest_key set: using a random ingest key; another replica or a"
                    " restart will refuse the uploads of profiling runs in flight")
        return secrets.token_bytes(32)
    if len(key) < MIN_KEY_BYTES:
        raise SettingsError(f"{where}: the ingest key must be at least {MIN_KEY_BYTES} bytes, found {len(key)}")
    return key
