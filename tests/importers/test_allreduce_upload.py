"""The all-reduce bundle importer: a hand-built bundle gives the graph the docstring describes,
its W = 1 ring prediction is the traced rate, recorded buckets are used, PS models refuse it,
and every defect is a TraceImportError naming the place (fuzzed)."""

from __future__ import annotations

import copy
import json
import random

import pytest

from advisor.core.curve import CurveSettings, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import ProgramKind, Resource
from advisor.core.sim_types import NetworkModel
from advisor.errors import ModelInputError, MultiWorkerTraceError, ProfileError, TraceImportError
from advisor.importers.allreduce_upload import read_allreduce_upload
from advisor.importers.profile_file import profile_to_json
from advisor.importers.uploads import profile_from_upload
from advisor.profiling.allreduce_bundle import build_allreduce_bundle, encode_allreduce_bundle

# Three gradients: a (4 MB), b (2 MB), c (1 MB). Backward runs c's layer first, then b, then a.
GRADS = [("a", 4_000_000), ("b", 2_000_000), ("c", 1_000_000)]


def _step(index: int, shift: float = 0.0) -> dict:
    # forward 0..10 ms; backward 10..25 ms; c ready at 13, b at 18, a at 24 ms; optimizer 26..28 ms;
    # step wall 30 ms (2 ms data loading after the optimizer, 1 ms gap before it).
    return {"index": index, "wall_us": 30_000.0 + shift, "backward_start_us": 10_000.0,
            "backward_end_us": 25_000.0, "grad_ready_us": [24_000.0, 18_000.0, 13_000.0],
            "optimizer_us": [26_000.0, 2_000.0]}


def _bundle(**changes) -> dict:
    doc = build_allreduce_bundle("pytorch-ddp", {"batch_size": 32, "model": "toy", "world_size": 1},
                                 GRADS, [_step(0), _step(1, 2_000.0)], buckets=[[2, 1], [0]])
    doc.update(changes)
    return doc


@pytest.mark.parametrize("source", ["controller-setting", "interface-speed"])
def test_the_recorded_link_rate_and_its_source_reach_the_profile(source: str) -> None:
    profile = read_allreduce_upload(_bundle(link={"rate_bps": 2.5e9, "source": source}), origin="t")
    assert profile.job.recorded_bandwidth_bps == 2.5e9 and profile.job.recorded_bandwidth_source == source
    named = _bundle(link={"rate_bps": 1e10, "source": "interface-speed", "interface": "eth0"})
    assert read_allreduce_upload(named, origin="t").job.recorded_bandwidth_source == "interface-speed"


def test_a_bundle_without_a_link_rate_records_none_and_version_1_still_loads() -> None:
    assert _bundle()["link"] is None
    profile = read_allreduce_upload(_bundle(), origin="t")
    assert profile.job.recorded_bandwidth_bps is None and profile.job.recorded_bandwidth_source is None
    old = _bundle(version=1)
    del old["link"], old["collectives"]  # a version 1 bundle, as the hooks wrote them before the link rate
    assert read_allreduce_upload(old, origin="t") == profile


def test_the_recorded_collectives_reach_the_profile_and_version_2_still_loads() -> None:
    # the bundle's per-step collectives besides the gradients' become job.collectives, their bytes
    # in order; a version 2 bundle (before the field) and a null both leave it unrecorded (None)
    listed = _bundle(collectives=[{"name": "loss/sum", "bytes": 4}, {"name": "loss/count", "bytes": 8}])
    assert read_allreduce_upload(listed, origin="t").job.collectives == (4, 8)
    assert read_allreduce_upload(_bundle(collectives=[]), origin="t").job.collectives == ()
    profile = read_allreduce_upload(_bundle(), origin="t")
    assert profile.job.collectives is None
    old = _bundle(version=2)
    del old["collectives"]
    assert read_allreduce_upload(old, origin="t") == profile
    # a profile file leaves out collectives it does not know, as written before the field existed
    assert "collectives" not in profile_to_json(profile)["job"]
    assert profile_to_json(read_allreduce_upload(listed, origin="t"))["job"]["collectives"] == [4, 8]


