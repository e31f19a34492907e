"""Record a 1-PS/1-worker profiling run inside the user's training program and ship it.

The controller launches the profiling run with ``ADVISOR_PROFILE=1`` and where to send the
trace (``docs/profiling.md``); this package traces the chosen steps, builds the upload bundle
and POSTs it. Importing the package needs only the standard library and prometheus-client (a
dependency of the package): TensorFlow is imported when the hook, a callback or the custom-loop
step profiler is first asked for, so the controller (which has no TensorFlow) shares
``build_bundle``/``encode_bundle`` with the recorder.

Every entry point (the hook, both callbacks, the step profiler, and PyTorch's ``profile_ddp``
in ``advisor.profiling.torch``) also counts a worker's training steps for Prometheus when
``ADVISOR_METRICS_PORT`` is set, with the job's progress where a global step can be read
(``ThroughputExporter``; prometheus-client, no TensorFlow), so a team and the controller's closed
loop can compare the prediction with what the real job achieves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.profiling.bundle import FORMAT, VERSION, build_bundle, encode_bundle, encode_steps
from advisor.profiling.config import ProfilingConfig, TaskInfo, load_config, parse_tf_config, profiling_enabled
from advisor.profiling.errors import ProfilingConfigError, ProfilingUnsupportedError
from advisor.profiling.throughput import ThroughputExporter, exporter_from_env
from advisor.profiling.upload import RetryPolicy, UploadResult, upload_bundle

if TYPE_CHECKING:
    from advisor.profiling.keras_callback import AdvisorKerasCallback
    from advisor.profiling.keras_mwms import AdvisorMwmsCallback
    from advisor.profiling.session_hook import AdvisorProfilingHook
    from advisor.profiling.tf_custom_loop import AdvisorStepProfiler

__all__ = [
    "FORMAT",
    "VERSION",
    "AdvisorKerasCallback",
    "AdvisorMwmsCallback",
    "AdvisorProfilingHook",
    "AdvisorStepProfiler",
    "ProfilingConfig",
    "ProfilingConfigError",
    "ProfilingUnsupportedError",
    "RetryPolicy",
    "TaskInfo",
    "ThroughputExporter",
    "UploadResult",
    "build_bundle",
    "encode_bundle",
    "encode_steps",
    "exporter_from_env",
    "load_config",
    "parse_tf_config",
    "profiling_enabled",
    "upload_bundle",
]

_NEEDS_TENSORFLOW = {
    "AdvisorProfilingHook": "advisor.profiling.session_hook",
    "AdvisorKerasCallback": "advisor.profiling.keras_callback",
    "AdvisorMwmsCallback": "advisor.profiling.keras_mwms",
    "AdvisorStepProfiler": "advisor.profiling.tf_custom_loop",
}


def __getattr__(name: str) -> Any:
    """Import TensorFlow only when the hook, a callback or the step profiler is used."""
    module = _NEEDS_TENSORFLOW.get(name)
    if module is None:
        raise AttributeError(f"module 'advisor.profiling' has no attribute {name!r}")
    from importlib import import_module

    try:
        return getattr(import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith(("tensorflow", "keras")):
            raise
        raise ModuleNotFoundError(
            f"advisor.profiling.{name} needs TensorFlow in the training program ({exc})", name=exc.name
        ) from exc
