"""The synchronous-PS rule against graphs real TensorFlow builds (no cluster, no run).

Run: /tmp/tfvenv/bin/python -m pytest -m heavy tests/heavy/test_sync_detection_tf.py

Independent truth: TensorFlow itself. ``SyncReplicasOptimizer`` puts its token queue at the
graph's root whatever name scope the user trains in and whatever name the optimizer gets; its
accumulators follow the optimizer's name. The importer's rule (``is_sync_replicas``) must find a
renamed optimizer inside a user's name scope, a second optimizer in the same graph, and no plain
optimizer.
"""

from __future__ import annotations

from typing import Any

import pytest

from advisor.importers.tf_profile import is_sync_replicas
from advisor.importers.tf_records import GraphNode

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow", reason="the heavy suite needs tensorflow-cpu")


def _graph(tf: Any, sync: bool, scope: str = "", name: str = "sync_replicas", twice: bool = False) -> list[GraphNode]:
    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        for k in range(2 if twice else 1):
            with tf.compat.v1.name_scope(scope or None):
                w = tf.compat.v1.get_variable(f"w{k}", [4])
                loss = tf.reduce_sum(w * w)
                opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
                if sync:
                    opt = tf.compat.v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=1, total_num_replicas=1,
                                                                   name=name)
                opt.minimize(loss, global_step=step)
    return [GraphNode(name=n.name, op=n.op, device="/job:ps/task:0") for n in graph.as_graph_def().node]


def test_real_graphs(tf: Any) -> None:
    assert is_sync_replicas(_graph(tf, sync=False)) is False
    assert is_sync_replicas(_graph(tf, sync=True)) is True
    renamed = _graph(tf, sync=True, scope="tower", name="my_sync")
    names = {n.name for n in renamed}
    assert "sync_token_q" in names and not any(n.startswith("sync_replicas/") for n in names)  # TF's naming, as said
    assert is_sync_replicas(renamed) is True
    twice = _graph(tf, sync=True, twice=True)
    assert {"sync_token_q", "sync_token_q_1"} <= {n.name for n in twice} and is_sync_replicas(twice) is True
