"""``scan_object`` against the independent truth of ``json.loads``: same value, same verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.importers.json_scan import JSONScanError, LazyArray, scan_object

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)
objects = st.dictionaries(st.sampled_from(["steps", "meta", "a", "", "\u00e9\\\""]), values, max_size=5)


def plain(value: Any) -> Any:
    """A scanned object with its lazy arrays read out, to compare with json.loads."""
    if isinstance(value, LazyArray):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def loads_object(text: str) -> dict[str, Any] | None:
    """json.loads's verdict on the same text (None: it refuses, or it is not an object)."""
    try:
        value = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@settings(max_examples=300, deadline=None)
@given(objects, st.sampled_from([None, 0, 1, 2]), st.sampled_from(["steps", "meta", None]))
def test_same_value_as_json_loads_with_any_spacing(obj: dict[str, Any], indent: int | None, lazy: str | None) -> None:
    text = json.dumps(obj, indent=indent, ensure_ascii=indent == 1)
    scanned = scan_object(text, lazy=lazy)
    assert plain(scanned) == json.loads(text)
    if lazy in obj and isinstance(obj[lazy], list):
        assert isinstance(scanned[lazy], LazyArray) and len(scanned[lazy]) == len(obj[lazy])
        assert scanned[lazy][1:] == obj[lazy][1:]  # slices and indexing decode too


@settings(max_examples=500, deadline=None)
@given(objects, st.integers(min_value=0), st.sampled_from(["", ",", "]", "}", "x", "NaN", "\"", " ", "[", ":"]))
def test_refuses_exactly_what_json_loads_refuses(obj: dict[str, Any], at: int, inserted: str) -> None:
    text = json.dumps({"steps": [obj, obj], **obj})
    at %= len(text) + 1
    broken = text[:at] + inserted + text[at:]
    truth = loads_object(broken)
    if truth is None:
        with pytest.raises(JSONScanError):
            scan_object(broken, lazy="steps")
    else:
        assert plain(scan_object(broken, lazy="steps")) == truth


@pytest.mark.parametrize(("text", "words"), [
    ("[1, 2]", "must be a JSON object, not an array"),
    ('"s"', "not a string"),
    ("3", "not a number"),
    ('{"a": 1} {}', "Extra data"),
    ('{"steps": [1, 2,]}', "is not valid JSON"),
    ('{"steps": [NaN]}', "NaN is not standard JSON"),
    ('{"a": -Infinity}', "Infinity is not standard JSON"),
    ('{"steps": ' + "[" * 30_000 + "]" * 30_000 + "}", "nested too deeply"),
    ("", "is not valid JSON"),
])
def test_errors_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(JSONScanError, match=words):
        scan_object(text, lazy="steps")


def test_duplicate_keys_keep_the_last_like_json() -> None:
    text = '{"steps": [1], "steps": [2, 3]}'
    assert plain(scan_object(text, lazy="steps")) == json.loads(text) == {"steps": [2, 3]}


def test_a_lazy_field_that_is_not_an_array_is_decoded_as_usual() -> None:
    assert scan_object('{"steps": {"a": [1]}}', lazy="steps") == {"steps": {"a": [1]}}


def test_elements_are_not_kept_once_read() -> None:
    """The point of the module: the array caches no decoded element, so each read one can be freed."""
    steps = scan_object(json.dumps({"steps": [{"n": i} for i in range(3)]}), lazy="steps")["steps"]
    assert [s["n"] for s in steps] == [0, 1, 2]
    assert steps[0] == steps[0] and steps[0] is not steps[0]  # decoded afresh on every read
    assert all(isinstance(v, (str, list, json.JSONDecoder)) for v in vars(steps).values())
    assert all(isinstance(start, int) for start in steps._starts)
