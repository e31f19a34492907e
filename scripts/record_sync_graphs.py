"""Write the nodes of real ``SyncReplicasOptimizer`` graphs that ``advisor.profiling.sync_share`` reads.

Why: the default test suite has no TensorFlow, yet the share a worker counts must be read from
graphs as TensorFlow builds them. This builds small graphs with the given R and W (on the chief,
whose hook adds the initial tokens, and on a worker), keeps the nodes the hook hands to
``sync_share`` (``session_hook._sync_nodes``) and writes them, with R and W, to
``tests/data/sync-share/graphs.json``. Run with TensorFlow installed:

    /tmp/tfvenv/bin/python scripts/record_sync_graphs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "sync-share" / "graphs.json"
CASES = [  # (replicas_to_aggregate, total_num_replicas, chief, optimizer name); None: a plain optimizer
    (2, 3, True, "sync_replicas"), (2, 3, False, "sync_replicas"), (1, 2, True, "sync_replicas"),
    (7, 8, False, "renamed"), (4, 4, True, "sync_replicas"), (3, 2, True, "sync_replicas"),
    (None, 1, True, ""),
]


def graph_nodes(tf: Any, replicas: int | None, total: int, chief: bool, name: str) -> list[dict[str, Any]]:
    from advisor.profiling.session_hook import _sync_nodes

    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [4, 2])
        b = tf.compat.v1.get_variable("b", [2])
        loss = tf.reduce_sum(w * w) + tf.reduce_sum(b)
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if replicas is not None:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas,
                                                           total_num_replicas=total, name=name)
        opt.minimize(loss, global_step=step)
        if replicas is not None:
            opt.make_session_run_hook(chief).begin()  # the chief's adds the initial tokens
    return _sync_nodes(graph.as_graph_def())


def main() -> None:
    import tensorflow as tf

    cases = [{"replicas_to_aggregate": r, "total_num_replicas": w, "chief": chief, "optimizer_name": name,
              "node": graph_nodes(tf, r, w, chief, name)} for r, w, chief, name in CASES]
    doc = {"how": "scripts/record_sync_graphs.py", "tensorflow": tf.__version__, "graphs": cases}
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} graphs to {OUT}")


if __name__ == "__main__":
    main()
