"""One contract, every registered model (as scikit-learn's check_estimator runs every estimator).

A model joins these checks by its registry line: determinism under a seed, the linear-scaling
and link-capacity ceilings, a W = 1 point near the trace's own rate for models that replay a
trace, bad parameters and missing inputs refused with ``ModelInputError`` naming the model, its
calibration parameters (real parameters, valid at every value of their grid, and acting on the
curve) or the reason it has none, and the layering (a model imports no other model; the curve, advice, report, CLI and controller
reach models only through the protocol and the registry).
"""

from __future__ import annotations

import ast
import importlib
import math
import statistics

import pytest

from advisor.core.advice import AdviceRequest, ModelChoice, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import GOODPUT, CalibrationParam, ModelInputs, ModelParams, Need, ThroughputModel
from advisor.core.profile import Profile
from advisor.core.sim_types import NetworkModel
from advisor.errors import ModelInputError
from benchmarks.synthetic import tiny_mlp
from tests.conftest import REPO, ps_async_traces

MODELS = registry.all_models()
CFG = CurveSettings(workers=(1, 2, 3, 4, 6), steps=260, warmup_steps=30, seed=3)
LINEAR_SLACK = 1.03  # a sampled W-worker rate may exceed W x the sampled W = 1 rate by its noise
W1_TOLERANCE = 0.10  # the W = 1 point of a trace-replaying model vs the trace's own rate


def _inputs(profile: Profile, bandwidth: float) -> ModelInputs:
    return model_inputs(profile, AdviceRequest(network=NetworkModel(bandwidth_bps=bandwidth), curve=CFG))


def _cases() -> list[tuple[str, Profile, float]]:
    """A synthetic step and the eight real traces of tests/data/ps-async."""
    from advisor.importers.loader import load_profile

    cases = [("tiny-mlp", tiny_mlp(), 1e8)]
    for path in ps_async_traces():
        bandwidth = 50e6 if "_bw50" in path.name else 100e6  # the tc rate the trace was recorded at
        cases.append((f"{path.parent.name}/{path.name}", load_profile([path]), bandwidth))
    return cases


CASES = _cases()
SPECS = ("alexnet.spec.yaml", "resnet50.spec.yaml", "dts-example.yaml")  # bundled: advisor/data


def _spec_inputs(name: str) -> ModelInputs:
    from advisor.importers.spec_file import read_spec_document

    return ModelInputs(spec=read_spec_document(REPO / "advisor" / "data" / name))


def _applies(model: ThroughputModel, inputs: ModelInputs) -> bool:
    try:
        model.check(inputs, registry.params_for(model))
    except ModelInputError:
        return False
    return True


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_the_model_describes_itself(model: ThroughputModel) -> None:
    assert model.name and model.name == model.name.strip().lower() and " " not in model.name
    assert model.description and "\n" not in model.description
    assert issubclass(model.Params, ModelParams) and model.Params.model_config.get("extra") == "forbid"
    assert model.needs and all(isinstance(n, Need) for n in model.needs)
    assert registry.get(model.name) is model


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_unknown_parameters_are_refused_naming_the_model(model: ThroughputModel) -> None:
    with pytest.raises(ModelInputError) as caught:
        registry.params_for(model, {"no_such_parameter": 1})
    assert f"model {model.name!r}" in str(caught.value) and "no_such_parameter" in str(caught.value)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_missing_inputs_are_refused_naming_the_model(model: ThroughputModel) -> None:
    with pytest.raises(ModelInputError) as caught:
        model.check(ModelInputs(), registry.params_for(model))
    assert f"model {model.name!r}" in str(caught.value)


def test_an_unknown_model_lists_the_valid_names() -> None:
    with pytest.raises(ModelInputError) as caught:
        ModelChoice("nonesuch").resolve()
    assert all(name in str(caught.value) for name in registry.names())


