"""What the plain-TCP probe of tests/data/two-way says, beside the real runs it stands in for.

    python -m benchmarks.two_way

No simulation (under a second). Three tables:

- **Alternation** (``probe.json``, ``scripts/probe_two_way.py --alternate``): per probe run the
  efficiency of an overlapped transfer (``two_way.efficiency_of_cycles``) and whether it held the
  alternation; per network setting the mean that ``two_way.PROBED`` ships.
- **Saturation** (``crowd.json``, ``--crowd``; ``crowd-push.json``, ``--crowd-modes push``): W
  synthetic MLP workers at random phases on the shaped PS link, pulling and pushing, then pulling
  only, then pushing only; each direction's data rate as a share of the link, beside the real
  asynchronous MLP's at the same W and setting (``tests/data/ps-async/measured``: examples/s /
  batch x bytes per step). If the real runs' saturation (71-77 % of the link) is the network's,
  the synthetic workers that pull and push show it, and those that only pull or only push do not.
- **Bursts** (``barrier.json``, ``--crowd-modes barrier``): W synthetic workers in lockstep, as a
  synchronous update's barrier makes them: all pull at once, each idles and pushes, the next round
  when every push has arrived; what a burst of W transfers in one direction gets of the link.
"""

from __future__ import annotations

import json
import statistics

from advisor.core.models.ps_des.arrangements import MIDDLE_SHARE
from advisor.core.models.ps_des.two_way import PROBED, efficiency_of_cycles
from benchmarks.paths import PS_ASYNC_DATA, REPO

DATA = REPO / "tests" / "data" / "two-way"
MLP_BATCH, MLP_BYTES = 32, 1_736_744  # tests/data/ps-async/README.md: the MLP's batch and bytes each way per step
REAL = {"cubic/100": "cubic/mlp_bw100", "bbr/100": "bbr/mlp_bw100", "cubic/20": "cubic_q20ms/mlp_bw100"}


def real_shares(run: str) -> dict[int, list[float]]:
    """Per W, each real run's data rate per PS link direction as a share of 100 Mbit/s."""
    shares: dict[int, list[float]] = {}
    for name in (run, run + "_repeat"):
        path = PS_ASYNC_DATA / "measured" / f"{name}.json"
        if not path.exists():
            continue
        for r in json.loads(path.read_text())["results"]:
            steps = float(r["thr_window"]) / MLP_BATCH
            shares.setdefault(int(r["W"]), []).append(steps * MLP_BYTES * 8 / 100e6)
    return shares


def saturation() -> list[tuple[str, int, float, float, float | None, list[float]]]:
    """Per crowd setting and W: (setting, W, the share pulling and pushing, pulling only, pushing
    only where probed, the real runs' shares at that W and setting, empty where none ran)."""
    crowd = json.loads((DATA / "crowd.json").read_text())["results"]
    pushing = json.loads((DATA / "crowd-push.json").read_text())["results"]
    share = {(r["setting"], r["workers"], r["push"]): r["direction_share"] for r in crowd}
    push_only = {(r["setting"], r["workers"]): r["direction_share"] for r in pushing}
    real = {key: real_shares(run) for key, run in REAL.items()}
    return [(setting, w, share[setting, w, True], share[setting, w, False], push_only.get((setting, w)),
             real["/".join(setting.split("/")[:2])].get(w, []))
            for setting, w in dict.fromkeys((r["setting"], r["workers"]) for r in crowd)]


def bursts() -> dict[tuple[str, int], list[tuple[float, float]]]:
    """Per barrier setting and W, each run's (what a burst of W pulls gets of the link, of W pushes)."""
    found: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in json.loads((DATA / "barrier.json").read_text())["results"]:
        found.setdefault((r["setting"], r["workers"]), []).append(
            (r["burst_efficiency"]["pull"], r["burst_efficiency"]["push"]))
    return found


def main() -> None:
    print("alternation: two synthetic workers half a cycle apart (probe.json)")
    print(f"{'setting':28s} {'middle share':>12s} {'efficiency':>10s}  counted")
    for run in json.loads((DATA / "probe.json").read_text())["results"]:
        e = efficiency_of_cycles(run["cycle_s"]["alone"], run["cycle_s"]["both"], run["gap_s"])
        counted = run["middle_share"] >= MIDDLE_SHARE
        print(f"{run['setting']:28s} {run['middle_share']:12.2f} {e:10.3f}  {'yes' if counted else 'no: did not alternate'}")
    for key, probed in PROBED.items():
        print(f"  {key:26s} shipped efficiency {probed.efficiency:.3f} (mean of {len(probed.efficiencies)})")
    print("\nsaturation: W synthetic workers at random phases (crowd.json) against the real MLP's runs "
          "(tests/data/ps-async/measured), each direction's data rate / link")
    print(f"{'setting':28s} {'W':>2s} {'pull+push':>9s} {'pull only':>9s} {'push only':>9s} {'real':>12s}")
    gaps = []
    for setting, workers, both, one, push, real in saturation():
        if real:
            gaps.append(abs(both / statistics.fmean(real) - 1))
        shown = "/".join(f"{x:.3f}" for x in real) if real else "-"
        pushed = f"{push:9.3f}" if push is not None else f"{'-':>9s}"
        print(f"{setting:28s} {workers:2d} {both:9.3f} {one:9.3f} {pushed} {shown:>12s}")
    if gaps:
        print(f"pull+push against the real runs at the same W: median |gap| {statistics.median(gaps):.1%}, "
              f"max {max(gaps):.1%} over {len(gaps)} points")
    print("\nbursts: W synthetic workers in lockstep behind a barrier (barrier.json); what a burst of W "
          "transfers in one direction gets of the link")
    print(f"{'setting':28s} {'W':>2s} {'pulls (each run)':>16s} {'pushes (each run)':>17s}")
    for (setting, workers), runs in bursts().items():
        pulls, pushes = ("/".join(f"{run[i]:.3f}" for run in runs) for i in (0, 1))
        print(f"{setting:28s} {workers:2d} {pulls:>16s} {pushes:>17s}")


if __name__ == "__main__":
    main()
