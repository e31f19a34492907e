"""Accepting a profiling run's trace: check it belongs to a live run, turn it into a profile, store it.

The HTTP layer (``http_api``) counts rejections by status and has already checked the token, the size and that the body is a
JSON object; here the upload bundle (docs/profiling.md) is interpreted with the same importer
the CLI uses, so a trace that ``advisor profile inspect`` would refuse is refused here too,
with the same message, as a 400. The bundle is stored as the pod sent it (gzip), beside the
profile, so a later, better interpretation can be re-run without profiling again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor.controller.http_api import IngestResult
from advisor.controller.metrics import Metrics
from advisor.importers.profile_file import profile_to_json
from advisor.importers.tf_profile import build_profile_from_trace
from advisor.importers.trace_upload import read_trace_upload
from advisor.errors import ProfileError, TraceImportError

Key = tuple[str, str]


@dataclass
class Ingest:
    cache: Callable[[str, str], Mapping[str, Any] | None]
    store: Any  # advisor.controller.store.Store
    metrics: Metrics
    enqueue: Callable[[Key], None]
    clock: Callable[[], float] = time.time

    def verify_token(self, namespace: str, name: str, generation: int, token: str) -> bool:
        """The token must be that of a live run of the job now known by that name (its uid).

        Why: ``accept_trace`` stores under the uid in the cache, and the store still holds the
        live runs of an earlier job of the same name (deleted and recreated) until garbage
        collection: their tokens must not upload into the new job's run. A job the cache does
        not show is left to ``accept_trace`` (404)."""
        run = self.store.verify_token(namespace, name, generation, token)
        uid = ((self.cache(namespace, name) or {}).get("metadata") or {}).get("uid")
        return run is not None and (uid is None or run.uid == uid)

    def accept_trace(self, namespace: str, name: str, generation: int, document: dict[str, Any],
                     raw: bytes) -> IngestResult:
        """``document`` is the parsed bundle, ``raw`` the bundle as the pod sent it (gzip)."""
        obj = self.cache(namespace, name)
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        run = self.store.run(uid, generation) if uid else None
        if run is None:
            return IngestResult(404, {"message": f"no profiling run for TFJob {namespace}/{name} generation {generation}"})
        origin = f"upload for {namespace}/{name} generation {generation}"
        try:
            profile = build_profile_from_trace(read_trace_upload(document, origin=origin))
        except (TraceImportError, ProfileError) as exc:
            return IngestResult(400, {"message": str(exc)})
        profile_json = json.dumps(profile_to_json(profile), sort_keys=True, separators=(",", ":"))
        sha = hashlib.sha256(profile_json.encode()).hexdigest()
        outcome = self.store.put_trace(uid, generation, raw, profile_json, sha, self.clock())
        if outcome == "conflict":
            return IngestResult(409, {"message": f"a different trace was already received for generation {generation}"})
        if outcome == "stored":  # put_trace moved the run to "received" in the same transaction
            self.metrics.profiling_runs.labels("succeeded").inc()
        self.enqueue((namespace, name))
        return IngestResult(202, {"profile": f"sha256:{sha}", "steps": len(profile.steps), "outcome": outcome})
