"""The condensed-dump importer against every real trace in tests/data/ps-async/condensed.

Independent truths used here: the model sizes in each dump's own ``meta`` (parameter shapes,
float32), the raw records themselves (read with plain ``json`` here, not with the importer),
and TensorFlow's semantics (an op cannot start before the ops it depends on have ended).
"""

from __future__ import annotations

import gzip
import json
import math

import pytest

from advisor.core.profile import Profile, Resource
from advisor.importers.loader import load_profile
from tests.conftest import ps_async_data

TRACES = [f"{cc}/{m}_bw{bw}" for cc in ("cubic", "bbr") for m in ("mlp", "cnn") for bw in (100, 50)]


def _raw(name: str) -> dict:
    return json.load(gzip.open(ps_async_data("condensed", f"{name}.json.gz")))


@pytest.fixture(scope="module", params=TRACES)
def trace(request: pytest.FixtureRequest) -> tuple[str, dict, Profile]:
    raw = _raw(request.param)
    profile = load_profile(ps_async_data("condensed", f"{request.param}.json.gz"))
    return request.param, raw, profile


def _param_bytes(raw: dict) -> int:
    # float32 parameters: 4 bytes per element of every shape listed in meta.params
    return 4 * sum(math.prod(shape) for shape in raw["meta"]["params"].values())


def test_bytes_per_step_each_way_equal_the_model_parameters(trace: tuple[str, dict, Profile]) -> None:
    _, raw, profile = trace
    down = sum(op.bytes for op in profile.ops if op.resource is Resource.DOWNLINK)
    up = sum(op.bytes for op in profile.ops if op.resource is Resource.UPLINK)
    params = _param_bytes(raw)
    assert params == raw["meta"]["param_bytes"]
    # pulls: every variable + the int64 global step (8 B) read back after the update;
    # pushes: every gradient + the float32 learning rate (4 B) sent to the PS's optimizer.
    assert down == params + 8
    assert up == params + 4


def test_op_counts_match_the_graph(trace: tuple[str, dict, Profile]) -> None:
    _, raw, profile = trace
    n_vars = len(raw["meta"]["params"])
    pulls = [op for op in profile.ops if op.resource is Resource.DOWNLINK and op.bytes > 0]
    pushes = [op for op in profile.ops if op.resource is Resource.UPLINK and op.bytes > 0]
    assert len(pulls) == n_vars + 1  # variables + global step
    assert len(pushes) <= n_vars + 1  # gradients (identical ones may be merged) + learning rate
    # every recorded node of a complete step is a profile op, except _SOURCE (not in any graph)
    step = next(s for s in raw["steps"] if s["step"] == profile.steps[0].index)
    recorded = {
        (d["device"], n["name"] if n["name"] != "RecvTensor" else n["label"].split()[2])
        for d in step["devices"] for n in d["nodes"] if n["name"] != "_SOURCE"
    }
    assert len(recorded) == len(profile.ops)


def _fetched_by_client(raw: dict) -> set[str]:
    """Tensor names whose _Recv feeds only a client-terminated _Send (a session.run fetch)."""
    nodes = [n for g in raw["partition_graphs"] for n in g["nodes"]]
    fetch_inputs = {n["inputs"][0] for n in nodes if n["op"] == "_Send" and n["attrs"]["client_terminated"]}
    return {n["attrs"]["tensor_name"] for n in nodes if n["op"] == "_Recv" and n["name"] in fetch_inputs}


def test_every_transfer_joins_a_producer_and_a_consumer(trace: tuple[str, dict, Profile]) -> None:
    _, raw, profile = trace
    fetched = _fetched_by_client(raw)
    consumers = {op.name: [] for op in profile.ops}
    for op in profile.ops:
        for d in op.deps:
            consumers[d].append(op)
    for op in profile.ops:
        if not op.resource.is_transfer:
            continue
        sender = Resource.PS if op.resource is Resource.DOWNLINK else Resource.WORKER
        receiver = Resource.WORKER if op.resource is Resource.DOWNLINK else Resource.PS
        producers = [profile.ops[profile.index[d]] for d in op.deps]
        assert any(p.resource is sender for p in producers), op.name
        assert all(c.resource is receiver for c in consumers[op.name]), op.name
        tensor = op.name.split(":", 1)[1]
        assert consumers[op.name] or tensor in fetched, f"{op.name} has no consumer and is not a fetch"


