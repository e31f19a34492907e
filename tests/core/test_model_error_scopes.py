"""A model's error measured in a scope of its inputs (``SEVERAL_PS``: jobs whose bytes go to
several parameter servers) widens those jobs' intervals; the model's unscoped error widens the
others, and a scope nobody measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.core.advice import AdviceRequest, advise
from advisor.core.curve import CurveSettings
from advisor.core.model_error import SEVERAL_PS, ErrorRegime, ModelError, ModelErrorDataError, ModelErrors
from advisor.core.models.registry import DEFAULT_MODEL
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors, shipped_path, write_model_error
from tests.conftest import REPO

PS_TRACES = REPO / "tests" / "data" / "ps-traces"


def _errors() -> ModelErrors:
    """The default model's error: +-10 % unscoped, +-30 % with several PS (W >= 1 each)."""
    one = ModelError(DEFAULT_MODEL, 0.95, (ErrorRegime(1, None, 0.1, 0.1, 20),))
    several = ModelError(DEFAULT_MODEL, 0.95, (ErrorRegime(1, None, 0.3, 0.3, 20),), scope=SEVERAL_PS)
    return ModelErrors((one, several))


def test_a_scope_takes_its_own_widths_where_measured_and_the_models_elsewhere() -> None:
    errors = _errors()
    assert errors.models == (DEFAULT_MODEL,)  # one model, two scopes
    assert errors.widen(DEFAULT_MODEL, 3, 100.0, 100.0, scope=SEVERAL_PS) == pytest.approx((70.0, 130.0))
    assert errors.widen(DEFAULT_MODEL, 3, 100.0, 100.0) == pytest.approx((90.0, 110.0))
    assert errors.widen(DEFAULT_MODEL, 3, 100.0, 100.0, scope="heterogeneous") == pytest.approx((90.0, 110.0))
    assert errors.of("cynthia", SEVERAL_PS) is None  # another model: neither
    only_scoped = ModelErrors((errors.errors[1],))
    assert only_scoped.of(DEFAULT_MODEL) is None  # a scope's widths say nothing of the other inputs
    with pytest.raises(ModelErrorDataError, match="in scope 'several-ps': keep one"):
        ModelErrors((errors.errors[1], errors.errors[1]))
    # a scope measured from W = 2 on: W = 1 (one worker alone, whatever the scope) keeps the model's
    one = ModelError(DEFAULT_MODEL, 0.95, (ErrorRegime(1, 1, 0.05, 0.05, 7), ErrorRegime(2, None, 0.1, 0.1, 20)))
    from_two = ModelError(DEFAULT_MODEL, 0.95, (ErrorRegime(2, None, 0.3, 0.3, 20),), "the 2-PS runs", SEVERAL_PS)
    merged = ModelErrors((one, from_two)).of(DEFAULT_MODEL, SEVERAL_PS)
    assert merged is not None and merged.scope == SEVERAL_PS
    assert merged.widen(DEFAULT_MODEL, 1, 100.0, 100.0) == pytest.approx((95.0, 105.0))
    assert merged.widen(DEFAULT_MODEL, 2, 100.0, 100.0) == pytest.approx((70.0, 130.0))
    assert merged.source.startswith("the 2-PS runs")
    with pytest.raises(ModelErrorDataError, match="a scope must be a name"):
        ModelError(DEFAULT_MODEL, 0.95, (ErrorRegime(1, None, 0.1, 0.1, 2),), scope=" ")


