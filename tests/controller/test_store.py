"""The controller's SQLite store: survives restarts, is idempotent, guards tokens, refuses bad files."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from advisor.controller.state.store import _MIGRATIONS, SCHEMA_VERSION, RunRecord, Store
from advisor.errors import StoreError, UnknownRunError

UID, NS, NAME = "0f6c-uid", "team-a", "mnist"
T = TypeVar("T")


def must(value: T | None) -> T:
    assert value is not None
    return value


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(":memory:")
    yield s
    s.close()


def start(store: Store, generation: int = 1, now: float = 100.0, uid: str = UID) -> RunRecord:
    run, _ = store.ensure_run(uid, NS, NAME, generation, f"{NAME}-profile-{generation}", now)
    return run


def token_of(run: RunRecord) -> str:
    return must(run.token)


def test_ensure_run_creates_once_and_returns_the_same_token(store: Store) -> None:
    first, created = store.ensure_run(UID, NS, NAME, 1, "mnist-profile-1", now=100.0)
    again, created_again = store.ensure_run(UID, NS, NAME, 1, "other-name", now=200.0)
    assert (created, created_again) == (True, False)
    assert again == first  # unchanged: same token, same profiling job, same timestamps
    assert first.state == "profiling" and first.created == first.updated == 100.0
    assert first.token is not None and len(first.token) >= 43  # 32 random bytes, base64url
    assert first.token not in repr(first)  # never printed into logs


def test_each_generation_gets_its_own_run_and_token(store: Store) -> None:
    one, two = start(store, 1), start(store, 2)
    assert one.token != two.token
    assert store.latest_run(UID) == two
    assert store.run(UID, 1) == one
    assert store.run(UID, 3) is None and store.latest_run("other") is None


def test_set_state_and_queries(store: Store) -> None:
    start(store, 1, now=100.0)
    start(store, 2, now=150.0)
    failed = store.set_state(UID, 1, "failed", "profiling pod OOMKilled", now=300.0)
    assert (failed.state, failed.reason, failed.created, failed.updated) == ("failed", "profiling pod OOMKilled",
                                                                             100.0, 300.0)
    assert [r.generation for r in store.runs()] == [1, 2]
    assert [r.generation for r in store.runs("profiling")] == [2]
    assert [r.generation for r in store.runs_updated_before(200.0)] == [2]  # gen 1 changed at 300
    with pytest.raises(UnknownRunError):
        store.set_state(UID, 9, "failed", "", now=1.0)
    with pytest.raises(ValueError, match="unknown run state"):
        store.set_state(UID, 1, "done", "", now=1.0)  # type: ignore[arg-type]


def test_delete_runs_forgets_the_job(store: Store) -> None:
    start(store, 1)
    start(store, 2)
    start(store, 1, uid="someone-else")
    store.put_trace(UID, 1, b"raw", "{}", "sha-1", now=1.0)
    store.record_resize(UID, 4, now=5.0)
    assert store.delete_runs(UID) == 2
    assert store.run(UID, 1) is None and store.trace(UID, 1) is None and store.last_resize(UID) is None
    assert store.run("someone-else", 1) is not None


def test_put_trace_stored_duplicate_conflict(store: Store) -> None:
    start(store, 1)
    assert store.put_trace(UID, 1, b"raw", '{"p": 1}', "sha-a", now=110.0) == "stored"
    assert must(store.run(UID, 1)).state == "received"  # moved in the same transaction
    assert store.put_trace(UID, 1, b"raw again", '{"p": 1}', "sha-a", now=120.0) == "duplicate"
    assert store.put_trace(UID, 1, b"other", '{"p": 2}', "sha-b", now=130.0) == "conflict"
    kept = must(store.trace(UID, 1))
    assert (kept.raw, kept.profile_json, kept.profile_sha, kept.received) == (b"raw", '{"p": 1}', "sha-a", 110.0)
    with pytest.raises(UnknownRunError):
        store.put_trace(UID, 2, b"raw", "{}", "sha", now=1.0)


def test_put_trace_leaves_a_run_that_is_no_longer_profiling_in_its_state(store: Store) -> None:
    start(store, 1)
    store.set_state(UID, 1, "timed_out", "no trace after 1800 s", now=2000.0)
    assert store.put_trace(UID, 1, b"late", "{}", "sha", now=2001.0) == "stored"
    assert must(store.run(UID, 1)).state == "timed_out"


def test_verify_token(store: Store) -> None:
    run = start(store, 1)
    token = run.token
    assert token is not None
    assert store.verify_token(NS, NAME, 1, token) == run
    assert store.verify_token(NS, NAME, 1, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert store.verify_token(NS, NAME, 2, token) is None  # wrong generation
    assert store.verify_token(NS, "other", 1, token) is None  # wrong job
    assert store.verify_token(NS, NAME, 1, "") is None
    store.put_trace(UID, 1, b"raw", "{}", "sha", now=1.0)
    assert store.verify_token(NS, NAME, 1, token) is not None  # received: a retried upload still authenticates
    store.revoke_token(UID, 1)
    assert store.verify_token(NS, NAME, 1, token) is None
    assert must(store.run(UID, 1)).token is None
    with pytest.raises(UnknownRunError):
        store.revoke_token(UID, 7)


@pytest.mark.parametrize("state", ["predicted", "failed", "timed_out", "superseded"])
def test_token_is_refused_once_the_run_is_over(store: Store, state: str) -> None:
    token = token_of(start(store, 1))
    store.set_state(UID, 1, state, "", now=1.0)  # type: ignore[arg-type]
    assert store.verify_token(NS, NAME, 1, token) is None


def test_a_new_generation_supersedes_the_live_runs_before_it(store: Store) -> None:
    one, two = start(store, 1), start(store, 2)
    start(store, 3, uid="other-job")
    store.put_trace(UID, 2, b"raw", "{}", "sha", now=150.0)  # received: live too (a retried upload)
    start(store, 4)
    store.set_state(UID, 4, "failed", "ProfilingFailed: OOMKilled", now=160.0)
    newest = start(store, 5)
    ended = store.supersede_runs(UID, 5, now=200.0)
    assert [(r.generation, r.state) for r in ended] == [(1, "profiling"), (2, "received")]  # as they were
    for run in (one, two):
        after = must(store.run(UID, run.generation))
        assert (after.state, after.reason, after.token, after.updated) == \
            ("superseded", "Superseded: generation 5 is profiled instead", None, 200.0)
        assert store.verify_token(NS, NAME, run.generation, token_of(run)) is None
    assert must(store.run(UID, 4)).state == "failed"  # already over: left as it ended
    assert must(store.run(UID, 5)) == newest and must(store.run("other-job", 3)).state == "profiling"
    assert store.trace(UID, 2) is not None  # the trace stays, for advisor store export
    assert store.supersede_runs(UID, 5, now=300.0) == []  # idempotent


def test_verify_token_tells_apart_a_recreated_job_with_the_same_name(store: Store) -> None:
    old = start(store, 1, uid="old-uid")
    new = start(store, 1, uid="new-uid")
    assert store.verify_token(NS, NAME, 1, token_of(old)) == old
    assert store.verify_token(NS, NAME, 1, token_of(new)) == new


def test_predictions_and_resizes(store: Store) -> None:
    assert store.prediction("sha", "fp1") is None
    store.put_prediction("sha", "fp1", '{"w": 4}', now=1.0)
    store.put_prediction("sha", "fp2", '{"w": 8}', now=1.0)
    store.put_prediction("sha", "fp1", '{"w": 5}', now=2.0)  # redone: replaced
    assert (store.prediction("sha", "fp1"), store.prediction("sha", "fp2")) == ('{"w": 5}', '{"w": 8}')
    assert store.last_resize(UID) is None
    store.record_resize(UID, 4, now=10.0)
    store.record_resize(UID, 6, now=20.0)
    assert store.last_resize(UID) == 20.0


def test_prune_predictions_keeps_those_of_stored_traces(store: Store) -> None:
    start(store, 1)
    store.put_trace(UID, 1, b"raw", "{}", "kept", now=1.0)
    store.put_prediction("kept", "fp", "{}", now=1.0)
    store.put_prediction("orphan", "fp", "{}", now=1.0)
    assert store.prune_predictions() == 1
    assert store.prediction("kept", "fp") == "{}" and store.prediction("orphan", "fp") is None


def test_restart_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    with Store(path) as before:
        run = start(before, 1)
        start(before, 2)
        before.set_state(UID, 2, "failed", "image pull", now=5.0)
        before.put_trace(UID, 1, b"\x00raw\xff", '{"p": 1}', "sha-a", now=6.0)
        before.put_prediction("sha-a", "fp", '{"w": 4}', now=7.0)
        before.record_resize(UID, 4, now=8.0)
    with Store(path) as after:
        assert after.run(UID, 1) == RunRecord(UID, 1, NS, NAME, "mnist-profile-1", "received", "", run.token,
                                              100.0, 6.0)
        assert must(after.run(UID, 2)).state == "failed"
        assert must(after.trace(UID, 1)).raw == b"\x00raw\xff"
        assert after.prediction("sha-a", "fp") == '{"w": 4}'
        assert after.last_resize(UID) == 8.0
        assert after.ensure_run(UID, NS, NAME, 1, "x", now=9.0) == (after.run(UID, 1), False)
        assert after.verify_token(NS, NAME, 1, token_of(run)) is not None
        assert after._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_concurrent_ensure_run_creates_exactly_one(tmp_path: Path) -> None:
    # Two Store objects on one file (two connections, as in two processes) and 4 threads on
    # each, released together: the primary key and IMMEDIATE transactions must let one win.
    stores = [Store(tmp_path / "advisor.db"), Store(tmp_path / "advisor.db")]
    barrier = threading.Barrier(8)
    results: list[tuple[RunRecord, bool]] = []
    lock = threading.Lock()

    def worker(s: Store) -> None:
        barrier.wait()
        outcome = s.ensure_run(UID, NS, NAME, 1, "p", now=1.0)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker, args=(stores[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sum(created for _, created in results) == 1
    assert len({run.token for run, _ in results}) == 1


def test_migrates_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with Store(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        start(s, 1)


def test_a_version_2_store_is_upgraded_keeping_its_runs_and_their_traces(tmp_path: Path) -> None:
    """Version 3 rebuilds the runs table (a new state in its CHECK); the traces that reference
    it must survive, though the store turns foreign keys (ON DELETE CASCADE) on."""
    path = tmp_path / "v2.db"
    with sqlite3.connect(path) as raw:
        for statement in (*_MIGRATIONS[0], *_MIGRATIONS[1]):
            raw.execute(statement)
        raw.execute("PRAGMA user_version = 2")
        raw.execute("INSERT INTO runs (uid, generation, namespace, name, profiling_job, state, token, token_sha,"
                    " created, updated) VALUES ('u', 1, 'ns', 'n', 'p', 'received', 't', 'sha', 1, 1)")
        raw.execute("INSERT INTO traces VALUES ('u', 1, x'00', '{}', 'profile-sha', 2)")
    raw.close()
    with Store(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert must(s.run("u", 1)).state == "received" and s.profile_sha("u", 1) == "profile-sha"
        assert [r.generation for r in s.supersede_runs("u", 2, now=3.0)] == [1]
        assert s.delete_runs("u") == 1 and s.trace("u", 1) is None  # the cascade works again


def test_a_version_1_store_is_upgraded_keeping_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as raw:  # the file as the first released schema left it
        for statement in _MIGRATIONS[0]:
            raw.execute(statement)
        raw.execute("PRAGMA user_version = 1")
        raw.execute("INSERT INTO runs (uid, generation, namespace, name, profiling_job, state, token, token_sha,"
                    " created, updated) VALUES ('u', 1, 'ns', 'n', 'p', 'profiling', 't', 'sha', 1, 1)")
    with Store(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert must(s.run("u", 1)).state == "profiling"
        assert must(s.start_prediction_job("k", 1, "advisor-predict-k-1", "{}", "{}", now=2.0)).state == "running"


# --- prediction Jobs (job backend) --------------------------------------------------------------


def test_a_prediction_job_attempt_runs_once_and_the_next_follows_a_finished_one(store: Store) -> None:
    first = must(store.start_prediction_job("k", 1, "job-1", '{"profile": 1}', '{"max_workers": 4}', now=1.0))
    assert (first.attempt, first.job_name, first.state, first.started) == (1, "job-1", "running", 1.0)
    assert store.start_prediction_job("k", 1, "job-1", "{}", "{}", now=2.0) is None  # running: not again
    assert store.start_prediction_job("k", 2, "job-2", "{}", "{}", now=2.0) is None  # nor the next one
    assert store.prediction_job_input("k") == ('{"profile": 1}', '{"max_workers": 4}')
    assert store.finish_prediction_job("k", 1, "succeeded", '{"curve": []}', "", now=3.0) is True
    assert store.finish_prediction_job("k", 1, "failed", None, "late Job status", now=4.0) is False  # once only
    done = must(store.prediction_job("k"))
    assert (done.state, done.result_json, done.token, done.updated) == ("succeeded", '{"curve": []}', None, 3.0)
    assert store.prediction_job_input("k") is None  # the input is dropped with the attempt
    assert store.start_prediction_job("k", 1, "job-1", "{}", "{}", now=5.0) is None  # never an earlier one again
    # a later number may skip (the cluster holds Jobs of attempts this store never knew), once
    second = must(store.start_prediction_job("k", 3, "job-3", "{}", "{}", now=5.0))
    assert (second.attempt, second.state, second.result_json) == (3, "running", None)
    assert must(second.token) != must(first.token)
    assert store.start_prediction_job("k", 4, "job-4", "{}", "{}", now=6.0) is None  # 3 runs: no other


def test_an_adopted_attempt_keeps_its_start_time_and_token(store: Store) -> None:
    """A Job another replica started: its record keeps the Job's start (its attempt id) and the
    token derived for it, not a fresh one."""
    row = must(store.start_prediction_job("k", 2, "job-2", "{}", "{}", now=9.0, token="derived", started=4.5))
    assert (row.attempt, row.started, row.updated, row.token) == (2, 4.5, 9.0, "derived")
    assert store.verify_prediction_token("k", "derived") is True


def test_a_prediction_token_is_valid_for_its_running_attempt_only(store: Store) -> None:
    a = must(store.start_prediction_job("a", 1, "job-a", "{}", "{}", now=1.0))
    store.start_prediction_job("b", 1, "job-b", "{}", "{}", now=1.0)
    assert store.verify_prediction_token("a", must(a.token)) is True
    assert store.verify_prediction_token("b", must(a.token)) is False
    assert store.verify_prediction_token("a", "forged") is False
    store.finish_prediction_job("a", 1, "failed", None, "pod never started", now=2.0)
    assert store.verify_prediction_token("a", must(a.token)) is False
    assert must(a.token) not in repr(a)  # never in logs


def test_prediction_jobs_survive_a_restart_and_can_be_forgotten(tmp_path: Path) -> None:
    with Store(tmp_path / "advisor.db") as before:
        job = must(before.start_prediction_job("k", 1, "job-1", "{}", "{}", now=1.0))
    with Store(tmp_path / "advisor.db") as after:
        assert after.prediction_job("k") == job and after.verify_prediction_token("k", must(job.token))
        after.delete_prediction_jobs(["k"])
        assert after.prediction_jobs() == []


def test_corrupt_file_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    path.write_bytes(b"this is not an SQLite database, just some text " * 100)
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


def test_newer_schema_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    Store(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError, match=rf"{path}.*schema version {SCHEMA_VERSION + 1}.*newer"):
        Store(path)


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE t (x)")
    raw.close()
    with pytest.raises(StoreError, match="not an advisor store"):
        Store(path)


def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "advisor.db"
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


def test_use_after_close_is_a_store_error(tmp_path: Path) -> None:
    s = Store(tmp_path / "advisor.db")
    s.close()
    with pytest.raises(StoreError, match="advisor.db"):
        s.run(UID, 1)
