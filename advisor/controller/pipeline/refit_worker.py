"""The closed loop's step in the prediction worker: the job's model calibrated to its observed points,
before its curve is predicted again.

Why apart from ``refit.py``: a refit is an ordinary prediction whose parameters carry the
observed points (``PredictionParams.refit``), so ``predictions.run_prediction`` calls
``refit_request`` first, in the worker process or the prediction Job, while ``refit.py`` (the
controller's side: when to look, which points, the events) builds those parameters with
``predictions``. This module needs neither, so both import it and the imports go one way.
``read_refit`` is the one reader of the points' text, for the worker and for the ``refit``
annotation a previous leader wrote. The update itself is the core's
(``core/online_calibration.py``), for whichever model the job uses.

The calibration grid of a job does not depend on what was observed, so the worker keeps the
last ``GRID_CACHE`` grids (by profile and request): a job observed again costs one prediction,
not a grid. A prediction Job starts without them and computes its grid again.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from advisor.core.advice import AdviceRequest
from advisor.core.online_calibration import (
    DEFAULT_RULE, MISSTATED, CalibrationError, Grid, Observation, Rule, calibrate,
)
from advisor.core.profile import Profile

NOTE_LIMIT = 200  # characters of each note kept in the annotation
DEFAULT_NOISE = 0.03  # a point without its own noise (points written before it was recorded)
GRID_CACHE = 8  # jobs whose calibration grid a worker process keeps


@dataclass(frozen=True, slots=True)
class RefitPoints:
    """The observed points of a refit and how they update the curve."""

    points: tuple[dict[str, Any], ...]
    rule: Rule
    misstated: float = MISSTATED  # the posterior's prior probability of wrong stated values


class _Grids(OrderedDict[Hashable, Grid]):
    """The last ``GRID_CACHE`` grids, the least recently used forgotten first."""

    def __getitem__(self, key: Hashable) -> Grid:
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def __setitem__(self, key: Hashable, value: Grid) -> None:
        super().__setitem__(key, value)
        while len(self) > GRID_CACHE:
            self.popitem(last=False)


_GRIDS = _Grids()


def read_points(text: str, where: str) -> tuple[dict[str, Any], ...]:
    """The points of ``refit.points_json`` text; ``ValueError`` naming the problem."""
    return read_refit(text, where).points


def read_refit(text: str, where: str) -> RefitPoints:
    """The points and the rule of ``refit.points_json`` text; ``ValueError`` naming the problem."""
    doc = json.loads(text)
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(points, list) or not points:
        raise ValueError(f"{where}: no observed points")
    out = []
    for p in points:
        if not isinstance(p, dict):
            raise ValueError(f"{where}: a point must be an object")
        w, observed, noise = p.get("workers"), p.get("observed"), p.get("noise", DEFAULT_NOISE)
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"{where}: workers must be an integer >= 1, got {w!r}")
        if isinstance(observed, bool) or not isinstance(observed, (int, float)) or not (
                math.isfinite(observed) and observed > 0):
            raise ValueError(f"{where}: observed examples/s must be a number > 0, got {observed!r}")
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < 1:
            raise ValueError(f"{where}: noise must be a fraction in [0, 1), got {noise!r}")
        out.append(p)
    rule = doc.get("rule", DEFAULT_RULE.value)
    if rule not in {r.value for r in Rule}:
        raise ValueError(f"{where}: rule must be one of {', '.join(r.value for r in Rule)}, got {rule!r}")
    misstated = doc.get("misstated", MISSTATED)
    if isinstance(misstated, bool) or not isinstance(misstated, (int, float)) or not 0 < misstated <= 1:
        raise ValueError(f"{where}: misstated must be a probability in (0, 1], got {misstated!r}")
    return RefitPoints(tuple(out), Rule(rule), float(misstated))


def refit_request(profile: Profile, request: AdviceRequest, refit: str,
                  cache_key: Hashable | None = None) -> tuple[AdviceRequest, dict[str, Any]]:
    """The request updated by the points in ``refit``, and what the update did (the prediction's
    ``refit`` section). Points that cannot inform it (outside the curve) keep the request
    (``outcome: unchanged``, with the reason); other errors propagate. ``cache_key`` names the
    profile, so the worker reuses the job's grid."""
    given = read_refit(refit, "the refit's points")
    section: dict[str, Any] = {"points": list(given.points), "rule": given.rule.value,
                               **({"misstated": given.misstated} if given.rule is Rule.POSTERIOR else {})}
    observations = [Observation(int(p["workers"]), float(p["observed"]), float(p.get("noise", DEFAULT_NOISE)))
                    for p in given.points]
    try:
        result = calibrate(profile, request, observations, rule=given.rule, misstated=given.misstated, cache=_GRIDS,
                           cache_key=cache_key)
    except CalibrationError as exc:
        return request, {**section, "outcome": "unchanged", "notes": [str(exc)[:NOTE_LIMIT]]}
    report = result.report()
    report["notes"] = [n[:NOTE_LIMIT] for n in report["notes"]]
    section.update(report, outcome="refitted" if result.changed else "unchanged")
    return result.request, section
