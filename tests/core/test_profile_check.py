"""The prediction's W = 1 against the profiling run's own rate (core/profile_check.py): the rate,
the limit, the notes, and a real trace stated with its link 2x too fast, by hand and through the
product's paths (advise, ``advisor predict --anchor``, the controller's prediction)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.core.advice import AdviceRequest, advise
from advisor.core.curve import CurveSettings
from advisor.core.model_error import ErrorRegime, ModelError
from advisor.core.profile import build_profile
from advisor.core.profile_check import (
    FALLBACK_W1_WIDTH, TRACING_ALLOWANCE, check_one_worker, contradiction_note, profile_rate, w1_width,
)
from advisor.core.sim_types import NetworkModel
from tests.conftest import REPO

MLP = REPO / "tests" / "data" / "ps-async" / "condensed" / "cubic" / "mlp_bw100.json.gz"


def profile(walls: list[float | None], untraced: list[float] | None = None):  # type: ignore[no-untyped-def]
    ops = [dict(name="pull", resource="downlink", ps=0, bytes=8), dict(name="c", resource="worker", deps=["pull"])]
    steps = [dict(index=i, start_us=[0.0, 0.0], duration_us=[0.0, 1000.0], wall_us=w) for i, w in enumerate(walls)]
    return build_profile(job=dict(batch_size=10, untraced_walls_us=untraced), ops=ops, steps=steps)


def test_the_profile_rate_is_batch_over_the_mean_client_wall() -> None:
    # traced steps of 100 and 300 ms: mean 200 ms, 10 examples -> 50 ex/s
    rate = profile_rate(profile([100_000.0, 300_000.0]))
    assert rate is not None and (rate.throughput, rate.steps, rate.untraced) == (pytest.approx(50.0), 2, False)
    # the untraced tail, when recorded, is the run's own rate: 10 / 0.125 s = 80 ex/s
    rate = profile_rate(profile([100_000.0, 300_000.0], untraced=[100_000.0, 150_000.0]))
    assert rate is not None and (rate.throughput, rate.steps, rate.untraced) == (pytest.approx(80.0), 2, True)
    assert rate.source == "its 2 untraced steps"
    assert profile_rate(profile([100_000.0, None])) is None  # a step the client did not time: no rate


def test_a_gap_contradicts_beyond_the_w1_width_and_tracings_allowance() -> None:
    p = profile([200_000.0])  # 50 ex/s
    error = ModelError("m", 0.95, (ErrorRegime(1, 1, 0.06, 0.04, 10),))
    width = w1_width(error, "m")
    assert width == 0.06 and w1_width(error, "other") == FALLBACK_W1_WIDTH and w1_width(None, "m") == FALLBACK_W1_WIDTH
    near = check_one_worker(p, 57.5, width)  # +15 % within 6 % + 10 %
    assert near is not None and near.gap == pytest.approx(0.15) and near.limit == pytest.approx(0.06 + TRACING_ALLOWANCE)
    assert not near.contradicts
    for predicted in (58.5, 41.5):  # +17 %, -17 %
        far = check_one_worker(p, predicted, width)
        assert far is not None and far.contradicts
    note = contradiction_note(check_one_worker(p, 100.0, width))  # type: ignore[arg-type]
    assert "100.0 ex/s, +100% from the profiling run's own 50.0 ex/s (its 1 traced steps)" in note
    assert "--anchor" in note
    assert check_one_worker(profile([None]), 50.0, width) is None and check_one_worker(None, 50.0, width) is None
    assert check_one_worker(p, float("nan"), width) is None


def _request(bandwidth: float, workers: tuple[int, ...] = (1, 2)) -> AdviceRequest:
    return AdviceRequest(network=NetworkModel(bandwidth_bps=bandwidth), side_by_side=(),
                         curve=CurveSettings(workers=workers, steps=200, warmup_steps=20))


def test_a_link_stated_twice_too_fast_is_contradicted_by_the_profile() -> None:
    """The transfer-bound MLP moves 1.74 MB each way a step: at 200 Mbit/s its step would be
    about half as long as at the 100 Mbit/s it was traced on (102.9 ex/s), so W = 1 comes out far
    above the profile's rate; stated as measured it lies within the limit."""
    from advisor.importers.loader import load_profile

    mlp = load_profile(MLP)
    right = advise(mlp, _request(100e6))
    assert right.profile_check is not None and not right.profile_check.contradicts
    assert not any("profiling run's own" in n for n in right.notes)
    wrong = advise(mlp, _request(200e6))
    check = wrong.profile_check
    assert check is not None and check.contradicts and check.gap > 0.5
    assert check.rate.throughput == pytest.approx(102.9, abs=0.1) and not check.rate.untraced
    assert any("profiling run's own 102.9 ex/s" in n for n in wrong.notes)
    # no W = 1 on the curve: nothing to check
    assert advise(mlp, _request(200e6, workers=(2,))).profile_check is None


def test_predict_anchor_brings_w1_to_the_profile_and_says_so(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from advisor.cli import main

    args = ["predict", str(MLP), "--bandwidth", "200M", "--workers", "1-3", "--steps", "200", "--warmup", "20",
            "--json"]
    assert main(args) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["profile_check"]["contradicts"] is True
    assert main(args + ["--anchor"]) == 0
    after = json.loads(capsys.readouterr().out)
    w1 = after["curve"][0]["throughput"]
    assert abs(w1 / 102.9 - 1) < 0.1 < before["curve"][0]["throughput"] / 102.9 - 1
    assert any(n.startswith("anchored on the profiling run's own 102.9 ex/s") for n in after["notes"])
    # the check reported is the one that was contradicted, not the anchored curve's own
    assert after["profile_check"] == before["profile_check"]
    # --anchor observes W = 1: a curve without it is refused, naming why
    assert main(["predict", str(MLP), "--bandwidth", "200M", "--workers", "2-3", "--steps", "200", "--warmup", "20",
                 "--anchor"]) == 2
    assert "--anchor needs the W = 1 point" in capsys.readouterr().err


def test_a_what_if_is_not_checked_against_the_profile() -> None:
    """The MLP's trace replayed as an all-reduce (no PS at W = 1: compute alone, about 8x the
    profile's rate) and as a job with 2 PS: neither W = 1 is the profiled run, so neither is a
    contradiction nor a case for --anchor; the same trace predicted as traced still is checked."""
    from dataclasses import replace as with_

    from advisor.core.advice import ModelChoice
    from advisor.importers.loader import load_profile

    mlp = load_profile(MLP)
    ring = advise(mlp, with_(_request(100e6), model=ModelChoice("ring-allreduce")))
    assert ring.points[0].throughput > 3 * 102.9  # far from the profile's rate, as a what-if may be
    assert ring.profile_check is None and not any("profiling run's own" in n for n in ring.notes)
    two_ps = advise(mlp, with_(_request(100e6), parameter_servers=2, worker_bandwidths_bps=(10e9,)))
    assert two_ps.profile_check is None
    assert advise(mlp, _request(100e6)).profile_check is not None
