"""The command line: output a person reads, JSON a program reads, and errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.importers.profile_file import read_profile
from tests.conftest import ps_async_data


def test_inspect_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect"]) == 0
    out = capsys.readouterr().out
    assert "batch size   32 examples/step" in out
    assert "downlink ps0       1,736,752 B in 9 transfers" in out  # 434,186 float32 params + 8 B global step
    assert "critical path" in out


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["bytes_per_step"]["uplink ps0"] == 1736748  # params + 4 B learning rate
    assert doc["job"]["batch_size"] == 32


def test_convert_then_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cnn.json.gz"
    src = ps_async_data("condensed", "cubic", "cnn_bw100.json.gz")
    assert main(["profile", "convert", str(src), "-o", str(out), "--recorded-bandwidth", "100Mbit/s"]) == 0
    profile = read_profile(out)
    assert profile.job.recorded_bandwidth_bps == 100e6 and profile.job.skipped_steps == 3


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "advisor-profile", "version": 1, "job": {"batch_size": 1}, "ops": [], "steps": []}')
    assert main(["profile", "inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: ") and "bad.json" in err and "ops" in err


def test_inspect_one_runs_binary_steps(capsys: pytest.CaptureFixture[str]) -> None:
    steps = [ps_async_data("raw-pb", "cubic", f"mlp_bw100_step{k}.pb") for k in (5, 6)]
    assert main(["profile", "inspect", *map(str, steps), "--batch-size", "32"]) == 0
    assert "steps        2 used, 0 skipped" in capsys.readouterr().out


def test_a_directory_mixing_runs_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "inspect", str(ps_async_data("raw-pb", "cubic"))]) == 2
    assert "belong to 4 runs" in capsys.readouterr().err


def test_predict_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--workers", "1,2", "--steps", "150", "--warmup", "10", "--json",
                 "--price-worker", "3", "--price-ps", "1"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "advisor-prediction/1"
    assert [p["workers"] for p in doc["curve"]] == [1, 2]
    one, two = doc["curve"]
    assert one["low"] <= one["throughput"] <= one["high"]
    # 2 workers: never more than twice one worker (within the intervals), never above the link:
    # 100 Mbit/s carries at most 1e8 / 8 / 1,736,752 B = 7.2 steps/s each way = 230 examples/s
    assert two["throughput"] <= 2 * one["high"] and two["throughput"] <= 1e8 / 8 / 1736752 * 32
    # cost per example = (W x 3 + 1) per hour / (3600 x throughput)
    assert one["cost_per_example"] == pytest.approx(4 / 3600 / one["throughput"])
    assert doc["recommended"]["workers"] in (1, 2) and doc["saturation_workers"] in (1, 2)


def test_predict_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    assert main(["predict", "--workers", "1-3", "--steps", "120", "--warmup", "10", "--plot", str(png), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "saturation point: W =" in out and "cost-optimal:     W =" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bandwidth", "0"], "argument --bandwidth: bandwidth must be > 0, got '0'"),
        (["--workers", "0-3"], "argument --workers: worker counts must be >= 1, got '0-3'"),
        (["--workers", "4-2"], "argument --workers: the range '4-2' is reversed: write 2-4"),
        (["--workers", "1,8-4"], "argument --workers: the range '8-4' is reversed: write 4-8"),
        (["--workers", "1-x"], "argument --workers: cannot read worker counts '1-x'"),
        (["--price-worker", "-1"], "worker price must be a finite number >= 0"),
        (["--ps", "2", "--model-param", "ps_placement=random"], "ps_placement"),  # --ps 2 itself is a what-if now
        (["--order", "custom"], "--order custom needs --order-file"),
        (["--deadline", "2"], "a deadline or budget needs the job's size"),
    ],
)
def test_predict_refuses_impossible_settings(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["predict", "--workers", "1", "--steps", "100", *argv])
    except SystemExit as exc:  # argparse rejects malformed values itself
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_calibrate_prints_a_usable_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["alpha_us_per_byte"] >= 0 and fit["beta_us"] >= 0 and 0 < fit["goodput"] <= 1
    assert main(["predict", "--calibrate", "--workers", "1", "--steps", "100", "--warmup", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["settings"]["overhead_beta_us"] == pytest.approx(fit["beta_us"])


def test_predict_contention_options_reach_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--workers", "1,2", "--steps", "120", "--warmup", "10", "--json"]
    assert main([*base, "--congestion", "cubic", "--queue", "20ms", "--share-sigma", "0.5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "li2020-des+contention"
    c = doc["network"]["contention"]
    assert (c["congestion_control"], c["queue_s"], c["request_queue_s"], c["share_sigma"]) == ("cubic", 0.02, 0.02, 0.5)
    assert "alternating" in doc["curve"][1]
    assert main([*base, "--equal-shares"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "li2020-des" and doc["network"]["contention"] is None
    assert all(p["alternating"] is None for p in doc["curve"])


@pytest.mark.parametrize(("argv", "message"), [(["--queue", "soon"], "argument --queue"),
                                               (["--congestion", "vegas"], "argument --congestion"),
                                               (["--multi-flow-goodput", "1.5"], "multi_flow_goodput")])
def test_predict_refuses_bad_contention_options(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["predict", "--workers", "1", "--steps", "100", *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_predict_measures_the_bandwidth_a_trace_does_not_record(capsys: pytest.CaptureFixture[str]) -> None:
    """The condensed trace carries no bandwidth; it was recorded with the link shaped to 100 Mbit/s."""
    trace = str(ps_async_data("condensed", "cubic", "cnn_bw100.json.gz"))
    common = ["predict", trace, "--workers", "1,2", "--steps", "150", "--warmup", "10", "--json", "--quiet"]
    assert main(common) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["network"]["bandwidth_source"] == "measured"
    assert 90e6 <= doc["network"]["bandwidth_bps"] <= 110e6
    assert any("measured from the profile's transfer times" in n for n in doc["notes"])
    assert main([*common, "--bandwidth", "100Mbit/s"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["network"]["bandwidth_source"] == "given" and given["network"]["bandwidth_bps"] == 100e6
    for m, g in zip(doc["curve"], given["curve"]):  # a rate within 10 % moves the prediction less than that
        assert m["throughput"] == pytest.approx(g["throughput"], rel=0.1)


def test_predict_bandwidth_measure_overrides_the_recorded_one(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["predict", "--workers", "1", "--steps", "100", "--warmup", "10", "--json", "--quiet"]
    assert main(common) == 0
    recorded = json.loads(capsys.readouterr().out)["network"]
    assert recorded["bandwidth_source"] == "recorded"
    assert main([*common, "--bandwidth", "measure"]) == 0
    measured = json.loads(capsys.readouterr().out)["network"]
    assert measured["bandwidth_source"] == "measured"
    assert measured["bandwidth_bps"] == pytest.approx(recorded["bandwidth_bps"], rel=0.1)


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error of a refused command line (exit status 2, no traceback)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a malformed value itself
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


PREDICT = ["predict", "--workers", "1", "--quiet"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*PREDICT, "--bandwidth", "0"], "argument --bandwidth: bandwidth must be > 0, got '0'"),
        ([*PREDICT, "--recorded-bandwidth", "0"], "argument --recorded-bandwidth: bandwidth must be > 0, got '0'"),
        ([*PREDICT, "--bandwidth=-5Mbit/s"], "argument --bandwidth: bandwidth must be > 0, got '-5Mbit/s'"),
        # the space form reaches the check too, where argparse alone says "expected one argument"
        ([*PREDICT, "--bandwidth", "-5Mbit/s"], "argument --bandwidth: bandwidth must be > 0, got '-5Mbit/s'"),
        ([*PREDICT, "--bandwidth", "fast"], "argument --bandwidth: cannot read bandwidth 'fast'"),
        ([*PREDICT, "--queue", "-5ms"], "argument --queue: duration must be >= 0, got '-5ms'"),
        ([*PREDICT, "--win", "-1e3"], "argument --win: the window must be > 0 bytes, got '-1e3'"),
        (["profile", "inspect", "--recorded-bandwidth", "0"],
         "argument --recorded-bandwidth: bandwidth must be > 0, got '0'"),
        (["fit-contention", "--bandwidth", "0"], "argument --bandwidth: bandwidth must be > 0, got '0'"),
        (["fit-contention", "--bandwidth", "-1Gbit/s"], "argument --bandwidth: bandwidth must be > 0, got '-1Gbit/s'"),
        (["fit-contention", "--queue", "-1ms"], "argument --queue: duration must be >= 0, got '-1ms'"),
    ],
)
def test_unit_options_say_what_is_wrong_with_the_value(argv: list[str], message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _refusal(argv, capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--warmup", "-1"], "argument --warmup: must be >= 0, got -1"),
        (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
        (["--steps", "many"], "argument --steps: expected a whole number, got 'many'"),
        (["--seed", "-1"], "argument --seed: must be >= 0, got -1 (numpy seeds its random generators"),
        (["--max-workers", "0"], "argument --max-workers: must be >= 1, got 0"),
        (["--timeline-workers", "0"], "argument --timeline-workers: must be >= 1, got 0"),
        (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
        (["--steps", "100", "--warmup", "100"],
         "--warmup 100 must be less than --steps 100: the warm-up steps are part of each worker's --steps"),
        (["--warmup", "250"], "--warmup 250 must be less than the 150 steps an adaptive run (no --steps) starts with"),
    ],
)
def test_predict_refuses_impossible_step_counts(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _refusal([*PREDICT, *argv], capsys)


def test_fixed_steps_may_warm_up_longer_than_an_adaptive_run_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """--steps 300 --warmup 250 is a fixed run: the 150 steps an adaptive run starts with do not bind it."""
    assert main([*PREDICT, "--steps", "300", "--warmup", "250", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["curve"][0]["steps"] == 300 and doc["settings"]["warmup_steps"] == 250


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
        (["--steps", "50"], "--steps 50 must exceed the 50 warm-up steps each simulation starts with"),
    ],
)
def test_fit_contention_refuses_impossible_steps_and_seeds(argv: list[str], message: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _refusal(["fit-contention", "--observed", "2=131", *argv], capsys)


@pytest.mark.parametrize(
    ("order", "lines", "message"),
    [
        ("custom", "nope\n", "--order-file {file} names unknown operation(s): ['nope']"),
        ("custom", "ps0:fc0/W\n", "--order-file {file} names operation(s) that are not transfers: ['ps0:fc0/W']"),
        ("custom", "\n  \n", "--order-file {file} names no transfers: write one name per line"),
        ("fifo", "nope\n", "--order-file is read only with --order custom, not --order fifo: add --order custom"),
        ("custom", None, "--order-file {file}: cannot read it (No such file or directory)"),
    ],
)
def test_predict_names_the_order_file_it_refuses(order: str, lines: str | None, message: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "order.txt"
    if lines is not None:
        file.write_text(lines)
    argv = [*PREDICT, "--steps", "60", "--warmup", "5", "--order", order, "--order-file", str(file)]
    assert message.format(file=file) in _refusal(argv, capsys)


def test_an_impossible_deadline_is_answered_with_what_is_possible(capsys: pytest.CaptureFixture[str]) -> None:
    """Not an error: the question has an answer (the likeliest W), given with one warning line."""
    assert main([*PREDICT, "--steps", "60", "--warmup", "5", "--examples", "1e9", "--deadline", "1"]) == 0
    err = capsys.readouterr().err
    assert ("advisor: warning: no worker count in 1..1 meets the deadline of 1 h for 1,000,000,000 examples with "
            "confidence 90%: the likeliest, W = 1, meets it with probability 0% (it needs 277,777.8 examples/s; "
            "predicted") in err
    assert "Constraints(" not in err


def test_target_out_of_range_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """Also with --steps, which does not use it: a wrong value is a mistake either way."""
    err = _refusal([*PREDICT, "--steps", "60", "--warmup", "5", "--target", "0"], capsys)
    assert "--target must be a fraction in (0, 1), e.g. 0.02 for +-2 %, got 0.0" in err


@pytest.mark.parametrize("flag", ["--plot", "--timeline"])
def test_an_output_it_cannot_write_is_refused_before_simulating(flag: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-dir" / "out"
    err = _refusal([*PREDICT, "--steps", "60", "--warmup", "5", flag, str(missing)], capsys)
    assert f"{flag} {missing}: there is no directory {missing.parent} to write it in" in err
    assert f"{flag} {tmp_path}: is a directory" in _refusal([*PREDICT, flag, str(tmp_path)], capsys)


def test_convert_names_an_output_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-dir" / "p.json"
    assert f"-o {missing}: there is no directory" in _refusal(["profile", "convert", "-o", str(missing)], capsys)


def test_one_worker_bandwidth_is_every_workers_link(capsys: pytest.CaptureFixture[str]) -> None:
    """``--worker-bandwidth`` with one rate states every worker's link, as the same rate listed
    once per worker does; left unstated, a 2-PS what-if caps each worker at one PS link, which
    costs a transfer-bound job throughput from W = 2 on (its two PS links then feed one 100 Mbit/s
    worker link)."""
    trace = str(Path(__file__).parent / "data" / "ps-traces" / "mlp_ps1_bw100.trace.json.gz")
    base = ["predict", trace, "--ps", "2", "--ps-placement", "greedy-bytes", "--workers", "1-3", "--json", "--quiet"]
    curves, networks = {}, {}
    for name, extra in {"one": ["--worker-bandwidth", "10Gbit/s"],
                        "each": ["--worker-bandwidth", ",".join(["10Gbit/s"] * 3)], "none": []}.items():
        assert main([*base, *extra]) == 0, name
        doc = json.loads(capsys.readouterr().out)
        curves[name] = {p["workers"]: p["throughput"] for p in doc["curve"]}
        networks[name] = doc["network"]["worker_bandwidth_bps"]
    assert networks == {"one": 1e10, "each": None, "none": None}
    for w in (1, 2, 3):
        assert curves["one"][w] == pytest.approx(curves["each"][w], rel=0.03), w
    assert curves["one"][3] > 1.05 * curves["none"][3]
