"""advisor predict with the model error and a deadline: the JSON keeps the simulation's interval
apart, the recommended W meets the deadline at the low end, and the output says how likely."""

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
        assert p["expected_cost_per_example"] >= p["cost_per_example"]  # E[1/T] >= 1/E... Jensen
    assert doc["model_error"]["model"] == doc["model"] and doc["model_error"]["level"] == 0.95
    off = _json(capsys, "--model-error", "off")
    assert off["model_error"] is None
    assert all(p["low"] == p["sim_low"] and p["high"] == p["sim_high"] for p in off["curve"])
    # the simulation's own interval does not depend on the model error
    assert [p["sim_low"] for p in off["curve"]] == [p["sim_low"] for p in doc["curve"]]


def test_the_deadline_is_met_at_the_interval_low_end(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys)
    low = {p["workers"]: p["low"] for p in doc["curve"]}
    sim_low = {p["workers"]: p["sim_low"] for p in doc["curve"]}
    assert max(low[1], low[2]) < low[3]  # (W = 2's is the widest interval: the alternating regime)
    # a deadline between the others' low ends and W = 3's: 1 h for that many examples/s
    need = (max(low[1], low[2]) + low[3]) / 2
    examples = str(need * 3600)
    rec = _json(capsys, "--examples", examples, "--deadline", "1")["recommended"]
    assert rec["workers"] == 3  # the only W whose low end meets it
    assert rec["hours_at_low"] == pytest.approx(need / low[3]) and rec["hours_at_low"] <= 1.0
    assert 0.5 < rec["p_deadline"] <= 1.0
    if need <= sim_low[2]:  # the simulation's interval alone would have taken W = 2
        off = _json(capsys, "--examples", examples, "--deadline", "1", "--model-error", "off")["recommended"]
        assert off["workers"] == 2


def test_the_table_says_how_likely_the_deadline_is_met(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--examples", "100000", "--deadline", "10"]) == 0
    out = capsys.readouterr().out
    assert "meets the 10 h deadline with probability" in out
    assert "intervals: simulation noise and the model's error" in out


def test_unreadable_model_error_data_is_one_line_and_exit_2(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--model-error", str(tmp_path / "none.json")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("advisor: error:")]
    assert len(errors) == 1 and errors[0].startswith("advisor: error: model-error data") and "none.json" in errors[0]
