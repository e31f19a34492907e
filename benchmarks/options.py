"""Command-line options several benchmarks share: one definition, so they read alike."""

from __future__ import annotations

import argparse

from advisor.core.sim_types import StreamOrder


def add_order_option(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--order``: the simulation's stream order (``fifo``, the default, or another
    ``StreamOrder`` but ``custom``, which needs the streams named; docs/accuracy.md, one worker),
    read back with ``StreamOrder(args.order)``."""
    parser.add_argument("--order", choices=[o.value for o in StreamOrder if o is not StreamOrder.CUSTOM],
                        default=StreamOrder.FIFO.value,
                        help=f"the simulation's stream order{what} (default fifo; docs/accuracy.md, one worker)")
