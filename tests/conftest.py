"""Shared test fixtures: where the real traces live, and small hand-made profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run by default, so a CI run on main can only
# fail on a change, never on a newly drawn example. Exploring for new cases is a separate,
# explicit run: HYPOTHESIS_PROFILE=explore python -m pytest -q (finds go into regression tests).
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", max_examples=1000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data; skips the test (with the reason) when it is not there."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real trace data not available at {path}")
    return path


@pytest.fixture
def shared() -> Path:
    """The ../shared/data folder (skips when absent)."""
    return shared_data()
