"""The three patch formats of a PATCH request, applied to plain JSON values.

- ``application/merge-patch+json``: RFC 7386 (null deletes a key, objects merge, lists replace).
- ``application/json-patch+json``: RFC 6902 (add/remove/replace/move/copy/test by JSON pointer).
- ``application/strategic-merge-patch+json``: only for built-in kinds; here merge-like, which is
  what it does for every field without a ``patchMergeKey``. It does not merge keyed lists
  (containers by name...), nor honour ``$patch`` directives: no test here relies on them.

Errors are the apiserver's: an undecodable patch is 400 BadRequest; a JSON patch that does not
apply is 422 with the json-patch library's words as the cause (handlers/patch.go).
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kube_emulator.status import ApiError, bad_request


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, returning a new value (``target`` is left untouched)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _rejected(why: str) -> ApiError:
    return ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                    {"causes": [{"message": why}]})


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, op: str, path: str, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit():
        raise _rejected(f"{op} operation does not apply: doc is missing path: {path}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise _rejected(f"{op} operation does not apply: doc is missing path: {path}")
    return idx


def _parent(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _rejected(f"{op} operation does not apply: doc is missing path: {path}")
    return node


def _get(doc: Any, path: str, op: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, op, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, op, path, allow_end=False)]
    raise _rejected(f"{op} operation does not apply: doc is missing key: {path}")


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, op, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, op, path, allow_end=True), value)
    else:
        raise _rejected(f"{op} operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> Any:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, op, path), tokens[-1] if tokens else ""
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, op, path, allow_end=False)]
    else:
        raise _rejected(f"{op} operation does not apply: doc is missing key: {path}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902, returning a new value."""
    if not isinstance(ops, list) or not all(isinstance(o, dict) and "op" in o and "path" in o for o in ops):
        raise bad_request("json: cannot unmarshal the patch: expected a list of operations with 'op' and 'path'")
    doc = copy.deepcopy(target)
    for o in ops:
        kind, path = o["op"], o["path"]
        if kind in ("add", "replace", "test") and "value" not in o:
            raise bad_request(f"{kind} operation is missing its value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(o["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path, "replace")
            doc = _add(_remove(doc, path, "replace"), path, copy.deepcopy(o["value"]), "replace") if _pointer(path) else copy.deepcopy(o["value"])
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, o.get("from", ""), kind))
            if kind == "move":
                doc = _remove(doc, o.get("from", ""), kind)
            doc = _add(doc, path, value, kind)
        elif kind == "test":
            if _get(doc, path, "test") != o["value"]:
                raise _rejected(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc
