"""Input shapes kept by the importers (Operation.input_shapes) for the op database: real traces
give the shapes the model's layers define, in every encoding; a record without a shape gives its
element count from bytes / dtype size; the profile file keeps the field optional."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.core.profile import Operation, Resource
from advisor.importers.loader import load_profile
from advisor.importers.profile_file import profile_to_json, read_profile, write_profile
from advisor.importers.tf_shapes import output_shape
from tests.conftest import ps_async_data
from tests.factories import one_layer


def _shapes(profile: object, op_type: str) -> list[object]:
    return sorted(op.input_shapes for op in profile.ops if op.op_type == op_type)  # type: ignore[attr-defined]


# the mlp of tests/data/ps-async/README.md: batch 32, dense 784-384-256-128-10; each forward MatMul
# multiplies the activations (32, fan_in) by the weights (fan_in, fan_out), the weights pulled
# from the PS (the shape is followed through _Recv to the tensor the PS sent)
MLP_FORWARD = sorted([((32, a), (a, b)) for a, b in ((784, 384), (384, 256), (256, 128), (128, 10))])


def test_condensed_mlp_matmuls_have_the_layer_shapes() -> None:
    profile = load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"))
    forward = [op.input_shapes for op in profile.ops if op.op_type == "MatMul" and "gradients" not in op.name]
    assert sorted(forward) == MLP_FORWARD  # type: ignore[type-var]
    assert all(op.input_shapes is not None for op in profile.ops if not op.resource.is_transfer)
    assert all(op.input_shapes is None for op in profile.ops if op.resource.is_transfer)


def test_protobuf_json_and_binary_traces_give_the_same_shapes() -> None:
    native = load_profile(ps_async_data("tf-native", "mlp_bw100"))
    assert sorted(op.input_shapes for op in native.ops if op.op_type == "MatMul" and "gradients" not in op.name) == MLP_FORWARD  # type: ignore[type-var]
    steps = [ps_async_data("raw-pb", "cubic", f"cnn_bw100_step{k}.pb") for k in (5, 6)]
    binary = load_profile(steps, batch_size=8)
    condensed = load_profile(ps_async_data("condensed", "cubic", "cnn_bw100.json.gz"))
    assert _shapes(binary, "Conv2D") == _shapes(condensed, "Conv2D")
    assert _shapes(binary, "Conv2DBackpropFilter") == _shapes(condensed, "Conv2DBackpropFilter")


def test_a_missing_shape_comes_from_bytes_and_dtype() -> None:
    assert output_shape([8, 16], "float32", 512) == (8, 16)  # recorded: kept as is
    assert output_shape(None, "float32", 400) == (100,)  # 400 B of 4-byte floats
    assert output_shape([-1, 4], "DT_DOUBLE", 128) == (16,)  # an unknown dimension: 128 / 8
    assert output_shape([], "DT_FLOAT", 4) == ()  # a scalar
    assert output_shape([], None, 4096) is None  # a RecvTensor record: no dtype, no real shape
    assert output_shape(None, "string", 64) is None  # no fixed element size


def test_the_profile_file_keeps_input_shapes_optional(tmp_path: Path) -> None:
    plain = one_layer()
    assert all("input_shapes" not in op for op in profile_to_json(plain)["ops"])  # written as before
    shaped = plain.model_copy(update={"ops": tuple(
        op.model_copy(update={"input_shapes": ((4, 3), ())}) if op.name == "worker:compute" else op for op in plain.ops
    )})
    write_profile(shaped, tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["version"] == 1
    assert [op.get("input_shapes") for op in doc["ops"]] == [None, None, [[4, 3], []], None, None]
    assert read_profile(tmp_path / "p.json") == shaped


def test_input_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="only computations"):
        Operation(name="t", resource=Resource.DOWNLINK, ps=0, bytes=4, input_shapes=((1,),))
    with pytest.raises(ValueError, match="negative dimension"):
        Operation(name="w", resource=Resource.WORKER, input_shapes=((-1, 3),))
