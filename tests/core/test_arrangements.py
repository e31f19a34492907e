"""Two PS workers alternate or drift (core/models/ps_des/arrangements.py): the step-log test, the
testbed's counts recounted from its files, and the probability each stated network gets."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from advisor.core.models.ps_des.arrangements import (
    MIDDLE_SHARE, ONE_GRADIENT, TESTBED, alternated, alternation_chance, middle_share,
)
from advisor.core.models.ps_des.contention import CongestionControl, Contention
from tests.conftest import REPO, ps_async_data


def test_the_middle_share_reads_the_phase_of_one_worker_in_the_others_step() -> None:
    a = np.arange(1.0, 11.0)  # a's steps end every second
    # b ends half-way through each of a's steps: all in the middle half
    assert middle_share(a, a + 0.5) == 1.0
    # b ends just after a: in step, none in the middle half
    assert middle_share(a, a + 0.05) == 0.0
    # b's phase drifts evenly over a's step, 0.05 to 0.95 in 9 steps of 0.1125: 0.275, 0.3875, 0.5, 0.6125 and
    # 0.725 lie in the middle half, 5 of 9 (random phases put half there)
    drifting = a[:-1] + np.linspace(0.05, 0.95, 9)
    assert middle_share(a, drifting) == pytest.approx(5 / 9)
    assert alternated(a, a + 0.5) and not alternated(a, drifting)
    assert np.isnan(middle_share(a, [0.5, 20.0]))  # no end of b falls inside a's steps


def test_the_testbed_counts_are_what_its_step_logs_say() -> None:
    """Every count in TESTBED recounted from the W = 2 step logs of the files it names."""
    for count in TESTBED.values():
        alternations = 0
        for name in count.files:
            for r in json.loads((ps_async_data("measured") / name).read_text())["results"]:
                if r["W"] != 2:
                    continue
                a, b = ([s[1] for s in steps][r["skip"]:] for steps in r["step_log"].values())
                alternations += alternated(a, b)
        assert (alternations, len(count.files)) == (count.alternated, count.runs), count.setting


def test_the_one_gradient_count_is_what_the_synchronous_step_logs_say() -> None:
    """ONE_GRADIENT recounted from the W = 2 step logs of the synchronous runs with one backup
    worker it names (each worker's steps as (start, end, global step)); every such run in the
    repository is counted, the held-out folder's too. Runs near the threshold count as what the
    share says (0.78: alternated, after drifting for a third of the run; 0.73: did not)."""
    data = REPO / "tests" / "data" / "ps-sync"
    assert set(ONE_GRADIENT.files) == {str(p.relative_to(data)) for p in data.glob("**/*_backup1.*.measured.json.gz")}
    alternations = 0
    for name in ONE_GRADIENT.files:
        (r,) = [r for r in json.loads(gzip.decompress((data / name).read_bytes()))["results"] if r["W"] == 2]
        a, b = ([step[1] for step in worker] for worker in r["step_log"])
        alternations += alternated(a, b)
    assert (alternations, len(ONE_GRADIENT.files)) == (ONE_GRADIENT.alternated, ONE_GRADIENT.runs)


def test_the_cnn_never_alternated_and_the_shares_separate_clearly() -> None:
    """The compute-bound cnn's W = 2 runs (no second outcome reported for it) show no alternation, and
    every W = 2 run is far from the threshold: the classification does not hang on it."""
    shares = {}
    for path in sorted(ps_async_data("measured").glob("*/*.json")):
        for r in json.loads(path.read_text())["results"]:
            if r["W"] == 2:
                a, b = ([s[1] for s in steps][r["skip"]:] for steps in r["step_log"].values())
                shares[f"{path.parent.name}/{path.name}#{r['rep']}"] = middle_share(a, b)
    assert all(v < MIDDLE_SHARE for k, v in shares.items() if "cnn" in k)
    assert all(abs(v - MIDDLE_SHARE) > 0.1 for v in shares.values())


@pytest.mark.parametrize(
    ("cc", "queue_s", "probability", "known"),
    [
        ("cubic", 0.1, (0 + 1) / (2 + 2), True),  # 0 of 2 alternated: Laplace's (k + 1) / (n + 2)
        ("reno", 0.2, 0.25, True),  # loss-based and a deep queue: as the testbed's cubic
        ("cubic", 0.02, (1 + 1) / (1 + 2), True),  # 1 of 1
        ("cubic", 0.04, 2 / 3, True),  # below the 44.7 ms between 20 and 100 ms on a log scale
        ("bbr", None, (2 + 1) / (2 + 2), True),  # 2 of 2; BBR keeps its queue short whatever the buffer
        ("cubic", None, 0.5, False),  # no queue stated: unknown
        ("unknown", None, 0.5, False),
    ],
)
def test_the_chance_of_alternation_per_stated_network(cc: str, queue_s: float | None, probability: float,
                                                      known: bool) -> None:
    chance = alternation_chance(Contention(CongestionControl(cc), queue_s))
    assert chance.probability == pytest.approx(probability) and chance.known is known
    assert ("unknown" in chance.basis) is not known
    if known:
        assert "testbed runs" in chance.basis
