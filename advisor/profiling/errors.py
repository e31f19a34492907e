"""The recorder's own errors, raised at start-up so a profiling run fails fast and says why.

They extend the project's tree (``advisor.errors.AdvisorError``) so the controller's code can
catch them with everything else; they live here because only the recorder raises them. Upload
failures are not errors: they come back as ``upload.UploadResult`` and are logged, because a
failed upload must never stop the user's training.
"""

from __future__ import annotations

from advisor.errors import AdvisorError


class ProfilingConfigError(AdvisorError, ValueError):
    """An ``ADVISOR_*`` variable, ``TF_CONFIG`` or a recorder argument holds an unusable value."""


class ProfilingUnsupportedError(AdvisorError, RuntimeError):
    """Profiling was switched on in a training set-up that cannot yield per-step RunMetadata."""
