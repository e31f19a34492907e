"""The profile model refuses inconsistent profiles with errors that name the problem."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.profile import Resource, parse_profile
from advisor.errors import ProfileError
from tests.factories import one_layer_doc


def _broken(edit: Any) -> dict[str, Any]:
    doc = one_layer_doc()
    edit(doc)
    return doc


def test_a_valid_profile_loads_with_its_graph() -> None:
    p = parse_profile(one_layer_doc())
    assert [op.resource for op in p.ops] == [
        Resource.PS, Resource.DOWNLINK, Resource.WORKER, Resource.UPLINK, Resource.PS
    ]
    assert p.topological_order == (0, 1, 2, 3, 4)  # a chain has exactly one order
    assert p.dep_indices == ((), (0,), (1,), (2,), (3,))
    assert p.steps[1].end_us == 281.0  # 260 + 1 + 20, see factories.one_layer_doc


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["ops"][2].update(deps=["nope"]), "unknown operation(s) ['nope']"),
        (lambda d: d["ops"][0].update(deps=["ps0:update"]), "cycle among 5 operation(s)"),
        (lambda d: d["ops"][2].update(deps=["worker:compute"]), "depends on itself"),
        (lambda d: d["steps"][0]["duration_us"].__setitem__(1, -5.0), "op #1 has duration -5.0"),
        (lambda d: d["steps"][0]["start_us"].__setitem__(0, float("nan")), "must be finite"),
        (lambda d: d["steps"][1]["duration_us"].pop(), "4 durations"),
        (lambda d: d.update(ops=[o for o in d["ops"] if o["resource"] in ("ps", "worker")]
                            and [{"name": "a", "resource": "worker"}]) or d.update(steps=[
                                {"index": 0, "start_us": [0.0], "duration_us": [1.0]}]), "no transfers"),
        (lambda d: d["ops"][1].update(ps=None), "needs a ps index"),
        (lambda d: d["ops"][1].update(ps=3), "names ps=3 but the job has 1"),
        (lambda d: d["ops"][2].update(bytes=10), "only transfers do"),
        (lambda d: d["ops"][1].update(bytes=-1), "greater than or equal to 0"),
        (lambda d: d["ops"][1].update(colour="red"), "ops.1.colour: Extra inputs are not permitted"),
        (lambda d: d["ops"].append(dict(d["ops"][0])), "appears twice"),
        (lambda d: d["job"].update(batch_size=0), "job.batch_size"),
        (lambda d: d.update(steps=[]), "steps: "),
        (lambda d: d.update(version=2), "unsupported profile version 2"),
        (lambda d: d.update(format="other"), "not an advisor profile"),
    ],
)
def test_malformed_profiles_are_refused_by_name(edit: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=None) as info:
        parse_profile(_broken(edit))
    assert message in str(info.value)


def _mutations() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(-10, 10**12), st.floats(allow_nan=True), st.text(max_size=5)
    )
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_malformed_profile_crashes_the_loader_with_a_foreign_error(data: st.DataObject) -> None:
    doc = one_layer_doc()
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)[1:]))  # recomputed: earlier edits reshape doc
        target = doc
        for key in path[:-1]:
            target = target[key]
        if data.draw(st.booleans()) and isinstance(target, dict):
            del target[path[-1]]
        else:
            target[path[-1]] = data.draw(_mutations())
        if not isinstance(doc, dict) or not _paths(doc)[1:]:
            break
    try:
        parse_profile(copy.deepcopy(doc))
    except ProfileError:
        pass  # the only acceptable failure


@given(text=st.text(max_size=200))
def test_arbitrary_json_text_fails_only_with_profile_error(text: str) -> None:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return
    try:
        parse_profile(doc)
    except ProfileError:
        pass


def _allreduce_doc() -> dict[str, Any]:
    """A two-gradient DDP profile: forward, a (100 B) and b (50 B) ready after it, the optimizer
    after both; buckets {a} then {b}; a 10 Gbit/s link the controller's setting gave."""
    return {
        "format": "advisor-profile", "version": 1,
        "job": {"batch_size": 4, "kind": "pytorch-ddp", "buckets": [["gradient/a"], ["gradient/b"]],
                "recorded_bandwidth_bps": 1e10, "recorded_bandwidth_source": "controller-setting"},
        "ops": [{"name": "forward", "resource": "worker"},
                {"name": "gradient/a", "resource": "uplink", "ps": 0, "bytes": 100, "deps": ["forward"]},
                {"name": "gradient/b", "resource": "uplink", "ps": 0, "bytes": 50, "deps": ["forward"]},
                {"name": "optimizer", "resource": "worker", "deps": ["gradient/a", "gradient/b"]}],
        "steps": [{"index": 0, "start_us": [0.0, 5.0, 5.0, 5.0], "duration_us": [5.0, 0.0, 0.0, 1.0]}],
    }


def test_an_allreduce_profile_loads_with_its_buckets_and_link_source() -> None:
    job = parse_profile(_allreduce_doc()).job
    assert job.buckets == (("gradient/a",), ("gradient/b",))
    assert (job.recorded_bandwidth_bps, job.recorded_bandwidth_source) == (1e10, "controller-setting")
    old = _allreduce_doc()
    del old["job"]["recorded_bandwidth_bps"], old["job"]["recorded_bandwidth_source"]
    assert parse_profile(old).job.recorded_bandwidth_source is None  # profiles without them still load


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # a bucket layout must add up to the gradients: each placed once, nothing else placed
        (lambda j: j.update(buckets=[["gradient/a", "gradient/b"], ["gradient/b"]]), "places gradient 'gradient/b' twice"),
        (lambda j: j.update(buckets=[["gradient/a"]]), "leaves out 1 gradient(s), e.g. 'gradient/b'"),
        (lambda j: j.update(buckets=[["gradient/a"], ["gradient/b", "forward"]]), "job.buckets[1] names 'forward'"),
        (lambda j: j.update(buckets=[["gradient/a", "gradient/b"], []]), "job.buckets[1] is empty"),
        (lambda j: j.update(kind="tf-ps"), "job.buckets is for all-reduce programs"),
        (lambda j: j.update(parameter_servers=2), "job.parameter_servers must stay 1"),
        (lambda j: j.pop("recorded_bandwidth_bps"), "records no recorded_bandwidth_bps"),
        (lambda j: j.update(recorded_bandwidth_source=""), "job.recorded_bandwidth_source"),
        (lambda j: j.update(recorded_bandwidth_bps=-1.0), "job.recorded_bandwidth_bps"),
        (lambda j: j.update(link_rate=1e10), "job.link_rate: Extra inputs are not permitted"),
    ],
)
def test_malformed_allreduce_profiles_are_refused_by_name(edit: Any, message: str) -> None:
    doc = _allreduce_doc()
    edit(doc["job"])
    with pytest.raises(ProfileError) as info:
        parse_profile(doc)
    assert message in str(info.value)
