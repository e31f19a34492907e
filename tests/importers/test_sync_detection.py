"""The regime of a TF parameter-server trace: ``JobInfo.synchronous`` against how each recorded
trace in tests/data was made.

Independent truth: the recordings themselves. ``tests/data/ps-sync`` holds one-worker runs of
``SyncReplicasOptimizer`` programs (mlp and cnn at 100 and 50 Mbit/s); ``tests/data/ps-async``
(README: plain ``GradientDescentOptimizer.minimize``, "asynchronous updates, no barrier") and
``tests/data/ps-traces`` (README: "plain GradientDescentOptimizer.minimize (asynchronous)") hold
asynchronous ones, in every encoding the importers read. The rule itself (``is_sync_replicas``)
is checked on hand-made graphs built from TensorFlow's naming (sync_replicas_optimizer.py: the
token queue ``sync_token_q`` at the graph's root, accumulators under the optimizer's own name).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.core.profile import parse_profile
from advisor.errors import ProfileError
from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import profile_to_json, read_profile, write_profile
from advisor.importers.tf_profile import is_sync_replicas
from advisor.importers.tf_records import GraphNode
from tests.conftest import REPO, ps_async_data

DATA = REPO / "tests" / "data"
SYNC = sorted((DATA / "ps-sync").glob("*.trace.json.gz"))
ASYNC_BUNDLES = sorted((DATA / "ps-traces").glob("*.trace.json.gz"))
RUNS = ("mlp_bw100", "mlp_bw50", "cnn_bw100", "cnn_bw50")
BATCH = {"mlp": 32, "cnn": 8}  # ps-async/README.md's table


def _rel(path: Path) -> str:
    return str(path.relative_to(DATA))


def test_the_recorded_sets_are_all_there() -> None:
    # a missing file must fail here, not shrink the parametrisations below to nothing
    assert [p.name for p in SYNC] == ["cnn_bw100.trace.json.gz", "cnn_bw50.trace.json.gz",
                                      "mlp_bw100.trace.json.gz", "mlp_bw50.trace.json.gz"]
    assert [p.name for p in ASYNC_BUNDLES] == ["cnn_ps1_bw100.trace.json.gz", "mlp_ps1_bw100.trace.json.gz",
                                               "mlp_ps2_bw100.trace.json.gz", "mlp_ps2greedy_bw100.trace.json.gz"]


@pytest.mark.parametrize("path", SYNC, ids=_rel)
def test_every_syncreplicas_recording_is_synchronous(path: Path) -> None:
    profile = load_profile(path)
    assert profile.job.synchronous is True
    # and it is still an ordinary PS profile: one worker, pulls and pushes on one PS
    assert profile.job.kind.value == "tf-ps" and profile.job.parameter_servers == 1


ASYNC_FORMS = (
    [("condensed", p) for p in sorted(ps_async_data("condensed").glob("*/*.json.gz"))]
    + [("bundle", p) for p in ASYNC_BUNDLES]
    + [("runmetadata-jsonl", ps_async_data("tf-native", r, "runmetadata.jsonl.gz")) for r in RUNS]
    + [("condensed", ps_async_data("tf-native", r, "trace_w0.json.gz")) for r in RUNS]
    + [("directory", ps_async_data("tf-native", r)) for r in RUNS]
)


@pytest.mark.parametrize(("form", "path"), ASYNC_FORMS, ids=lambda v: v if isinstance(v, str) else _rel(v))
def test_every_asynchronous_recording_is_asynchronous(form: str, path: Path) -> None:
    assert load_profile(path).job.synchronous is False


@pytest.mark.parametrize("run", [f"{cc}/{m}_bw{bw}" for cc in ("cubic", "bbr") for m in ("mlp", "cnn")
                                 for bw in (100, 50)])
def test_binary_runmetadata_of_asynchronous_runs_is_asynchronous(run: str) -> None:
    cc, name = run.split("/")
    steps = [ps_async_data("raw-pb", cc, f"{name}_step{k}.pb") for k in (5, 6)]
    assert load_profile(steps, batch_size=BATCH[name.split("_")[0]]).job.synchronous is False


# --- the rule, on graphs named as TensorFlow names them ------------------------------------------

PS = "/job:ps/replica:0/task:0/device:CPU:0"
WORKER = "/job:worker/replica:0/task:0/device:CPU:0"


def _node(name: str, op: str, device: str = PS) -> GraphNode:
    return GraphNode(name=name, op=op, device=device)


QUEUE = _node("sync_token_q", "FIFOQueueV2")
APPLY = _node("sync_replicas/ResourceAccumulatorApplyGradient", "ResourceAccumulatorApplyGradient")
PLAIN = [_node("fc0/W", "VarHandleOp"), _node("GradientDescent/update_fc0/W/ResourceApplyGradientDescent",
                                              "ResourceApplyGradientDescent"), _node("fc0/MatMul", "MatMul", WORKER)]


@pytest.mark.parametrize(("nodes", "expected"), [
    (PLAIN, False),  # asynchronous: gradients applied to the variables directly
    ([*PLAIN, QUEUE, APPLY], True),  # the default name scope, sync_replicas
    # a user's name for the optimizer moves the accumulators, never the token queue (name_scope(""))
    ([*PLAIN, QUEUE, _node("tower/my_sync/ResourceAccumulatorApplyGradient", "ResourceAccumulatorApplyGradient")],
     True),
    ([QUEUE, _node("sync_replicas/AccumulatorApplyGradient", "AccumulatorApplyGradient")], True),  # ref accumulators
    ([QUEUE, _node("sync_replicas/SparseAccumulatorApplyGradient", "SparseAccumulatorApplyGradient")], True),
    ([_node("sync_token_q_1", "FIFOQueueV2"), APPLY], True),  # a second optimizer's queue: TF appends _1
    ([*PLAIN, QUEUE], False),  # a queue that happens to bear the name, no accumulator
    ([*PLAIN, APPLY], False),  # an accumulator used for something else, no token queue
    ([_node("input/sync_token_q", "FIFOQueueV2"), APPLY], False),  # not the root-level token queue
    ([_node("sync_token_q", "VarHandleOp"), APPLY], False),  # the name, but not a queue
])
def test_the_rule_needs_the_token_queue_and_an_accumulator(nodes: list[GraphNode], expected: bool) -> None:
    assert is_sync_replicas(nodes) is expected


# --- the field in the project's own format ------------------------------------------------------

def test_the_field_round_trips_and_is_written_only_when_true(tmp_path: Path) -> None:
    sync = load_profile(SYNC[0])
    written = tmp_path / "sync.json.gz"
    write_profile(sync, written)
    assert read_profile(written).job.synchronous is True
    assert profile_to_json(sync)["job"]["synchronous"] is True
    # an asynchronous profile is written without it, byte for byte as before the field existed:
    # older readers (which refuse unknown fields) still read it, stored sha256s stay the same
    example = read_profile(BUNDLED_EXAMPLE)
    assert "synchronous" not in profile_to_json(example)["job"] and example.job.synchronous is False


def test_a_profile_without_the_field_is_asynchronous_and_all_reduce_cannot_claim_it() -> None:
    doc = profile_to_json(read_profile(BUNDLED_EXAMPLE))
    assert parse_profile(doc).job.synchronous is False
    ddp = profile_to_json(load_profile(DATA / "allreduce" / "ddp-comm" / "profile.json.gz"))
    ddp["job"]["synchronous"] = True
    with pytest.raises(ProfileError, match="synchronous by its kind"):
        parse_profile(json.loads(json.dumps(ddp)))


def test_the_worker_device_is_read_from_the_device_names(tmp_path: Path) -> None:
    from advisor.importers.tf_profile import worker_on_gpu

    # every recorded trace here ran on CPU (sleeps emulate the accelerator): none is marked
    assert not any(load_profile(path).job.worker_on_gpu for path in [*SYNC, *ASYNC_BUNDLES])
    ps = GraphNode("w", "VarHandleOp", "/job:ps/replica:0/task:0/device:CPU:0")
    cpu = GraphNode("m", "MatMul", "/job:worker/replica:0/task:0/device:CPU:0")
    gpu = GraphNode("m", "MatMul", "/job:worker/replica:0/task:0/device:GPU:0")
    old_gpu = GraphNode("m", "MatMul", "/job:worker/task:0/gpu:1")  # TF 1's short form
    assert (worker_on_gpu([ps, cpu]), worker_on_gpu([ps, gpu]), worker_on_gpu([old_gpu])) == (False, True, True)
    # a PS on a GPU does not make the worker's all-reduce NCCL's
    assert not worker_on_gpu([GraphNode("w", "VarHandleOp", "/job:ps/replica:0/task:0/device:GPU:0"), cpu])
    # written only when true, so a CPU profile is written as before the field existed
    profile = load_profile(ASYNC_BUNDLES[0])
    assert "worker_on_gpu" not in profile_to_json(profile)["job"]
    on_gpu = profile.model_copy(update={"job": profile.job.model_copy(update={"worker_on_gpu": True})})
    write_profile(on_gpu, tmp_path / "gpu.json")
    assert read_profile(tmp_path / "gpu.json").job.worker_on_gpu is True
