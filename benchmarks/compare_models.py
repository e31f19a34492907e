"""Every registered model against the testbed's measured throughput: median and max |error| per
trace, the table in docs/models.md and the README.

For each measured run in ``tests/data/ps-async/measured`` it predicts from the matching 1-worker trace
(``condensed/<cc>/<model>_bw100``; the 20 ms-queue run uses the cubic trace) with every model's
default parameters, except that the contention model is told the run's congestion control and
queue, as its user would. Run: ``python3 -m benchmarks.compare_models [--markdown]``.
"""

from __future__ import annotations

import argparse
import statistics

from advisor.core.advice import AdviceRequest, ModelChoice
from advisor.core.compare import compare, errors
from advisor.core.curve import CurveSettings
from advisor.core.models import registry
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from advisor.importers.observed import read_observed
from benchmarks.paths import PS_ASYNC_DATA

# measured file, trace, congestion control and queue as its user would state them
RUNS = (
    ("cubic/mlp_bw100.json", "cubic/mlp_bw100.json.gz", "cubic", 0.1),
    ("cubic/mlp_bw100_repeat.json", "cubic/mlp_bw100.json.gz", "cubic", 0.1),
    ("cubic/cnn_bw100.json", "cubic/cnn_bw100.json.gz", "cubic", 0.1),
    ("bbr/mlp_bw100.json", "bbr/mlp_bw100.json.gz", "bbr", None),
    ("bbr/mlp_bw100_repeat.json", "bbr/mlp_bw100.json.gz", "bbr", None),
    ("bbr/cnn_bw100.json", "bbr/cnn_bw100.json.gz", "bbr", None),
    ("cubic_q20ms/mlp_bw100.json", "cubic/mlp_bw100.json.gz", "cubic", 0.02),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = parser.parse_args()
    names = list(registry.names())
    by_model: dict[str, list[float]] = {n: [] for n in names}
    rows = []
    for measured, trace, cc, queue in RUNS:
        observed = read_observed(PS_ASYNC_DATA / "measured" / measured)
        profile = load_profile([PS_ASYNC_DATA / "condensed" / trace])
        request = AdviceRequest(
            network=NetworkModel(bandwidth_bps=100e6),
            curve=CurveSettings(workers=tuple(sorted(observed)), target_rel_halfwidth=0.02),
            model=ModelChoice(registry.DEFAULT_MODEL, {"congestion_control": cc, "queue_s": queue}),
            side_by_side=())
        cells = []
        for curve in compare(profile, request, names):
            e = errors(curve, observed)
            by_model[curve.name] += list(e.per_worker.values())
            cells.append("n/a" if e.median is None else f"{e.median:.1%} / {e.max:.1%}")
        rows.append((measured, cells))
    if args.markdown:
        print("| run | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for measured, cells in rows:
            print(f"| {measured} | " + " | ".join(cells) + " |")
        print("| **all points** | " + " | ".join(_summary(by_model[n]) for n in names) + " |")
        return
    print(f"{'run':<30}" + "".join(f"{n:>30}" for n in names))
    for measured, cells in rows:
        print(f"{measured:<30}" + "".join(f"{c:>30}" for c in cells))
    print(f"{'all points (median / max)':<30}" + "".join(f"{_summary(by_model[n]):>30}" for n in names))


def _summary(values: list[float]) -> str:
    return "n/a" if not values else f"{statistics.median(values):.1%} / {max(values):.1%}"


if __name__ == "__main__":
    main()
