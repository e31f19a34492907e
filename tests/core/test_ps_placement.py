"""PS-count what-if: a one-PS profile placed on M PS (advisor/core/models/ps_des/placement.py)."""

from __future__ import annotations

import pytest

from advisor.core.profile import Profile, Resource, build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.models.ps_des.placement import owners, place, ps_bytes, with_parameter_servers
from advisor.core.models.ps_des.simulator import simulate
from advisor.errors import ModelInputError
from benchmarks.synthetic import tiny_mlp
from tests.conftest import REPO, ps_async_data


def small_profile() -> Profile:
    """Three variables (400, 100 and 100 bytes), each read, pulled, pushed and applied, plus a
    learning rate pushed to every update and a counter updated after all of them."""
    ops: list[dict] = []
    for v in ("a", "b", "c"):
        ops.append(dict(name=f"ps:{v}", resource="ps", ps=0, op_type="VarHandleOp"))
    ops.append(dict(name="ps:step", resource="ps", ps=0, op_type="VarHandleOp"))
    ops.append(dict(name="lr", resource="worker"))
    ops.append(dict(name="push:lr", resource="uplink", ps=0, bytes=4, deps=["lr"]))
    sizes = {"a": 400, "b": 100, "c": 100}
    for v, size in sizes.items():
        ops.append(dict(name=f"ps:{v}/read", resource="ps", ps=0, op_type="ReadVariableOp", deps=[f"ps:{v}"]))
        ops.append(dict(name=f"pull:{v}", resource="downlink", ps=0, bytes=size, deps=[f"ps:{v}/read"]))
        ops.append(dict(name=f"grad:{v}", resource="worker", deps=[f"pull:{v}"]))
        ops.append(dict(name=f"push:{v}", resource="uplink", ps=0, bytes=size, deps=[f"grad:{v}"]))
        ops.append(dict(name=f"ps:{v}/apply", resource="ps", ps=0, deps=[f"ps:{v}", f"push:{v}", "push:lr"]))
    ops.append(dict(name="ps:gather", resource="ps", ps=0, deps=[f"ps:{v}/apply" for v in sizes]))
    ops.append(dict(name="ps:step/add", resource="ps", ps=0, deps=["ps:gather", "ps:step"]))
    n = len(ops)
    steps = [dict(index=0, start_us=[0.0] * n, duration_us=[float(i + 1) for i in range(n)])]
    return build_profile(job=dict(batch_size=4, parameter_servers=1), ops=ops, steps=steps)


def test_one_ps_is_the_profile_itself() -> None:
    profile = small_profile()
    assert with_parameter_servers(profile, 1) is profile
    assert with_parameter_servers(profile, 1, "greedy-bytes") is profile
    assert place(profile, 1) == {"ps:a": 0, "ps:b": 0, "ps:c": 0, "ps:step": 0}


def test_two_ps_round_robin_by_hand() -> None:
    # Creation order a, b, c, step -> PS 0, 1, 0, 1 (replica_device_setter's round robin).
    profile = small_profile()
    assert place(profile, 2) == {"ps:a": 0, "ps:b": 1, "ps:c": 0, "ps:step": 1}
    two = with_parameter_servers(profile, 2)
    ps = {op.name: op.ps for op in two.ops}
    assert two.job.parameter_servers == 2
    # Each variable's read, pull, push and apply follow it.
    for v, p in (("a", 0), ("b", 1), ("c", 0)):
        assert ps[f"ps:{v}/read"] == ps[f"pull:{v}"] == ps[f"push:{v}"] == ps[f"ps:{v}/apply"] == p
    # The gather depends on updates on both PS: it follows its dependent, the step counter's
    # increment, which sits with the step variable on PS 1.
    assert ps["ps:gather"] == ps["ps:step/add"] == 1
    # The learning rate feeds updates on PS 0 (a, c) and PS 1 (b): sent once to each.
    assert ps["push:lr"] == 0 and ps["push:lr@ps1"] == 1
    deps = {op.name: op.deps for op in two.ops}
    assert "push:lr" in deps["ps:a/apply"] and "push:lr" in deps["ps:c/apply"]
    assert "push:lr@ps1" in deps["ps:b/apply"] and "push:lr" not in deps["ps:b/apply"]
    # Bytes per PS and step: PS 0 = a (400 + 400) + c (100 + 100) + lr 4; PS 1 = b (200) + lr 4.
    assert ps_bytes(two) == [1004, 204]
    # The copy keeps the traced timing of the push it copies; worker compute is untouched.
    dur = dict(zip((op.name for op in two.ops), two.steps[0].duration_us))
    assert dur["push:lr@ps1"] == dur["push:lr"] == 6.0
    assert sum(op.resource is Resource.WORKER for op in two.ops) == 4


