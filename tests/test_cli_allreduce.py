"""The CLI on all-reduce profiles (the bundles recorded in tests/data/allreduce): a missing link
rate is asked for in all-reduce terms, a recorded one is used and named, the prediction says
which bucket layout it replayed, and ``profile inspect`` describes DDP and MWMS profiles as what
they are. Expected figures come from how the programs were built (scripts/record_allreduce_*.py):
ddp-slow has 6 layers of 0.5 MiB, sleeping 3 ms forward and 6 ms backward each, and DDP put them
into a first bucket of 1 MiB (its first_bucket_bytes_cap) and one of the rest; mwms-mlp4m-bw50 is
a dense 256-1024-512-512-10 MLP (4 kernels, 4 biases, 4,223,016 bytes of float32) in TF's one
default pack, sleeping 5 ms forward and 10 ms backward per layer."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.core.models.ring_allreduce.model import GRPC_RING

DATA = Path(__file__).resolve().parent / "data" / "allreduce"
DDP = DATA / "ddp-slow" / "profile.json.gz"
MWMS = DATA / "mwms-mlp4m-bw50" / "profile.json.gz"
MIB = 1024 * 1024
PREDICT = ["predict", "--workers", "1-2", "--steps", "120", "--warmup", "10", "--quiet"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _with_link(tmp_path: Path, source: str, rate_bps: float) -> Path:
    """The ddp-slow bundle as a version 2 bundle that records ``rate_bps`` from ``source``."""
    doc = json.loads(gzip.decompress(DDP.read_bytes()))
    doc.update(version=2, link={"rate_bps": rate_bps, "source": source})
    path = tmp_path / "bundle.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_a_missing_link_rate_is_asked_for_in_allreduce_terms(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([*PREDICT, str(DDP)], [*PREDICT, str(DDP), "--bandwidth", "measure"],
                 ["compare", str(DDP), "--workers", "1-2", "--quiet"]):
        code, _, err = _run(argv, capsys)
        assert code == 2, argv
        assert "the profile records no link rate" in err and "no transfers to measure" in err
        assert "--bandwidth RATE" in err and "'bandwidth' setting" in err
        assert "contrast" not in err


def test_the_recorded_link_rate_is_used_and_its_source_named(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _with_link(tmp_path, "interface-speed", 1e8)
    code, out, _ = _run([*PREDICT, str(bundle), "--json"], capsys)
    assert code == 0
    net = json.loads(out)["network"]
    assert net["bandwidth_bps"] == 1e8 and net["bandwidth_source"] == "recorded"
    assert net["recorded_bandwidth_source"] == "interface-speed"
    code, out, _ = _run([*PREDICT, str(bundle), "--json", "--bandwidth", "200Mbit/s"], capsys)
    net = json.loads(out)["network"]
    assert (net["bandwidth_bps"], net["bandwidth_source"], net["recorded_bandwidth_source"]) == (2e8, "given", None)


def test_the_prediction_says_which_bucket_layout_it_replayed(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*PREDICT, str(DDP), "--bandwidth", "100Mbit/s"]
    code, out, _ = _run([*base, "--json"], capsys)
    assert code == 0
    recorded = json.loads(out)
    assert recorded["model_params"]["bucket_mb"] is None  # no cap was used
    assert recorded["model_details"]["buckets"] == {"source": "recorded", "bucket_mb": None, "count": 2,
                                                    "bytes": [1 * MIB, 2 * MIB]}
    code, out, _ = _run([*base, "--json", "--model-param", "bucket_mb=25"], capsys)
    capped = json.loads(out)
    assert capped["model_params"]["bucket_mb"] == 25.0
    assert capped["model_details"]["buckets"] == {"source": "bucket_mb", "bucket_mb": 25.0, "count": 1,
                                                  "bytes": [3 * MIB]}  # all 6 x 0.5 MiB under one cap
    # one bucket, ready when backward ends, hides nothing behind backward: W = 2 is slower
    assert capped["curve"][1]["throughput"] < recorded["curve"][1]["throughput"]
    _, table, _ = _run(base, capsys)
    assert "buckets: 2, as the framework laid them out (recorded with the profile); MiB in reduce order: " \
           "1.00, 2.00" in table
    _, table, _ = _run([*base, "--model-param", "bucket_mb=25"], capsys)
    assert "buckets: 1, grouped by the model at bucket_mb = 25 MiB; MiB in reduce order: 3.00" in table


def test_inspect_tells_a_ddp_profile_in_its_own_terms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = _run(["profile", "inspect", str(DDP)], capsys)
    assert code == 0
    assert "kind         pytorch-ddp: PyTorch DistributedDataParallel, synchronous all-reduce" in text
    assert "gradients    6 tensors, 3,145,728 B per step" in text
    assert "buckets      2, as the framework laid them out, in reduce order: 1,048,576, 2,097,152 B" in text
    assert "link         not recorded: give --bandwidth RATE to predict" in text
    for words in ("parameter server(s)", "uplink ps0", "compute      ps", "recorded at"):
        assert words not in text
    for phase in ("forward", "backward", "optimizer", "other", "step time"):
        assert f"\n{phase:<12} " in text
    code, out, _ = _run(["profile", "inspect", str(DDP), "--json"], capsys)
    s = json.loads(out)["summary"]
    assert (s["kind"], s["gradients"], s["gradient_bytes"], s["buckets"]) == ("pytorch-ddp", 6, 3 * MIB,
                                                                            [MIB, 2 * MIB])
    assert s["link_bps"] is None and s["steps"] == 60 and s["step_is_wall"]
    phases = {k: v["median"] / 1000 for k, v in s["phases_us"].items()}
    assert 18 <= phases["forward"] < 18 * 1.3 and 36 <= phases["backward"] < 36 * 1.3  # the sleeps, and a little
    total = sum(v["mean"] for v in s["phases_us"].values())
    assert total == pytest.approx(s["step_us"]["mean"], rel=1e-9)  # the phases make up the wall step
    _, text, _ = _run(["profile", "inspect", str(_with_link(tmp_path, "controller-setting", 1e8))], capsys)
    assert "link         100 Mbit/s each way, recorded (controller-setting)" in text


def test_inspect_tells_an_mwms_profile_in_its_own_terms(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = _run(["profile", "inspect", str(MWMS)], capsys)
    assert code == 0
    assert "kind         tf-mwms: TensorFlow MultiWorkerMirroredStrategy" in text
    assert "gradients    8 tensors, 4,223,016 B per step" in text
    assert "buckets      1, as the framework laid them out, in reduce order: 4,223,016 B" in text
    code, out, _ = _run(["profile", "inspect", str(MWMS), "--json"], capsys)
    s = json.loads(out)["summary"]
    assert (s["kind"], s["gradients"], s["gradient_bytes"], s["buckets"]) == ("tf-mwms", 8, 4_223_016, [4_223_016])
    phases = {k: v["median"] / 1000 for k, v in s["phases_us"].items()}
    assert 20 <= phases["forward"] < 20 * 1.5 and 40 <= phases["backward"] < 40 * 1.5


def test_one_worker_bandwidth_is_every_workers_ring_link(capsys: pytest.CaptureFixture[str]) -> None:
    """A ring's links are all workers' links: one ``--worker-bandwidth`` rate is the same ring as
    that rate given as ``--bandwidth``, and slower than the faster link it overrides (ddp-slow's
    two buckets take measurably longer at 10 Mbit/s than at 100)."""
    curves = {}
    for name, extra in {"stated": ["--bandwidth", "100Mbit/s", "--worker-bandwidth", "10Mbit/s"],
                        "same": ["--bandwidth", "10Mbit/s"], "fast": ["--bandwidth", "100Mbit/s"]}.items():
        code, out, _ = _run([*PREDICT, str(DDP), "--json", *extra], capsys)
        assert code == 0, name
        curves[name] = {p["workers"]: p["throughput"] for p in json.loads(out)["curve"]}
    assert curves["stated"] == pytest.approx(curves["same"], rel=1e-9)
    assert curves["stated"][2] < 0.9 * curves["fast"][2]


def test_workers_that_share_a_hosts_cores_are_stated_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    """``--model-param host_cores=1`` on the MWMS profile (TF's ring: ``host_cpu_s`` a step and
    ``host_cpu_s_per_mb`` per MB all-reduced, per worker beyond the cores; the CPU bound left out
    here): W = 1 keeps its rate, W = 2 one worker too many, so its step is that much longer (2 x
    32 examples a step, whatever the predicted step is); the JSON and the table say which host the
    prediction assumed, and a prediction that states none says nothing."""
    unbound = ["--model-param", "transfer_cpu_s_per_mb=0", "--model-param", "transfer_cpu_s_per_call=0",
               "--model-param", "collective_cpu_s=0"]
    base = [*PREDICT, str(MWMS), "--bandwidth", "50Mbit/s", "--model-error", "off", *unbound]
    _, out, _ = _run([*base, "--json"], capsys)
    plain = json.loads(out)
    assert "host" not in plain["model_details"] and plain["model_params"]["host_cores"] is None
    code, out, _ = _run([*base, "--json", "--model-param", "host_cores=1"], capsys)
    assert code == 0
    shared = json.loads(out)
    host = shared["model_details"]["host"]
    megabytes = host["megabytes"]  # the gradients and Keras's metric reductions, bytes / 1e6
    assert megabytes == pytest.approx((sum(plain["model_details"]["buckets"]["bytes"])
                                       + sum(plain["model_details"]["collectives"]["bytes"])) / 1e6, rel=1e-12)
    extra = GRPC_RING.host_cpu_s + GRPC_RING.host_cpu_s_per_mb * megabytes
    assert {k: host[k] for k in ("cores", "workers_per_host", "host_cpu_s", "host_cpu_s_per_mb",
                                 "transfer_cpu_s_per_mb", "transfer_cpu_s_per_call")} == {
        "cores": 1, "workers_per_host": None, "host_cpu_s": GRPC_RING.host_cpu_s,
        "host_cpu_s_per_mb": GRPC_RING.host_cpu_s_per_mb, "transfer_cpu_s_per_mb": 0.0, "transfer_cpu_s_per_call": 0.0}
    (one, two), (one_h, two_h) = ([p["throughput"] for p in doc["curve"]] for doc in (plain, shared))
    assert one_h == pytest.approx(one, rel=1e-12)
    assert 64 / two_h == pytest.approx(64 / two + extra, rel=1e-9)
    _, table, _ = _run([*base, "--model-param", "host_cores=1"], capsys)
    assert (f"host: workers share 1 core(s), all on one host; each step {GRPC_RING.host_cpu_s * 1e3:g} ms + "
            f"{GRPC_RING.host_cpu_s_per_mb * 1e3:g} ms per MB all-reduced longer per worker beyond them") in table
    _, bound, _ = _run([*PREDICT, str(MWMS), "--bandwidth", "50Mbit/s", "--model-error", "off",
                        "--model-param", "host_cores=1"], capsys)
    assert (f"and no shorter than the CPU its workers need (a worker's own a step: not measured; "
            f"{GRPC_RING.transfer_cpu_s_per_call * 1e3:g} ms an all-reduce, "
            f"{GRPC_RING.collective_cpu_s * 1e3:g} ms each other collective and "
            f"{GRPC_RING.transfer_cpu_s_per_mb * 1e3:g} ms per MB)") in bound
    assert f"(step^{GRPC_RING.host_bound_exponent:g} + bound^{GRPC_RING.host_bound_exponent:g})" in bound
