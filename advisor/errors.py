"""The project's exception tree, drawn in one place.

Every error that bad input can cause is one of these, so callers (the CLI, later the
controller) can catch ``AdvisorError`` and report it without also catching programming
errors. Third-party errors (pydantic, json, protobuf) are wrapped once, where they arise.

    AdvisorError
    ├── ProfileError              a profile (our own format) is invalid
    └── TraceImportError          a TensorFlow trace cannot become a profile
        ├── TraceFormatError      unreadable: truncated, not JSON/protobuf, wrong shape
        ├── MissingTraceDataError readable, but lacks what prediction needs
        └── MultiWorkerTraceError recorded with more than one worker
    └── QuotaError                a Kueue queue's quota cannot be read (controller cluster mode)
    └── KubeError                 a Kubernetes API call failed (advisor/controller/kube/client.py)
        ├── KubeNotFound          404: the object does not exist
        ├── KubeAlreadyExists     409 AlreadyExists: create found the name taken
        ├── KubeConflict          409 Conflict: stale resourceVersion (optimistic concurrency)
        ├── KubeGone              410: a watch or continue token is older than the server keeps
        ├── KubeForbidden         401/403: RBAC or credentials refuse the call
        ├── KubeInvalid           other 4xx: the request itself is wrong (422, 400, 415...)
        ├── KubeUnavailable       5xx, 429, timeouts, refused or dropped connections: retry later
        └── KubeConfigError       no usable kubeconfig or in-cluster configuration
    └── StoreError                the controller's store cannot be opened or used (controller/state/store.py)
        └── UnknownRunError       no profiling run for that job uid and generation
    └── StateFormatError          state written by a newer controller, left untouched (controller/state/formats.py)
    └── HttpApiError              the controller's HTTP server cannot start (controller/web/http_api.py)
"""

from __future__ import annotations

import pickle


class AdvisorError(Exception):
    """Base of every error the project raises on purpose."""


class ProfileError(AdvisorError, ValueError):
    """A profile is malformed or inconsistent (unknown op reference, cycle, negative time...)."""


class TraceImportError(AdvisorError):
    """A TensorFlow trace cannot be turned into a profile."""


class TraceFormatError(TraceImportError):
    """The trace file cannot be read: truncated, not the expected encoding or structure."""


class MissingTraceDataError(TraceImportError):
    """The trace is readable but lacks data the predictor needs (e.g. partition graphs)."""


class MultiWorkerTraceError(TraceImportError):
    """The trace was recorded with more than one worker; profiling needs 1 worker."""


# --- controller: the objects it reads ----------------------------------------------------------


class TFJobError(AdvisorError, ValueError):
    """A TFJob (or its advisor annotations) is not what the API and the advisor accept."""


class JobKindError(TFJobError):
    """An object of a kind (or a job of a shape) the controller does not handle."""


class QuotaError(AdvisorError, ValueError):
    """A Kueue LocalQueue or ClusterQueue whose quota the controller cannot read (cluster mode)."""


# --- Kubernetes -------------------------------------------------------------------------------
# Raised only by advisor/controller/kube/client.py, which translates every client and urllib3 error
# once; the rest of the controller catches these and never the client's own exceptions.


class KubeError(AdvisorError):
    """A Kubernetes API call failed; the message names the verb, the object and the server's words.

    ``status`` is the HTTP code (None when no response came), ``reason`` the Status reason
    (``Conflict``, ``Expired``...), ``retry_after_s`` the server's Retry-After when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s


class KubeNotFound(KubeError):
    """404: the object (or its namespace) does not exist."""


class KubeAlreadyExists(KubeError):
    """409 AlreadyExists: an object with that name already exists."""


class KubeConflict(KubeError):
    """409 Conflict: the write carried a stale resourceVersion; read again and retry."""


class KubeGone(KubeError):
    """410 Expired/Gone: the resourceVersion is older than the server's history; list again."""


class KubeForbidden(KubeError):
    """401/403: the credentials or RBAC rules do not allow this call."""


class KubeInvalid(KubeError):
    """Another 4xx: the request is malformed or refused by validation (400, 415, 422...)."""


class KubeUnavailable(KubeError):
    """The server cannot answer now (5xx, 429, timeout, connection refused or dropped)."""


class KubeConfigError(KubeError):
    """No usable cluster configuration: missing or broken kubeconfig, unknown context."""


# --- controller store / ingest ----------------------------------------------------------------
# Raised by advisor/controller/state/store.py (which wraps every sqlite3 error once) and
# advisor/controller/web/http_api.py.


class StoreError(AdvisorError):
    """The controller's SQLite store cannot be opened or used; the message names the file."""


class UnknownRunError(StoreError):
    """No profiling run is stored for that job uid and generation."""


class StateFormatError(AdvisorError):
    """State in the cluster (a job's annotations, a profile record) is of a format newer than this
    controller knows: written by a newer version. It is left as it is; the message names it."""


class HttpApiError(AdvisorError):
    """The controller's HTTP server cannot start (e.g. the port is taken); names host and port."""


class ModelInputError(AdvisorError, ValueError):
    """A throughput model cannot predict from what it was given: a missing input (no profile, no
    layer spec, no bandwidth) or an invalid parameter. The message names the model and the field."""

    def __init__(self, model: str, message: str) -> None:
        super().__init__(f"model {model!r}: {message}")
        self.model = model
        self.reason = message  # the message without the model's name in front

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # rebuilt from both arguments: a prediction in a worker process (the controller's pool)
        # sends its error back pickled, and Exception's default would call __init__ with one
        return type(self), (self.model, self.reason)


class ModelRegimeError(ModelInputError):
    """A throughput model predicts another training regime than the one the trace was recorded
    from (an asynchronous PS model given a trace of ``SyncReplicasOptimizer``). The message names
    both and the model to use; the parts stay apart for side-by-side notes."""

    def __init__(self, model: str, predicts: str, trace: str, use: str) -> None:
        super().__init__(model, f"predicts {predicts}; this trace is of {trace}: use {use}")
        self.predicts, self.trace, self.use = predicts, trace, use

    def __reduce__(self) -> tuple[type, tuple[str, str, str, str]]:  # type: ignore[override]
        return type(self), (self.model, self.predicts, self.trace, self.use)


class ObservedThroughputError(AdvisorError, ValueError):
    """A file of measured throughput (``advisor compare --observed``) cannot be read."""


# --- spec files (--spec FILE.yaml) ---------------------------------------------------------------


class SpecError(AdvisorError, ValueError):
    """A spec (layers, GPU, links, cluster) is invalid; the message names the file when known and
    the path of each bad field (``layers.3.stride: ...``)."""


# --- the compiled engine's on-disk cache (advisor/jit_cache.py, core/models/ps_des/simulator/jit.py) ---


class EngineCacheWarning(UserWarning):
    """The simulation engine's on-disk numba cache could not be used: it was compiled in the process."""


# what reading a damaged or foreign numba cache file raises (pickle's errors and what a truncated
# stream turns into); anything else is not about the cache and propagates
CACHE_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, KeyError,
    IndexError, OSError, RuntimeError,
)
