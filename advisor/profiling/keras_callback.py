"""``AdvisorKerasCallback``: what Keras training can and cannot give the profiler, said plainly.

A profile needs, for each traced step, TensorFlow's ``RunMetadata``: step stats with the
``RecvTensor`` record of every parameter pull and gradient push, and the partition graphs that
pair them. Only a ``tf.compat.v1`` session produces it (``session.run(options=RunOptions(
trace_level=FULL_TRACE, output_partition_graphs=True))``). Keras in TensorFlow 2 (Keras 2's
``tf.keras`` up to 2.15, Keras 3 from 2.16) runs every step as a ``tf.function``, and with
``tf.distribute.ParameterServerStrategy`` schedules them through a ``ClusterCoordinator``: no
session, no per-step ``RunMetadata``; ``tf.profiler`` writes XPlane traces without partition
graphs or tensor names. Recording that would mean pretending.

So the callback is inert while ``ADVISOR_PROFILE`` is off (a program may keep it in its
callbacks) and, when a profiling run switches recording on, raises ``ProfilingUnsupportedError``
at construction, before any training, with what to do instead: a tf.compat.v1 training loop
with ``AdvisorProfilingHook``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tensorflow import keras

from advisor.profiling.config import profiling_enabled
from advisor.profiling.errors import ProfilingUnsupportedError

UNSUPPORTED = (
    "advisor profiling cannot record Keras training: Keras in TensorFlow 2 runs steps as "
    "tf.functions, and with ParameterServerStrategy through a ClusterCoordinator, which yields no "
    "per-step RunMetadata (step stats with transfer records and partition graphs). Profile a "
    "tf.compat.v1 training loop instead: MonitoredTrainingSession(hooks=[AdvisorProfilingHook("
    "batch_size=...)]); see docs/profiling.md"
)


class AdvisorKerasCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Inert without ``ADVISOR_PROFILE``; with it, refuses at construction (see the module doc)."""

    def __init__(
        self,
        batch_size: int | None = None,
        model_name: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if profiling_enabled(os.environ if environ is None else environ):
            raise ProfilingUnsupportedError(UNSUPPORTED)
        super().__init__()
