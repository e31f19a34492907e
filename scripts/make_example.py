"""Regenerate the bundled example profile from the shared testbed trace.

    python scripts/make_example.py ../shared/data/condensed/cubic/mlp_bw100.json.gz

The example is the MLP of ``shared/data`` (1 PS, 1 worker, TCP cubic, PS link shaped to
100 Mbit/s, batch 32, 100 fully traced steps), converted to the project's own format so the
installed package can demonstrate itself without ``shared/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import write_profile


def main(source: str) -> None:
    profile = load_profile(Path(source), bandwidth_bps=100e6)
    job = profile.job.model_copy(update={"source": "shared/data/condensed/cubic/mlp_bw100 (tbf 100 Mbit/s, cubic)"})
    write_profile(profile.model_copy(update={"job": job}), BUNDLED_EXAMPLE)
    print(f"wrote {BUNDLED_EXAMPLE} ({BUNDLED_EXAMPLE.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
