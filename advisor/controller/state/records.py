"""The durable record of a profiling run in the cluster: its profile, in a ConfigMap owned by the job.

Why in the cluster: the controller's SQLite store is one replica's; a new leader (another pod,
another volume) must still finish a job whose trace the old one received, without profiling it
again. The condensed profile (what a prediction reads, 150-210 kB of JSON for the project's
traces, 45-63 kB gzipped) goes into one ConfigMap per job and profiled generation, named
``<job>-advisor-g<generation>``, owned by the job (deleted with it), gzipped in ``binaryData``
and refused when it would pass the API's 1 MiB object limit. The run's state (phase, reason,
profiled generation, profiling run name, tries) is in the job's annotations already; together
they are the whole state a new leader needs. A ConfigMap rather than a Secret: the profile is
not a credential, and the controller then needs no right on Secrets in users' namespaces.
Whichever replica receives the upload writes the record, so ingest works on a standby too; the
leader adds the prediction it applied, so a new leader re-applies it without simulating.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from advisor.controller.jobs.tfjob import (
    GENERATION_LABEL, PREFIX, PROFILING_FOR_LABEL, PROFILING_FOR_UID, ROLE_LABEL, owner_ref,
)
from advisor.controller.state.formats import RECORD_FORMAT, RECORD_FORMAT_ANNOTATION, check_format
from advisor.errors import AdvisorError, KubeAlreadyExists, KubeNotFound

log = logging.getLogger(__name__)
PROFILE_KEY = "profile.json.gz"
PREDICTION_KEY = "prediction.json.gz"
PROFILE_SHA = PREFIX + "profile-sha256"
PREDICTION = PREFIX + "prediction-key"  # the prediction key (profile and parameters) of PREDICTION_KEY
MAX_OBJECT_BYTES = 1024 * 1024  # etcd's request limit, as the API server enforces for a ConfigMap
_HEADROOM = 16 * 1024  # metadata, base64 padding of the JSON body
_NAME_LIMIT = 253
PutOutcome = Literal["stored", "duplicate", "conflict"]


class ProfileTooLarge(AdvisorError):
    """The profile does not fit in one ConfigMap."""


@dataclass(frozen=True)
class ProfileRecord:
    profile_json: str
    sha: str
    prediction_key: str | None = None  # the prediction recorded with it, if any
    prediction_json: str | None = None


def record_name(job: str, generation: int) -> str:
    """``<job>-advisor-g<generation>``; a DNS subdomain (253), shortened with a hash if need be."""
    suffix = f"-advisor-g{generation}"
    if len(job) + len(suffix) <= _NAME_LIMIT:
        return job + suffix
    digest = hashlib.sha256(job.encode()).hexdigest()[:8]
    return f"{job[:_NAME_LIMIT - len(suffix) - 9]}-{digest}{suffix}"


@dataclass
class ProfileRecords:
    """Reads and writes the records through ``kube`` (advisor.controller.kube.client.Kube)."""

    kube: Any

    def put(self, namespace: str, name: str, uid: str, generation: int, profile_json: str,
            kind: str = "TFJob") -> PutOutcome:
        """Keep the profile: ``stored``, ``duplicate`` (the same one is there) or ``conflict`` (a
        different one is). A record left by an earlier job of the same name is replaced.
        ``kind`` is the job's (its owner reference names it)."""
        sha = hashlib.sha256(profile_json.encode()).hexdigest()
        packed = gzip.compress(profile_json.encode(), mtime=0)
        if len(packed) * 4 // 3 + _HEADROOM > MAX_OBJECT_BYTES:
            raise ProfileTooLarge(f"the profile is {len(packed)} bytes gzipped; a ConfigMap holds at most "
                                  f"{MAX_OBJECT_BYTES} bytes: profile fewer steps (profiling_steps)")
        cm_name = record_name(name, generation)
        body: dict[str, Any] = {
            "metadata": {
                "name": cm_name, "namespace": namespace,
                "labels": {ROLE_LABEL: "profile", PROFILING_FOR_LABEL: name[:63], GENERATION_LABEL: str(generation)},
                "annotations": {PROFILING_FOR_UID: uid, PROFILE_SHA: sha, RECORD_FORMAT_ANNOTATION: str(RECORD_FORMAT)},
                "ownerReferences": [owner_ref(name, uid, kind)],
            },
            "binaryData": {PROFILE_KEY: base64.b64encode(packed).decode()},
        }
        for _ in range(2):
            try:
                self.kube.create_configmap(namespace, body)
                return "stored"
            except KubeAlreadyExists:
                pass
            existing = self.kube.get_configmap(namespace, cm_name)
            if existing is None:
                continue  # deleted meanwhile: create again
            notes = (existing.get("metadata") or {}).get("annotations") or {}
            if notes.get(PROFILING_FOR_UID) == uid:
                return "duplicate" if notes.get(PROFILE_SHA) == sha else "conflict"
            log.info("profile record %s/%s belongs to an earlier job of that name; replacing it", namespace, cm_name)
            try:
                self.kube.delete_configmap(namespace, cm_name, uid=existing["metadata"]["uid"])
            except KubeNotFound:
                pass
        return "conflict"

    def put_prediction(self, namespace: str, name: str, generation: int, key: str, prediction_json: str) -> bool:
        """Keep the prediction the job's annotations were written from beside its profile, so a
        new leader applies it instead of simulating again (and flipping the job to Predicting).
        False when it does not fit (logged): the new leader then simulates."""
        packed = base64.b64encode(gzip.compress(prediction_json.encode(), mtime=0)).decode()
        if len(packed) > MAX_OBJECT_BYTES // 4:
            log.warning("prediction %s for %s/%s not recorded: %d bytes", key, namespace, name, len(packed))
            return False
        self.kube.patch_configmap(namespace, record_name(name, generation),
                                  {"metadata": {"annotations": {PREDICTION: key}}, "binaryData": {PREDICTION_KEY: packed}})
        return True

    def get(self, namespace: str, name: str, uid: str, generation: int) -> ProfileRecord | None:
        """The profile recorded for this job (uid) and generation; None when there is none, or
        it is unreadable (logged) or an earlier job's."""
        cm = self.kube.get_configmap(namespace, record_name(name, generation))
        if cm is None:
            return None
        return read_record(cm, uid)


