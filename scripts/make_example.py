"""Regenerate the bundled example profile from the repository's testbed trace.

    python scripts/make_example.py [TRACE]

TRACE defaults to ``tests/data/ps-async/condensed/cubic/mlp_bw100.json.gz``: the MLP of the
testbed (1 PS, 1 worker, TCP cubic, PS link shaped to 100 Mbit/s, batch 32, 100 fully traced
steps), converted to the project's own format so the installed package can demonstrate itself
without the test data.
"""

from __future__ import annotations

import sys
from pathlib import Path

from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import write_profile

TRACE = Path(__file__).resolve().parents[1] / "tests/data/ps-async/condensed/cubic/mlp_bw100.json.gz"
SOURCE = "tests/data/ps-async/condensed/cubic/mlp_bw100 (tbf 100 Mbit/s, cubic)"  # what the example says it is


def main(source: Path) -> None:
    profile = load_profile(source, bandwidth_bps=100e6)
    job = profile.job.model_copy(update={"source": SOURCE})
    write_profile(profile.model_copy(update={"job": job}), BUNDLED_EXAMPLE)
    print(f"wrote {BUNDLED_EXAMPLE} ({BUNDLED_EXAMPLE.stat().st_size} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else TRACE)