def test_the_recorded_creation_order_decides_over_the_trace_order() -> None:
    # A trace's partition graph lists variables in an order of its own (a real one put
    # global_step last); the hook records the creation order, step first here: round robin then
    # gives step, a, b, c -> PS 0, 1, 0, 1. Greedy by bytes: step (never pulled here: 0 bytes) on
    # PS 0, whose load stays 0, so a (400) goes to PS 0 too (ties to the lower index), then b and
    # c to PS 1 (100 and 200 < 400).
    base = small_profile()
    profile = base.model_copy(update={"job": base.job.model_copy(update={"variable_order": ("step", "a", "b", "c")})})
    assert place(profile, 2) == {"ps:step": 0, "ps:a": 1, "ps:b": 0, "ps:c": 1}
    assert place(profile, 2, "greedy-bytes") == {"ps:step": 0, "ps:a": 0, "ps:b": 1, "ps:c": 1}
    # a name the list lacks keeps its trace place after the listed ones
    partial = base.model_copy(update={"job": base.job.model_copy(update={"variable_order": ("c",)})})
    assert place(partial, 2) == {"ps:c": 0, "ps:a": 1, "ps:b": 0, "ps:step": 1}


def test_the_hook_records_the_creation_order_and_the_importer_keeps_it() -> None:
    from advisor.importers.loader import load_profile

    # tests/data/ps-sync: the profiling hook's meta lists global_step first (created first)
    profile = load_profile(REPO / "tests" / "data" / "ps-sync" / "mlp_bw100.trace.json.gz")
    assert profile.job.variable_order is not None
    assert profile.job.variable_order[:3] == ("global_step", "fc0/W", "fc0/b")


def test_two_ps_greedy_by_bytes_by_hand() -> None:
    # In creation order, each to the PS with fewest bytes so far (ties: lowest index):
    # a (400) -> PS 0 [400, 0]; b (100) -> PS 1 [400, 100]; c (100) -> PS 1 [400, 200];
    # step (0 bytes: nothing pulls it) -> PS 1 [400, 200].
    profile = small_profile()
    assert place(profile, 2, "greedy-bytes") == {"ps:a": 0, "ps:b": 1, "ps:c": 1, "ps:step": 1}
    two = with_parameter_servers(profile, 2, "greedy-bytes")
    assert ps_bytes(two) == [804, 404]
    # Three PS, round robin: a, b, c, step -> 0, 1, 2, 0.
    assert place(profile, 3) == {"ps:a": 0, "ps:b": 1, "ps:c": 2, "ps:step": 0}


def test_owners_follow_variables() -> None:
    profile = small_profile()
    own = owners(profile)
    names = [op.name for op in profile.ops]
    by = {names[i]: (names[o] if o is not None else None) for i, o in enumerate(own)}
    assert by["ps:b/apply"] == "ps:b" and by["pull:c"] == "ps:c" and by["ps:gather"] == "ps:step"
    assert by["grad:a"] is None


