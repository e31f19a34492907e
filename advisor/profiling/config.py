"""What the profiling run is asked to do, read once from the environment the controller sets.

The controller (or a person, by hand) switches recording on with ``ADVISOR_PROFILE=1`` in the
profiling pods and tells the recorder where to send the trace; the training operator sets
``TF_CONFIG`` as usual. Reading and checking all of it here, once, keeps the hook and the
Keras callback free of string parsing, and lets a bad value fail the run at start-up with a
message that names the variable, instead of hours later or never.

Only the standard library is used: this runs inside the user's training image.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from advisor.profiling.errors import ProfilingConfigError

ENV_PROFILE = "ADVISOR_PROFILE"
ENV_INGEST_URL = "ADVISOR_INGEST_URL"
ENV_TOKEN_FILE = "ADVISOR_TOKEN_FILE"
ENV_STEPS = "ADVISOR_PROFILE_STEPS"
ENV_WARMUP = "ADVISOR_PROFILE_WARMUP"
ENV_UNTRACED = "ADVISOR_PROFILE_UNTRACED_STEPS"
ENV_BATCH_SIZE = "ADVISOR_BATCH_SIZE"
ENV_MODEL_NAME = "ADVISOR_MODEL_NAME"
ENV_BANDWIDTH_MBIT = "ADVISOR_BANDWIDTH_MBIT"
ENV_STOP_AFTER_UPLOAD = "ADVISOR_STOP_AFTER_UPLOAD"
ENV_TF_CONFIG = "TF_CONFIG"

DEFAULT_TOKEN_FILE = "/var/run/secrets/advisor/token"
DEFAULT_STEPS = 100
DEFAULT_WARMUP = 5
# steps timed untraced after the traced ones: what tracing itself costs a step (on the testbed's
# CNN about 5 % of a synchronous step and nothing measurable of an asynchronous one,
# tests/data/tracing-cost)
DEFAULT_UNTRACED = 20

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """This process's place in the training cluster, from ``TF_CONFIG``.

    ``records`` is true for the one process that traces and uploads: worker 0, or the chief
    where the cluster has one (the chief is then the first worker). Parameter servers' records
    arrive inside that process's ``RunMetadata``, so no other task records.
    """

    task_type: str | None
    task_index: int | None
    ps_hosts: tuple[str, ...] = ()
    worker_hosts: tuple[str, ...] = ()  # chief/master first, then workers
    has_chief: bool = False

    @property
    def records(self) -> bool:
        if self.task_type in ("chief", "master"):
            return self.task_index == 0
        return self.task_type == "worker" and self.task_index == 0 and not self.has_chief

    @property
    def trains(self) -> bool:
        """Whether this task's ``session.run`` calls are training steps worth counting.

        Workers, and the chief/master (in between-graph replication it trains like a worker and
        the controller counts it as one); also an unknown task (no ``TF_CONFIG``: a program run
        by hand). Not parameter servers, evaluators or other task types.
        """
        return self.task_type in (None, "worker", "chief", "master")


@dataclass(frozen=True, slots=True)
class ProfilingConfig:
    """The checked ``ADVISOR_*`` settings of an enabled profiling run."""

    ingest_url: str
    token_file: str = DEFAULT_TOKEN_FILE
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    untraced_steps: int = DEFAULT_UNTRACED
    batch_size: int | None = None
    model_name: str | None = None
    bandwidth_mbit: float | None = None
    stop_after_upload: bool = True
    task: TaskInfo = field(default_factory=lambda: TaskInfo(None, None))


def profiling_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``ADVISOR_PROFILE`` switches recording on (absent, empty or ``0``: off)."""
    env = os.environ if environ is None else environ
    return _flag(env, ENV_PROFILE, default=False)


def load_config(environ: Mapping[str, str] | None = None) -> ProfilingConfig | None:
    """The profiling settings, or None when ``ADVISOR_PROFILE`` is off.

    Raises ``ProfilingConfigError`` naming the variable when recording is on but a value is
    unusable; the environment is read only when recording is on.
    """
    env = os.environ if environ is None else environ
    if not _flag(env, ENV_PROFILE, default=False):
        return None
    return ProfilingConfig(
        ingest_url=_url(env),
        token_file=env.get(ENV_TOKEN_FILE) or DEFAULT_TOKEN_FILE,
        steps=_int_or(env, ENV_STEPS, DEFAULT_STEPS, minimum=1),
        warmup=_int_or(env, ENV_WARMUP, DEFAULT_WARMUP, minimum=0),
        untraced_steps=_int_or(env, ENV_UNTRACED, DEFAULT_UNTRACED, minimum=0),
        batch_size=batch_size_from_env(env),
        model_name=env.get(ENV_MODEL_NAME) or None,
        bandwidth_mbit=_positive_float(env, ENV_BANDWIDTH_MBIT),
        stop_after_upload=_flag(env, ENV_STOP_AFTER_UPLOAD, default=True),
        task=parse_tf_config(env.get(ENV_TF_CONFIG)),
    )


