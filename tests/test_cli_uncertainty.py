"""advisor predict with the model error, a deadline and a confidence: the JSON keeps the simulation's
interval apart and holds each W's probability of meeting the deadline; the recommended W is the
cheapest whose probability reaches the confidence; when none does the answer is still given (exit
0, one warning line); only input that cannot work is refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.cli import main

BASE = ["predict", "--workers", "1-3", "--steps", "150", "--warmup", "10", "--jobs", "1"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*BASE, "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keeps_the_simulation_interval_in_its_own_fields(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys)
    for p in doc["curve"]:
        assert p["low"] <= p["sim_low"] <= p["throughput"] <= p["sim_high"] <= p["high"]
        assert p["low"] < p["sim_low"]  # widened by the shipped model error
        if len(p["outcomes"]) == 1:  # E[1/T] >= 1/T (Jensen) for one outcome
            assert p["expected_cost_per_example"] >= p["cost_per_example"]
    assert doc["model_error"]["model"] == doc["model"] and doc["model_error"]["level"] == 0.95
    off = _json(capsys, "--model-error", "off")
    assert off["model_error"] is None
    assert all(p["low"] == p["sim_low"] and p["high"] == p["sim_high"] for p in off["curve"])
    # the simulation's own interval does not depend on the model error
    assert [p["sim_low"] for p in off["curve"]] == [p["sim_low"] for p in doc["curve"]]


def test_the_cheapest_w_whose_probability_reaches_the_confidence(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys)
    thr = {p["workers"]: p["throughput"] for p in doc["curve"]}
    # a deadline between W = 1's and W = 3's prediction: 1 h for that many examples/s
    need = (thr[1] + thr[3]) / 2
    for confidence in ("0.6", "0.9"):
        out = _json(capsys, "--examples", str(need * 3600), "--deadline", "1", "--confidence", confidence)
        rec, curve = out["recommended"], out["curve"]
        assert out["constraints"]["confidence"] == float(confidence) and out["constraints"]["deadline_hours"] == 1
        p_meet = {p["workers"]: p["p_meet"] for p in curve}
        assert rec["confident"] and rec["warning"] is None
        assert rec["p_meet"] == p_meet[rec["workers"]] >= float(confidence)
        assert rec["needed_throughput"] == pytest.approx(need)
        # every W that is cheaper (expected, per example) misses the confidence
        cost = {p["workers"]: p["expected_cost_per_example"] for p in curve}
        assert all(p_meet[w] < float(confidence) for w in cost if cost[w] < cost[rec["workers"]])
        assert p_meet[1] < 0.01  # W = 1's prediction is far below what it needs


def test_no_w_reaching_the_confidence_is_answered_with_a_warning_and_exit_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys)
    top = max(p["throughput"] for p in doc["curve"])
    need = top * 1.1  # above every prediction: no W is 90 % likely to make it
    assert main([*BASE, "--json", "--examples", str(need * 3600), "--deadline", "1"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    rec = out["recommended"]
    assert rec["confident"] is False and rec["p_meet"] < 0.9
    assert rec["p_meet"] == max(p["p_meet"] for p in out["curve"])  # the likeliest W
    assert rec["needed_throughput"] == pytest.approx(need)
    warnings = [line for line in captured.err.splitlines() if line.startswith("advisor: warning:")]
    assert warnings == [f"advisor: warning: {rec['warning']}"]
    assert f"the likeliest, W = {rec['workers']}, meets it with probability" in rec["warning"]
    assert "with confidence 90%" in rec["warning"]
    # the table says the same, and the warning is the one line on stderr
    assert main([*BASE, "--examples", str(need * 3600), "--deadline", "1"]) == 0
    captured = capsys.readouterr()
    assert f"likeliest:        W = {rec['workers']}: no worker count meets the 1 h deadline" in captured.out
    assert "P(meet)" in captured.out
    assert len([line for line in captured.err.splitlines() if line.startswith("advisor: warning:")]) == 1


def test_a_deadline_planned_on_one_resize_starts_no_dearer_and_says_what_to_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--resize-after: the start's plan (stay if observed in time, else resize once) meets the
    deadline with at least the start's own probability, so the start is never a dearer W than the
    one-shot answer at the same confidence; the JSON says when to stay and where to move."""
    doc = _json(capsys, "--workers", "1-6")
    need = 0.96 * doc["curve"][1]["throughput"]  # 4 % under W = 2's prediction: W = 2 alone is not 90 % sure
    argv = ["--workers", "1-6", "--examples", str(need * 3600 * 10), "--deadline", "10"]
    alone = _json(capsys, *argv)
    planned = _json(capsys, *argv, "--resize-after", "1", "--resize-loss", "0.1")
    rec, k = planned["recommended"], planned["recommended"]["correction"]
    assert alone["recommended"]["correction"] is None and all(p["p_plan"] is None for p in alone["curve"])
    assert k["window_hours"] == 1 and k["restart_hours"] == 0.1
    for p in planned["curve"]:  # the resize only adds ways to meet it
        assert p["p_plan"] >= p["p_meet"]
    assert rec["confident"] and rec["p_meet"] >= 0.9 and rec["workers"] < alone["recommended"]["workers"]
    assert k["p_alone"] == pytest.approx({p["workers"]: p["p_meet"] for p in planned["curve"]}[rec["workers"]])
    assert k["stay_at_least"] == pytest.approx(need)
    if k["p_alone"] < 1:  # a start that may fall short says where to go: a faster W
        moves = [(f["at_least"], f["workers"]) for f in k["fallbacks"] if f["in_time"]]
        assert moves and all(thr > need * 0.5 and w > rec["workers"] for thr, w in moves)
    assert main([*BASE, *argv, "--resize-after", "1"]) == 0
    out = capsys.readouterr().out
    assert "P(plan)" in out and f"start:            W = {rec['workers']}, observed after 1 h" in out