def read_record(cm: Mapping[str, Any], uid: str) -> ProfileRecord | None:
    """The record in ``cm`` when it is this job's (``uid``), in any format up to ``RECORD_FORMAT``;
    ``StateFormatError`` for a newer one (the caller leaves the job alone)."""
    meta = cm.get("metadata") or {}
    notes = meta.get("annotations") or {}
    if notes.get(PROFILING_FOR_UID) != uid:
        return None
    check_format(f"profile record {meta.get('namespace')}/{meta.get('name')}", notes.get(RECORD_FORMAT_ANNOTATION),
                 RECORD_FORMAT)
    try:
        text = gzip.decompress(base64.b64decode((cm.get("binaryData") or {})[PROFILE_KEY])).decode()
        json.loads(text)
    except (KeyError, ValueError, OSError, EOFError) as exc:
        log.warning("profile record %s/%s is unreadable (%s); ignored", meta.get("namespace"), meta.get("name"), exc)
        return None
    sha = hashlib.sha256(text.encode()).hexdigest()
    if notes.get(PROFILE_SHA) not in (None, sha):
        log.warning("profile record %s/%s does not match its digest; ignored", meta.get("namespace"), meta.get("name"))
        return None
    key, prediction = notes.get(PREDICTION), None
    if key:
        try:
            prediction = gzip.decompress(base64.b64decode((cm.get("binaryData") or {})[PREDICTION_KEY])).decode()
            json.loads(prediction)
        except (KeyError, ValueError, OSError, EOFError):
            key, prediction = None, None  # simulated again: nothing lost but time
    return ProfileRecord(text, sha, key, prediction)