@pytest.mark.parametrize(("case", "profile", "bandwidth"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_the_curve_keeps_the_invariants(model: ThroughputModel, case: str, profile: Profile, bandwidth: float) -> None:
    inputs = _inputs(profile, bandwidth)
    if not _applies(model, inputs):
        pytest.skip(f"{model.name} does not apply to a one-worker PS trace")
    params = registry.params_for(model)
    curve = predict_curve(model, inputs, params, CFG)
    again = predict_curve(model, inputs, params, CFG)
    assert curve == again  # the same seed gives the same curve
    one = curve[0].throughput
    for p in curve:
        assert 0 < p.throughput <= p.workers * one * LINEAR_SLACK, f"W={p.workers}: above linear scaling"
        assert p.low <= p.throughput <= p.high
        bound = model.link_bound(inputs, params, p.workers)
        if model.capacity_bound:
            assert p.throughput <= bound * 1.01, f"W={p.workers}: {p.throughput:.1f} ex/s above the links' {bound:.1f}"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_calibration_parameters_are_real_parameters_or_their_absence_is_explained(model: ThroughputModel) -> None:
    if not model.calibration:
        assert len(model.calibration_note) > 20 and "\n" not in model.calibration_note
        return
    assert model.calibration_note == ""
    names = [p.name for p in model.calibration]
    assert len(set(names)) == len(names)
    for p in model.calibration:
        assert isinstance(p, CalibrationParam) and p.description and p.low < p.high
        if p.name == GOODPUT:  # the link's delivered share: only a model that reads a link has it
            assert Need.BANDWIDTH in model.needs and 0 < p.low and p.high <= 1
            continue
        assert p.name in model.Params.model_fields, f"{p.name} is not a parameter of {model.name}"
        for value in p.grid:  # every value a calibration may try is a valid parameter value
            registry.params_for(model, {p.name: value})
        default = model.Params.model_fields[p.name].default
        if default is None:  # decided by the inputs (model.resolved), e.g. by the profile's framework
            _, profile, bandwidth = REAL_FOR_CALIBRATION
            inputs = _inputs(profile, bandwidth) if Need.PROFILE in model.needs else _spec_inputs(SPECS[0])
            default = getattr(model.resolved(inputs, registry.params_for(model)), p.name)
        assert p.low <= default <= p.high, f"{p.name}'s default {default} lies outside its range"


def test_a_calibration_value_cannot_be_given_as_a_goodput_parameter() -> None:
    # goodput is an input of every model with a link (ModelInputs.goodput), never one of its Params
    for model in MODELS:
        assert GOODPUT not in model.Params.model_fields


REAL_FOR_CALIBRATION = next(c for c in CASES if c[0].endswith("mlp_bw100.json.gz") and "cubic" in c[0])


@pytest.mark.parametrize("model", [m for m in MODELS if m.calibration], ids=lambda m: m.name)
def test_each_calibration_parameter_moves_the_curve(model: ThroughputModel) -> None:
    # Each declared parameter must act on the prediction: its two ends give different curves
    # (somewhere in W = 1..12: a hierarchical ring's inter-node latency acts only beyond one node
    # of 8), or observed throughput could never tell its value.
    from advisor.core.online_calibration import with_values

    _, profile, bandwidth = REAL_FOR_CALIBRATION
    inputs = _inputs(profile, bandwidth) if Need.PROFILE in model.needs else _spec_inputs(SPECS[0])
    if not _applies(model, inputs):
        pytest.skip(f"{model.name} does not apply")
    params = model.resolved(inputs, registry.params_for(model))  # what a calibration starts from
    stated = [inputs.goodput if p.name == GOODPUT else getattr(params, p.name) for p in model.calibration]
    cfg = CurveSettings(workers=(1, 2, 4, 6, 12), steps=160, warmup_steps=20, seed=1)
    for j, p in enumerate(model.calibration):
        curves = []
        for end in (p.low, p.high):
            values = list(stated)
            values[j] = end
            inp, par = with_values(model, inputs, params, values)
            curves.append([c.throughput for c in predict_curve(model, inp, par, cfg)])
        assert max(abs(a / b - 1) for a, b in zip(*curves)) > 0.01, f"{p.name} does not move {model.name}'s curve"


def test_cynthia_as_published_can_exceed_link_capacity() -> None:
    # Why cynthia is exempt from the capacity check: T_P = 1, T_C = 1, K = 1: U_1 = 1/3; at W = 30,
    # W U_1 = 10, throughput = 30 / (1 x 10 + 2) = 2.5 examples/s, while a link direction that needs
    # T_C = 1 s per step carries at most 1 step/s = 1 example/s.
    from advisor.core.models.cynthia import cynthia_throughput
    from advisor.core.phases import Phases

    assert cynthia_throughput(Phases(1.0, 1.0, 1.0, 0.0, 1), 30) == pytest.approx(2.5)
    assert not registry.get("cynthia").capacity_bound


REAL = [c for c in CASES if c[0] != "tiny-mlp"]  # the synthetic step's durations are not a measured run


@pytest.mark.parametrize(("case", "profile", "bandwidth"), REAL, ids=[c[0] for c in REAL])
@pytest.mark.parametrize("model", [m for m in MODELS if Need.PROFILE in m.needs and m.anchored],
                         ids=lambda m: m.name)
def test_one_worker_is_near_the_traces_own_rate(model: ThroughputModel, case: str, profile: Profile,
                                                 bandwidth: float) -> None:
    # The trace measured one worker: batch / (client wall time per step), where the client
    # recorded it, else the span of the step's records.
    inputs = _inputs(profile, bandwidth)
    if not _applies(model, inputs):
        pytest.skip(f"{model.name} does not apply")
    step_s = statistics.mean((s.wall_us or s.end_us) for s in profile.steps) / 1e6
    traced = profile.job.batch_size / step_s
    (point,) = predict_curve(model, inputs, registry.params_for(model), CurveSettings(workers=(1,), steps=260,
                                                                                     warmup_steps=30))
    assert point.throughput == pytest.approx(traced, rel=W1_TOLERANCE)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("model", [m for m in MODELS if m.needs & {Need.LAYER_SPEC, Need.CLUSTER_SPEC}],
                         ids=lambda m: m.name)
def test_spec_models_keep_the_invariants_on_the_bundled_specs(model: ThroughputModel, spec: str) -> None:
    inputs = _spec_inputs(spec)
    if not _applies(model, inputs):
        pytest.skip(f"{model.name} does not read {spec}")
    params = registry.params_for(model)
    curve = predict_curve(model, inputs, params, CFG)
    assert curve == predict_curve(model, inputs, params, CFG)
    one = curve[0].throughput
    for p in curve:
        assert 0 < p.throughput <= p.workers * one * LINEAR_SLACK
        assert p.throughput <= model.link_bound(inputs, params, p.workers) * 1.01


def _imports(module: str) -> set[str]:
    """Absolute modules imported anywhere in ``module`` (a package: all its files)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    files = list(REPO.joinpath(*module.split(".")).rglob("*.py")) if spec.submodule_search_locations else \
        [REPO.joinpath(*module.split(".")).with_suffix(".py")]
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _is_within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


@pytest.mark.parametrize("module", registry.MODULES)
def test_a_model_module_imports_no_other_model(module: str) -> None:
    others = [m for m in registry.MODULES if m != module]
    assert not {i for i in _imports(module) for o in others if _is_within(i, o)}


@pytest.mark.parametrize("user", ["advisor.core.curve", "advisor.core.advice", "advisor.core.compare",
                                  "advisor.report", "advisor.cli", "advisor.controller"])
def test_the_curve_advice_cli_and_controller_know_models_only_through_the_protocol(user: str) -> None:
    allowed = ("advisor.core.models.protocol", "advisor.core.models.registry")
    reached = {i for i in _imports(user) if _is_within(i, "advisor.core.models")}
    assert {i for i in reached if i != "advisor.core.models" and not any(_is_within(i, a) for a in allowed)} == set()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_the_outlook_reports_json_and_parameters_the_model_has(model: ThroughputModel) -> None:
    """What a model adds to the prediction (model_details, and model_params as used) is JSON, and
    the parameters as used are valid parameters of the model: given back, they are accepted."""
    import json

    inputs = _inputs(tiny_mlp(), 1e8)
    if not _applies(model, inputs):
        pytest.skip(f"{model.name} does not apply to a one-worker PS trace")
    params = registry.params_for(model)
    curve = predict_curve(model, inputs, params, CurveSettings(workers=(1, 2), steps=120, warmup_steps=10, seed=3))
    outlook = model.outlook(inputs, params, {p.workers: p.throughput for p in curve})
    json.dumps(dict(outlook.details))
    used = json.loads(json.dumps({**params.model_dump(mode="json"), **outlook.params}))
    assert set(outlook.params) <= set(model.Params.model_fields)
    registry.params_for(model, used)
