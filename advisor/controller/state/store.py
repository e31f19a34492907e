"""The controller's durable state: profiling runs, their upload tokens, traces, predictions, and
the prediction Jobs of the ``job`` backend.

Why a store at all: the controller is restarted (rollouts, node drains, a new leader) while
profiling runs are in flight. After a restart it must still accept the trace a profiling pod
uploads (so the run's token is kept, and the Secret carrying it can be recreated), must not
start a second profiling run for a generation it already profiles, and must not re-predict a
profile whose prediction under the same settings it already has.

Why SQLite: one file on a volume, atomic transactions, no server to run, and the standard
library. One connection guarded by a lock serves every thread; WAL with ``synchronous=NORMAL``
keeps writes cheap (a power loss may drop the last transactions, never corrupt the file). The
schema is versioned with ``PRAGMA user_version`` and upgraded by ``_MIGRATIONS`` on open.

The store never reads the clock: every write takes ``now`` from the caller, so tests and the
reconcile logic decide what time it is. Records come out as plain frozen dataclasses.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, get_args

from advisor.errors import StoreError, UnknownRunError

logger = logging.getLogger(__name__)

# superseded: a newer generation of the job's templates is profiled instead (never predicted)
RunState = Literal["profiling", "received", "predicted", "failed", "timed_out", "superseded"]
JobState = Literal["running", "succeeded", "failed"]
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
TOKEN_STATES: tuple[RunState, ...] = ("profiling", "received")  # states in which a token is accepted
PutTraceOutcome = Literal["stored", "duplicate", "conflict"]

APPLICATION_ID = 0x41445653  # "ADVS" in the file header: tells our files from other SQLite files

# Migration i takes the schema from version i to i + 1; append, never edit a released one.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"PRAGMA application_id = {APPLICATION_ID}",
        """CREATE TABLE runs (
            uid TEXT NOT NULL,
            generation INTEGER NOT NULL,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            profiling_job TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('profiling', 'received', 'predicted', 'failed', 'timed_out')),
            reason TEXT NOT NULL DEFAULT '',
            token TEXT,
            token_sha TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (uid, generation))""",
        "CREATE INDEX runs_by_job ON runs (namespace, name, generation)",
        "CREATE INDEX runs_by_updated ON runs (updated)",
        """CREATE TABLE traces (
            uid TEXT NOT NULL,
            generation INTEGER NOT NULL,
            raw BLOB NOT NULL,
            profile_json TEXT NOT NULL,
            profile_sha TEXT NOT NULL,
            received REAL NOT NULL,
            PRIMARY KEY (uid, generation),
            FOREIGN KEY (uid, generation) REFERENCES runs (uid, generation) ON DELETE CASCADE)""",
        "CREATE INDEX traces_by_sha ON traces (profile_sha)",
        """CREATE TABLE predictions (
            profile_sha TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            advice_json TEXT NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (profile_sha, fingerprint))""",
        """CREATE TABLE resizes (
            uid TEXT PRIMARY KEY,
            workers INTEGER NOT NULL,
            at REAL NOT NULL)""",
    ),
    (
        # One row per prediction key: its latest attempt as a Kubernetes Job (job backend). The
        # input (profile, parameters) and token live while the attempt runs; the answer stays
        # until garbage collection, so one that arrives while nobody waits for it is not lost.
        """CREATE TABLE prediction_jobs (
            key TEXT PRIMARY KEY,
            attempt INTEGER NOT NULL,
            job_name TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
            reason TEXT NOT NULL DEFAULT '',
            profile_json TEXT,
            params_json TEXT NOT NULL,
            token TEXT,
            token_sha TEXT,
            result_json TEXT,
            started REAL NOT NULL,
            updated REAL NOT NULL)""",
    ),
    (
        # The run state 'superseded'. SQLite cannot change a CHECK constraint in place: the table
        # is rebuilt as its documented procedure says (_migrate turns foreign keys off meanwhile,
        # so dropping the old table does not cascade to the traces).
        """CREATE TABLE runs_v3 (
            uid TEXT NOT NULL,
            generation INTEGER NOT NULL,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            profiling_job TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('profiling', 'received', 'predicted', 'failed', 'timed_out',
                                                 'superseded')),
            reason TEXT NOT NULL DEFAULT '',
            token TEXT,
            token_sha TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (uid, generation))""",
        "INSERT INTO runs_v3 SELECT uid, generation, namespace, name, profiling_job, state, reason, token, token_sha,"
        " created, updated FROM runs",
        "DROP TABLE runs",
        "ALTER TABLE runs_v3 RENAME TO runs",
        "CREATE INDEX runs_by_job ON runs (namespace, name, generation)",
        "CREATE INDEX runs_by_updated ON runs (updated)",
    ),
    (
        # Profiling tries (profiling_max_attempts): which try runs, and why each earlier one ended.
        "ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE runs ADD COLUMN attempts_json TEXT NOT NULL DEFAULT '[]'",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_RUN_COLUMNS = ("uid, generation, namespace, name, profiling_job, state, reason, token, created, updated, attempt,"
                " attempts_json")
_JOB_COLUMNS = "key, attempt, job_name, state, reason, params_json, token, result_json, started, updated"


@dataclass(frozen=True)
class RunRecord:
    """One profiling run: the profiling of one generation of one TFJob."""

    uid: str
    generation: int
    namespace: str
    name: str
    profiling_job: str  # name of the profiling TFJob the controller created
    state: RunState
    reason: str
    token: str | None = field(repr=False)  # the upload token; None once revoked; never in logs
    created: float  # when the current try started (or may start, while it waits for its backoff)
    updated: float
    attempt: int = 1  # the current try, 1..profiling_max_attempts
    attempts_json: str = "[]"  # [{"attempt", "run", "reason"}] of the tries that ended


@dataclass(frozen=True)
class TraceRecord:
    """The trace a profiling run uploaded, as received and as the decoded profile."""

    uid: str
    generation: int
    raw: bytes = field(repr=False)
    profile_json: str = field(repr=False)
    profile_sha: str
    received: float


@dataclass(frozen=True)
class PredictionJobRecord:
    """The latest attempt at one prediction (by key) as a Kubernetes Job."""

    key: str
    attempt: int  # 1, 2...: a new attempt gets a new Job name and token
    job_name: str
    state: JobState
    reason: str  # why it failed
    params_json: str = field(repr=False)
    token: str | None = field(repr=False)  # None once the attempt is over
    result_json: str | None = field(repr=False)  # the advisor-prediction/1 answer, once succeeded
    started: float
    updated: float


class Store:
    """The controller's SQLite store; safe to share between threads.

    ``path`` is a file (created if missing, upgraded if older) or ``":memory:"`` for tests.
    Every ``sqlite3`` error is raised as ``StoreError`` naming the path.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._conn = _open(self.path)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def ping(self) -> None:
        """Raise ``StoreError`` unless the store answers a query (for the readiness probe)."""
        with self._tx() as c:
            c.execute("SELECT 1").fetchone()

    # -- profiling runs ----------------------------------------------------------------------

    def ensure_run(self, uid: str, namespace: str, name: str, generation: int, profiling_job: str,
                   now: float, token: str | None = None, *, state: RunState = "profiling", reason: str = "",
                   attempt: int = 1, attempts_json: str = "[]", created: float | None = None,
                   ) -> tuple[RunRecord, bool]:
        """The run for ``(uid, generation)``, created with ``token`` (a fresh one if None) in
        ``state`` if there is none; the flag says whether it was created. An existing run is
        returned unchanged (same token), so reconciling the same generation twice profiles it
        once. The keywords adopt a run another replica started (its state read from the cluster)."""
        _check_generation(generation)
        _check_state(state)
        token = token or secrets.token_urlsafe(32)
        live = state in TOKEN_STATES
        with self._tx(write=True) as c:
            cur = c.execute(
                "INSERT INTO runs (uid, generation, namespace, name, profiling_job, state, reason, token,"
                " token_sha, created, updated, attempt, attempts_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (uid, generation) DO NOTHING",
                (uid, generation, namespace, name, profiling_job, state, reason, token if live else None,
                 _sha256(token) if live else None, now if created is None else created, now, attempt, attempts_json))
            created = cur.rowcount == 1
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return _run(row), created

    def run(self, uid: str, generation: int) -> RunRecord | None:
        with self._tx() as c:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return _run(row) if row else None

    def latest_run(self, uid: str) -> RunRecord | None:
        """The run of the job's highest generation profiled so far."""
        with self._tx() as c:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE uid = ? ORDER BY generation DESC LIMIT 1",
                            (uid,)).fetchone()
        return _run(row) if row else None

    def runs(self, state: RunState | None = None) -> list[RunRecord]:
        """Every run (or those in ``state``), ordered by namespace, name and generation."""
        if state is not None:
            _check_state(state)
        where, args = ("WHERE state = ?", (state,)) if state else ("", ())
        with self._tx() as c:
            rows = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs {where} ORDER BY namespace, name, generation",
                             args).fetchall()
        return [_run(r) for r in rows]

    def runs_with_profile(self, namespace: str | None = None, name: str | None = None,
                          ) -> list[tuple[RunRecord, str | None]]:
        """Every run (or one job's, by namespace and name) with its profile's digest, None while it
        has no trace; ordered by namespace, name and generation. One query, for ``advisor store``."""
        one_job = namespace is not None and name is not None
        where, args = ("WHERE r.namespace = ? AND r.name = ?", (namespace, name)) if one_job else ("", ())
        columns = ", ".join(f"r.{c.strip()}" for c in _RUN_COLUMNS.split(","))
        with self._tx() as c:
            rows = c.execute(f"SELECT {columns}, t.profile_sha FROM runs r LEFT JOIN traces t"
                             f" ON t.uid = r.uid AND t.generation = r.generation {where}"
                             " ORDER BY r.namespace, r.name, r.generation", args).fetchall()
        return [(_run(r), r["profile_sha"]) for r in rows]

    def runs_updated_before(self, t: float) -> list[RunRecord]:
        """Runs whose last change is older than ``t`` (candidates for garbage collection)."""
        with self._tx() as c:
            rows = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE updated < ? ORDER BY updated", (t,)).fetchall()
        return [_run(r) for r in rows]

    def set_state(self, uid: str, generation: int, state: RunState, reason: str, now: float,
                  attempts_json: str | None = None) -> RunRecord:
        """Move a run to ``state`` (with ``attempts_json``, the tries that ended, the last one
        included: what a failed run reports again after a write to the job failed); raises
        ``UnknownRunError`` when there is no such run."""
        _check_state(state)
        with self._tx(write=True) as c:
            cur = c.execute("UPDATE runs SET state = ?, reason = ?, updated = ?,"
                            " attempts_json = COALESCE(?, attempts_json) WHERE uid = ? AND generation = ?",
                            (state, reason, now, attempts_json, uid, generation))
            if cur.rowcount == 0:
                raise UnknownRunError(f"no profiling run for uid {uid} generation {generation}")
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return _run(row)

    def next_attempt(self, uid: str, generation: int, attempt: int, profiling_job: str, attempts_json: str,
                     start_at: float, now: float) -> RunRecord | None:
        """Move a profiling run to try ``attempt`` (named ``profiling_job``, starting at
        ``start_at``), recording the ended tries; None (nothing written) unless the run is
        profiling at try ``attempt - 1``, so two looks at the same failure retry once."""
        with self._tx(write=True) as c:
            cur = c.execute(
                "UPDATE runs SET attempt = ?, profiling_job = ?, attempts_json = ?, created = ?, updated = ?"
                " WHERE uid = ? AND generation = ? AND state = 'profiling' AND attempt = ?",
                (attempt, profiling_job, attempts_json, start_at, now, uid, generation, attempt - 1))
            if cur.rowcount != 1:
                return None
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return _run(row)

    def supersede_runs(self, uid: str, generation: int, now: float) -> list[RunRecord]:
        """End the job's live runs (profiling, or trace received) of generations before
        ``generation``: state ``superseded``, token revoked, in one transaction. Returns them.

        Why: once a newer generation of the job's templates is profiled, an older run's trace is
        of no use; left live, its token stayed valid and garbage collection kept its Secret and
        profiling TFJob for good. Ended, the token is refused and both are collected."""
        _check_generation(generation)
        live = ", ".join("?" * len(TOKEN_STATES))
        where = f"uid = ? AND generation < ? AND state IN ({live})"
        with self._tx(write=True) as c:
            rows = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE {where} ORDER BY generation",
                             (uid, generation, *TOKEN_STATES)).fetchall()
            c.execute(f"UPDATE runs SET state = 'superseded', reason = ?, token = NULL, token_sha = NULL, updated = ?"
                      f" WHERE {where}", (f"Superseded: generation {generation} is profiled instead", now,
                                          uid, generation, *TOKEN_STATES))
        return [_run(r) for r in rows]

    def forget_live_run(self, uid: str, generation: int) -> bool:
        """Delete a run still waiting for its trace (state ``profiling``): stopped for good (the
        job no longer opts in), so a later opt-in starts afresh. False when there is none."""
        with self._tx(write=True) as c:
            return c.execute("DELETE FROM runs WHERE uid = ? AND generation = ? AND state = 'profiling'",
                             (uid, generation)).rowcount == 1

    def delete_runs(self, uid: str) -> int:
        """Forget a job that is gone: its runs, their traces and its resize record. Returns the
        number of runs deleted. Predictions stay (they are keyed by profile): see ``prune_predictions``."""
        with self._tx(write=True) as c:
            deleted = c.execute("DELETE FROM runs WHERE uid = ?", (uid,)).rowcount  # traces cascade
            c.execute("DELETE FROM resizes WHERE uid = ?", (uid,))
        return deleted

    # -- tokens ------------------------------------------------------------------------------

    def verify_token(self, namespace: str, name: str, generation: int, token: str) -> RunRecord | None:
        """The run this token may upload to, or None. Accepted only while the run is profiling
        or has received its trace (a retried upload), and not revoked. Digests are compared in
        constant time, all candidates every time, so timing tells nothing about the token."""
        digest = _sha256(token)
        placeholders = ", ".join("?" * len(TOKEN_STATES))
        with self._tx() as c:
            rows = c.execute(
                f"SELECT {_RUN_COLUMNS}, token_sha FROM runs WHERE namespace = ? AND name = ? AND generation = ?"
                f" AND state IN ({placeholders}) AND token_sha IS NOT NULL",
                (namespace, name, generation, *TOKEN_STATES)).fetchall()
        match = None
        for row in rows:  # more than one only if a job was deleted and recreated under the same name
            if hmac.compare_digest(row["token_sha"], digest):
                match = row
        return _run(match) if match is not None else None

    def revoke_token(self, uid: str, generation: int) -> None:
        """Forget the run's token: no upload is accepted for it any more."""
        with self._tx(write=True) as c:
            cur = c.execute("UPDATE runs SET token = NULL, token_sha = NULL WHERE uid = ? AND generation = ?",
                            (uid, generation))
            if cur.rowcount == 0:
                raise UnknownRunError(f"no profiling run for uid {uid} generation {generation}")

    # -- traces ------------------------------------------------------------------------------

    def put_trace(self, uid: str, generation: int, raw: bytes, profile_json: str, profile_sha: str,
                  now: float) -> PutTraceOutcome:
        """Keep the run's trace. The same profile again is a ``duplicate`` (a retried upload), a
        different one a ``conflict``; neither overwrites. When stored, a run still ``profiling``
        becomes ``received`` in the same transaction, so a crash cannot leave a trace whose run
        still waits for it. Raises ``UnknownRunError`` when there is no such run."""
        with self._tx(write=True) as c:
            if c.execute("SELECT 1 FROM runs WHERE uid = ? AND generation = ?", (uid, generation)).fetchone() is None:
                raise UnknownRunError(f"no profiling run for uid {uid} generation {generation}")
            row = c.execute("SELECT profile_sha FROM traces WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
            if row is not None:
                return "duplicate" if row["profile_sha"] == profile_sha else "conflict"
            c.execute("INSERT INTO traces (uid, generation, raw, profile_json, profile_sha, received)"
                      " VALUES (?, ?, ?, ?, ?, ?)", (uid, generation, raw, profile_json, profile_sha, now))
            c.execute("UPDATE runs SET state = 'received', updated = ? WHERE uid = ? AND generation = ?"
                      " AND state = 'profiling'", (now, uid, generation))
        return "stored"

    def trace(self, uid: str, generation: int) -> TraceRecord | None:
        with self._tx() as c:
            row = c.execute("SELECT uid, generation, raw, profile_json, profile_sha, received FROM traces"
                            " WHERE uid = ? AND generation = ?", (uid, generation)).fetchone()
        return TraceRecord(**dict(row)) if row else None

    def profile_sha(self, uid: str, generation: int) -> str | None:
        """The identity of the run's profile, without reading the trace (a reconcile's question)."""
        with self._tx() as c:
            row = c.execute("SELECT profile_sha FROM traces WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return str(row["profile_sha"]) if row else None

    def profile_json(self, uid: str, generation: int) -> str | None:
        """The decoded profile alone (not the raw upload): what a prediction needs."""
        with self._tx() as c:
            row = c.execute("SELECT profile_json FROM traces WHERE uid = ? AND generation = ?",
                            (uid, generation)).fetchone()
        return str(row["profile_json"]) if row else None

    # -- predictions -------------------------------------------------------------------------

    def put_prediction(self, profile_sha: str, fingerprint: str, advice_json: str, now: float) -> None:
        """Keep a prediction; a prediction for the same key is replaced (they are deterministic)."""
        with self._tx(write=True) as c:
            c.execute("INSERT INTO predictions (profile_sha, fingerprint, advice_json, created) VALUES (?, ?, ?, ?)"
                      " ON CONFLICT (profile_sha, fingerprint) DO UPDATE SET advice_json = excluded.advice_json,"
                      " created = excluded.created", (profile_sha, fingerprint, advice_json, now))

    def prediction(self, profile_sha: str, fingerprint: str) -> str | None:
        with self._tx() as c:
            row = c.execute("SELECT advice_json FROM predictions WHERE profile_sha = ? AND fingerprint = ?",
                            (profile_sha, fingerprint)).fetchone()
        return row["advice_json"] if row else None

    def prune_predictions(self) -> int:
        """Delete predictions of profiles no stored trace has any more; returns how many."""
        with self._tx(write=True) as c:
            return c.execute("DELETE FROM predictions WHERE profile_sha NOT IN"
                             " (SELECT profile_sha FROM traces)").rowcount

    # -- prediction Jobs (job backend) -------------------------------------------------------

    def start_prediction_job(self, key: str, attempt: int, job_name: str, profile_json: str, params_json: str,
                             now: float, *, token: str | None = None, started: float | None = None,
                             ) -> PredictionJobRecord | None:
        """Record ``attempt`` of prediction ``key`` as running with ``token`` (a fresh one if None),
        started at ``started`` (default ``now``; an attempt adopted from the cluster keeps its
        own): any attempt when there is no row, else only one after the finished latest. None
        (and nothing written) otherwise: an attempt is still running, or this one exists already.
        Attempts may skip numbers: the cluster can hold Jobs of attempts this store never knew."""
        token = token or secrets.token_urlsafe(32)
        started = now if started is None else started
        with self._tx(write=True) as c:
            cur = c.execute(
                "INSERT INTO prediction_jobs (key, attempt, job_name, state, reason, profile_json, params_json, token,"
                " token_sha, result_json, started, updated) VALUES (?, ?, ?, 'running', '', ?, ?, ?, ?, NULL, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET attempt = excluded.attempt, job_name = excluded.job_name,"
                " state = 'running', reason = '', profile_json = excluded.profile_json,"
                " params_json = excluded.params_json, token = excluded.token, token_sha = excluded.token_sha,"
                " result_json = NULL, started = excluded.started, updated = excluded.updated"
                " WHERE prediction_jobs.state != 'running' AND prediction_jobs.attempt < excluded.attempt",
                (key, attempt, job_name, profile_json, params_json, token, _sha256(token), started, now))
            if cur.rowcount != 1:
                return None
            row = c.execute(f"SELECT {_JOB_COLUMNS} FROM prediction_jobs WHERE key = ?", (key,)).fetchone()
        return _job(row)

    def prediction_job(self, key: str) -> PredictionJobRecord | None:
        with self._tx() as c:
            row = c.execute(f"SELECT {_JOB_COLUMNS} FROM prediction_jobs WHERE key = ?", (key,)).fetchone()
        return _job(row) if row else None

    def prediction_jobs(self) -> list[PredictionJobRecord]:
        with self._tx() as c:
            rows = c.execute(f"SELECT {_JOB_COLUMNS} FROM prediction_jobs ORDER BY key").fetchall()
        return [_job(r) for r in rows]

    def prediction_job_input(self, key: str) -> tuple[str, str] | None:
        """(profile JSON, parameters JSON) of a running attempt; None when there is none."""
        with self._tx() as c:
            row = c.execute("SELECT profile_json, params_json FROM prediction_jobs WHERE key = ? AND state = 'running'",
                            (key,)).fetchone()
        return (row["profile_json"], row["params_json"]) if row else None

    def verify_prediction_token(self, key: str, token: str) -> bool:
        """True when ``token`` is the token of the running attempt at ``key`` (constant-time compare)."""
        with self._tx() as c:
            row = c.execute("SELECT token_sha FROM prediction_jobs WHERE key = ? AND state = 'running'"
                            " AND token_sha IS NOT NULL", (key,)).fetchone()
        return row is not None and hmac.compare_digest(row["token_sha"], _sha256(token))

    def finish_prediction_job(self, key: str, attempt: int, state: JobState, result_json: str | None, reason: str,
                              now: float) -> bool:
        """End a running attempt (its token and input are dropped); False when it was not running,
        so of two replicas or two paths (answer, Job status) that finish it, exactly one does."""
        if state not in ("succeeded", "failed"):
            raise ValueError(f"a prediction Job ends succeeded or failed, not {state!r}")
        with self._tx(write=True) as c:
            cur = c.execute(
                "UPDATE prediction_jobs SET state = ?, result_json = ?, reason = ?, token = NULL, token_sha = NULL,"
                " profile_json = NULL, updated = ? WHERE key = ? AND attempt = ? AND state = 'running'",
                (state, result_json, reason, now, key, attempt))
        return cur.rowcount == 1

    def delete_prediction_jobs(self, keys: list[str]) -> None:
        with self._tx(write=True) as c:
            c.executemany("DELETE FROM prediction_jobs WHERE key = ?", [(k,) for k in keys])

    # -- auto-mode bookkeeping ---------------------------------------------------------------

    def record_resize(self, uid: str, workers: int, now: float) -> None:
        with self._tx(write=True) as c:
            c.execute("INSERT INTO resizes (uid, workers, at) VALUES (?, ?, ?)"
                      " ON CONFLICT (uid) DO UPDATE SET workers = excluded.workers, at = excluded.at",
                      (uid, workers, now))

    def last_resize(self, uid: str) -> float | None:
        """When the controller last changed this job's worker count (for the auto-mode cool-down)."""
        with self._tx() as c:
            row = c.execute("SELECT at FROM resizes WHERE uid = ?", (uid,)).fetchone()
        return row["at"] if row else None

    # -- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """Hold the lock; for writes, one IMMEDIATE transaction (committed, or rolled back on
        any error). ``sqlite3`` errors become ``StoreError`` here, the one place they are caught."""
        with self._lock:
            try:
                if write:
                    self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                if write:
                    self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"advisor store {self.path}: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):  # closed connection or no transaction: the original error matters
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")


def _open(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the advisor store {path}: {exc}") from exc
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal" and path != ":memory:":
            logger.warning("advisor store %s: the file system does not support WAL; journal mode is %s", path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot use the advisor store {path} (unreadable or corrupt?): {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the file to ``SCHEMA_VERSION`` in one transaction (so two processes opening a new
    file at once cannot both migrate it); refuse foreign SQLite files and newer schemas.

    Foreign keys are off meanwhile, as SQLite's procedure for rebuilding a table asks (dropping
    a referenced table would otherwise delete the rows that reference it), and checked before
    the commit."""
    conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: set before BEGIN
    try:
        _migrate_in_transaction(conn, path)
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def _migrate_in_transaction(conn: sqlite3.Connection, path: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        has_objects = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        if app_id != APPLICATION_ID and has_objects:
            raise StoreError(f"{path} is an SQLite database but not an advisor store")
        if version > SCHEMA_VERSION:
            raise StoreError(f"advisor store {path} has schema version {version}, newer than this advisor"
                             f" understands ({SCHEMA_VERSION}); run a newer advisor or move the file away")
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {step + 1}")
            logger.info("advisor store %s: migrated schema to version %d", path, step + 1)
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise StoreError(f"advisor store {path}: the schema upgrade would break references between tables")
        conn.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(uid=row["uid"], generation=row["generation"], namespace=row["namespace"], name=row["name"],
                     profiling_job=row["profiling_job"], state=row["state"], reason=row["reason"],
                     token=row["token"], created=row["created"], updated=row["updated"], attempt=row["attempt"],
                     attempts_json=row["attempts_json"])


def _job(row: sqlite3.Row) -> PredictionJobRecord:
    return PredictionJobRecord(**{k: row[k] for k in row.keys()})


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _check_state(state: str) -> None:
    if state not in RUN_STATES:
        raise ValueError(f"unknown run state {state!r}; expected one of {', '.join(RUN_STATES)}")


def _check_generation(generation: int) -> None:
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"generation must be a non-negative integer, got {generation!r}")
