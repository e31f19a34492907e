"""Real 2-PS traces whose small variables sit apart from the weights
(tests/data/ps-traces/w3-placements, recorded by scripts/record_ps_traces.py; its README says how).

Independent truths: the placement each trace was recorded with (which PS holds what, from the
layer widths), TensorFlow's own message between the PS (a 0-byte control edge, as its step
records say), and the throughput the same programs measured at W = 3 on the testbed.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import statistics
from functools import cache

import pytest

from advisor.core.advice import AdviceRequest, model_inputs
from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.profile import Profile, Resource
from advisor.core.sim_types import NetworkModel
from advisor.errors import MissingTraceDataError, TraceFormatError
from advisor.importers.loader import _trace_records, load_profile
from advisor.importers.tf_profile import RELAY_MAX_BYTES, build_profile_from_trace
from advisor.importers.tf_records import NodeRecord
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "ps-traces" / "w3-placements"
MODEL = "li2020-des+contention"


@cache
def trace(placement: str) -> Profile:
    return load_profile(DATA / f"{placement}.trace.json.gz")


def measured_w3(placement: str) -> list[float]:
    return [float(json.loads(gzip.decompress(p.read_bytes()))["results"][0]["thr_window"])
            for p in sorted(DATA.glob(f"{placement}.r*.measured.json.gz"))]


def inputs_of(profile: Profile):  # type: ignore[no-untyped-def]
    settings = CurveSettings(workers=(3,), steps=1000, warmup_steps=50, seed=0)
    return model_inputs(profile, AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=settings)), settings


def ancestors(profile: Profile, name: str) -> set[str]:
    by_name = {op.name: op for op in profile.ops}
    seen: set[str] = set()
    todo = list(by_name[name].deps)
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(by_name[dep].deps)
    return seen


def test_a_message_between_ps_is_kept_as_a_dependency() -> None:
    profile = trace("step-apart")
    # global_step alone on PS 0, every other variable on PS 1: TensorFlow sends the increment's
    # trigger from PS 1 to PS 0 directly, which the profile keeps as a dependency, not a transfer
    assert profile.job.parameter_servers == 2
    transfers = [op for op in profile.ops if op.resource.is_transfer]
    # PS 0 sends the worker only the step count (8 bytes); the relay is no transfer of either PS
    assert [(op.resource, op.bytes) for op in transfers if op.ps == 0] == [(Resource.DOWNLINK, 8)]
    assert all(op.resource in (Resource.DOWNLINK, Resource.UPLINK) for op in transfers)
    increment = "ps0:GradientDescent"
    applies = {op.name for op in profile.ops if op.name.startswith("ps1:") and op.name.endswith("ApplyGradientDescent")}
    assert len(applies) == 8  # 4 weight matrices and 4 biases, all on PS 1
    assert applies <= ancestors(profile, increment)  # the step is counted after every update


def test_a_message_between_ps_with_data_is_refused_naming_both() -> None:
    records = _trace_records(DATA / "step-apart.trace.json.gz")
    big = RELAY_MAX_BYTES + 1

    def heavier(rec: NodeRecord) -> NodeRecord:
        if rec.name == "RecvTensor" and "GradientDescent/update from /job:ps" in rec.label:
            return dataclasses.replace(rec, requested_bytes=big)
        return rec

    steps = tuple(dataclasses.replace(s, records=tuple(map(heavier, s.records))) for s in records.steps)
    with pytest.raises(TraceFormatError, match=rf"carries {big} bytes from ps1 to ps0"):
        build_profile_from_trace(dataclasses.replace(records, steps=steps))
    unrecorded = tuple(dataclasses.replace(s, records=tuple(r for r in s.records if "from /job:ps" not in r.label))
                       for s in records.steps)
    with pytest.raises(MissingTraceDataError, match="goes from ps1 to ps0, and no step records its size"):
        build_profile_from_trace(dataclasses.replace(records, steps=unrecorded))


def test_an_idle_ps_leaves_a_one_ps_job() -> None:
    model = registry.get(MODEL)
    params = registry.params_for(model)
    idle, split = inputs_of(trace("last-ps"))[0], inputs_of(trace("step-apart"))[0]
    assert trace("last-ps").job.parameter_servers == 2  # PS 1 holds every variable; PS 0 is in the cluster
    assert (model.simulated_ps(idle), model.simulated_ps(split)) == (1, 2)
    # the goodput of contending flows is the one-PS one for the idle PS's job, the several-PS one otherwise
    assert model.network(idle, params).multi_flow_goodput == params.multi_flow_goodput
    assert model.network(split, params).multi_flow_goodput == params.multi_ps_flow_goodput
    assert {c.name for c in model.calibration_for(idle)} >= {"multi_flow_goodput"}


def test_the_idle_ps_job_is_predicted_within_the_testbeds_spread() -> None:
    model = registry.get(MODEL)
    inputs, settings = inputs_of(trace("last-ps"))
    (point,) = predict_curve(model, inputs, registry.params_for(model, {"congestion_control": "cubic",
                                                                         "queue_s": 0.1}), settings)
    runs = measured_w3("last-ps")
    assert len(runs) == 2
    # the one-PS rules, as for the one-PS runs of the same program (within their 5-10 % run-to-run spread)
    assert point.throughput == pytest.approx(statistics.fmean(runs), rel=0.08)