def test_a_scopes_file_is_named_for_model_and_scope_and_loads_beside_the_models(tmp_path: Path) -> None:
    write_model_error(DEFAULT_MODEL, 0.5, [(1, 0.02, None), (3, -0.2, None)], ((1, 1), (2, None)), "by hand",
                      folder=tmp_path)
    written, path = write_model_error(DEFAULT_MODEL, 0.5, [(1, 0.05, None), (3, 0.3, None)], ((1, 1), (2, None)),
                                      "by hand", folder=tmp_path, scope=SEVERAL_PS)
    assert path.name == f"{DEFAULT_MODEL}@{SEVERAL_PS}.json" and written.scope == SEVERAL_PS
    errors = load_model_errors(tmp_path)
    # level 0.5, one residual per regime: rank ceil(2 x 0.5) = 1, that residual
    assert errors.widen(DEFAULT_MODEL, 3, 100.0, 100.0) == pytest.approx((80.0, 120.0))
    assert errors.widen(DEFAULT_MODEL, 3, 100.0, 100.0, scope=SEVERAL_PS) == pytest.approx((70.0, 130.0))
    # a scope that is not a name, or not the one the file's name says, is refused, naming both
    doc = json.loads(path.read_text())
    doc["scope"] = 7
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelErrorDataError, match="'scope' must be a name such as 'several-ps' or absent, got 7"):
        load_model_errors(tmp_path)
    doc["scope"] = "other"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelErrorDataError, match=r"named for model 'li2020-des\+contention' in scope 'several-ps' "
                                                  r"but holds the error of model 'li2020-des\+contention' in scope "
                                                  r"'other': rename it li2020-des\+contention@other\.json"):
        load_model_errors(tmp_path)


def _advice(trace: str, **request: object):  # type: ignore[no-untyped-def]
    cfg = CurveSettings(workers=(1, 3), steps=150, warmup_steps=20)
    return advise(load_profile(PS_TRACES / trace), AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=cfg,
                                                                 model_error=_errors(), **request))  # type: ignore[arg-type]


def test_a_job_with_two_ps_is_widened_by_the_several_ps_error_and_a_one_ps_job_by_the_models() -> None:
    for advice, width in ((_advice("mlp_ps2_bw100.trace.json.gz"), 0.3),
                          (_advice("mlp_ps1_bw100.trace.json.gz", parameter_servers=2,
                                   worker_bandwidths_bps=(10e9,) * 3), 0.3),  # the --ps 2 what-if
                          (_advice("mlp_ps1_bw100.trace.json.gz"), 0.1)):
        three = advice.point(3)
        assert (three.low, three.high) == pytest.approx((three.sim_low * (1 - width), three.sim_high * (1 + width)))
        assert advice.model_error is not None
        assert advice.model_error.scope == (SEVERAL_PS if width == 0.3 else None)


def test_the_shipped_several_ps_widths_hold_the_two_ps_runs_misses() -> None:
    """The shipped several-PS widths load beside the model's, cover every W, and are wider than
    the one-PS widths from W = 3 on: the 2-PS runs that take turns on the busiest link (or do
    not) are missed by more (docs/accuracy.md). Every held-out point they were measured from lies
    within them but the conformal rank's exceptions."""
    errors = load_model_errors()
    several, one = errors.of(DEFAULT_MODEL, SEVERAL_PS), errors.of(DEFAULT_MODEL)
    assert several is not None and one is not None and several.scope == SEVERAL_PS and one.scope is None
    assert all(several.regime(w) is not None for w in range(1, 65))
    assert several.regime(3).up > one.regime(3).up  # type: ignore[union-attr]
    # and skewed: the runs that take turns beat the prediction by more than the others fall short
    assert several.regime(3).down < several.regime(3).up  # type: ignore[union-attr]
    points = json.loads(shipped_path(DEFAULT_MODEL, SEVERAL_PS).read_text())["validation"]["points"]
    assert len(points) >= 40
    for p in points:
        assert p["r"] == pytest.approx(p["measured"] / p["predicted"] - 1)
    outside = [p for p in points if not -several.regime(p["workers"]).down - 1e-4  # type: ignore[union-attr]
               <= p["r"] <= several.regime(p["workers"]).up + 1e-4]  # type: ignore[union-attr]
    assert len(outside) <= 0.05 * len(points) + 1