def test_graph_and_times_match_the_hand_built_step() -> None:
    profile = read_allreduce_upload(_bundle(), origin="t")
    assert profile.job.kind is ProgramKind.PYTORCH_DDP and profile.job.batch_size == 32
    names = [op.name for op in profile.ops]
    # segments in ready order c (13 ms), b (18 ms), a (24 ms)
    assert names == ["forward", "backward/0000", "backward/0001", "backward/0002", "backward/tail",
                     "gradient/c", "gradient/b", "gradient/a", "optimizer", "other"]
    ops = {op.name: op for op in profile.ops}
    assert ops["gradient/a"].resource is Resource.UPLINK and ops["gradient/a"].bytes == 4_000_000
    assert ops["gradient/c"].deps == ("backward/0000",)
    assert set(ops["optimizer"].deps) == {"backward/tail", "gradient/a", "gradient/b", "gradient/c"}
    step = profile.steps[0]
    dur = dict(zip(names, step.duration_us))
    # forward 10; segments 3, 5, 6; tail 1; optimizer 2; other = 30 - 25 - 2 = 3 (ms)
    assert [dur[n] for n in ("forward", "backward/0000", "backward/0001", "backward/0002", "backward/tail",
                              "optimizer", "other")] == [10_000, 3_000, 5_000, 6_000, 1_000, 2_000, 3_000]
    assert sum(step.duration_us) == pytest.approx(step.wall_us)
    assert profile.steps[1].wall_us == 32_000 and dict(zip(names, profile.steps[1].duration_us))["other"] == 5_000
    assert profile.job.buckets == (("gradient/c", "gradient/b"), ("gradient/a",))


def _inputs(profile, gbps: float = 10.0) -> ModelInputs:
    return ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=gbps * 1e9))


def test_ring_at_one_worker_is_the_traced_rate() -> None:
    profile = read_allreduce_upload(_bundle(), origin="t")
    model = registry.get("ring-allreduce")
    curve = predict_curve(model, _inputs(profile), registry.params_for(model), CurveSettings(workers=(1,), seed=1))
    # two recorded steps of 30 and 32 ms, drawn at random: 32 examples per 31 ms on average
    assert curve[0].throughput == pytest.approx(32 / 0.031, rel=0.03)


def test_ring_uses_the_recorded_buckets_unless_bucket_mb_is_given() -> None:
    """At W = 2 on 1 Gbit/s (goodput 1, latency 50 us and two-way share 1 given), a flat ring
    moves 2(W-1)/W = 1x each bucket's bytes: bucket {c,b} (3 MB) takes 24 ms + 2 x 50 us, bucket
    {a} (4 MB) 32 ms + 100 us. Step (identical ready times): bucket 1 ready at 18 ms, ends 42.1 ms;
    bucket 2 ready at 24 ms, starts at 42.1, ends 74.2 ms; then optimizer 2 ms and other 3 ms
    (step 0): 79.2 ms. With one 25 MiB bucket instead: all 7 MB ready at 24 ms, 56 ms + 0.1 ms,
    ends 80.1 ms, then 5 ms: 85.1 ms."""
    doc = _bundle()
    doc["steps"] = [_step(0)]
    profile = read_allreduce_upload(doc, origin="t")
    model = registry.get("ring-allreduce")
    inputs = _inputs(profile, gbps=1.0)
    plain = {"latency_s": 50e-6, "two_way_share": 1.0}
    run = model.start(inputs, registry.params_for(model, plain), 2, seed=0)
    ends = run.advance(1).step_ends_s
    assert ends[0][0] == pytest.approx(0.0792, rel=1e-9)
    run = model.start(inputs, registry.params_for(model, {"bucket_mb": 25, **plain}), 2, seed=0)
    assert run.advance(1).step_ends_s[0][0] == pytest.approx(0.0851, rel=1e-9)


@pytest.mark.parametrize("name", ["li2020-des+contention", "li2020-des", "phase-mva", "cynthia", "huang-replay"])
def test_parameter_server_models_refuse_an_allreduce_trace(name: str) -> None:
    profile = read_allreduce_upload(_bundle(), origin="t")
    model = registry.get(name)
    with pytest.raises(ModelInputError, match="pytorch-ddp"):
        model.check(_inputs(profile), registry.params_for(model))


def test_the_default_model_follows_the_profile_kind() -> None:
    assert registry.default_model_for(True) == "ring-allreduce"
    assert registry.default_model_for(False) == registry.DEFAULT_MODEL


