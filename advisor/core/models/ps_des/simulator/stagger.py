"""Start offsets that spread workers over one step (``SimulationSettings.start_offsets_s``).

Why: workers started together stay synchronised when nothing breaks their symmetry, so the
simulation shows only the synchronised regime (all pull together, all push together). On
the testbed two workers often settle instead into alternating phases, one pulling while
the other pushes, which uses both directions of the PS link at once. Starting the workers
evenly spread over one step puts them in such an alternating arrangement from the outset;
whether the simulation keeps it or falls back into step tells whether the alternating
regime is self-sustaining under the model's rules (e.g. with request-path queueing,
``NetworkModel.queue_delay_s``).
"""

from __future__ import annotations

import math

from advisor.core.sim_types import SimulationSettingsError


def even_stagger(workers: int, period_s: float) -> tuple[float, ...]:
    """Offsets ``w * period_s / workers`` for w = 0..workers-1 (period_s: one step, in s)."""
    if not isinstance(workers, int) or workers < 1:
        raise SimulationSettingsError(f"workers must be an integer >= 1, got {workers!r}")
    if not (isinstance(period_s, (int, float)) and math.isfinite(period_s) and period_s >= 0):
        raise SimulationSettingsError(f"period_s must be a finite number >= 0, got {period_s!r}")
    return tuple(w * period_s / workers for w in range(workers))
