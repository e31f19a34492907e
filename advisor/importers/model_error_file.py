"""Read model-error data (``advisor-model-error/1``): the widths ``benchmarks/model_error.py``
measured, shipped as ``advisor/data/model_error.json``, or a file a team measured on its own
cluster. The core's ``ModelError`` (``core/model_error.py``) says what they mean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from advisor.core.model_error import ErrorRegime, ModelError, ModelErrorDataError

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "model_error.json"
SCHEMA = "advisor-model-error/1"


def load_model_error(path: Path | None = None) -> ModelError:
    """The model error in ``path`` (default: the shipped data); a file that is not one is a
    ``ModelErrorDataError`` naming the file and the problem."""
    where = path or SHIPPED
    try:
        doc = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise ModelErrorDataError(f"model-error data {where}: cannot read it ({exc})") from None
    try:
        return parse_model_error(doc)
    except ModelErrorDataError as exc:
        raise ModelErrorDataError(f"model-error data {where}: {exc}") from None


def parse_model_error(doc: Any) -> ModelError:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ModelErrorDataError(f"not {SCHEMA} data (its 'schema' field)")
    try:
        regimes = tuple(ErrorRegime(int(r["workers_min"]), None if r["workers_max"] is None else int(r["workers_max"]),
                                    float(r["down"]), float(r["up"]), int(r["n"]), bool(r.get("exact", True)),
                                    None if r.get("outcome") is None else str(r["outcome"]))
                        for r in doc["regimes"])
        return ModelError(str(doc["model"]), float(doc["level"]), regimes, str(doc.get("source", "")))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ModelErrorDataError):
            raise
        raise ModelErrorDataError(f"a field is missing or of the wrong type ({type(exc).__name__}: {exc})") from None
