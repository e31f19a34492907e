"""The alternating pair's two-way loss (``two_way.py``): its geometry by hand, its constants
recounted from the probe's own recording, and its outcome against real alternating runs it was
not fitted to."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from advisor.core.advice import DEFAULT_GOODPUT, AdviceRequest, advise
from advisor.core.curve import CurveSettings
from advisor.core.models.ps_des.arrangements import ALTERNATING, MIDDLE_SHARE, setting_of
from advisor.core.models.ps_des.contention import Contention, alternating_bound
from advisor.core.models.ps_des.two_way import (
    PROBED,
    alternating_rate,
    alternating_step_s,
    efficiency_of_cycles,
    overlap_s,
    two_way,
)
from advisor.core.phases import phases, ps_link_bound
from advisor.core.sim_types import NetworkModel
from advisor.importers.loader import load_profile
from tests.conftest import ps_async_data
from tests.factories import des_choice

PROBE = Path(__file__).resolve().parents[1] / "data" / "two-way" / "probe.json"


def test_overlap_by_hand() -> None:
    # pull [0, 1], the other's push [T/2 - 1, T/2]
    assert overlap_s(1.0, 1.0, 2.0) == pytest.approx(1.0)  # no compute: the whole transfer overlaps
    assert overlap_s(1.0, 1.0, 3.0) == pytest.approx(0.5)  # push [0.5, 1.5] against pull [0, 1]
    assert overlap_s(1.0, 1.0, 4.0) == 0.0  # compute-bound: push [1, 2] starts as the pull ends
    assert overlap_s(1.0, 0.0, 3.0) == 0.0  # nothing pushed, nothing overlaps
    assert overlap_s(2.0, 1.0, 3.0) == pytest.approx(1.0)  # pull [0, 2] holds the push [0.5, 1.5]


def test_the_step_grows_by_the_overlapped_transfers_loss() -> None:
    # pull and push 1 s each, step 3 s: 0.5 s of each overlaps; at efficiency 0.8 each half
    # second takes 0.625 s, so the step grows by 2 x 0.125 = 0.25 s
    assert alternating_step_s(3.0, 1.0, 1.0, 0.8) == pytest.approx(3.25)
    assert alternating_step_s(3.0, 1.0, 1.0, 1.0) == 3.0
    # the probe's reading inverts it: a 3 s cycle with 1 s of gap that grew to 3.25 s
    assert efficiency_of_cycles(3.0, 3.25, 1.0) == pytest.approx(0.8)
    assert efficiency_of_cycles(3.0, 2.9, 1.0) == 1.0  # faster together: no loss, not a gain
    with pytest.raises(ValueError, match="efficiency"):
        alternating_step_s(3.0, 1.0, 1.0, 0.0)


def _probe_runs() -> list[dict]:
    return json.loads(PROBE.read_text())["results"]


def test_the_probed_efficiencies_are_the_probe_recordings_own() -> None:
    """PROBED is the mean, per network setting, of the probe runs that held the alternation,
    each read by ``efficiency_of_cycles``: recomputed here from the recording."""
    found: dict[str, list[float]] = {}
    for run in _probe_runs():
        if run["mode"] != "alternate" or run["middle_share"] < MIDDLE_SHARE:
            continue
        key = setting_of(Contention(run["congestion_control"], run["queue_ms"] / 1e3))
        assert key is not None
        found.setdefault(key, []).append(efficiency_of_cycles(run["cycle_s"]["alone"], run["cycle_s"]["both"],
                                                              run["gap_s"]))
    assert set(found) == set(PROBED)
    for key, efficiencies in found.items():
        assert PROBED[key].efficiencies == pytest.approx(tuple(efficiencies), abs=5e-4), key
        assert 0 < PROBED[key].efficiency < 1


def test_an_unprobed_setting_takes_the_mean_of_every_probe_run_and_says_so() -> None:
    every = [e for p in PROBED.values() for e in p.efficiencies]
    unknown = two_way(Contention("cubic", None))
    assert not unknown.known and "not probed" in unknown.basis
    assert unknown.efficiency == pytest.approx(statistics.fmean(every))
    bbr = two_way(Contention("bbr", 0.1))
    assert bbr.known and bbr.efficiency == pytest.approx(PROBED["bbr"].efficiency)


def _mlp() -> object:
    return load_profile(ps_async_data() / "condensed" / "bbr" / "mlp_bw100.json.gz")


def test_alternating_rate_lies_below_the_bound_and_reaches_it_without_loss() -> None:
    profile = _mlp()
    link = 100e6 * 0.95
    one = 102.0
    assert alternating_rate(profile, one, link, 1.0) == pytest.approx(alternating_bound(profile, one, link))
    lossy = alternating_rate(profile, one, link, 0.8)
    assert lossy < alternating_bound(profile, one, link) <= ps_link_bound(profile, link)
    # by hand from the trace's phases: each step grows by its overlapped pull and push at 1/0.8
    ph = phases(profile, link)
    step = profile.job.batch_size / one
    grown = step + 2 * overlap_s(ph.downlink_s, ph.uplink_s, step) * (1 / 0.8 - 1)
    assert lossy == pytest.approx(2 * profile.job.batch_size / grown)


def test_the_alternating_outcome_meets_the_real_alternating_runs_it_never_saw() -> None:
    """The MLP under BBR alternated at W = 2 in both testbed runs: 169 and 167 ex/s
    (tests/data/ps-async/measured), 82 % of twice one worker. The alternating outcome, at the
    efficiency the plain-TCP probe measured (no training run in it), lies within 10 % of both;
    twice one worker was 21-23 % above them."""
    profile = _mlp()
    request = AdviceRequest(network=NetworkModel(bandwidth_bps=100e6),
                            curve=CurveSettings(workers=(1, 2), steps=300, warmup_steps=30),
                            model=des_choice(Contention("bbr", 0.1)))
    advice = advise(profile, request)
    two = advice.points[1]
    assert two.alternating is not None
    for measured in (169.0, 167.0):
        assert abs(two.alternating / measured - 1) <= 0.10, two.alternating
    assert two.alternating < 2 * advice.points[0].throughput
    assert any(ALTERNATING in note and "keeping" in note for note in advice.notes)


def test_the_crowd_probe_carries_what_the_real_runs_did_and_pulling_alone_fills_the_link() -> None:
    """tests/data/two-way/crowd.json against tests/data/ps-async/measured (two recordings, one of
    plain-TCP workers that compute nothing, one of TensorFlow): with pulls and pushes the link's
    directions carry what the real MLP's did at the same W and setting (within 10 %, median 5 %);
    the same workers pulling only, or pushing only, fill 84 % or more of it. The saturation is the
    two directions at once, not several flows in one direction (docs/accuracy.md)."""
    from benchmarks.two_way import REAL, real_shares, saturation

    # one real point by hand: cubic mlp W = 8, 167.0 ex/s of batch 32, 1,736,744 bytes a step each way
    assert real_shares(REAL["cubic/100"])[8] == pytest.approx([167.0 / 32 * 1_736_744 * 8 / 100e6], rel=0.01)
    gaps, pushed = [], 0
    for _, _, both, pulled_only, pushed_only, real in saturation():
        assert pulled_only >= 0.84 and both < pulled_only - 0.1
        if pushed_only is not None:
            assert pushed_only >= 0.84 and both < pushed_only - 0.1
            pushed += 1
        if real:
            gaps.append(abs(both / statistics.fmean(real) - 1))
    assert pushed >= 6
    assert len(gaps) >= 8 and max(gaps) <= 0.10 and statistics.median(gaps) <= 0.05


def test_lockstep_bursts_lose_in_one_direction_about_what_the_synchronous_constant_says() -> None:
    """tests/data/two-way/barrier.json: each run's burst efficiency recomputed from its rounds by
    hand (W transfers of the MLP's bytes at 100 Mbit/s over first start to last end, the rounds
    after the first fifth); the bursts keep less of the link than workers at random phases do in
    one direction (84 % or more), and the synchronous model's multi-flow goodput (0.85 of one
    flow's 95 %) lies within what they keep (docs/accuracy.md)."""
    from advisor.core.models.ps_des.sync import SyncContentionParams

    runs = json.loads((PROBE.parent / "barrier.json").read_text())["results"]
    kept = []
    for run in runs:
        rounds = run["rounds_s"]
        n = min(len(r) for r in rounds)
        ideal = run["workers"] * run["bytes"] * 8 / (run["mbit"] * 1e6)
        for i, phase in ((0, "pull"), (2, "push")):
            bursts = [ideal / (max(r[k][i + 1] for r in rounds) - min(r[k][i] for r in rounds)) for k in range(n // 5, n)]
            assert run["burst_efficiency"][phase] == pytest.approx(statistics.fmean(bursts), rel=1e-9)
            kept.append(run["burst_efficiency"][phase])
    assert len(runs) == 24 and all(0.6 < k <= 1.0 for k in kept)
    assert min(kept) < 0.8 < statistics.median(kept) < 0.95
    link_share = SyncContentionParams().multi_flow_goodput * DEFAULT_GOODPUT
    assert min(kept) <= link_share <= max(kept)


def test_workers_taking_turns_keep_the_two_way_loss_in_plain_tcp_but_not_in_tensorflow() -> None:
    """tests/data/two-way/turns.json against the round-robin 2-PS runs of tests/data/ps-traces:
    plain-TCP workers that take turns (one pull and one push on the link at a time) still lose
    what the two directions cost each other (under 0.80 of the link each way, where one way at a
    time fills 0.86 or more), while the TensorFlow runs carried more the more evenly their
    workers took turns (R1 falling), up to 0.92 (docs/contention-model.md section 7)."""
    from benchmarks.two_way import real_turns, turns

    probed = turns()
    assert len(probed) == 4 and all(len(runs) == 2 for runs in probed.values())
    for both, one_way in (run for runs in probed.values() for run in runs):
        assert both < 0.80 and one_way >= 0.86
    real = real_turns()
    # one point by hand: mlp_ps2_bw100 at W = 3, 212.4 ex/s of batch 32, 1,736,744 bytes a step each way
    assert ("mlp_ps2_bw100", 3) in {(run, w) for run, w, _, _ in real}
    first = next(share for run, w, _, share in real if (run, w) == ("mlp_ps2_bw100", 3))
    assert first == pytest.approx(212.4 / 32 * 1_736_744 * 8 / 100e6, rel=0.01)
    cubic_turns = max(both for (setting, _), runs in probed.items() if setting.startswith("cubic/100/100")
                      for both, _ in runs)
    most_even = min(real, key=lambda row: row[2])
    assert most_even[2] < 0.05 and most_even[3] > cubic_turns + 0.1
    # the shares fall as R1 rises: every pair of runs ordered the same way but for small R1 gaps
    for _, _, r1_a, share_a in real:
        for _, _, r1_b, share_b in real:
            if r1_b - r1_a >= 0.05:
                assert share_a > share_b
