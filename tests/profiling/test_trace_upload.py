"""The upload bundle: built by the recorder's functions, read by the controller's importer.

Independent truth: a ``tests/data/ps-async/tf-native/<run>`` directory, read by the existing loader.
A bundle made of that directory's ``runmetadata.jsonl.gz`` lines (decoded with plain ``json``)
and its ``meta.json`` must give the same profile; only ``job.source`` differs, by design (it
names the file the profile came from).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.core.profile import Profile
from advisor.errors import MissingTraceDataError, MultiWorkerTraceError, TraceFormatError, TraceImportError
from advisor.importers.loader import load_profile
from advisor.importers.tf_profile import build_profile_from_trace
from advisor.importers.trace_upload import (
    BundleTooLargeError,
    decode_trace_upload,
    read_trace_upload,
    read_trace_upload_bytes,
)
from advisor.profiling import build_bundle, encode_bundle, encode_steps
from tests.conftest import ps_async_data

NATIVE_RUNS = ("mlp_bw100", "mlp_bw50", "cnn_bw100", "cnn_bw50")


def _native(run: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    folder = ps_async_data("tf-native", run)
    lines = gzip.decompress((folder / "runmetadata.jsonl.gz").read_bytes()).decode().splitlines()
    return [json.loads(line) for line in lines if line.strip()], json.loads((folder / "meta.json").read_text())


def _without_source(profile: Profile) -> Profile:
    return profile.model_copy(update={"job": profile.job.model_copy(update={"source": None})})


@pytest.fixture(scope="module")
def mlp() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return _native("mlp_bw100")


@pytest.fixture(scope="module")
def small_bundle(mlp: tuple[list[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Three steps of the real mlp run (client times cut to match): small enough to mutate."""
    docs, meta = mlp
    return build_bundle(docs[:3], {**meta, "client_steps_us": meta["client_steps_us"][:3]})


# --- equality with the tf-native directory ----------------------------------------------------


@pytest.mark.parametrize("run", NATIVE_RUNS)
def test_bundle_of_a_native_run_gives_the_same_profile(run: str, tmp_path: Path) -> None:
    docs, meta = _native(run)
    body = encode_bundle(build_bundle(docs, meta))
    from_bytes = build_profile_from_trace(read_trace_upload_bytes(body, origin="POST /v1/traces/ns/job/1"))
    path = tmp_path / "upload.json.gz"
    path.write_bytes(body)
    from_file = load_profile(path)  # the loader recognises a bundle file by its format field
    native = load_profile(ps_async_data("tf-native", run))
    assert _without_source(from_bytes) == _without_source(native)
    assert from_file == native.model_copy(update={"job": native.job.model_copy(update={"source": "upload.json.gz"})})
    assert len(native.steps) + native.job.skipped_steps == len(docs) == 100


