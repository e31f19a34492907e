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

from advisor.controller.pipeline import annotations as ann
from advisor.controller.web.http_api import IngestResult
from advisor.controller.jobs.kinds import parse_job, trace_mismatch
from advisor.controller.web.metrics import Metrics
from advisor.controller.state.records import ProfileRecords, ProfileTooLarge
from advisor.controller.state.store import TOKEN_STATES
from advisor.controller.state.tokens import token_matches
from advisor.importers.profile_file import profile_to_json
from advisor.importers.uploads import profile_from_upload
from advisor.errors import KubeError, ProfileError, TFJobError, TraceImportError

Key = tuple[str, str]


@dataclass
class Ingest:
    """Serves uploads on every replica, leader or not: the token is derived from the shared key,
    whether the run is live is read from the job (its annotations) when this replica's store
    does not know the run, and the profile goes first to its record in the cluster
    (``records``), where the leader finds it. A standby is therefore Ready and useful."""

    cache: Callable[[str, str], Mapping[str, Any] | None]
    store: Any  # advisor.controller.state.store.Store
    metrics: Metrics
    enqueue: Callable[[Key], None]
    clock: Callable[[], float] = time.time
    ingest_key: bytes = b""
    records: ProfileRecords | None = None
    # a Warning event on a job (object, reason, message): why its upload was refused
    warn: Callable[[Mapping[str, Any], str, str], None] | None = None

    def verify_token(self, namespace: str, name: str, generation: int, token: str) -> bool:
        """The token must be the one derived for the job now known by that name (its uid) and
        this generation, and its run must be live. Why the uid: a job deleted and recreated
        under the same name is another job, and the old job's token must not upload into the
        new job's run. A job the cache does not show has no token (403, before the body is read)."""
        uid = ((self.cache(namespace, name) or {}).get("metadata") or {}).get("uid")
        if not isinstance(uid, str):
            return False
        if not token_matches(self.ingest_key, uid, generation, token):
            # a run started by a release that kept a random token per run in its store (and a
            # Secret): still accepted after an upgrade that kept the store volume
            stored = self.store.verify_token(namespace, name, generation, token)
            return stored is not None and stored.uid == uid
        return self._live(namespace, name, uid, generation)

    def _live(self, namespace: str, name: str, uid: str, generation: int) -> bool:
        """This replica's record of the run decides; without one (a standby, a new leader), the
        job's annotations: the run of this generation was started and the job is not past it."""
        run = self.store.run(uid, generation)
        if run is not None:
            return run.state in TOKEN_STATES and run.token is not None
        notes = ((self.cache(namespace, name) or {}).get("metadata") or {}).get("annotations") or {}
        return (notes.get(ann.PROFILED_GENERATION) == str(generation) and bool(notes.get(ann.PROFILING_RUN))
                and notes.get(ann.PHASE) in ("Profiling", "Predicting"))

    def accept_trace(self, namespace: str, name: str, generation: int, document: dict[str, Any],
                     raw: bytes) -> IngestResult:
        """``document`` is the parsed bundle, ``raw`` the bundle as the pod sent it (gzip)."""
        obj = self.cache(namespace, name)
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not self._live(namespace, name, uid, generation):
            return IngestResult(404, {"message": f"no profiling run for job {namespace}/{name} generation {generation}"})
        origin = f"upload for {namespace}/{name} generation {generation}"
        try:
            profile = profile_from_upload(document, origin=origin)
        except (TraceImportError, ProfileError) as exc:
            return IngestResult(400, {"message": str(exc)})
        try:  # the trace must be of the job's own kind of program (a DDP trace cannot be a TFJob's)
            view = parse_job(obj or {})
        except TFJobError as exc:
            return IngestResult(400, {"message": f"{origin}: the job cannot be read: {exc}"})
        mismatch = trace_mismatch(view, profile.job.kind)
        if mismatch is not None:
            if self.warn is not None and obj is not None:
                self.warn(obj, "TraceKindMismatch", f"upload for generation {generation} refused: {mismatch}")
            return IngestResult(400, {"message": f"{origin}: {mismatch}"})
        profile_json = json.dumps(profile_to_json(profile), sort_keys=True, separators=(",", ":"))
        sha = hashlib.sha256(profile_json.encode()).hexdigest()
        outcome: str = "stored"
        if self.records is not None:  # the durable record first: a new leader finishes from it
            try:
                outcome = self.records.put(namespace, name, uid, generation, profile_json, view.kind)
            except ProfileTooLarge as exc:
                return IngestResult(413, {"message": str(exc)}, reason="too_large")
            except KubeError as exc:
                return IngestResult(503, {"message": f"cannot record the profile, retry: {exc}"}, reason="error")
        if outcome != "conflict" and self.store.run(uid, generation) is not None:
            outcome = self.store.put_trace(uid, generation, raw, profile_json, sha, self.clock())
        if outcome == "conflict":
            return IngestResult(409, {"message": f"a different trace was already received for generation {generation}"})
        if outcome == "stored":  # put_trace moved the run to "received" in the same transaction
            self.metrics.profiling_runs.labels("succeeded").inc()
        self.enqueue((namespace, name))
        return IngestResult(202, {"profile": f"sha256:{sha}", "steps": len(profile.steps), "outcome": outcome})