def test_a_deadline_can_be_a_time(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "--examples", "1000", "--deadline", "2999-01-01T00:00Z")
    assert out["constraints"]["deadline_hours"] > 8e6 and out["recommended"]["p_meet"] == pytest.approx(1.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--confidence", "0"], "--confidence: must be a probability strictly between 0 and 1 (e.g. 0.9), got '0'"),
    (["--confidence", "1"], "got '1': 1 would ask for certainty"),
    (["--confidence", "1.5"], "strictly between 0 and 1"),
    (["--confidence", "-0.2"], "strictly between 0 and 1"),
    (["--confidence", "sure"], "expected a probability such as 0.9, got 'sure'"),
    (["--examples", "1e6", "--deadline", "0"], "--deadline: deadline must be a time in the future or a number of "
                                               "hours > 0, got '0'"),
    (["--examples", "1e6", "--deadline", "-3"], "number of hours > 0, got '-3'"),
    (["--examples", "1e6", "--deadline", "2001-01-01T00:00Z"], "--deadline: deadline '2001-01-01T00:00Z' is in the "
                                                               "past (it is now"),
    (["--examples", "1e6", "--deadline", "soon"], "cannot read deadline 'soon'"),
    (["--deadline", "3"], "a deadline or budget needs the job's size in examples"),
    (["--examples", "1e6", "--resize-after", "1"], "--resize-after plans a deadline's resize: give --examples and "
                                                   "--deadline too"),
    (["--examples", "1e6", "--deadline", "3", "--resize-after", "0"], "--resize-after 0 --resize-loss 0: the "
                                                                      "correction's window must be"),
    (["--examples", "1e6", "--deadline", "3", "--resize-after", "1", "--resize-loss", "-1"], "restart time"),
    (["--examples", "1e6", "--deadline", "3", "--resize-loss", "0.1"], "--resize-loss is read only with "
                                                                       "--resize-after"),
])
def test_input_that_cannot_work_is_refused_by_name(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([*BASE, *argv])
    except SystemExit as exc:  # argparse refuses a malformed value itself
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_unreadable_model_error_data_is_one_line_and_exit_2(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--model-error", str(tmp_path / "none.json")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("advisor: error:")]
    assert len(errors) == 1 and errors[0].startswith("advisor: error: model-error data") and "none.json" in errors[0]
