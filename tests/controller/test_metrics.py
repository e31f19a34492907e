"""The controller's counters export every label value it uses, at zero, from the start."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import generate_latest

from advisor.controller.web import metrics
from advisor.controller.web.metrics import Metrics

PACKAGE = Path(metrics.__file__).parent
COUNTERS = {"predictions": metrics.PREDICTION_OUTCOMES, "profiling_runs": metrics.PROFILING_OUTCOMES,
            "reconcile_errors": metrics.RECONCILE_ERROR_REASONS, "resizes": metrics.RESIZE_MODES,
            "watch_restarts": metrics.WATCH_RESTART_REASONS}


def used_label_values(attribute: str) -> set[str]:
    """String literals the controller's code passes to ``<metrics>.<attribute>.labels(...)``."""
    found: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        for call in re.finditer(rf"\.{attribute}\.labels\(([^)]*)\)", path.read_text()):
            found |= set(re.findall(r'"([a-z_]+)"', call.group(1)))
    return found


def test_every_label_value_the_code_uses_is_exported_at_zero() -> None:
    """A counter series born at 1 shows no increase() in Prometheus: the first event would be lost."""
    m = Metrics()
    text = generate_latest(m.registry).decode()
    for attribute, values in COUNTERS.items():
        assert used_label_values(attribute) <= set(values), f"{attribute}: add the new value to metrics.py"
        name = getattr(m, attribute)._name
        for value in values:
            assert re.search(rf'^{name}_total\{{\w+="{value}"\}} 0\.0$', text, re.M), (name, value)


def test_profiling_outcomes_cover_the_run_states() -> None:
    # reconcile._end_run counts profiling_runs by the run's state: failed or timed_out
    assert {"failed", "timed_out"} <= set(metrics.PROFILING_OUTCOMES)
