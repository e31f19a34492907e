"""Shared test setup: the Hypothesis profiles and where the real testbed recordings live."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

# Property tests draw the same examples on every run by default, so a CI run on main can only
# fail on a change, never on a newly drawn example. Exploring for new cases is a separate,
# explicit run: HYPOTHESIS_PROFILE=explore python -m pytest -q (finds go into regression tests).
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", max_examples=1000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
PS_ASYNC_DATA = REPO / "tests" / "data" / "ps-async"  # real TF parameter-server runs: README there


def ps_async_data(*parts: str) -> Path:
    """A path under tests/data/ps-async. The repository ships these recordings, so a missing one
    is a broken checkout: it fails the test (naming the path) rather than skipping it."""
    path = PS_ASYNC_DATA.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing from the repository's test data ({PS_ASYNC_DATA}/README.md)")
    return path


def ps_async_traces() -> list[Path]:
    """Every condensed trace, ``condensed/<cc>/<model>_bw<B>.json.gz``, in a stable order.

    The eight (two models, 50 and 100 Mbit/s, cubic and bbr) are all there or the checkout is broken."""
    traces = sorted(ps_async_data("condensed").glob("*/*.json.gz"))
    if len(traces) != 8:
        raise FileNotFoundError(f"{PS_ASYNC_DATA}/condensed: {len(traces)} traces where the README lists 8")
    return traces
