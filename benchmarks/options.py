"""Command-line options several benchmarks share: one definition, so they read alike."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from advisor.core.sim_types import StreamOrder


def add_order_option(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--order``: the simulation's stream order (``fifo``, the default, or another
    ``StreamOrder`` but ``custom``, which needs the streams named; docs/accuracy.md, one worker),
    read back with ``StreamOrder(args.order)``."""
    parser.add_argument("--order", choices=[o.value for o in StreamOrder if o is not StreamOrder.CUSTOM],
                        default=StreamOrder.FIFO.value,
                        help=f"the simulation's stream order{what} (default fifo; docs/accuracy.md, one worker)")


def add_param_option(parser: argparse.ArgumentParser) -> None:
    """``--param K=V`` (repeatable): a model parameter for every prediction, read back with
    ``model_params(args.param)``."""
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="a model parameter for every prediction (a number, true/false or a string)")


def model_params(given: Sequence[str]) -> dict[str, Any]:
    """``--param`` values: JSON where they parse (0.85, true), else the string; the model's
    ``Params`` validates them."""
    params: dict[str, Any] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--param {item!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params
