"""What the plain-TCP probe of tests/data/two-way says, beside the real runs it stands in for.

    python -m benchmarks.two_way

No simulation (about a second). Four tables:

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
- **Turns** (``turns.json``, ``--crowd-modes turns pull-turns``): W synthetic workers that take
  turns, one pull and one push on the link at a time, then pulling only, one at a time; each
  direction's data rate as a share of the link, beside the real round-robin 2-PS MLP runs
  (``tests/data/ps-traces``, the weights' PS link), each with its order parameter R1 (near 0:
  the workers took turns).
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Sequence

from advisor.core.models.ps_des.arrangements import MIDDLE_SHARE
from advisor.core.models.ps_des.two_way import PROBED, efficiency_of_cycles
from benchmarks.multi_ps_accuracy import PLACEMENTS, TWO_PS, measured_runs, order_parameter, random_order_parameter
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


def turns() -> dict[tuple[str, int], list[tuple[float, float]]]:
    """Per turns setting and W, each run's (each direction's share taking turns both ways, one way)."""
    runs = json.loads((DATA / "turns.json").read_text())["results"]
    one_way = [r for r in runs if not r["push"]]
    found: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for both, one in zip((r for r in runs if r["push"]), one_way, strict=True):
        if (both["setting"], both["workers"]) != (one["setting"], one["workers"]):
            raise ValueError(f"turns.json: {both['setting']} W={both['workers']} has no one-way run after it")
        found.setdefault((both["setting"], both["workers"]), []).append(
            (both["direction_share"], one["direction_share"]))
    return found


def real_turns(workers: Sequence[int] = (3, 4)) -> list[tuple[str, int, float, float]]:
    """The real round-robin 2-PS MLP runs at ``workers`` (and the W = 3 placement runs that kept
    the round-robin placement): (run, W, R1, each direction's data rate on the weights' PS link as
    a share of 100 Mbit/s)."""
    paths = [*measured_runs(TWO_PS["round-robin"]), *sorted(PLACEMENTS.glob("round-robin.r*.measured.json.gz"))]
    rows = []
    for path in paths:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        skip = int(doc["meta"].get("window_skips_steps", 20))
        for r in doc["results"]:
            if int(r["W"]) in workers:
                share = float(r["thr_window"]) / MLP_BATCH * MLP_BYTES * 8 / 100e6
                rows.append((path.name.removesuffix(".measured.json.gz"), int(r["W"]),
                             order_parameter(r["step_log"], skip), share))
    return rows


def print_runs(title: str, headings: tuple[str, str],
               found: dict[tuple[str, int], list[tuple[float, float]]]) -> None:
    """A table of ``bursts()`` or ``turns()``: per setting and W, each run's two figures."""
    print(title)
    print(f"{'setting':28s} {'W':>2s} {headings[0]:>20s} {headings[1]:>20s}")
    for (setting, workers), runs in found.items():
        first, second = ("/".join(f"{run[i]:.3f}" for run in runs) for i in (0, 1))
        print(f"{setting:28s} {workers:2d} {first:>20s} {second:>20s}")


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
    print_runs("\nbursts: W synthetic workers in lockstep behind a barrier (barrier.json); what a burst of W "
               "transfers in one direction gets of the link", ("pulls (each run)", "pushes (each run)"), bursts())
    print_runs("\nturns: W synthetic workers taking turns, one transfer each way at a time (turns.json); each "
               "direction's data rate / link, both ways, then one way only",
               ("both ways (each run)", "one way (each run)"), turns())
    print("the real round-robin 2-PS MLP (cubic, 100 ms queue), the weights' PS link; R1 near 0: turns "
          f"(random phases: {random_order_parameter(3):.2f} at W = 3, {random_order_parameter(4):.2f} at W = 4)")
    for run, workers, r1, share in real_turns():
        print(f"{run:28s} {workers:2d} R1 {r1:4.2f}  each direction {share:.3f}")


if __name__ == "__main__":
    main()