def test_a_multi_worker_run_is_refused() -> None:
    doc = _bundle(meta={"batch_size": 32, "world_size": 4})
    with pytest.raises(MultiWorkerTraceError, match="world_size 4"):
        read_allreduce_upload(doc, origin="t")


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(version=5), "version 5 is not supported .this reader reads 1, 2, 3 and 4"),
    (lambda d: (d.update(version=3), d["meta"].update(cpu_s_per_step=0.1)),
     r"unknown meta field\(s\) \['cpu_s_per_step'\] for version 3"),  # came in 4
    (lambda d: d["meta"].update(cpu_s_per_step=-0.1), "meta.cpu_s_per_step should be CPU seconds >= 0"),
    (lambda d: d["meta"].update(cpu_s_per_step="fast"), "meta.cpu_s_per_step"),
    (lambda d: d["meta"].update(cpu_s_per_step=True), "meta.cpu_s_per_step"),
    (lambda d: d["meta"].update(cpu_s_per_step=float("inf")), "meta.cpu_s_per_step"),
    (lambda d: d.update(version=1), r"unknown field\(s\) \['collectives', 'link'\]; a version 1 bundle"),
    (lambda d: d.update(version=2), r"unknown field\(s\) \['collectives'\]; a version 2 bundle"),  # came in 3
    (lambda d: d.update(collectives={"loss": 4}), "collectives should be a list"),
    (lambda d: d.update(collectives=[{"name": "loss/sum"}]), r"collectives\[0\] should be an object"),
    (lambda d: d.update(collectives=[{"name": "", "bytes": 4}]), r"collectives\[0\].name"),
    (lambda d: d.update(collectives=[{"name": "a", "bytes": 4}, {"name": "b", "bytes": 0}]), r"collectives\[1\].bytes"),
    (lambda d: d.update(kind="horovod"), "kind should be one of"),
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d["meta"].update(batch_size=0), "meta.batch_size"),
    (lambda d: d["meta"].update(color="red"), "unknown meta field"),
    (lambda d: d["meta"].update(bucket_cap_bytes=-1), "meta.bucket_cap_bytes"),
    (lambda d: d["meta"].update(bucket_cap_bytes=0), "meta.bucket_cap_bytes"),
    (lambda d: d.update(gradients=[]), "no trainable parameters"),
    (lambda d: d["gradients"][1].update(bytes=-3), r"gradients\[1\].bytes"),
    (lambda d: d["gradients"][1].update(bytes=0), r"gradients\[1\].bytes"),
    (lambda d: d["gradients"][2].update(name="a"), "appears twice"),
    # bucket layouts whose sizes could not add up to the gradients' bytes: a bucket's bytes are
    # its gradients', so each gradient must be placed exactly once, at a real position
    (lambda d: d.update(buckets=[[0, 1]]), "leave out 1 gradient"),  # less than the gradient bytes
    (lambda d: d.update(buckets=[[0, 1, 7]]), "not a gradient position"),
    (lambda d: d.update(buckets=[[0, 0], [1, 2]]), "twice"),  # more than the gradient bytes
    (lambda d: d.update(buckets=[[2, 1], [0, 1]]), "place gradient 1 twice"),
    (lambda d: d.update(buckets=[[-1, 0, 1, 2]]), r"buckets\[0\] holds -1, not a gradient position 0..2"),
    (lambda d: d.update(buckets=[[0, 1, 2], []]), r"buckets\[1\] should be a non-empty list"),
    (lambda d: d.update(buckets=[]), "buckets should be a non-empty list"),
    (lambda d: d.update(buckets=[[0, 1.0, 2]]), "holds 1.0, not a gradient position"),
    (lambda d: d.update(buckets=[[0, True, 2]]), "holds True, not a gradient position"),
    (lambda d: d.update(buckets={"0": [0, 1, 2]}), "buckets should be a non-empty list"),
    (lambda d: d.update(link=100e6), "link should be an object"),
    (lambda d: d.update(link={"rate_bps": 1e8, "source": "controller-setting", "rtt_s": 1}), r"unknown link field"),
    (lambda d: d.update(link={"rate_bps": -1e8, "source": "controller-setting"}), "link.rate_bps .* > 0, found -1"),
    (lambda d: d.update(link={"rate_bps": 0, "source": "controller-setting"}), "link.rate_bps"),
    (lambda d: d.update(link={"rate_bps": True, "source": "controller-setting"}), "link.rate_bps"),
    (lambda d: d.update(link={"rate_bps": float("inf"), "source": "controller-setting"}), "link.rate_bps"),
    (lambda d: d.update(link={"source": "controller-setting"}), "link.rate_bps"),
    (lambda d: d.update(link={"rate_bps": 1e8, "source": "guess"}), "link.source should be one of"),
    (lambda d: d.update(link={"rate_bps": 1e8}), "link.source should be one of"),
    (lambda d: d.update(link={"rate_bps": 1e8, "source": "interface-speed", "interface": ""}), "link.interface"),
    (lambda d: d.update(steps=[]), "no step was traced"),
    (lambda d: d["steps"][1].pop("wall_us"), r"steps\[1\] lacks \['wall_us'\]"),
    (lambda d: d["steps"][0].update(grad_ready_us=[1.0]), "should list 3 times"),
    (lambda d: d["steps"][0]["grad_ready_us"].__setitem__(0, 40_000.0), "outside backward"),
    (lambda d: d["steps"][0].update(backward_end_us=5_000.0), "before it starts"),
    (lambda d: d["steps"][0].update(optimizer_us=[20_000.0, 1.0]), "before backward ends"),
    (lambda d: d["steps"][0].update(wall_us=26_000.0), "more than the step's wall_us"),
    (lambda d: d["steps"][0].update(wall_us=float("nan")), "finite number"),
])
def test_each_defect_names_its_place(mutate, message: str) -> None:
    doc = copy.deepcopy(_bundle())
    mutate(doc)
    with pytest.raises(TraceImportError, match=message):
        read_allreduce_upload(doc, origin="upload x")