def test_round_trip_keeps_graphs_on_the_first_step_only(mlp: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    docs, meta = mlp
    with_graphs = [docs[0], docs[1], {**docs[2], "partitionGraphs": docs[0]["partitionGraphs"]}]
    bundle = build_bundle(with_graphs, meta)
    decoded = decode_trace_upload(encode_bundle(bundle), origin="x")
    assert decoded == bundle
    assert ["partitionGraphs" in d for d in decoded["runmetadata"]] == [True, False, False]
    assert (decoded["format"], decoded["version"], decoded["meta"]) == ("advisor-trace-upload", 1, meta)


def test_encoding_is_deterministic_and_streaming_matches(small_bundle: dict[str, Any]) -> None:
    body = encode_bundle(small_bundle)
    assert body == encode_bundle(json.loads(json.dumps(small_bundle)))
    assert body == encode_steps(small_bundle["runmetadata"], small_bundle["meta"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
step_docs = st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=4), min_size=1, max_size=4)


@given(steps=step_docs, meta=st.dictionaries(st.text(max_size=8), json_values, max_size=4))
@settings(max_examples=150, deadline=None)
def test_any_json_round_trips_and_both_encoders_agree(steps: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    bundle = build_bundle(steps, meta)
    body = encode_bundle(bundle)
    assert body == encode_steps(steps, meta)
    assert json.loads(gzip.decompress(body)) == json.loads(json.dumps(bundle))


def test_a_bundle_needs_a_step() -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_bundle([], {})
    with pytest.raises(ValueError, match="at least one"):
        encode_steps(iter([]), {})


# --- malformed bundles fail with our errors, naming the problem ---------------------------------


def _mutated(bundle: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**bundle, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"format": "advisor-profile"}, TraceFormatError, "format 'advisor-profile'"),
        ({"format": _DROP}, TraceFormatError, "no format field"),
        ({"version": 2}, TraceFormatError, "version 2 is not supported"),
        ({"version": "1"}, TraceFormatError, "version should be an integer"),
        ({"version": True}, TraceFormatError, "version should be an integer"),
        ({"extra": 1}, TraceFormatError, "unknown field(s) ['extra']"),
        ({"meta": _DROP}, MissingTraceDataError, "no meta"),
        ({"meta": [1]}, TraceFormatError, "meta should be an object"),
        ({"runmetadata": _DROP}, MissingTraceDataError, "no runmetadata"),
        ({"runmetadata": []}, MissingTraceDataError, "runmetadata is empty"),
        ({"runmetadata": {"a": 1}}, TraceFormatError, "runmetadata should be a list"),
        ({"runmetadata": [{}, [], {}]}, TraceFormatError, "runmetadata[1] should be an object"),
        (
            {"runmetadata": [{}, {}, {"stepStats": {"devStats": 1}}]},
            TraceFormatError,
            "runmetadata[2].stepStats.devStats should be a list",
        ),
    ],
)
def test_malformed_bundles_name_the_problem(
    small_bundle: dict[str, Any], changes: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as caught:
        read_trace_upload(_mutated(small_bundle, **changes), origin="upload-1")
    assert str(caught.value).startswith("upload-1: ")
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("meta_changes", "error", "words"),
    [
        ({"batch": "many"}, TraceFormatError, "meta.batch should be an integer"),
        ({"bw_mbit": [100]}, TraceFormatError, "meta.bw_mbit should be a number"),
        ({"variables": [{"name": "w", "bytes": "x"}]}, TraceFormatError, "meta.variables[0].bytes"),
        ({"client_steps_us": [[1, 2]]}, TraceFormatError, "lists 1 steps but runmetadata holds 3"),
        ({"client_steps_us": [[1], [2], [3]]}, TraceFormatError, "meta.client_steps_us[0] should be"),
        ({"untraced_steps_us": [[5, 9], [9, 4]]}, TraceFormatError, "meta.untraced_steps_us[1] ends (4) before it"),
        ({"untraced_steps_us": {"a": 1}}, TraceFormatError, "meta.untraced_steps_us should be a list"),
        ({"n_workers": 2}, MultiWorkerTraceError, "recorded with 2 workers"),
        ({"n_workers": "1"}, TraceFormatError, "meta.n_workers should be a whole number"),
    ],
)
def test_bad_meta_values_name_the_field(
    small_bundle: dict[str, Any], meta_changes: dict[str, Any], error: type[Exception], words: str
) -> None:
    bundle = {**small_bundle, "meta": {**small_bundle["meta"], **meta_changes}}
    with pytest.raises(error) as caught:
        read_trace_upload(bundle, origin="upload-1")
    assert words in str(caught.value)


def test_a_zero_length_untraced_step_is_refused_when_the_profile_is_built(small_bundle: dict[str, Any]) -> None:
    bundle = {**small_bundle, "meta": {**small_bundle["meta"], "untraced_steps_us": [[5, 9], [9, 9]]}}
    with pytest.raises(TraceFormatError, match=r"untraced_walls_us\[1\] is 0.0 us"):
        build_profile_from_trace(read_trace_upload(bundle, origin="u"))


def test_missing_batch_is_refused_when_the_profile_is_built(small_bundle: dict[str, Any]) -> None:
    meta = {k: v for k, v in small_bundle["meta"].items() if k not in ("batch", "model_cfg")}
    records = read_trace_upload({**small_bundle, "meta": meta}, origin="u")
    with pytest.raises(MissingTraceDataError, match="batch size"):
        build_profile_from_trace(records)


