"""Two PS workers alternate or drift (core/models/ps_des/arrangements.py): the step-log test, the
testbed's counts recounted from its files, and the probability each stated network gets."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from advisor.core.models.ps_des.arrangements import (
    MIDDLE_SHARE, ONE_GRADIENT, TESTBED, alternated, alternation_chance, middle_share, setting_of,
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
    """Every count in TESTBED recounted from the W = 2 step logs of the files it names: ps-async's
    (each worker's step ends after the run's ``skip``), and the project's recordings (each worker's
    steps as (start, end, global step), several W = 2 runs to a file in ps-arrangements)."""
    for count in TESTBED.values():
        alternations, runs = 0, 0
        for name in count.files:
            for r in json.loads((ps_async_data("measured") / name).read_text())["results"]:
                if r["W"] != 2:
                    continue
                a, b = ([s[1] for s in steps][r["skip"]:] for steps in r["step_log"].values())
                alternations, runs = alternations + alternated(a, b), runs + 1
        for name in count.recorded:
            for r in json.loads(gzip.decompress((REPO / "tests" / "data" / name).read_bytes()))["results"]:
                if r["W"] != 2:
                    continue
                a, b = ([step[1] for step in worker] for worker in r["step_log"])
                alternations, runs = alternations + alternated(a, b), runs + 1
        assert (alternations, runs) == (count.alternated, count.runs), count.setting


def test_every_recorded_two_worker_run_with_one_ps_and_two_outcomes_is_counted() -> None:
    """The project's one-PS asynchronous files with a W = 2 run of equal workers (no stated speeds
    or links) of the MLP, or of a program whose kept prediction reports two outcomes at W = 2 (the
    CNN of ps-async-held-out), are all in TESTBED: no recording is left out of the probabilities by
    oversight."""
    data = REPO / "tests" / "data"
    found: dict[str, set[str]] = {}
    folders = ("ps-traces", "ps-arrangements", "ps-async-held-out")
    for path in [p for folder in folders for p in data.glob(f"{folder}/*.measured.json.gz")]:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        meta = doc.get("meta", {})
        model = meta.get("model", "mlp")
        kept = path.parent / f"prediction-{model}.json"
        two = model == "mlp" or (kept.exists() and any(
            p["workers"] == 2 and len(p["outcomes"]) == 2 for p in json.loads(kept.read_text())["curve"]))
        if two and meta.get("n_ps", 1) == 1 and not meta.get("sync") and not meta.get("worker_speeds") \
                and not meta.get("worker_mbits") and any(r["W"] == 2 for r in doc["results"]):
            # the setting it counts under: its congestion control and queue (the first recordings
            # state neither: cubic and 100 ms, tests/data/ps-traces/README.md)
            cc = meta.get("congestion_control", "cubic")
            setting = setting_of(Contention(CongestionControl(cc), (meta.get("queue_ms") or 100) / 1e3))
            assert setting is not None
            found.setdefault(setting, set()).add(str(path.relative_to(data)))
    assert found == {key: set(count.recorded) for key, count in TESTBED.items() if count.recorded}


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
        ("cubic", 0.1, (3 + 1) / (11 + 2), True),  # 3 of 11 alternated: Laplace's (k + 1) / (n + 2)
        ("reno", 0.2, 4 / 13, True),  # loss-based and a deep queue: as the testbed's cubic
        ("cubic", 0.02, (2 + 1) / (7 + 2), True),  # 2 of 7
        ("cubic", 0.04, 1 / 3, True),  # below the 44.7 ms between 20 and 100 ms on a log scale
        ("bbr", None, (6 + 1) / (6 + 2), True),  # 6 of 6; BBR keeps its queue short whatever the buffer
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


def test_two_workers_gain_with_the_distance_between_their_phases() -> None:
    """The MLP's W = 2 runs under each queue (tests/data/ps-arrangements, ps-traces): the further
    apart the two workers' phases (the middle share), the more they train, every run at a larger
    share faster than every run at a share 0.1 smaller (docs/accuracy.md: a continuum, whose ends
    are the two outcomes)."""
    from benchmarks.w2_arrangements import runs

    # the MLP's W = 2 runs recorded to count the arrangements (ps-arrangements) and ps-traces' one
    mine = [r for r in runs() if r.workers == 2 and r.source.startswith(("ps-arrangements/", "ps-traces/"))]
    for setting in ("loss-based, deep queue", "loss-based, short queue"):
        pairs = [(r.share, r.throughput) for r in mine if r.setting == setting]
        assert len(pairs) >= 5
        assert all(t1 < t2 for s1, t1 in pairs for s2, t2 in pairs if s2 >= s1 + 0.1), setting


def test_the_runs_recorded_after_their_prediction_lie_inside_its_outcomes() -> None:
    """Every run of tests/data/ps-arrangements inside the interval of one of its point's outcomes in
    the prediction kept from before the runs; one lies outside the interval of the outcome it
    showed (164.6 ex/s, drifting at middle share 0.67, 0.5 % above that interval's top)."""
    from benchmarks.predicted_first import points
    from benchmarks.w2_arrangements import ARRANGEMENTS

    found = points(ARRANGEMENTS)
    assert len(found) == 23 and all(p.inside_any for p in found)
    assert [p.measured for p in found if not p.inside] == [pytest.approx(164.6, abs=0.05)]
