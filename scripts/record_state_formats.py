"""Record the state older controllers wrote, with their own code: tests/data/state-formats/<commit>/.

For each commit in ``COMMITS`` (one per change of what the controller writes: the job's
annotations, the profile record ConfigMap, the store's schema), the repository's tree at that
commit is extracted (``git archive``, nothing in this checkout changes) and its own controller
runs, in a child process with that tree alone on ``PYTHONPATH``, against its own API emulator:
two TFJobs opt in; ``done`` is profiled (the trace of tests/data/ps-async/tf-native/mlp_bw100,
cut to its first ``STEPS`` steps to keep the files small) and predicted (the harness's canned
prediction), ``inflight`` is left profiling. What the cluster then holds is written as JSON
(``tfjobs.json``: both jobs and their profiling runs; ``records.json``: the profile ConfigMaps
and ``secrets.json``: the runs' token Secrets, where that commit wrote any), and the store file as ``advisor.db`` when its schema differs from the previous commit's.

    python3 scripts/record_state_formats.py [COMMIT ...]

tests/controller/test_state_formats.py reads them with today's controller.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "state-formats"
STEPS = 15
# commit -> what it changed in the state it writes (README.md in OUT says the same)
COMMITS = {
    "d657b3c": "the first controller: store schema 1, annotations, no profile record",
    "751a76a": "store schema 2 (prediction_jobs)",
    "1532dbd": "store schema 3 (run state superseded)",
    "ede6b43": "store schema 4 (profiling tries), profile record ConfigMaps, profiling-run/-started/-attempts",
    "e3a4057": "the applied prediction in the profile record",
    "ed10708": "curve-source annotation (online refit)",
    "cc38434": "job kinds: the record's owner reference names the job's kind",
    "a9dac1b": "the last commit before state carried its format version",
}

DRIVER = r'''
import gzip, json, sys
from pathlib import Path
import tests.controller.harness as h
from tests.controller.tfjobs import tfjob
from tests.kube_emulator import KubeEmulator
from advisor.profiling.bundle import build_bundle, encode_bundle

out, data, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
meta = json.loads((data / "meta.json").read_text())
with gzip.open(data / "runmetadata.jsonl.gz", "rt") as fh:
    recorded = [json.loads(line) for line in fh if line.strip()][:steps]
meta = {k: (v[:steps] if isinstance(v, list) and len(v) == meta["n_steps"] else v) for k, v in meta.items()}
meta["n_steps"] = steps
body = encode_bundle(build_bundle(recorded, meta))
extra = {"ingest_key": h.INGEST_KEY} if hasattr(h, "INGEST_KEY") else {}
settings = h.settings_for(out / "run", leader_election=False, **extra)
with KubeEmulator(namespaces=[h.NS], bookmark_interval_s=0.5) as emu:
    controller = h.start_controller(emu, settings)
    try:
        h.create_tfjob(emu, tfjob("done"))
        h.create_tfjob(emu, tfjob("inflight"))
        h.wait_for("two profiling runs", lambda: len(h.profiling_jobs(emu)) == 2, timeout_s=60)
        h.wait_for("Profiling", lambda: h.phase(emu, "done") == h.phase(emu, "inflight") == "Profiling")
        run = emu.get("tfjobs", h.NS, "done-prof-g1")
        result = h.upload_as_profiling_pod(emu, run, body)
        assert result.ok, result
        h.wait_for("Predicted", lambda: h.phase(emu, "done") == "Predicted", timeout_s=60)
        try:  # commits from e3a4057 on add the applied prediction to the record, just after Predicted
            h.wait_for("the recorded prediction", lambda: any(
                "prediction.json.gz" in (c.get("binaryData") or {}) for c in emu.list("configmaps", h.NS)), timeout_s=5)
        except AssertionError:
            pass
    finally:
        controller.stop()
    typed = lambda items, api, kind: [{"apiVersion": api, "kind": kind, **o} for o in items]  # as a get answers
    tfjobs = typed(sorted(emu.list("tfjobs", h.NS), key=lambda o: o["metadata"]["name"]), "kubeflow.org/v1", "TFJob")
    records = typed([c for c in emu.list("configmaps", h.NS)
                     if (c["metadata"].get("labels") or {}).get("training-advisor.io/role") == "profile"], "v1",
                    "ConfigMap")
    secrets = typed(emu.list("secrets", h.NS), "v1", "Secret")  # the runs' tokens, where a commit kept them so
(out / "tfjobs.json").write_text(json.dumps(tfjobs, indent=1, sort_keys=True) + "\n")
for name, objects in (("records.json", records), ("secrets.json", secrets)):
    if objects:
        (out / name).write_text(json.dumps(objects, indent=1, sort_keys=True) + "\n")
'''


def record(commit: str, work: Path, previous_schema: int | None) -> int:
    tree = work / commit
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO, check=True, capture_output=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    out = OUT / commit
    out.mkdir(parents=True, exist_ok=True)
    data = REPO / "tests" / "data" / "ps-async" / "tf-native" / "mlp_bw100"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(out), str(data), str(STEPS)], cwd=tree, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{commit}: its controller did not get through the run (exit {done.returncode})")
    store = out / "run" / "advisor.db"
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        schema = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if schema != previous_schema:
        (out / "advisor.db").write_bytes(store.read_bytes())
    for leftover in sorted((out / "run").iterdir(), reverse=True):
        leftover.unlink()
    (out / "run").rmdir()
    print(f"{commit}: schema {schema}{'' if schema != previous_schema else ' (store not kept: as before)'}")
    return schema


def main(argv: list[str]) -> int:
    commits = argv or list(COMMITS)
    schema = None
    with tempfile.TemporaryDirectory(prefix="advisor-state-formats-") as tmp:
        work = Path(tmp)
        for commit in commits:
            schema = record(commit, work, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
