"""Read and write model-error data (``advisor-model-error/1``): the widths a benchmark measured
for one model, shipped as ``advisor/data/model_error/<model>.json`` (one file per model), or
files a team measured on its own cluster. The core's ``ModelError`` and ``ModelErrors``
(``core/model_error.py``) say what they mean.

In a folder, a file's name is the model it is for: ``li2020-des+contention.json`` holds that
model's widths, ``li2020-des+contention@several-ps.json`` its widths for inputs in one scope
(jobs with several parameter servers), and a file whose ``model`` or ``scope`` field says
otherwise is refused (it would widen a model nobody meant). A single file given alone may be
named anything."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.core.model_error import (
    SEVERAL_PS, ErrorRegime, ModelError, ModelErrorDataError, ModelErrors, error_key, error_name,
    measured_error,
)

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "model_error"
SCHEMA = "advisor-model-error/1"
DIGITS = 4  # widths are stored to 4 decimals (0.01 % of throughput)


def shipped_path(model: str, scope: str | None = None) -> Path:
    """Where the package ships ``model``'s measured error (for ``scope``; the file may not exist)."""
    return SHIPPED / f"{error_key(model, scope)}.json"


def load_model_errors(path: Path | None = None) -> ModelErrors:
    """Every model's error in ``path``: a folder of ``<model>.json`` files (default: the shipped
    one) or one file (one model). A file that is not model-error data, a folder without any, a
    file whose model differs from its name in a folder, or a model that is not registered is a
    ``ModelErrorDataError`` naming the file and the problem."""
    where = SHIPPED if path is None else path
    if where.is_dir():
        files = sorted(p for p in where.glob("*.json") if not p.name.startswith("."))
        if not files:
            raise ModelErrorDataError(f"model-error data {where}: the folder holds no <model>.json file")
        errors = tuple(load_model_error(p, expect_key=p.stem) for p in files)
    else:
        errors = (load_model_error(where),)
    return ModelErrors(errors)


def load_model_error(path: Path, expect_key: str | None = None) -> ModelError:
    """The one model's error in the file ``path``; ``expect_key``: the model (``model@scope``)
    the file must be for (in a folder, its name)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelErrorDataError(f"model-error data {path}: cannot read it ({exc})") from None
    try:
        error = parse_model_error(doc)
        _check_model(error.model, expect_key, error.scope)
    except ModelErrorDataError as exc:
        raise ModelErrorDataError(f"model-error data {path}: {exc}") from None
    return error


def _check_model(model: str, expect_key: str | None, scope: str | None = None) -> None:
    key = error_key(model, scope)
    if expect_key is not None and key != expect_key:
        named_model, _, named_scope = expect_key.partition("@")
        raise ModelErrorDataError(f"the file is named for {error_name(named_model, named_scope or None)} but holds the "
                                  f"error of {error_name(model, scope)}: rename it {key}.json or fix its 'model' and "
                                  f"'scope' fields")
    from advisor.core.models import registry  # the registry imports every model: only when data is read

    if model not in registry.names():
        raise ModelErrorDataError(f"model {model!r} is not a registered model (advisor models lists them)")


def parse_model_error(doc: Any) -> ModelError:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ModelErrorDataError(f"not {SCHEMA} data (its 'schema' field)")
    try:
        regimes = tuple(ErrorRegime(int(r["workers_min"]), None if r["workers_max"] is None else int(r["workers_max"]),
                                    float(r["down"]), float(r["up"]), int(r["n"]), bool(r.get("exact", True)),
                                    None if r.get("outcome") is None else str(r["outcome"]))
                        for r in doc["regimes"])
        scope = doc.get("scope")
        if scope is not None and not isinstance(scope, str):
            raise ModelErrorDataError(f"'scope' must be a name such as {SEVERAL_PS!r} or absent, got {scope!r}")
        return ModelError(str(doc["model"]), float(doc["level"]), regimes, str(doc.get("source", "")),
                          None if scope is None else str(scope))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ModelErrorDataError):
            raise
        raise ModelErrorDataError(f"a field is missing or of the wrong type ({type(exc).__name__}: {exc})") from None


def model_error_doc(error: ModelError, validation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``error`` as ``advisor-model-error/1`` data, widths rounded to ``DIGITS`` decimals, with
    ``validation`` (what the widths were checked against: coverage, the points) stored as given."""
    doc: dict[str, Any] = {
        "schema": SCHEMA, "model": error.model, "level": error.level, "source": error.source,
        "regimes": [{"workers_min": g.workers_min, "workers_max": g.workers_max, "down": round(g.down, DIGITS),
                     "up": round(g.up, DIGITS), "n": g.n, "exact": g.exact, "outcome": g.outcome}
                    for g in error.regimes],
    }
    if error.scope is not None:
        doc["scope"] = error.scope
    if validation is not None:
        doc["validation"] = dict(validation)
    return doc


def write_model_error(model: str, level: float, residuals: Iterable[tuple[int, float, str | None]],
                      bounds: Sequence[tuple[int, int | None]], source: str,
                      validation: Mapping[str, Any] | None = None, *,
                      outcome_bounds: Sequence[tuple[int, int | None]] | None = None, symmetric: bool = True,
                      folder: Path | None = None, scope: str | None = None) -> tuple[ModelError, Path]:
    """Measure ``model``'s error from its held-out residuals ``(W, r, outcome)``
    (r = measured / predicted - 1; outcome None for the prediction's own, else the outcome the
    run showed, r against it) and write it as ``<folder>/<model>.json`` (``<model>@<scope>.json``
    for a ``scope``'s; default: the shipped folder), the file ``load_model_errors`` reads. Per regime of W in ``bounds``
    (``outcome_bounds`` for the other outcomes), ``core.model_error.regime_widths`` at
    ``level``; ``source`` says how the residuals were obtained (the command, the data).
    Returns the error as written (widths rounded) and the file; data that would not load
    again (an unregistered model, no residual in any regime) is refused before writing."""
    try:
        measured = measured_error(model, level, residuals, bounds, outcome_bounds, symmetric, source, scope)
    except ModelErrorDataError as exc:
        raise ModelErrorDataError(f"model-error data of {model}: {exc}") from None
    return write_error_file(measured, validation, folder)


def write_error_file(error: ModelError, validation: Mapping[str, Any] | None = None,
                     folder: Path | None = None) -> tuple[ModelError, Path]:
    """Write ``error`` (widths already measured, e.g. regimes of different kinds put together) as
    ``<folder>/<model>[@<scope>].json``; refused before writing when it would not load again.
    Returns the error as written (widths rounded) and the file."""
    try:
        doc = model_error_doc(error, validation)
        written = parse_model_error(doc)
        _check_model(written.model, None)
    except ModelErrorDataError as exc:
        raise ModelErrorDataError(f"model-error data of {error.model}: {exc}") from None
    out = (SHIPPED if folder is None else folder) / f"{error_key(error.model, error.scope)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return written, out
