"""The ``advisor`` command (console script) and ``python -m advisor``: the command line of
``advisor/cli.py``, started with Python's cyclic garbage collector paused during its imports.

The imports (numpy, pydantic, numba's core, the models) make some 300,000 objects and no
garbage, and the collector's passes over them cost about a tenth of a second of every
command's start-up, which is serial: a curve's pool of processes starts only after it
(``benchmarks/bench_command.py``). After the imports the collector is back on, with what they
made *frozen* (``gc.freeze``: never scanned again, in this process or in the forked ones).
``advisor.cli`` itself stays free of this process-wide switch, for code that imports it.
"""

from __future__ import annotations

import gc
import sys


def main() -> int:
    was = gc.isenabled()
    gc.disable()
    try:
        from advisor.cli import main as cli_main
    finally:
        gc.freeze()
        if was:
            gc.enable()
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