def sync_profile() -> Profile:
    """A synchronous program as a one-worker trace shows it: variables a (400 bytes), b and c
    (100 each) and the step counter; a token queue and one gradient accumulator per trainable
    variable, created before the variables and linked to none of them (the chief's ops that read
    both are not in the trace); each gradient pushed to its accumulator's apply."""
    ops: list[dict] = [dict(name="ps:sync_token_q", resource="ps", ps=0, op_type="FIFOQueueV2")]
    sizes = {"a": 400, "b": 100, "c": 100}
    for k in range(len(sizes)):
        ops.append(dict(name=f"ps:acc_{k}", resource="ps", ps=0, op_type="ResourceConditionalAccumulator"))
    for v in (*sizes, "global_step"):
        ops.append(dict(name=f"ps:{v}", resource="ps", ps=0, op_type="VarHandleOp"))
    ops.append(dict(name="ps:global_step/read", resource="ps", ps=0, op_type="ReadVariableOp",
                    deps=["ps:global_step"]))
    ops.append(dict(name="pull:global_step", resource="downlink", ps=0, bytes=8, deps=["ps:global_step/read"]))
    for k, (v, size) in enumerate(sizes.items()):
        ops.append(dict(name=f"ps:{v}/read", resource="ps", ps=0, op_type="ReadVariableOp", deps=[f"ps:{v}"]))
        ops.append(dict(name=f"pull:{v}", resource="downlink", ps=0, bytes=size, deps=[f"ps:{v}/read"]))
        ops.append(dict(name=f"grad:{v}", resource="worker", deps=[f"pull:{v}"]))
        ops.append(dict(name=f"push:{v}", resource="uplink", ps=0, bytes=size, deps=[f"grad:{v}"]))
        ops.append(dict(name=f"ps:apply_{k}", resource="ps", ps=0, op_type="ResourceAccumulatorApplyGradient",
                        deps=[f"ps:acc_{k}", f"push:{v}"]))
    ops.append(dict(name="ps:token", resource="ps", ps=0, op_type="QueueDequeueV2",
                    deps=[*(f"ps:apply_{k}" for k in range(len(sizes))), "ps:sync_token_q"]))
    ops.append(dict(name="pull:token", resource="downlink", ps=0, bytes=8, deps=["ps:token"]))
    n = len(ops)
    steps = [dict(index=0, start_us=[0.0] * n, duration_us=[float(i + 1) for i in range(n)])]
    return build_profile(job=dict(batch_size=4, parameter_servers=1), ops=ops, steps=steps)


def test_a_synchronous_programs_accumulators_and_token_queue_follow_their_variables() -> None:
    # TF creates each accumulator on its variable's device and the token queue on global_step's.
    # Matched by size in creation order: acc_0 (400 bytes) -> a; acc_1 (100) -> b, the next 100-byte
    # variable; acc_2 (100) -> c, the one after it (not b again).
    profile = sync_profile()
    names = [op.name for op in profile.ops]
    by = {names[i]: (names[o] if o is not None else None) for i, o in enumerate(owners(profile))}
    assert [by[f"ps:acc_{k}"] for k in range(3)] == ["ps:a", "ps:b", "ps:c"]
    assert [by[f"ps:apply_{k}"] for k in range(3)] == ["ps:a", "ps:b", "ps:c"]
    assert by["ps:sync_token_q"] == by["ps:token"] == by["pull:token"] == "ps:global_step"
    # greedy by bytes: a (400) on PS 0, b, c and the counter on PS 1; each push goes where its
    # variable is, so each PS link carries its own variables' bytes both ways
    two = with_parameter_servers(profile, 2, "greedy-bytes")
    assert place(profile, 2, "greedy-bytes") == {"ps:a": 0, "ps:b": 1, "ps:c": 1, "ps:global_step": 1}
    assert ps_bytes(two) == [2 * 400, 2 * 100 + 2 * 100 + 8 + 8]


