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
"""

from __future__ import annotations


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
