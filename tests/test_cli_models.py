"""The model seam on the command line: advisor models, --model/--model-param, advisor compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.core.models import registry
from tests.conftest import ps_async_data

FAST = ["--workers", "1,2", "--steps", "120", "--warmup", "10", "--quiet"]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses malformed values itself
        return int(exc.code or 0)


def test_models_lists_every_registered_model_with_its_needs_and_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in doc["models"]] == list(registry.names()) and doc["default"] == registry.DEFAULT_MODEL
    des = next(m for m in doc["models"] if m["name"] == "li2020-des+contention")
    assert des["needs"] == ["bandwidth", "profile"]
    assert {p["name"]: p["default"] for p in des["params"]}["share_sigma"] == 1.0
    # what observed throughput corrects, with its range, or why nothing
    assert [(c["name"], c["low"], c["high"]) for c in des["calibration"]] == [
        ("share_sigma", 0.0, 2.0), ("multi_flow_goodput", 0.6, 1.0), ("goodput", 0.25, 1.0)]
    assert des["calibration_note"] == ""
    ring = next(m for m in doc["models"] if m["name"] == "ring-allreduce")
    assert [c["name"] for c in ring["calibration"]] == ["latency_s", "goodput"]
    dts = next(m for m in doc["models"] if m["name"] == "dts")
    assert dts["calibration"] == [] and "cluster spec" in dts["calibration_note"]
    assert all(m["calibration"] or m["calibration_note"] for m in doc["models"])  # every model says which
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "li2020-des+contention (default)" in text
    assert "calibrated from observed throughput: share_sigma 0..2, multi_flow_goodput 0.6..1, goodput 0.25..1" in text
    assert "not calibrated from observed throughput: its rates are the cluster spec's" in text


def test_predict_with_another_model_reports_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "phase-mva", "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "phase-mva" and doc["model_params"] == {}
    one = doc["curve"][0]
    # a closed form: no interval, no simulated steps; its own value beside itself agrees
    assert one["low"] == one["throughput"] == one["high"] and one["steps"] == 0
    assert one["models"]["phase-mva"]["throughput"] == pytest.approx(one["throughput"])
    assert doc["network"]["contention"] is None


def test_model_params_and_contention_flags_reach_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--json", *FAST, "--congestion", "cubic", "--queue", "20ms", "--model-param", "share_sigma=0.25"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "li2020-des+contention"
    assert doc["model_params"]["share_sigma"] == 0.25 and doc["model_params"]["queue_s"] == pytest.approx(0.02)
    assert doc["network"]["contention"]["request_queue_s"] == pytest.approx(0.02)


def test_equal_shares_is_an_alias_of_the_papers_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--equal-shares", "--json", *FAST]) == 0
    alias = json.loads(capsys.readouterr().out)
    assert main(["predict", "--model", "li2020-des", "--json", *FAST]) == 0
    named = json.loads(capsys.readouterr().out)
    assert alias["model"] == named["model"] == "li2020-des" and alias["curve"] == named["curve"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "oracle"], "model 'oracle': no such model; the models are: li2020-des+contention, li2020-des"),
    (["--model-param", "sigma=1"], "parameter sigma: Extra inputs are not permitted"),
    (["--model-param", "share_sigma"], "--model-param 'share_sigma': write KEY=VALUE"),
    (["--model-param", "share_sigma=-1"], "parameter share_sigma: Input should be greater than or equal to 0"),
    (["--model", "cynthia", "--share-sigma", "0.5"], "--share-sigma sets the parameter share_sigma, which this model"),
    (["--model", "cynthia", "--ps", "2"], "model 'cynthia': parameter_servers: predicts only the traced PS count"),
    (["--model", "dts"], "model 'dts': needs a cluster spec"),
    (["--equal-shares", "--model", "cynthia"], "--equal-shares means --model li2020-des"),
    (["--model", "cynthia", "--timeline", "/tmp/advisor-timeline.json"], "this model draws no timeline"),
])
def test_model_mistakes_are_one_line_naming_the_model_and_exit_2(argv: list[str], message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["predict", *FAST, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_compare_prints_every_model_with_errors_against_measurements(capsys: pytest.CaptureFixture[str]) -> None:
    trace = ps_async_data("condensed", "cubic", "mlp_bw100.json.gz")
    measured = ps_async_data("measured", "cubic", "mlp_bw100.json")
    assert main(["compare", str(trace), "--observed", str(measured), "--workers", "1-4", "--steps", "150",
                 "--warmup", "10", "--json", "--quiet", "--recorded-bandwidth", "100Mbit/s"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "advisor-compare/1" and [m["name"] for m in doc["models"]] == list(registry.names())
    by_name = {m["name"]: m for m in doc["models"]}
    assert not by_name["dts"]["applies"] and "needs a cluster spec" in by_name["dts"]["why_not"]
    des = by_name["li2020-des+contention"]
    observed = {int(w): v for w, v in doc["observed"].items()}
    for point in des["curve"]:  # |error| is |predicted / measured - 1|, measured = mean of the repeats
        assert point["error"] == pytest.approx(abs(point["throughput"] / observed[point["workers"]] - 1))
    errors = [p["error"] for p in des["curve"]]
    assert des["max_error"] == max(errors) and des["median_error"] == pytest.approx(sorted(errors)[1:3][0] / 2
                                                                                      + sorted(errors)[1:3][1] / 2)


def test_compare_table_names_why_a_model_does_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--workers", "1,2", "--steps", "120", "--warmup", "10", "--quiet",
                 "--models", "cynthia,dts"]) == 0
    out = capsys.readouterr().out
    assert "n/a dts: model 'dts': needs a cluster spec" in out
    assert _run(["compare", "--models", "cynthia,nope", "--quiet"]) == 2
    assert "model 'nope': no such model" in capsys.readouterr().err


def test_observed_files_that_cannot_be_read_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "measured.json"
    bad.write_text('{"results": [{"W": 2, "thr_window": -1}]}')
    assert _run(["compare", "--observed", str(bad), "--quiet"]) == 2
    assert "results[0].thr_window: throughput must be a finite number > 0, got -1" in capsys.readouterr().err
    bad.write_text('{"2": 130.5, "x": 1}')
    assert _run(["compare", "--observed", str(bad), "--quiet"]) == 2
    assert "key 'x': a worker count must be an integer" in capsys.readouterr().err


def test_spec_models_predict_from_the_bundled_specs_without_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).resolve().parents[1] / "advisor" / "data"
    assert main(["predict", "--model", "pei2019", "--spec", str(data / "resnet50.spec.yaml"), "--workers", "1,2",
                 "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "pei2019" and doc["job"]["batch_size"] > 0 and doc["network"]["bandwidth_bps"] is None
    one, two = doc["curve"]
    assert one["throughput"] < two["throughput"] <= 2 * one["throughput"]
    assert main(["predict", "--model", "dts", "--spec", str(data / "dts-example.yaml"), "--workers", "1-3",
                 "--quiet"]) == 0
    assert "model dts" in capsys.readouterr().out


def test_a_spec_with_an_unknown_section_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("gpus: P40\n")
    assert _run(["predict", "--model", "pei2019", "--spec", str(bad), "--quiet"]) == 2
    assert "unknown section(s) gpus; the sections are" in capsys.readouterr().err


def test_a_ps_count_what_if_prints_its_placement(capsys: pytest.CaptureFixture[str]) -> None:
    # The bundled mlp: fc0/W (784 x 384 float32 = 1,204,224 B) is the largest variable; greedy by
    # bytes puts it alone on one PS and the other 8 (about 0.53 MB) on the other.
    assert main(["predict", "--ps", "2", "--ps-placement", "greedy-bytes", *FAST]) == 0
    out = capsys.readouterr().out
    assert "PS placement (greedy-bytes, 2 PS):" in out
    assert "1 variable(s)" in out and "8 variable(s)" in out and "fc0/W" in out
    assert main(["predict", "--ps", "2", "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["parameter_servers"] == 2 and doc["model_details"]["ps_placement"]["strategy"] == "round-robin"
    assert _run(["predict", "--model", "cynthia", "--ps-placement", "greedy-bytes", *FAST]) == 2
    assert "--ps-placement sets the parameter ps_placement, which this model" in capsys.readouterr().err


COMPARED = ["--models", "li2020-des+contention,li2020-des", "--json"]


def test_a_model_param_in_compare_changes_that_model_only(capsys: pytest.CaptureFixture[str]) -> None:
    """share_sigma 0 gives every worker an equal TCP share, the default 1 spreads them: the
    contention model's W = 2 moves, li2020-des (which has no such parameter) does not; and the
    contention model's W = 2 is what predict gives with the same parameter and settings."""
    assert main(["compare", *FAST, *COMPARED]) == 0
    before = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert main(["compare", *FAST, *COMPARED, "--model-param", "li2020-des+contention.share_sigma=0"]) == 0
    after = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    contention, des = after["li2020-des+contention"], after["li2020-des"]
    assert des["curve"] == before["li2020-des"]["curve"] and des["params_given"] == {}
    assert des["params"] == before["li2020-des"]["params"] and "share_sigma" not in des["params"]
    assert contention["curve"][1]["throughput"] != before["li2020-des+contention"]["curve"][1]["throughput"]
    assert contention["params_given"] == {"share_sigma": 0.0} and contention["params"]["share_sigma"] == 0.0
    assert before["li2020-des+contention"]["params"]["share_sigma"] == 1.0  # the default it ran with before
    assert main(["predict", *FAST, "--json", "--model-param", "share_sigma=0", "--model-error", "off"]) == 0
    predicted = json.loads(capsys.readouterr().out)["curve"]
    assert [p["throughput"] for p in contention["curve"]] == pytest.approx([p["throughput"] for p in predicted])


