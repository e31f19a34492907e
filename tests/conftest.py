"""Shared test fixtures: where the real traces live, and small hand-made profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

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
