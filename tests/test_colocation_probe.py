"""The co-location probe (tests/data/allreduce/colocation-probe): what its README claims, read
from the recorded per-copy CPU and wall time per step."""

from __future__ import annotations

import json

from tests.conftest import REPO

PROBE = REPO / "tests" / "data" / "allreduce" / "colocation-probe" / "colocate.json"


def runs() -> dict[str, dict[int, dict[str, list[float]]]]:
    doc = json.loads(PROBE.read_text())
    return {r["model"]: {x["copies"]: x for x in r["runs"]} for r in doc["runs"]}


def test_every_program_ran_alone_and_beside_one_to_seven_copies_of_itself() -> None:
    got = runs()
    assert sorted(got) == ["cnn", "mlp", "mlp4m"]
    for by_n in got.values():
        assert sorted(by_n) == [1, 2, 3, 4, 5, 6, 8]
        assert all(len(x["cpu_s"]) == len(x["step_s"]) == n for n, x in by_n.items())


def test_a_workers_own_cpu_per_step_does_not_grow_with_the_copies_beside_it() -> None:
    for model, by_n in runs().items():
        alone = by_n[1]["cpu_s"][0]
        for n, x in by_n.items():
            # never more than 12.2 % above its CPU alone (the CNN's 11.5 ms against 10.3), at most
            # 32 % below (the 1.7 MB MLP's 7.2 against 10.6): no growth with the copies
            assert all(0.65 * alone <= c <= 1.13 * alone for c in x["cpu_s"]), (model, n)
        # eight copies on two cores: the cores are not yet full, so each step lengthens by at most 20 %
        assert max(by_n[8]["step_s"]) <= 1.2 * by_n[1]["step_s"][0]
        assert sum(by_n[8]["cpu_s"]) / max(by_n[8]["step_s"]) < 2.0