def test_the_compare_table_says_which_parameters_a_model_ran_with(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *FAST, "--models", "li2020-des+contention,cynthia", "--model-param",
                 "li2020-des+contention.share_sigma=0.3", "--model-param", "li2020-des+contention.queue_s=none"]) == 0
    out = capsys.readouterr().out
    assert "li2020-des+contention ran with share_sigma=0.3, queue_s=None" in out and "cynthia ran with" not in out


@pytest.mark.parametrize(("param", "message"), [
    ("oracle.share_sigma=1", "--model-param 'oracle.share_sigma=1': model 'oracle': no such model; the models are: "),
    ("li2020-des.share_sigma=1", "--model-param: model 'li2020-des': parameter share_sigma: Extra inputs are not "
                                 "permitted (its parameters: engine, ps_placement)"),
    ("li2020-des+contention.share_sigma=wide", "model 'li2020-des+contention': parameter share_sigma: Input should "
                                               "be a valid number"),
    ("li2020-des+contention.share_sigma=-1", "parameter share_sigma: Input should be greater than or equal to 0"),
    ("cynthia.x=1", "--model-param 'cynthia.x=1': cynthia is not compared (the models compared: "
                    "li2020-des+contention, li2020-des)"),
    ("share_sigma=1", "--model-param 'share_sigma=1': write MODEL.KEY=VALUE, e.g. li2020-des+contention.share_sigma"),
    ("li2020-des+contention.share_sigma", "write MODEL.KEY=VALUE"),
])
def test_a_bad_model_param_in_compare_is_one_line_naming_it(param: str, message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["compare", *FAST, *COMPARED, "--model-param", param]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("advisor: error: ") and captured.err.count("\n") == 1, captured.err
    assert message in captured.err and captured.out == ""
