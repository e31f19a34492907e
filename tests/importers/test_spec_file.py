"""``--spec FILE.yaml``: the shipped examples load, and every bad input names the file and the field."""

from __future__ import annotations

import math

import pytest

from advisor.core.gpus import GPU_TABLE
from advisor.core.spec import GpuSpec, Layer, parse_spec
from advisor.errors import AdvisorError, SpecError
from advisor.importers.spec_file import example_spec_path, load_spec


def _write(tmp_path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_alexnet_example_matches_the_architecture():
    spec = load_spec(example_spec_path("alexnet"))
    convs = [layer for layer in spec.layers if layer.type == "conv"]
    assert [c.outputs for c in convs] == [64, 192, 384, 384, 256]
    assert convs[0].output_hw == (55, 55)  # (227 - 11) / 4 + 1
    fc6 = next(layer for layer in spec.layers if layer.name == "fc6")
    assert fc6.in_channels * fc6.height * fc6.width == 9216  # 256 x 6 x 6 after pool5
    # Weights and biases by hand: conv 3*121*64+64 = 23,296; 64*25*192+192 = 307,392; 192*9*384+384 = 663,936;
    # 384*9*384+384 = 1,327,488; 384*9*256+256 = 884,992 (3,207,104 in all); fc 9216*4096+4096 = 37,752,832;
    # 4096*4096+4096 = 16,781,312; 4096*1000+1000 = 4,097,000 (58,631,144): 61,838,248.
    assert sum(layer.parameters for layer in spec.layers) == 61_838_248
    assert spec.batch == 256 and spec.gpu is not None and spec.gpu.name == "P40"


def test_resnet50_example_matches_the_architecture():
    spec = load_spec(example_spec_path("resnet50"))
    convs = [layer for layer in spec.layers if layer.type == "conv"]
    assert len(convs) == 53  # 1 + 16 blocks x 3 + 4 projections
    assert spec.layers[-1].type == "fc" and spec.layers[-1].in_channels == 2048
    # ResNet-50: 25.56 M parameters (23.5 M in convolutions, 53 k in batch norm, 2.05 M in the classifier).
    assert sum(layer.parameters for layer in spec.layers) == pytest.approx(25.56e6, rel=0.005)
    assert convs[-1].output_hw == (7, 7)


def test_gpu_by_name_fills_the_table_and_keeps_overrides():
    spec = parse_spec({"gpu": {"name": "V100", "clock_mhz": 1380}})
    assert spec.gpu == GpuSpec(**{**GPU_TABLE["V100"], "name": "V100", "clock_mhz": 1380})
    assert parse_spec({"gpu": "tesla p40"}).gpu.sm_count == 30
    assert parse_spec({"gpu": "1080 Ti"}).gpu.sm_count == 28


def test_every_bundled_gpu_is_valid():
    for name in ("P40", "K80", "K40", "1080Ti", "V100", "A100", "H100", "L4"):
        gpu = GpuSpec.model_validate(name)
        assert gpu.sp_per_sm % gpu.ldst_per_sm == 0 and math.isfinite(gpu.clock_mhz)


def test_explicit_gpu_without_a_name():
    values = dict(GPU_TABLE["A100"])
    assert parse_spec({"gpu": values}).gpu.sm_count == 108
    del values["shared_load_latency"]
    with pytest.raises(SpecError, match=r"gpu.shared_load_latency: Field required"):
        parse_spec({"gpu": values})


def test_unknown_gpu_lists_the_known_ones(tmp_path):
    path = _write(tmp_path, "gpu: RTX9090\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    text = str(err.value)
    assert str(path) in text and "gpu: unknown GPU 'RTX9090'" in text
    for name in ("P40", "K80", "K40", "1080Ti", "V100", "A100", "H100", "L4"):
        assert name in text


@pytest.mark.parametrize(
    ("yaml_text", "where"),
    [
        ("batch: 0\n", "batch: Input should be greater than 0"),
        ("batch: -3\n", "batch: Input should be greater than 0"),
        ("gpu: {name: P40, clock_mhz: .nan}\n", "gpu.clock_mhz: Input should be a finite number"),
        ("gpu: {name: P40, memory_bandwidth_gbps: .inf}\n", "gpu.memory_bandwidth_gbps: Input should be a finite number"),
        ("links: {mode: ps, bandwidth_gbps: 0}\n", "links.bandwidth_gbps: Input should be greater than 0"),
        ("links: {mode: ps, bandwidth_gbps: 10, sigmoid: {k: 1, a: -1, w: 1}}\n", "links.sigmoid.a: Input should be greater than 0"),
        ("links: {mode: ring, bandwidth_gbps: 10}\n", "links.mode: Input should be 'ps' or 'nccl'"),
        ("batch: 4\nlayers:\n  - {type: conv, in_channels: 3, out_channels: 8, height: 8, width: 8}\n"
         "  - {type: conv, in_channels: 8, out_channels: 8, height: 8, width: 8, stride: 0}\n", "layers.1.stride"),
        ("batch: 4\nlayers:\n  - {type: conv, in_channels: 3, height: 8, width: 8}\n", "layers.0: a conv layer needs out_channels"),
        ("batch: 4\nlayers:\n  - {type: conv, in_channels: 3, out_channels: 4, height: 4, width: 4, filter: 5}\n",
         "does not fit the 4x4 input"),
        ("batch: 4\nlayers:\n  - {type: lstm, in_channels: 3}\n", "layers.0.type"),
        ("batch: 4\nlayers:\n  - {type: relu, in_channels: 3, colour: red}\n", "layers.0.colour: Extra inputs are not permitted"),
        ("layers:\n  - {type: relu, in_channels: 3}\n", "batch is missing"),
        ("batch: 4\nlayers:\n  - {type: relu, in_channels: 3, batch: 8}\n", "different batch sizes [4, 8]"),
        ("gpus: P40\n", "unknown section(s) gpus; the sections are"),
    ],
)
def test_bad_values_are_refused_with_their_path(tmp_path, yaml_text, where):
    path = _write(tmp_path, yaml_text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(path) in str(err.value)
    assert where in str(err.value)


def test_file_level_problems(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match=r"not valid YAML at line 3, column 1"):
        load_spec(_write(tmp_path, "batch: 4\nlayers: [ {type: relu\n"))
    with pytest.raises(SpecError, match="the file is empty"):
        load_spec(_write(tmp_path, ""))
    with pytest.raises(SpecError, match="expected a mapping of sections at the top, got list"):
        load_spec(_write(tmp_path, "- 1\n- 2\n"))
    assert issubclass(SpecError, AdvisorError)


def test_cluster_is_left_to_the_dts_model():
    spec = parse_spec({"cluster": {"processors": [{"name": "a"}]}})
    assert spec.cluster == {"processors": [{"name": "a"}]} and spec.layers == ()


def test_layer_shapes():
    same = Layer(type="conv", in_channels=3, out_channels=8, height=224, width=224, filter=7, stride=2, padding="same")
    assert same.output_hw == (112, 112)
    valid = Layer(type="pool", in_channels=8, height=55, width=55, filter=3, stride=2)
    assert valid.output_hw == (27, 27)
    explicit = Layer(type="conv", in_channels=3, out_channels=8, height=32, width=32, filter=(3, 5), padding=1)
    assert explicit.output_hw == (32, 30)
    assert Layer(type="bn", in_channels=64).parameters == 128


def test_batch_may_come_from_the_layers():
    spec = parse_spec({"layers": [{"type": "relu", "in_channels": 3, "batch": 8}, {"type": "relu", "in_channels": 3}]})
    assert spec.batch == 8
