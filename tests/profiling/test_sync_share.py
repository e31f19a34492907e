"""The share of a synchronous worker's batch that moves the model, read from TensorFlow graphs.

Independent truths: the R and W each graph of ``tests/data/sync-share/graphs.json`` was built with
by real TensorFlow (``scripts/record_sync_graphs.py``; the heavy suite builds them again), and the
project's real synchronous runs with a backup worker (``tests/data/ps-sync``), whose workers ran
W / R local steps per aggregated gradient: the share the hook counts turns the steps the workers
ran into the aggregated examples the runs measured.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from advisor.profiling.sync_share import SyncShare, SyncShareUnknown, sync_share

DATA = Path(__file__).resolve().parents[1] / "data"
GRAPHS = json.loads((DATA / "sync-share" / "graphs.json").read_text())["graphs"]


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: f"R{g['replicas_to_aggregate']}-W{g['total_num_replicas']}"
                         f"-{'chief' if g['chief'] else 'worker'}")
def test_r_and_w_of_real_graphs(graph: dict[str, Any]) -> None:
    r, w = graph["replicas_to_aggregate"], graph["total_num_replicas"]
    found = sync_share({"node": graph["node"]})
    if r is None:
        assert found is None
    else:
        assert found == SyncShare(r, max(w, r))
        assert found.share == pytest.approx(min(1.0, r / w))


def _graph(r: int = 2, w: int = 3) -> dict[str, Any]:
    """The chief's graph of R and W where there is one (it holds the initial tokens too)."""
    found = [g for g in GRAPHS if g["replicas_to_aggregate"] == r and g["total_num_replicas"] == w]
    return copy.deepcopy(max(found, key=lambda g: g["chief"]))


def _node(graph: dict[str, Any], op: str) -> dict[str, Any]:
    return next(n for n in graph["node"] if n["op"] == op)


def test_no_graph_or_no_accumulator_is_no_share() -> None:
    assert sync_share({}) is None
    assert sync_share({"node": []}) is None
    graph = _graph()
    graph["node"] = [n for n in graph["node"] if "TakeGradient" not in n["op"]]
    assert sync_share(graph) is None  # a queue of that name alone is not SyncReplicasOptimizer


def test_a_computed_num_required_is_named() -> None:
    graph = _graph()
    take = _node(graph, "ResourceAccumulatorTakeGradient")
    take["input"][1] = "some/computed_count"
    with pytest.raises(SyncShareUnknown, match="num_required is not a constant"):
        sync_share(graph)


def test_a_count_stored_as_bytes_is_read() -> None:
    """TensorFlow may store a constant's values as tensorContent (little-endian bytes)."""
    graph = _graph(7, 8)
    take = next(n for n in graph["node"] if "TakeGradient" in n["op"])
    const = next(n for n in graph["node"] if n["name"] == take["input"][1])
    const["attr"]["value"]["tensor"] = {"dtype": "DT_INT64", "tensorContent": "BwAAAAAAAAA="}  # int64 7
    assert sync_share(graph) == SyncShare(7, 8)


def test_bytes_that_are_no_integers_are_named() -> None:
    graph = _graph(7, 8)
    take = next(n for n in graph["node"] if "TakeGradient" in n["op"])
    const = next(n for n in graph["node"] if n["name"] == take["input"][1])
    for content in ("not base64!", "BwAA"):  # not base64; 3 bytes, no whole int32
        const["attr"]["value"]["tensor"] = {"dtype": "DT_INT32", "tensorContent": content}
        with pytest.raises(SyncShareUnknown, match="num_required"):
            sync_share(graph)


def test_no_refill_after_an_update_is_named() -> None:
    graph = _graph()
    graph["node"] = [n for n in graph["node"] if "Enqueue" not in n["op"]]
    with pytest.raises(SyncShareUnknown, match="no single token refill"):
        sync_share(graph)


def test_the_initial_tokens_are_not_the_refill() -> None:
    """The chief's graph enqueues R initial tokens too (no wait for an update): W comes from the refill."""
    graph = _graph(2, 3)
    fills = [n for n in graph["node"] if n["op"] == "Fill" and n["name"] != "gradients/grad_ys_0"]
    assert len(fills) == 2  # the refill (3 tokens) and the initial tokens (2)
    assert sync_share(graph) == SyncShare(2, 3)


def _window_steps(run: dict[str, Any], skip: int) -> tuple[int, int]:
    """(local steps the workers ended, global-step increase) inside the run's measured window."""
    logs = run["step_log"]
    start, end = max(log[skip - 1][1] for log in logs), min(log[-1][1] for log in logs)
    steps = sum(1 for log in logs for s in log if start < s[1] <= end)
    step_at = [max(s[2] for log in logs for s in log if s[1] <= t) for t in (start, end)]
    return steps, step_at[1] - step_at[0]


@pytest.mark.parametrize("path", sorted((DATA / "ps-sync").glob("*_backup1.r*.measured.json.gz")), ids=lambda p: p.name)
def test_the_share_turns_the_steps_workers_ran_into_the_aggregated_examples_measured(path: Path) -> None:
    doc = json.loads(gzip.open(path).read())
    batch, skip = doc["meta"]["batch"], doc["meta"]["window_skips_steps"]
    for run in doc["results"]:
        w, r = run["W"], run["replicas_to_aggregate"]
        steps, updates = _window_steps(run, skip)
        counted = steps * batch * SyncShare(r, max(w, r)).share  # what the workers' counters add up to
        assert counted == pytest.approx(updates * r * batch, rel=0.03), (path.name, w)
        if r < w:  # and counting every step's whole batch would overstate it by W / R
            assert steps * batch > 1.1 * updates * r * batch
