"""A JSON object whose one big array field is decoded an element at a time, when it is read.

Why: a trace upload is one JSON object of a few fields and one array of ~100 traced steps that
makes up nearly all of its bytes. ``json.loads`` would build every step's objects at once
(about five times the text's size); the importer reads the steps one by one, so here the
array's elements are decoded lazily from the text, and each can be freed once read. The
controller then holds the text and one step at a time, not the whole tree.

Semantics are ``json.loads``'s, with the standard library's own decoder doing every value:
the whole text is checked up front (each element of the lazy array is decoded once, and
dropped, to find where it ends), duplicate keys keep the last value, nothing may follow the
object, and NaN/Infinity are refused as they are not standard JSON. Errors are
``JSONScanError`` with the messages ``json`` gives, worded to follow a subject ("the body
is not valid JSON: ...", "the body must be a JSON object, not an array").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from json.decoder import JSONDecodeError
from typing import Any, overload

_WS = re.compile(r"[ \t\n\r]*")
# json's own string scanner (C when available); public at run time, absent from the type stubs
scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")


class JSONScanError(ValueError):
    """The text is not one JSON object (the message says what is wrong, and where)."""


class LazyArray(Sequence[Any]):
    """The elements of a JSON array, each decoded from the text when it is read."""

    def __init__(self, text: str, starts: list[int], decoder: json.JSONDecoder) -> None:
        self._text, self._starts, self._decoder = text, starts, decoder

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._decode(start) for start in self._starts[index]]
        return self._decode(self._starts[index])

    def __iter__(self) -> Iterator[Any]:
        for start in self._starts:
            yield self._decode(start)

    def __repr__(self) -> str:
        return f"LazyArray({len(self)} elements)"

    def _decode(self, start: int) -> Any:
        return self._decoder.raw_decode(self._text, start)[0]  # checked by scan_object already


def scan_object(text: str, *, lazy: str | None = None) -> dict[str, Any]:
    """Decode a JSON object; the field named ``lazy``, if it holds an array, becomes a ``LazyArray``."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    try:
        return _scan(text, lazy, decoder)
    except RecursionError:
        raise JSONScanError("is not usable JSON: nested too deeply") from None
    except JSONDecodeError as exc:
        raise JSONScanError(f"is not valid JSON: {exc}") from None
    except ValueError as exc:  # NaN / Infinity
        raise JSONScanError(f"is not valid JSON: {exc}") from None


def _scan(text: str, lazy: str | None, decoder: json.JSONDecoder) -> dict[str, Any]:
    i = _skip(text, 0)
    if text[i:i + 1] != "{":
        value = decoder.decode(text)  # not an object: let json name the error, or say what it is
        raise JSONScanError(f"must be a JSON object, not {_kind(value)}")
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i:i + 1] != '"':
                raise JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            key, i = scanstring(text, i + 1)
            i = _skip(text, i)
            if text[i:i + 1] != ":":
                raise JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _skip(text, i + 1)
            if key == lazy and text[i:i + 1] == "[":
                out[key], i = _lazy_array(text, i, decoder)
            else:
                out[key], i = decoder.raw_decode(text, i)
            i = _skip(text, i)
            separator = text[i:i + 1]
            if separator == "}":
                i += 1
                break
            if separator != ",":
                raise JSONDecodeError("Expecting ',' delimiter", text, i)
            i = _skip(text, i + 1)
    end = _skip(text, i)
    if end != len(text):
        raise JSONDecodeError("Extra data", text, end)
    return out


def _lazy_array(text: str, i: int, decoder: json.JSONDecoder) -> tuple[LazyArray, int]:
    """``text[i]`` is ``[``: where each element starts (each decoded once and dropped), and the end."""
    starts: list[int] = []
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return LazyArray(text, starts, decoder), i + 1
    while True:
        starts.append(i)
        _, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        separator = text[i:i + 1]
        if separator == "]":
            return LazyArray(text, starts, decoder), i + 1
        if separator != ",":
            raise JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _skip(text, i + 1)


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match else i


def _kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not standard JSON")
