"""A small PromQL reader: which metric names and label names an expression uses, and the two sides
of an alert's comparison.

Enough for dashboards and alert rules, not a full parser: it tokenizes (strings, ranges in
brackets, durations, numbers, identifiers, punctuation) and classifies each identifier by its context: a
name followed by ``(`` (or by ``by``/``without``) is a function or aggregation, names inside ``{...}`` before a matcher
operator are labels, names in the parentheses after ``by``, ``without``, ``on``, ``ignoring``,
``group_left`` and ``group_right`` are labels, keywords are keywords, and every other name is a
metric. ``{__name__="x"}`` counts x as a metric. Grafana's template variables are substituted
first (``substitute``), since ``$__rate_interval`` is not PromQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})
COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "or", "unless"})
LABEL_LIST_MODIFIERS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<range>\[[^\]]*\])
      | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![a-zA-Z0-9_:]))
      | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
      | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


class PromQLSyntaxError(ValueError):
    pass


@dataclass
class Names:
    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace Grafana variables ($x, ${x}, ${x:fmt}, [[x]]); unknown ones are an error."""

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in variables:
            raise KeyError(f"no value for Grafana variable ${name} in {expr!r}")
        return variables[name]

    return _VARIABLE.sub(value, expr)


def tokenize(expr: str) -> list[tuple[str, str]]:
    return [(kind, text) for kind, text, _ in _spans(expr)]


def _spans(expr: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) of each token, spaces left out."""
    tokens, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromQLSyntaxError(f"cannot read {expr[pos:pos + 20]!r} in {expr!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group(), pos))
        pos = match.end()
    return tokens


def comparison_operands(expr: str) -> tuple[str, str] | None:
    """The two sides of ``expr`` when it is a comparison (``a > on (x) b``, ``(a or b) < 1``), else None.

    An alert is its expression filtered by a threshold; its left side is the measured quantity.
    Only a comparison at the top (outside any parentheses or braces) counts, and only when no
    ``and``/``or``/``unless`` follows it, since those bind more loosely and would make the
    comparison one operand of a larger expression.
    """
    depth, split = 0, None
    for kind, text, pos in _spans(expr):
        if text in ("(", "{"):
            depth += 1
        elif text in (")", "}"):
            depth -= 1
        elif depth == 0 and split is None and text in COMPARISONS:
            split = (pos, pos + len(text))
        elif depth == 0 and split is not None and kind == "ident" and text.lower() in SET_OPERATORS:
            return None
    if split is None:
        return None
    return expr[:split[0]].strip(), expr[split[1]:].strip()


def names(expr: str) -> Names:
    """The metric, label and function names ``expr`` uses."""
    tokens = tokenize(expr)
    found = Names()
    braces = 0  # depth of {...}
    label_list = False  # inside the (...) after by/without/on/...
    for i, (kind, text) in enumerate(tokens):
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if text == "{":
            braces += 1
        elif text == "}":
            braces -= 1
        elif text == ")" and label_list:
            label_list = False
        elif kind == "ident":
            if braces:
                found.labels.add(text)
                if text == "__name__" and nxt == "=" and i + 2 < len(tokens) and tokens[i + 2][0] == "string":
                    found.metrics.add(tokens[i + 2][1][1:-1])
            elif label_list:
                found.labels.add(text)
            elif text in LABEL_LIST_MODIFIERS:
                label_list = nxt == "("
            elif nxt == "(" or nxt in ("by", "without"):  # a function, or `sum by (x) (...)`
                found.functions.add(text)
            elif text.lower() not in KEYWORDS:
                found.metrics.add(text)
    if braces:
        raise PromQLSyntaxError(f"unbalanced braces in {expr!r}")
    return found


def label_values_query(query: str) -> tuple[str | None, str]:
    """Grafana's ``label_values(selector, label)`` or ``label_values(label)``: (selector, label)."""
    match = re.fullmatch(r"\s*label_values\((?:(?P<selector>.+),)?\s*(?P<label>\w+)\s*\)\s*", query)
    if match is None:
        raise PromQLSyntaxError(f"not a label_values() query: {query!r}")
    selector = match.group("selector")
    return (selector.strip() if selector else None), match.group("label")