def test_no_partition_graphs_is_missing_data(small_bundle: dict[str, Any]) -> None:
    steps = [{k: v for k, v in d.items() if k != "partitionGraphs"} for d in small_bundle["runmetadata"]]
    with pytest.raises(MissingTraceDataError, match="output_partition_graphs"):
        read_trace_upload({**small_bundle, "runmetadata": steps}, origin="u")


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (lambda b: b[: len(b) // 2], TraceFormatError, "truncated gzip"),
        (lambda b: b[:10] + b"\x00" * 40 + b[50:], TraceFormatError, "gzip"),
        (lambda b: b + b"junk", TraceFormatError, "stray bytes"),
        (lambda b: gzip.compress(b"[1, 2"), TraceFormatError, "not valid JSON"),
        (lambda b: gzip.compress(b"{\"a\": \"\xff\"}"), TraceFormatError, "not UTF-8"),
        (lambda b: gzip.compress(b"[" * 100_000), TraceFormatError, "nested too deeply"),
        (lambda b: gzip.compress(b"[1]"), TraceFormatError, "should be a JSON object"),
        (lambda b: b"", TraceFormatError, "not valid JSON"),
    ],
)
def test_bad_bytes_are_format_errors(
    small_bundle: dict[str, Any], body: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as caught:
        read_trace_upload_bytes(body(encode_bundle(small_bundle)), origin="req")
    assert words in str(caught.value)


def test_oversize_is_refused_before_it_is_inflated(small_bundle: dict[str, Any]) -> None:
    body = encode_bundle(small_bundle)
    size = len(gzip.decompress(body))
    assert read_trace_upload_bytes(body, origin="req", max_bytes=size).steps  # exactly at the cap: fine
    with pytest.raises(BundleTooLargeError, match=f"more than {size - 1} bytes"):
        read_trace_upload_bytes(body, origin="req", max_bytes=size - 1)
    bomb = gzip.compress(b" " * 50_000_000)  # 50 MB of blanks in about 50 kB
    with pytest.raises(BundleTooLargeError):
        decode_trace_upload(bomb, origin="req", max_bytes=1_000_000)
    with pytest.raises(BundleTooLargeError):  # plain JSON is capped too
        decode_trace_upload(json.dumps(small_bundle).encode(), origin="req", max_bytes=100)


def test_plain_json_bodies_are_read_too(small_bundle: dict[str, Any]) -> None:
    records = read_trace_upload_bytes(json.dumps(small_bundle).encode(), origin="req")
    assert len(records.steps) == 3


@st.composite
def _mutations(draw: st.DrawFn, bundle: dict[str, Any]) -> Any:
    """The bundle with one value somewhere replaced by arbitrary JSON."""
    doc = json.loads(json.dumps(bundle))
    node: Any = doc
    for _ in range(draw(st.integers(0, 6))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], (dict, list)) or not node[key]:
                break
            node = node[key]
        elif isinstance(node, list) and node:
            child = node[draw(st.integers(0, len(node) - 1))]
            if not isinstance(child, (dict, list)) or not child:
                break
            node = child
    replacement = draw(json_values)
    if isinstance(node, dict) and node:
        node[draw(st.sampled_from(sorted(node)))] = replacement
    elif isinstance(node, list) and node:
        node[draw(st.integers(0, len(node) - 1))] = replacement
    return doc


@pytest.fixture(scope="module")
def tiny_bundle(small_bundle: dict[str, Any]) -> dict[str, Any]:
    return {**small_bundle, "runmetadata": small_bundle["runmetadata"][:2], "meta": {
        **small_bundle["meta"], "client_steps_us": small_bundle["meta"]["client_steps_us"][:2]}}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutated_bundle_fails_only_with_our_errors(tiny_bundle: dict[str, Any], data: st.DataObject) -> None:
    doc = data.draw(_mutations(tiny_bundle))
    try:
        build_profile_from_trace(read_trace_upload(doc, origin="fuzz"))
    except TraceImportError as exc:
        assert str(exc)