@pytest.mark.parametrize("program", ["mlp", "cnn"])
@pytest.mark.parametrize(("strategy", "tag"), [("greedy-bytes", "ps2greedy"), ("round-robin", "ps2")])
def test_the_what_if_of_a_real_synchronous_trace_splits_the_bytes_as_the_real_two_ps_job(
        program: str, strategy: str, tag: str) -> None:
    # The truth: the same SyncReplicasOptimizer program traced with 2 PS, greedy or round-robin
    # placement (tests/data/ps-sync/two-ps). Before accumulators followed their variables, every
    # gradient went to the first variable's PS (mlp, greedy: 2,941,040 and 532,528 bytes a step).
    from advisor.importers.loader import load_profile

    sync = REPO / "tests" / "data" / "ps-sync"
    one = load_profile(sync / f"{program}_bw100.trace.json.gz")
    real = load_profile(sync / "two-ps" / f"{program}_{tag}_bw100.trace.json.gz")
    assert sorted(ps_bytes(with_parameter_servers(one, 2, strategy))) == sorted(ps_bytes(real))


def test_bad_requests_name_the_problem() -> None:
    with pytest.raises(ModelInputError, match="no variables"):
        with_parameter_servers(tiny_mlp(), 2)
    with pytest.raises(ModelInputError, match="ps_placement"):
        place(small_profile(), 2, "random")
    two = with_parameter_servers(small_profile(), 2)
    with pytest.raises(ModelInputError, match="traced with 2 PS"):
        with_parameter_servers(two, 3)
    assert with_parameter_servers(two, 2) is two
    with pytest.raises(ModelInputError, match=">= 1"):
        place(small_profile(), 0)


def test_real_trace_round_robin_and_what_if() -> None:
    from advisor.importers.loader import load_profile

    profile = load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"), bandwidth_bps=100e6)
    # Variables in creation order fc0/W, fc0/b, ..., fc3/b, global_step: round robin puts every
    # weight matrix on PS 0 (the known pitfall of the default strategy), greedy-bytes balances.
    rr = place(profile, 2)
    assert [p for _, p in sorted(rr.items())] == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    rr_bytes = ps_bytes(with_parameter_servers(profile, 2))
    greedy_bytes = ps_bytes(with_parameter_servers(profile, 2, "greedy-bytes"))
    assert rr_bytes[1] < 0.01 * rr_bytes[0]
    assert max(greedy_bytes) < 0.75 * sum(greedy_bytes)
    assert sum(rr_bytes) >= sum(ps_bytes(profile))  # copies only add (the learning rate)
    # The link-bound MLP at W = 8: spreading the bytes over 2 PS links raises throughput.
    net = NetworkModel(bandwidth_bps=100e6)
    sim = SimulationSettings(workers=8, steps=120, warmup_steps=20, seed=1)
    one = simulate(profile, net, sim).throughput(20)
    two = simulate(with_parameter_servers(profile, 2, "greedy-bytes"), net, sim).throughput(20)
    assert two > 1.2 * one


def test_models_what_if_one_ps_is_today_and_two_ps_reports_the_placement() -> None:
    from advisor.core.curve import CurveSettings
    from advisor.core.models import registry
    from tests.core.test_sync_ps import _curve, _inputs

    cfg = CurveSettings(workers=(1, 3), steps=120, warmup_steps=20, seed=1)
    profile = small_profile()
    for name in ("li2020-des+contention", "li2020-des-sync"):
        today = _curve(name, _inputs(profile, 1e6), cfg)
        assert _curve(name, _inputs(profile, 1e6, parameter_servers=1), cfg) == today
        two = _inputs(profile, 1e6, parameter_servers=2)
        _curve(name, two, cfg, ps_placement="greedy-bytes")
        model = registry.get(name)
        details = model.outlook(two, registry.params_for(model, {"ps_placement": "greedy-bytes"}), {}).details
        assert details["ps_placement"]["variables"] == {"ps:a": 0, "ps:b": 1, "ps:c": 1, "ps:step": 1}
    with pytest.raises(ModelInputError, match="li2020-des.*parameter_servers.*no variables"):
        _curve("li2020-des", _inputs(tiny_mlp(), 1e8, parameter_servers=2), cfg)
    with pytest.raises(ModelInputError, match="ps_placement"):
        registry.params_for(registry.get("li2020-des"), {"ps_placement": "random"})
