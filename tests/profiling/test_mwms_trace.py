"""The TensorFlow-free half of the Keras MWMS callback (``advisor.profiling.mwms_trace``): TF's
all-reduce pack layout, reading XPlane op events, and one step's facts from them.

Independent truths: TF's ``cross_device_utils.group_by_size`` rule (a new pack starts after one
holds MORE than ``bytes_per_pack``) and ``CollectiveAllReduce._all_reduce``'s reversal, applied
by hand below; hand-made XPlane events with times chosen so every expected figure is a sum
written beside it.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from advisor.core.profile import Resource
from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.profiling.allreduce_bundle import build_allreduce_bundle
from advisor.profiling.errors import ProfilingUnsupportedError
from advisor.profiling.mwms_trace import (
    OpEvent, bytes_of, check_single_worker, declared_collectives, events_from_xspace, layer_of, metric_collectives, pack_layout, step_facts,
    step_windows,
)


def test_default_options_reduce_every_gradient_in_one_pack_last_variable_first() -> None:
    assert pack_layout([4, 4, 4, 4], 0) == [[3, 2, 1, 0]]


def test_packs_close_once_they_hold_more_than_the_cap() -> None:
    # reversed: 3, 2, 1, 0 (4 bytes each). cap 5: [3] holds 4 (not > 5) so 2 joins (8 > 5: closed);
    # 1 opens a pack, 0 joins it (4 was not > 5)
    assert pack_layout([4, 4, 4, 4], 5) == [[3, 2], [1, 0]]
    # cap 3: every pack is closed by its first gradient (4 > 3)
    assert pack_layout([4, 4, 4, 4], 3) == [[3], [2], [1], [0]]
    # a big last variable fills the first pack alone: 100 > 50, then 1 + 1 + 1 = 3 never exceeds it
    assert pack_layout([1, 1, 1, 100], 50) == [[3], [2, 1, 0]]


def test_each_logged_value_is_reduced_as_a_sum_and_an_int64_count_in_sorted_order() -> None:
    # strategy.reduce("MEAN", v, axis=0) all-reduces reduce_sum(v, axis=0) (v less its first
    # dimension) and the int64 count; Keras's tree.map_structure visits the logs' dict sorted by key.
    # loss as a [1] vector (the recorder's Keras workaround): a float32 scalar sum, 4 bytes; a scalar
    # accuracy: 4 bytes; a per-class float32 [32, 10] value: 10 x 4 = 40 bytes; a float64 scalar: 8.
    logged = [("loss", (1,), 4), ("per_class", (32, 10), 4), ("accuracy", (), 4), ("auc", (), 8)]
    assert metric_collectives(logged) == [
        ("accuracy/sum", 4), ("accuracy/count", 8), ("auc/sum", 8), ("auc/count", 8),
        ("loss/sum", 4), ("loss/count", 8), ("per_class/sum", 40), ("per_class/count", 8)]
    assert metric_collectives([]) == []  # nothing logged, nothing reduced


def test_a_bundle_refuses_a_collective_without_bytes() -> None:
    step = {"index": 0, "wall_us": 10.0, "backward_start_us": 1.0, "backward_end_us": 2.0, "grad_ready_us": [2.0],
            "optimizer_us": [2.0, 1.0]}
    with pytest.raises(ValueError, match="bytes >= 1"):
        build_allreduce_bundle("tf-mwms", {"batch_size": 1}, [("w", 4)], [step], collectives=[("loss/sum", 0)])


def test_layer_of_a_keras_path_and_a_tf_variable_name() -> None:
    assert layer_of("fc0/kernel") == "fc0"
    assert layer_of("mlp/fc0/bias:0") == "fc0"


def test_gradient_bytes_are_elements_times_dtype_size() -> None:
    assert bytes_of((1024, 512), 4, "fc1/kernel") == 2_097_152  # 524,288 float32
    assert bytes_of((10,), 2, "b") == 20
    with pytest.raises(ProfilingUnsupportedError, match="unknown shape"):
        bytes_of((None, 3), 4, "x")


def test_single_worker_check() -> None:
    check_single_worker(1, 1, "MWMS")
    check_single_worker(1, 0, "MWMS")  # no TF_CONFIG: a local run
    with pytest.raises(ProfilingUnsupportedError, match="2 replica"):
        check_single_worker(2, 1, "MWMS")
    with pytest.raises(ProfilingUnsupportedError, match="3 worker"):
        check_single_worker(1, 3, "MWMS")


def _xspace(origin_ns: int, line_ns: int, events: list[tuple[str, int, int]]) -> Any:
    """An XSpace look-alike: TF 2.21's Task Environment plane with profile_start_time, and a host
    plane with one line of ``(name, offset_ps, duration_ps)`` events."""
    names = {i + 1: SimpleNamespace(name=name) for i, (name, _, _) in enumerate(events)}
    line = SimpleNamespace(timestamp_ns=line_ns, events=[
        SimpleNamespace(metadata_id=i + 1, offset_ps=off, duration_ps=dur) for i, (_, off, dur) in enumerate(events)
    ])
    host = SimpleNamespace(name="/host:CPU", stats=[], stat_metadata={}, event_metadata=names, lines=[line])
    env = SimpleNamespace(name="Task Environment", lines=[], event_metadata={},
                          stat_metadata={7: SimpleNamespace(name="profile_start_time")},
                          stats=[SimpleNamespace(metadata_id=7, uint64_value=origin_ns, int64_value=0)])
    return SimpleNamespace(planes=[env, host])


def test_op_events_are_on_the_wall_clock_and_runtime_annotations_are_dropped() -> None:
    space = _xspace(1_000_000_000, 500, [
        ("StatefulPartitionedCall/gradient_tape/m/fc0_1/MatMul/MatMul:_MklMatMul", 2_000_000, 3_000_000),
        ("ExecutorState::Process", 0, 10),
        ("KernelAndDeviceFunc::Run", 0, 10),
        ("EagerLocalExecute: OptionalHasValue", 0, 10),
    ])
    # start: origin 1e9 ns + line 500 ns + 2e6 ps (2,000 ns); end: + 3e6 ps (3,000 ns)
    assert events_from_xspace(space) == [
        OpEvent("StatefulPartitionedCall/gradient_tape/m/fc0_1/MatMul/MatMul", 1_000_002_500, 1_000_005_500)
    ]


MS = 1_000_000  # ns
STEP_OPS = [
    OpEvent("StatefulPartitionedCall/m/fc0_1/MatMul", 1 * MS, 2 * MS),  # forward
    OpEvent("StatefulPartitionedCall/gradient_tape/compile_loss/x/Mul", 5 * MS, 5 * MS + 100_000),  # backward starts
    OpEvent("StatefulPartitionedCall/gradient_tape/m/fc1_1/MatMul/MatMul_1", 6 * MS, 7 * MS),  # fc1 ready at 7 ms
    OpEvent("StatefulPartitionedCall/sgd/update_2/Mul", 7_100_000, 7_300_000),  # an update while backward runs
    OpEvent("StatefulPartitionedCall/compute_bwd_1", 7 * MS, 9 * MS),  # a custom gradient, outside the tape scope
    OpEvent("StatefulPartitionedCall/gradient_tape/m/fc0_1/BiasAdd/BiasAddGrad", 9 * MS, 9_500_000),
    OpEvent("StatefulPartitionedCall/gradient_tape/m/fc0_1/MatMul/MatMul", 9_400_000, 10 * MS),  # fc0 at 10 ms
    OpEvent("StatefulPartitionedCall/sgd/update_0/Mul", 10 * MS, 10_400_000),
    OpEvent("StatefulPartitionedCall/sgd/update_0_1/AssignSubVariableOp", 10_300_000, 10_500_000),
    OpEvent("StatefulPartitionedCall/gradient_tape/m/fc0_1/MatMul/MatMul", 12 * MS, 13 * MS),  # the next step's
]
VARIABLES = ["fc0/kernel", "fc0/bias", "fc1/kernel", "fc1/bias"]


def test_one_step_from_its_ops() -> None:
    step = step_facts(7, 0, 12 * MS, STEP_OPS, VARIABLES, "sgd", single_pack=True)
    assert step["index"] == 7
    assert step["wall_us"] == 12_000.0  # the next step begins at 12 ms
    assert step["backward_start_us"] == 5_000.0  # the loss gradient, first tape op
    assert step["backward_end_us"] == 10_000.0  # the last tape op (fc0's MatMul) ends at 10 ms
    assert step["grad_ready_us"] == [10_000.0, 10_000.0, 7_000.0, 7_000.0]  # fc0's scope ends at 10, fc1's at 7
    # optimizer busy time: [7.1, 7.3] + [10.0, 10.5] (the two overlapping updates merged) = 0.2 + 0.5 ms
    assert step["optimizer_us"] == [10_000.0, pytest.approx(700.0)]


def test_a_variable_without_tape_ops_is_ready_at_backward_end_only_with_one_pack() -> None:
    ops = [OpEvent("gradient_tape/m/fc10_1/MatMul", 1 * MS, 2 * MS), OpEvent("gradient_tape/m/fc1x/MatMul", 2 * MS, 3 * MS)]
    # "fc1" is neither fc10_1 (another layer) nor fc1x
    step = step_facts(0, 0, 4 * MS, ops, ["fc1/kernel"], "sgd", single_pack=True)
    assert step["grad_ready_us"] == [3_000.0]
    with pytest.raises(ProfilingUnsupportedError, match=r"fc1/kernel.*bytes_per_pack"):
        step_facts(0, 0, 4 * MS, ops, ["fc1/kernel"], "sgd", single_pack=False)


def test_a_step_without_gradient_ops_is_refused_loudly() -> None:
    ops = [OpEvent("cluster_0/xla_run", 1 * MS, 2 * MS)]
    with pytest.raises(ProfilingUnsupportedError, match="jit_compile"):
        step_facts(0, 0, 4 * MS, ops, VARIABLES, "sgd", single_pack=True)


def test_the_steps_make_a_bundle_the_importer_reads_back_to_the_step_time() -> None:
    begins = [0, 12 * MS, 24 * MS]
    ops = STEP_OPS[:-1] + [OpEvent(op.name, op.start_ns + 12 * MS, op.end_ns + 12 * MS) for op in STEP_OPS[:-1]]
    steps = [step_facts(k, s, e, ops, VARIABLES, "sgd", single_pack=True) for k, (s, e) in enumerate(step_windows(begins))]
    sizes = [1024, 16, 64, 4]
    bundle = build_allreduce_bundle("tf-mwms", {"batch_size": 32, "model": "m", "world_size": 1, "framework": "tf",
                                                "bucket_cap_bytes": None}, list(zip(VARIABLES, sizes)), steps,
                                    buckets=pack_layout(sizes, 0))
    profile = read_allreduce_upload(bundle, origin="test")
    assert profile.job.buckets == (tuple(f"gradient/{v}" for v in reversed(VARIABLES)),)
    assert sorted(op.bytes for op in profile.ops if op.resource is Resource.UPLINK) == sorted(sizes)
    for timing in profile.steps:  # the importer's ops add up to the traced step: 12 ms
        assert sum(timing.duration_us) == pytest.approx(12_000.0)


def test_several_updates_in_one_step_are_refused_but_accumulated_gradients_are_not() -> None:
    # A tf.function that loops over two steps (tf.range): every op of a step, the optimizer's included, runs
    # twice between two step begins under the same name; one apply_gradients runs each of its ops once.
    twice = STEP_OPS[:-1] + [OpEvent(op.name, op.start_ns + 11 * MS, op.end_ns + 11 * MS) for op in STEP_OPS[:-1]]
    with pytest.raises(ProfilingUnsupportedError, match=r"sgd/update_\S+ ran 2 times in traced step 3.*one step per call"):
        step_facts(3, 0, 24 * MS, twice, VARIABLES, "sgd", single_pack=True)
    # A Python loop unrolled in the tf.function: the second apply_gradients runs under a uniquified scope
    unrolled = [OpEvent(op.name.replace("/sgd/", "/sgd_1/"), op.start_ns, op.end_ns) if op.start_ns >= 11 * MS else op
                for op in twice]
    with pytest.raises(ProfilingUnsupportedError, match=r"2 name scopes \(StatefulPartitionedCall/sgd, "
                                                        r"StatefulPartitionedCall/sgd_1\) in traced step 3"):
        step_facts(3, 0, 24 * MS, unrolled, VARIABLES, "sgd", single_pack=True)
    # Gradient accumulation: the tape runs twice (two micro-batches), the optimizer once: one step, whose
    # backward spans both tape runs: from the first loss gradient (5 ms) to fc0's last op (10 + 11 = 21 ms).
    accumulated = [op for op in twice if op.start_ns < 11 * MS or "/sgd/" not in op.name]
    step = step_facts(3, 0, 24 * MS, accumulated, VARIABLES, "sgd", single_pack=True)
    assert (step["backward_start_us"], step["backward_end_us"]) == (5_000.0, 21_000.0)
    assert step["grad_ready_us"] == [21_000.0, 21_000.0, 18_000.0, 18_000.0]  # fc1's last op ends at 7 + 11 ms


def test_declared_collectives_are_kept_in_order_and_bad_ones_named() -> None:
    """A custom loop's own per-step reductions go into the bundle as given; a pair that could not
    be replayed (no name, no bytes, a fraction of a byte, not a pair) is refused naming its place."""
    assert declared_collectives([("loss", 4), ("accuracy/count", 8)], "P") == [("loss", 4), ("accuracy/count", 8)]
    assert declared_collectives((), "P") == []
    for bad, words in ((["loss"], "collectives[0] must be a (name, bytes) pair"),
                       ([("", 4)], "collectives[0]'s name must be a non-empty string"),
                       ([("loss", 4), ("acc", 0)], "collectives[1] ('acc') must reduce a whole number of bytes > 0"),
                       ([("loss", 2.5)], "got 2.5"), ([("loss", True)], "got True")):
        with pytest.raises(ProfilingUnsupportedError, match=re.escape(words)):
            declared_collectives(bad, "P")