def test_dependencies_agree_with_recorded_times(trace: tuple[str, dict, Profile]) -> None:
    """No op starts before an op it depends on has ended (to the clock's 50 us granularity)."""
    _, _, profile = trace
    for step in profile.steps:
        for i, deps in enumerate(profile.dep_indices):
            for d in deps:
                assert step.start_us[i] >= step.start_us[d] + step.duration_us[d] - 50, (
                    step.index, profile.ops[d].name, profile.ops[i].name)


def test_dependencies_do_not_depend_on_which_steps_are_read(trace: tuple[str, dict, Profile]) -> None:
    name, raw, profile = trace
    first_half = dict(raw, steps=raw["steps"][: len(raw["steps"]) // 2])
    second_half = dict(raw, steps=raw["steps"][len(raw["steps"]) // 2 :])
    from advisor.importers.tf_condensed import condensed_records
    from advisor.importers.tf_profile import build_profile_from_trace

    a = build_profile_from_trace(condensed_records(first_half))
    b = build_profile_from_trace(condensed_records(second_half))
    assert a.ops == b.ops == profile.ops


def test_incomplete_steps_are_skipped_and_counted(trace: tuple[str, dict, Profile]) -> None:
    _, raw, profile = trace
    # a step is incomplete when it lacks the PS-side RecvTensor records (README of tests/data/ps-async)
    def ps_recvs(step: dict) -> int:
        return sum(
            1 for d in step["devices"] if "/job:ps/" in d["device"] for n in d["nodes"] if n["name"] == "RecvTensor"
        )
    incomplete = [s["step"] for s in raw["steps"] if ps_recvs(s) == 0]
    assert profile.job.skipped_steps == len(incomplete)
    assert {s.index for s in profile.steps}.isdisjoint(incomplete)
    assert len(profile.steps) + len(incomplete) == len(raw["steps"])


def test_recorded_transfer_times_are_copied_exactly() -> None:
    raw = _raw("cubic/mlp_bw100")
    profile = load_profile(ps_async_data("condensed", "cubic/mlp_bw100.json.gz"))
    step = raw["steps"][7]
    timing = next(s for s in profile.steps if s.index == step["step"])
    for dev in step["devices"]:
        for n in dev["nodes"]:
            if n["name"] != "RecvTensor":
                continue
            tensor = n["label"].split()[2]
            name = ("pull0:" if "/job:worker/" in dev["device"] else "push0:") + tensor
            assert timing.duration_us[profile.index[name]] == n["end_rel_us"]


def test_known_dependencies_of_the_mlp() -> None:
    """Edges read off the MLP's partition graphs by hand (see tests/data/ps-async/README.md)."""
    profile = load_profile(ps_async_data("condensed", "cubic/mlp_bw100.json.gz"))
    deps = {op.name: set(op.deps) for op in profile.ops}
    # fc0/MatMul multiplies the input by fc0/W, which arrives through _Recv of edge_17
    assert "pull0:edge_17_fc0/MatMul/ReadVariableOp" in deps["worker:fc0/MatMul"]
    # the pull of fc0/W is produced by the PS's ReadVariableOp of fc0/W
    assert deps["pull0:edge_17_fc0/MatMul/ReadVariableOp"] == {"ps0:fc0/MatMul/ReadVariableOp"}
    # the update of fc0/W waits for its gradient (edge_122) and the learning rate (edge_49)
    assert {"push0:edge_122_gradients/fc0/MatMul_grad/MatMul_1", "push0:edge_49_GradientDescent/learning_rate"} <= deps[
        "ps0:GradientDescent/update_fc0/W/ResourceApplyGradientDescent"
    ]
