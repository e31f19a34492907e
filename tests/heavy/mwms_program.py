"""A small Keras MultiWorkerMirroredStrategy training program for ``test_keras_mwms``, run as its
own process (MWMS must be created before TensorFlow runs anything, so not inside pytest).

    python tests/heavy/mwms_program.py MODE OUT_JSON

MODE ``train``: one worker, ``AdvisorMwmsCallback`` recording (the environment says where to
upload) and training on after the upload; OUT_JSON gets the step end times of the untraced steps
after it. ``spe2``: the same with ``steps_per_execution=2``; ``mirrored``: under
``MirroredStrategy``; ``count``: no recording, the callback counting for ``ADVISOR_METRICS_PORT``
and reading the progress with every step, as one worker of the TF_CONFIG's cluster; OUT_JSON gets
what its exporter serves after training and the optimizer's iterations. Errors go to stderr; the exit code is 0 only when training finished.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

WIDTHS = (64, 256, 128, 10)  # 64x256+256 + 256x128+128 + 128x10+10 = 16,640 + 32,896 + 1,290 = 50,826 float32
BATCH = 16
TOTAL_STEPS = 90


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    strategy = tf.distribute.MirroredStrategy() if mode == "mirrored" else tf.distribute.MultiWorkerMirroredStrategy()
    import keras
    from record_allreduce_mwms import build_model, multi_worker_fit

    from advisor.profiling.keras_mwms import AdvisorMwmsCallback

    with strategy.scope():
        model = build_model(tf, keras, WIDTHS, 0.004, 0.008)
        if mode == "spe2":
            model.compile(optimizer=keras.optimizers.SGD(0.001), steps_per_execution=2,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    workers = strategy.num_replicas_in_sync  # one replica a worker: the dataset's batch is the global one
    x = rng.random((BATCH * workers * 8, WIDTHS[0]), dtype=np.float32)
    y = rng.integers(0, WIDTHS[-1], len(x))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH * workers).repeat()
    if workers > 1:  # each worker takes its share of every global batch, as the recorder's runs do
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
        multi_worker_fit(tf, strategy, model, (x[:BATCH], y[:BATCH]))
    ends: list[float] = []

    class StepLog(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
            ends.append(time.time())

    if mode == "count":
        from advisor.profiling import throughput

        throughput.GLOBAL_STEP_EVERY_S = 0.0  # read the progress with every step
    callback = AdvisorMwmsCallback(batch_size=BATCH, model_name="mlp-test")
    model.fit(dataset, steps_per_epoch=TOTAL_STEPS, epochs=1, verbose=0, callbacks=[callback, StepLog()])
    if mode == "count":
        assert callback.counter is not None, "ADVISOR_METRICS_PORT is not set"
        steps, examples, progress = callback.counter.exporter.snapshot()
        out.write_text(json.dumps({"steps": steps, "examples": examples, "progress": progress,
                                   "iterations": int(model.optimizer.iterations.numpy())}))
        return
    out.write_text(json.dumps({"ends": ends, "uploaded": callback.result is not None and callback.result.ok}))


if __name__ == "__main__":
    main()
