"""The op database (Huang et al.): statistics per (op type, shapes, device), the per-type linear
fit on hand-made data, estimation order and the error that names an op it cannot time."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.core.huang.opdb import (
    OpDatabase, OpEntry, OpEstimateError, build_database, elements, fit_linear, merge,
)
from advisor.core.profile import Operation, Profile, Resource, build_profile


def _profile(ops: list[dict[str, Any]], durations: list[list[float]], batch: int = 8) -> Profile:
    """A pull feeding the given worker ops in a chain; ``durations[k]`` times step k's ops (the pull first)."""
    names = ["pull"]
    chain = []
    for i, op in enumerate(ops):
        chain.append({"resource": "worker", "deps": [names[-1]], **op})
        names.append(op["name"])
    all_ops = [{"name": "pull", "resource": "downlink", "ps": 0, "bytes": 1000}, *chain]
    steps = [{"index": k, "start_us": [0.0] * len(all_ops), "duration_us": d} for k, d in enumerate(durations)]
    return build_profile(job={"batch_size": batch}, ops=all_ops, steps=steps)


def _op(name: str, op_type: str, shapes: tuple[tuple[int, ...], ...] | None) -> Operation:
    return Operation(name=name, resource=Resource.WORKER, op_type=op_type, input_shapes=shapes)


def test_entry_statistics_by_hand() -> None:
    # one MatMul over three steps: 90, 100, 110 us -> mean 100, population std sqrt(200/3)
    prof = _profile([{"name": "mm", "op_type": "MatMul", "input_shapes": [[8, 10], [10, 4]]}],
                    [[5, 90], [5, 100], [5, 110]])
    db = build_database([prof])
    (entry,) = db.entries
    assert entry.key == ("MatMul", "worker", ((8, 10), (10, 4)), None)
    assert (entry.count, entry.mean_us, entry.min_us, entry.max_us) == (3, 100.0, 90.0, 110.0)
    assert entry.std_us == pytest.approx((200 / 3) ** 0.5)


def test_two_ops_with_one_key_pool_their_records() -> None:
    # two Relu of the same shape: records 10 and 30 -> one entry, mean 20, count 2 (one step)
    prof = _profile([{"name": "r1", "op_type": "Relu", "input_shapes": [[8, 16]]},
                     {"name": "r2", "op_type": "Relu", "input_shapes": [[8, 16]]}], [[1, 10, 30]])
    (entry,) = build_database([prof]).entries
    assert (entry.count, entry.mean_us) == (2, 20.0)


def test_linear_fit_on_hand_made_data() -> None:
    # t = 10 + 0.2 n exactly at n = 100, 200, 400 elements (MatMul inputs 10x10, 10x20, 20x20)
    prof = _profile([
        {"name": "a", "op_type": "MatMul", "input_shapes": [[10, 10]]},
        {"name": "b", "op_type": "MatMul", "input_shapes": [[10, 20]]},
        {"name": "c", "op_type": "MatMul", "input_shapes": [[20, 20]]},
    ], [[1, 30, 50, 90]])
    db = build_database([prof])
    fit = db.fits[("MatMul", "worker")]
    assert fit.intercept_us == pytest.approx(10.0)
    assert fit.slope_us_per_element == pytest.approx(0.2)
    assert fit.points == 3
    # an unseen shape, 15x20 = 300 elements: 10 + 0.2 x 300 = 70 us
    assert db.estimate_us(_op("new", "MatMul", ((15, 20),))) == pytest.approx(70.0)
    # a seen shape takes its own mean, not the fit
    assert db.estimate_us(_op("again", "MatMul", ((10, 20),))) == 50.0
    # the elements of several inputs add up: 2x3 + 4 = 10
    assert elements(((2, 3), (4,))) == 10


def test_fit_fallbacks_by_hand() -> None:
    # one distinct size: proportional, 30 us at 100 elements -> 0.3 us per element
    one = fit_linear("X", "worker", [(100, 30.0)])
    assert (one.intercept_us, one.slope_us_per_element, one(200)) == (0.0, 0.3, pytest.approx(60.0))
    # a negative slope (50 us at 100, 40 us at 200): the constant mean, 45 us
    flat = fit_linear("X", "worker", [(100, 50.0), (200, 40.0)])
    assert (flat.slope_us_per_element, flat(1000)) == (0.0, 45.0)
    # (100, 10), (200, 40): slope 0.3, intercept -20 < 0 -> through the origin,
    # b = (100 x 10 + 200 x 40) / (100^2 + 200^2) = 9000 / 50000 = 0.18
    origin = fit_linear("X", "worker", [(100, 10.0), (200, 40.0)])
    assert origin.intercept_us == 0.0 and origin.slope_us_per_element == pytest.approx(0.18)
    # only empty inputs (0 elements): the constant mean
    assert fit_linear("X", "worker", [(0, 4.0), (0, 6.0)])(0) == 5.0


def test_unknown_op_type_is_an_error_naming_the_op() -> None:
    db = build_database([_profile([{"name": "mm", "op_type": "MatMul", "input_shapes": [[8, 10]]}], [[1, 5]])])
    with pytest.raises(OpEstimateError, match=r"'worker:conv'.*no Conv2D on worker"):
        db.estimate_us(_op("worker:conv", "Conv2D", ((8, 8, 8, 3), (3, 3, 3, 32))))


def test_opaque_ops_match_only_their_own_node() -> None:
    # a PyFunc's time is not a function of its shapes: it is kept per node, with no fit
    prof = _profile([{"name": "worker:emu", "op_type": "PyFunc", "input_shapes": [[8, 64]]}], [[1, 8000]])
    db = build_database([prof])
    assert db.fits == {}
    assert db.estimate_us(_op("worker:emu", "PyFunc", ((8, 64),))) == 8000.0
    with pytest.raises(OpEstimateError, match=r"'worker:other'.*timed per node"):
        db.estimate_us(_op("worker:other", "PyFunc", ((8, 64),)))


def test_an_op_without_shapes_is_kept_per_node() -> None:
    prof = _profile([{"name": "worker:x", "op_type": "MatMul"}], [[1, 40]])
    db = build_database([prof])
    assert db.estimate_us(_op("worker:x", "MatMul", None)) == 40.0
    with pytest.raises(OpEstimateError, match="recorded without input shapes"):
        db.estimate_us(_op("worker:y", "MatMul", None))


def test_merge_pools_counts_means_and_spreads() -> None:
    # entry A: 2 records of mean 10 (std 0); entry B: 1 record of 40 -> 3 records, mean 20,
    # E[t^2] = (2 x 100 + 1600) / 3 = 600, variance 600 - 400 = 200
    key: dict[str, Any] = {"op_type": "Relu", "device": "worker", "input_shapes": ((4,),)}
    a = OpDatabase((OpEntry(**key, count=2, mean_us=10.0, min_us=10.0, max_us=10.0),), sources=("a",))
    b = OpDatabase((OpEntry(**key, count=1, mean_us=40.0, min_us=40.0, max_us=40.0),), sources=("b",))
    (pooled,) = merge([a, b]).entries
    assert (pooled.count, pooled.mean_us, pooled.min_us, pooled.max_us) == (3, 20.0, 10.0, 40.0)
    assert pooled.std_us == pytest.approx(200**0.5)


def test_a_database_refuses_a_key_twice() -> None:
    entry = OpEntry(op_type="Relu", device="worker", input_shapes=((4,),), count=1, mean_us=1.0, min_us=1.0, max_us=1.0)
    with pytest.raises(OpEstimateError, match="twice"):
        OpDatabase((entry, entry))
