"""Rolling upgrades: today's controller reads the state every older one wrote, and leaves state of
a newer format alone.

The fixtures in tests/data/state-formats/<commit>/ were written by the controller of that commit
itself (scripts/record_state_formats.py; the README there lists what each changed): two TFJobs,
``done`` profiled and predicted, ``inflight`` still profiling, their profiling runs, profile
records and token Secrets where that commit made them, and its store file where its schema
changed. Today's controller starts on them as a new release does after an upgrade: with the old
store where there is one (a kept volume), else with a store of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from advisor.controller.jobs.tfjob import PREFIX
from advisor.controller.state.formats import RECORD_FORMAT, STATE_FORMAT
from advisor.controller.state.store import SCHEMA_VERSION, Store
from advisor.errors import StoreError
from tests.controller.harness import (
    NS, annotations, create_tfjob, phase, profiling_jobs, reconciles, settings_for, start_controller,
    upload_as_profiling_pod, wait_for,
)
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "state-formats"
COMMITS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def load(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else []


def test_every_fixture_is_listed_in_the_readme() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert COMMITS and all(f"`{c}`" in readme for c in COMMITS)


@pytest.mark.parametrize("commit", COMMITS)
def test_todays_controller_finishes_what_an_older_one_left(emu: KubeEmulator, body: bytes, tmp_path: Path,
                                                           commit: str) -> None:
    folder = FIXTURES / commit
    records = load(folder, "records.json")
    for obj in [*load(folder, "tfjobs.json"), *records, *load(folder, "secrets.json")]:
        emu.seed(obj)
    if (folder / "advisor.db").exists():  # the volume kept across the upgrade
        shutil.copyfile(folder / "advisor.db", tmp_path / "advisor.db")
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False))
    try:
        wait_for("the job in the cache", lambda: controller.jobs.get(NS, "inflight"))
        wait_for("both jobs' runs in the store", lambda: len(controller.store.runs()) == 2)
        # the run in flight is adopted: the token its pod holds is accepted, and it is predicted
        run = emu.get("tfjobs", NS, "inflight-prof-g1")
        result = upload_as_profiling_pod(emu, run, body, port=controller.http.port)
        assert result.status == 202, result.message
        wait_for("both Predicted", lambda: phase(emu, "done") == phase(emu, "inflight") == "Predicted", timeout_s=30)
        # nothing was profiled again, and no profiling run was replaced
        assert [c for c in emu.calls(verb="create", resource="tfjobs")] == []
        assert [c for c in emu.calls(verb="delete", resource="tfjobs")] == []
        assert sorted(j["metadata"]["name"] for j in profiling_jobs(emu)) == ["done-prof-g1", "inflight-prof-g1"]
        for name in ("done", "inflight"):  # the job's state is today's format from now on
            notes = annotations(emu, name)
            assert notes[PREFIX + "state-format"] == str(STATE_FORMAT)
            assert notes[PREFIX + "profiled-generation"] == "1"
        # a prediction recorded with the profile is applied as it is when its key (profile and
        # parameters) is still today's: then only the in-flight job is simulated
        if not records:
            return  # a release before the records: its stored prediction's key is not in the cluster
        old_key = next((r["metadata"]["annotations"].get(PREFIX + "prediction-key") for r in records
                        if r["metadata"]["name"] == "done-advisor-g1"), None)
        def record_key() -> str | None:
            return (emu.get("configmaps", NS, "done-advisor-g1") or {}).get("metadata", {}).get(
                "annotations", {}).get(PREFIX + "prediction-key")

        def settled() -> tuple[str | None, float] | None:
            # a stale key is simulated again and its record rewritten: wait for the rewrite too
            # (read before it, the record still holds the old key while two predictions ran)
            key, simulated = record_key(), controller.metrics.predictions.labels("succeeded")._value.get()
            return (key, simulated) if simulated == (1 if key == old_key else 2) else None

        try:
            wait_for("done's record with as many predictions as its key needs", settled)
        except AssertionError:
            pass
        new_key = record_key()
        simulated = controller.metrics.predictions.labels("succeeded")._value.get()
        assert simulated == (1 if old_key == new_key else 2), (old_key, new_key)
    finally:
        controller.stop()


def newer(obj: dict[str, Any], key: str, version: int) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {})[PREFIX + key] = str(version)
    return obj


def test_state_of_a_newer_format_is_left_untouched_and_said_so(emu: KubeEmulator, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """What an older controller does in a rolling upgrade when a newer one wrote the job's state:
    no write on the job, no profiling run, no record touched; a Warning event (once) and a log line."""
    future = STATE_FORMAT + 1
    emu.seed(newer(tfjob("ahead", annotations={PREFIX + "phase": "Profiling"}), "state-format", future))
    controller = start_controller(emu, settings_for(tmp_path, leader_election=False, resync_period_s=5))
    try:
        events = lambda: [e for e in emu.list("events", NS) if e["reason"] == "StateFormatUnsupported"]  # noqa: E731
        (event,) = wait_for("the Warning event", events)
        assert event["involvedObject"]["name"] == "ahead" and event["type"] == "Warning"
        assert f"in format '{future}', newer than this controller knows (up to {STATE_FORMAT})" in event["message"]
        assert any("ahead" in r.getMessage() and "newer than this controller" in r.getMessage() for r in caplog.records)
        controller.resync()  # looked at again: still nothing written, still one event
        wait_for("a second look", lambda: reconciles(controller) >= 2)
        assert emu.calls(verb="patch", resource="tfjobs") == [] and emu.calls(verb="create", resource="tfjobs") == []
        assert len(events()) == 1
        assert annotations(emu, "ahead")[PREFIX + "state-format"] == str(future)
    finally:
        controller.stop()


def test_a_profile_record_of_a_newer_format_is_not_read_nor_overwritten(emu: KubeEmulator, tmp_path: Path) -> None:
    """The job's annotations are today's, but its record was written by a newer controller (it
    took over the job, then this one leads again): the job is left as it is, and said so."""
    first = start_controller(emu, settings_for(tmp_path / "a", leader_election=False))
    try:
        create_tfjob(emu, tfjob("mixed"))
        wait_for("Profiling", lambda: phase(emu, "mixed") == "Profiling")
    finally:
        first.stop()
    uid = emu.get("tfjobs", NS, "mixed")["metadata"]["uid"]
    record = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "mixed-advisor-g1", "namespace": NS,
                           "annotations": {PREFIX + "profiling-for-uid": uid,
                                           PREFIX + "record-format": str(RECORD_FORMAT + 1)}},
              "binaryData": {"profile.json.gz": "a format this controller cannot read"}}
    emu.seed(record)
    second = start_controller(emu, settings_for(tmp_path / "b", leader_election=False))  # its store knows nothing
    try:
        (event,) = wait_for("the Warning event", lambda: [e for e in emu.list("events", NS)
                                                          if e["reason"] == "StateFormatUnsupported"])
        assert "profile record ml/mixed-advisor-g1 is in format" in event["message"]
        assert emu.calls(verb="patch", resource="configmaps") == []
        assert emu.calls(verb="delete", resource="configmaps") == []
        assert emu.get("configmaps", NS, "mixed-advisor-g1")["binaryData"] == record["binaryData"]
        assert second.store.runs() == []  # not adopted from a state it cannot read
    finally:
        second.stop()


def test_a_store_of_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    Store(path).close()
    import sqlite3
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this advisor understands"):
        Store(path)
    assert path.read_bytes() == before