def test_fuzzed_bundles_give_import_errors_only() -> None:
    """Random deletions, type swaps and value changes anywhere in the document: the reader either
    returns a profile or raises TraceImportError/ProfileError, never anything else."""
    rng = random.Random(7)
    base = _bundle()
    junk = [None, -1, 0, 1.5, "x", [], {}, [1, 2], {"a": 1}, True, float("inf")]

    def paths(node, prefix=()):
        yield prefix
        if isinstance(node, dict):
            for k, v in node.items():
                yield from paths(v, (*prefix, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from paths(v, (*prefix, i))

    every = [p for p in paths(base) if p]
    for _ in range(600):
        doc = copy.deepcopy(base)
        path = rng.choice(every)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.3 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(junk)
        try:
            read_allreduce_upload(doc, origin="fuzz")
        except (TraceImportError, ProfileError):
            pass


def test_the_measured_cpu_per_step_reaches_the_profile_and_version_3_still_loads() -> None:
    # meta.cpu_s_per_step (the hook's CPU seconds per untraced step) becomes job.cpu_s_per_step;
    # absent, null or a version 3 bundle leave it unmeasured (None), and a profile file without it
    # is written as before the field
    measured = _bundle()
    measured["meta"]["cpu_s_per_step"] = 0.0725
    profile = read_allreduce_upload(measured, origin="t")
    assert profile.job.cpu_s_per_step == 0.0725
    assert profile_to_json(profile)["job"]["cpu_s_per_step"] == 0.0725
    plain = read_allreduce_upload(_bundle(), origin="t")
    assert plain.job.cpu_s_per_step is None and "cpu_s_per_step" not in profile_to_json(plain)["job"]
    assert read_allreduce_upload(_bundle(version=3), origin="t") == plain
    with pytest.raises(ValueError, match="meta.cpu_s_per_step should be CPU seconds >= 0"):
        build_allreduce_bundle("tf-mwms", {"batch_size": 32, "world_size": 1, "cpu_s_per_step": -1.0},
                               GRADS, [_step(0)])
    with pytest.raises(ValueError, match=r"unknown meta field\(s\) \['cpus'\]"):
        build_allreduce_bundle("tf-mwms", {"batch_size": 32, "world_size": 1, "cpus": 2}, GRADS, [_step(0)])


def test_dispatch_and_round_trip_through_the_encoded_bytes() -> None:
    import gzip

    raw = encode_allreduce_bundle(_bundle())
    assert raw == encode_allreduce_bundle(_bundle())  # deterministic bytes
    doc = json.loads(gzip.decompress(raw))
    assert profile_from_upload(doc, origin="t") == read_allreduce_upload(_bundle(), origin="t")
    with pytest.raises(TraceImportError, match="expected one of"):
        profile_from_upload({"format": "nope"}, origin="t")


def test_builder_refuses_what_the_importer_would() -> None:
    for link in ({"rate_bps": 0, "source": "controller-setting"}, {"rate_bps": 1e9, "source": "guess"},
                 {"rate_bps": 1e9, "source": "interface-speed", "speed": 1}):
        with pytest.raises(ValueError, match="link should be"):
            build_allreduce_bundle("pytorch-ddp", {}, GRADS, [_step(0)], link=link)
    with pytest.raises(ValueError, match="kind"):
        build_allreduce_bundle("horovod", {}, GRADS, [_step(0)])
    with pytest.raises(ValueError, match="gradient ready times"):
        bad = _step(0)
        bad["grad_ready_us"] = [1.0]
        build_allreduce_bundle("tf-mwms", {}, GRADS, [bad])
