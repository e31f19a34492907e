"""The DTS spec refuses what it cannot use, naming the field's path; the fluctuation interval is seeded."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from advisor.core.dts import Architecture, parse_spec, simulate
from advisor.core.dts.spec import expand_processors
from advisor.errors import ModelInputError

GOOD: dict[str, Any] = {
    "cluster": {"processors": [{"name": "big", "gflop_per_s": 200, "memory_gb": 10, "bandwidth_gb_per_s": 2},
                               {"name": "n", "gflop_per_s": 100, "memory_gb": 10, "bandwidth_gb_per_s": 1,
                                "count": 6}],
                "power_fluctuation_pct": 20, "bandwidth_fluctuation_pct": 10},
    "dnn": {"layers": 4, "gflop_per_sample": 1.0, "memory_gb": 8.0, "client_gflop_per_sample": 0.6,
            "server_gflop_per_sample": 0.4, "client_memory_gb": 4.0, "server_memory_gb": 6.0,
            "weights_gb": 2.0, "intermediate_gb": 0.05},
    "training": {"sample_gb": 0.01, "batch_size": 10, "batches_per_client": 50, "epochs": 3, "clients": 3},
}


def with_value(path: str, value: Any) -> dict[str, Any]:
    """GOOD with one field replaced; ``path`` like 'cluster.processors.1.gflop_per_s'."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return doc


def test_the_good_spec_parses_and_expands_counts() -> None:
    s = parse_spec(GOOD)
    assert [n for n, _ in expand_processors(s.cluster)] == ["big"] + [f"n-{i}" for i in range(1, 7)]
    assert s.architectures == list(Architecture) and s.max_paths == 64
    # defaults: gradients as big as the weights; the client side's weights by its share of the memory
    assert s.dnn.upload_gb == 2.0 and s.dnn.client_side_weights_gb == pytest.approx(2.0 * 4 / 10)


@pytest.mark.parametrize(("path", "value", "said"), [
    ("cluster.processors.1.gflop_per_s", 0, "cluster.processors[1].gflop_per_s: Input should be greater than 0"),
    ("cluster.processors.0.memory_gb", -3, "cluster.processors[0].memory_gb: Input should be greater than 0"),
    ("cluster.processors.0.bandwidth_gb_per_s", math.inf, "cluster.processors[0].bandwidth_gb_per_s: Input should be "
                                                          "a finite number"),
    ("dnn.weights_gb", math.nan, "dnn.weights_gb: Input should be a finite number"),
    ("training.batch_size", 0, "training.batch_size: Input should be greater than 0"),
    ("training.clients", 2.5, "training.clients: Input should be a valid integer"),
    ("training.epochs", True, "training.epochs: Input should be a valid integer"),  # YAML 'yes'
    ("dnn.memory_gb", "12", "dnn.memory_gb: Input should be a valid number"),
    ("cluster.power_fluctuation_pct", 100, "cluster.power_fluctuation_pct: Input should be less than 100"),
    ("cluster.bandwidth_fluctuation_pct", -1, "cluster.bandwidth_fluctuation_pct: Input should be greater than or "
                                              "equal to 0"),
    ("dnn.flops", 3, "dnn.flops: Extra inputs are not permitted"),
    ("cluster.processors.1", {"name": "big", "gflop_per_s": 1, "memory_gb": 1, "bandwidth_gb_per_s": 1},
     "cluster.processors: two processors are named 'big'"),
    ("dnn.client_weights_gb", 2.0, "dnn: client_weights_gb (2) must be below weights_gb (2)"),
    ("architectures", ["FL", "XL"], "architectures[1]: Input should be 'PL', 'FL', 'SL', 'PSL' or 'FSL'"),
    ("architectures", ["FL", "FL"], "architectures: an architecture is listed twice"),
    ("max_paths", 0, "max_paths: Input should be greater than 0"),
])
def test_bad_values_are_named_by_their_path(path: str, value: Any, said: str) -> None:
    with pytest.raises(ModelInputError) as err:
        parse_spec(with_value(path, value), source="cluster.yaml")
    assert str(err.value).startswith("model 'dts': cluster.yaml: ")
    assert said in str(err.value)


def test_a_missing_section_and_a_non_mapping() -> None:
    doc = copy.deepcopy(GOOD)
    del doc["training"]
    with pytest.raises(ModelInputError, match=r"training: Field required"):
        parse_spec(doc)
    with pytest.raises(ModelInputError, match=r"expected a mapping with cluster, dnn and training, got list"):
        parse_spec([1, 2])


def test_the_same_seed_gives_the_same_interval_and_another_seed_another() -> None:
    s = parse_spec(GOOD)
    a, b, c = (simulate(s, samples=400, seed=seed) for seed in (7, 7, 8))
    assert [r.interval for r in a.results] == [r.interval for r in b.results]
    assert [r.interval for r in a.results] != [r.interval for r in c.results]
    for r in a.results:
        i = r.interval
        assert i.batch_low_s < i.batch_mean_s < i.batch_high_s
        assert i.epoch_low_s < r.batches_per_epoch * i.batch_mean_s < i.epoch_high_s
        # +-20 % power and +-10 % links cannot slow any term by more than 1/0.8 or speed it past 1/1.2
        assert r.seconds_per_batch / 1.2 <= i.batch_low_s and i.batch_high_s <= r.seconds_per_batch / 0.8
        # an epoch of independent batches varies relatively less than one batch (by about 1/sqrt(B))
        rel_batch = (i.batch_high_s - i.batch_low_s) / i.batch_mean_s
        rel_epoch = (i.epoch_high_s - i.epoch_low_s) / (r.batches_per_epoch * i.batch_mean_s)
        assert rel_epoch < rel_batch / 3


def test_without_fluctuation_the_interval_is_the_nominal_time() -> None:
    doc = with_value("cluster.power_fluctuation_pct", 0)
    doc["cluster"]["bandwidth_fluctuation_pct"] = 0
    s = parse_spec(doc)
    for r in simulate(s, samples=10).results:
        i = r.interval
        assert i.batch_low_s == pytest.approx(r.seconds_per_batch) and i.batch_high_s == pytest.approx(
            r.seconds_per_batch)
        assert i.epoch_low_s == pytest.approx(r.seconds_per_epoch) and i.epoch_high_s == pytest.approx(
            r.seconds_per_epoch)


def test_simulate_refuses_too_few_samples() -> None:
    with pytest.raises(ModelInputError, match="samples must be at least 2"):
        simulate(parse_spec(GOOD), samples=1)
