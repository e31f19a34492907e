"""Compile the simulation engine into a numba cache directory (what the image build runs).

    python3 scripts/build_numba_cache.py DIR      # same as: python -m advisor.jit_cache build DIR
"""

import sys

from advisor.jit_cache import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
