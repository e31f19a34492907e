"""Online refit's step in the prediction worker: the job's contention constants fitted to its
observed points, before its curve is predicted again.

Why apart from ``refit.py``: a refit is an ordinary prediction whose parameters carry the
observed points (``PredictionParams.refit``), so ``predictions.run_prediction`` calls
``refit_request`` first, in the worker process or the prediction Job, while ``refit.py`` (the
controller's side: when to look, which points, the events) builds those parameters with
``predictions``. This module needs neither, so both import it and the imports go one way.
``read_points`` is the one reader of the points' text, for the worker and for the ``refit``
annotation a previous leader wrote.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from advisor.core.advice import AdviceRequest
from advisor.core.online_refit import refit_model
from advisor.core.profile import Profile
from advisor.core.sim_types import SimulationSettingsError

NOTE_LIMIT = 200  # characters of each fit note kept in the annotation


def read_points(text: str, where: str) -> tuple[dict[str, Any], ...]:
    """The points of ``refit.points_json`` text; ``ValueError`` naming the problem."""
    doc = json.loads(text)
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(points, list) or not points:
        raise ValueError(f"{where}: no observed points")
    out = []
    for p in points:
        if not isinstance(p, dict):
            raise ValueError(f"{where}: a point must be an object")
        w, observed = p.get("workers"), p.get("observed")
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"{where}: workers must be an integer >= 1, got {w!r}")
        if isinstance(observed, bool) or not isinstance(observed, (int, float)) or not (
                math.isfinite(observed) and observed > 0):
            raise ValueError(f"{where}: observed examples/s must be a number > 0, got {observed!r}")
        out.append(p)
    return tuple(out)


def refit_request(profile: Profile, request: AdviceRequest, refit: str) -> tuple[AdviceRequest, dict[str, Any]]:
    """The request with the job's constants refitted to the points in ``refit``, and what the
    refit did (the prediction's ``refit`` section). Points that cannot inform a fit keep the
    constants (``outcome: unchanged``, with the reason); other errors propagate."""
    points = read_points(refit, "the refit's points")
    section: dict[str, Any] = {"points": list(points)}
    try:
        result = refit_model(profile, request, [(int(p["workers"]), float(p["observed"])) for p in points])
    except SimulationSettingsError as exc:
        _, params = request.model.resolve()
        constants = {k: getattr(params, k, None) for k in ("share_sigma", "multi_flow_goodput")}
        return request, {**section, "outcome": "unchanged", "notes": [str(exc)[:NOTE_LIMIT]],
                         **{k: {"before": v, "after": v} for k, v in constants.items()}}
    section.update({name: {"before": result.before[name], "after": result.after[name]} for name in result.before})
    section.update(outcome="refitted" if result.changed else "unchanged", error_before=round(result.error_before, 4),
                   error_after=round(result.error_after, 4), notes=[n[:NOTE_LIMIT] for n in result.notes])
    return replace(request, model=result.choice), section