def batch_size_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``ADVISOR_BATCH_SIZE`` (examples per step of this worker), or None when unset."""
    env = os.environ if environ is None else environ
    return _int(env, ENV_BATCH_SIZE, None, minimum=1)


def choose_batch_size(from_env: int | None, from_code: object, *, missing: str) -> int:
    """The environment's batch size if set, else the code's; ``missing`` is the error without either.

    Both the trace and the step counter need it before the first step: refusing at start-up
    beats a profile without a batch or an examples counter stuck at 0.
    """
    size = from_env if from_env is not None else from_code
    if size is None:
        raise ProfilingConfigError(missing)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ProfilingConfigError(f"batch_size={size!r}: expected a whole number of examples >= 1")
    return size


def parse_tf_config(text: str | None) -> TaskInfo:
    """This task's type and index and the cluster's hosts, from a ``TF_CONFIG`` JSON string.

    Absent or empty: an unknown task (``records`` is false): without ``TF_CONFIG`` the
    recorder cannot tell worker 0 from another worker, so it does not guess.
    """
    if not text or not text.strip():
        return TaskInfo(None, None)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfilingConfigError(f"{ENV_TF_CONFIG} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise ProfilingConfigError(f"{ENV_TF_CONFIG} should be a JSON object, found {type(doc).__name__}")
    cluster = _tf_config_object(doc, "cluster")
    task = _tf_config_object(doc, "task")
    task_type = task.get("type")
    task_index = task.get("index", 0)
    if not isinstance(task_type, str) or not isinstance(task_index, int) or isinstance(task_index, bool):
        raise ProfilingConfigError(
            f"{ENV_TF_CONFIG}: task should be {{\"type\": <job name>, \"index\": <integer>}}, found {task!r}"
        )
    chiefs = [h for job in ("chief", "master") for h in _hosts(cluster, job)]
    return TaskInfo(
        task_type=task_type,
        task_index=task_index,
        ps_hosts=tuple(_hosts(cluster, "ps")),
        worker_hosts=tuple(chiefs + _hosts(cluster, "worker")),
        has_chief=bool(chiefs),
    )


def _tf_config_object(doc: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ProfilingConfigError(f"{ENV_TF_CONFIG}: {key} should be a JSON object, found {value!r}")
    return value


def _hosts(cluster: Mapping[str, object], job: str) -> list[str]:
    hosts = cluster.get(job, [])
    if isinstance(hosts, dict):  # the sparse form {"0": "host:port"}
        hosts = [hosts[k] for k in sorted(hosts, key=_task_order)]
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ProfilingConfigError(f"{ENV_TF_CONFIG}: cluster.{job} should be a list of host:port, found {hosts!r}")
    return hosts


def _task_order(key: object) -> tuple[int, str]:
    """Task indices of the sparse form in numeric order ("2" before "10")."""
    text = str(key)
    return (int(text), "") if text.isdigit() else (-1, text)


def _flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ProfilingConfigError(f"{name}={raw!r}: expected 1 or 0")


def _url(env: Mapping[str, str]) -> str:
    raw = (env.get(ENV_INGEST_URL) or "").strip()
    if not raw:
        raise ProfilingConfigError(f"{ENV_PROFILE} is on but {ENV_INGEST_URL} is not set: nowhere to send the trace")
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ProfilingConfigError(f"{ENV_INGEST_URL}={raw!r}: expected an http:// or https:// URL")
    return raw


def _int_or(env: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    """``_int`` with a default: never None."""
    value = _int(env, name, default, minimum=minimum)
    return default if value is None else value


def _int(env: Mapping[str, str], name: str, default: int | None, *, minimum: int) -> int | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ProfilingConfigError(f"{name}={raw!r}: expected a whole number") from None
    if value < minimum:
        raise ProfilingConfigError(f"{name}={raw!r}: expected at least {minimum}")
    return value


def _positive_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise ProfilingConfigError(f"{name}={raw!r}: expected a number (Mbit/s)") from None
    if not math.isfinite(value) or value <= 0:
        raise ProfilingConfigError(f"{name}={raw!r}: expected a positive number (Mbit/s)")
    return value
