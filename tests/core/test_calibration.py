"""Calibration: the link replay by hand, pinned to the simulator, and recovery of known values."""

from __future__ import annotations

import pytest

from advisor.core.calibration import CalibrationError, calibrate, replay_link
from advisor.core.profile import build_profile
from advisor.core.sim_types import NetworkModel, SimulationSettings
from advisor.core.models.ps_des.simulator import simulate
from tests.factories import one_layer_doc

RATE = 8e6  # 8 Mbit/s: one byte takes 1 us


def test_fifo_replay_by_hand() -> None:
    # A (1000 B) and B (500 B) requested at 0: A until 1000 us, then B until 1500 us
    assert replay_link([0, 0], [1000, 500], RATE, None) == [1000, 1500]
    # B requested at 2000 us, after the link went idle: it starts then
    assert replay_link([0, 2000], [1000, 500], RATE, None) == [1000, 2500]
    assert replay_link([5, 0], [0, 10], RATE, None) == [5, 10]  # a 0-byte stream ends at its request


def test_window_replay_by_hand() -> None:
    # WIN = 400 B: A sends 400 (to 400 us), B sends 400 (to 800), A its remaining 600 (to 1400),
    # B its remaining 100 (to 1500): second services wait behind first ones, in preemption order
    assert replay_link([0, 0], [1000, 500], RATE, 400) == [1400, 1500]
    # a stream no larger than WIN finishes in its first service: A (300 B) to 300 us; B sends
    # 400 to 700 us, then its remaining 100 to 800 us
    assert replay_link([0, 0], [300, 500], RATE, 400) == [300, 800]


def _roots_profile(sizes: list[int]) -> object:
    ops = [{"name": f"t{i}", "resource": "downlink", "ps": 0, "bytes": b} for i, b in enumerate(sizes)]
    ops.append({"name": "w", "resource": "worker", "deps": [f"t{i}" for i in range(len(sizes))]})
    n = len(ops)
    return build_profile(job={"batch_size": 1}, ops=ops, steps=[{"index": 0, "start_us": [0] * n, "duration_us": [1] * n}])


@pytest.mark.parametrize("win", [None, 3e5, 1e6])
def test_replay_agrees_with_the_simulator(win: float | None) -> None:
    sizes = [500_000, 2_000_000, 100_000, 1_200_000, 0]
    profile = _roots_profile(sizes)
    result = simulate(profile, NetworkModel(bandwidth_bps=1e8, win_bytes=win),
                      SimulationSettings(workers=1, steps=1, warmup_steps=0, record_timeline=True))
    simulated = {}
    for ev in result.timeline or ():
        if ev.op.startswith("t"):
            simulated[ev.op] = max(simulated.get(ev.op, 0.0), ev.end_s * 1e6)
    replayed = replay_link([0.0] * len(sizes), sizes, 1e8, win)
    for i, size in enumerate(sizes):
        if size:
            assert simulated[f"t{i}"] == pytest.approx(replayed[i], rel=1e-6), (win, i)


def test_calibration_recovers_known_parameters() -> None:
    # make recorded ends from the model itself: WIN 64 kB, goodput 0.9, alpha 0.002 us/B, beta 300 us
    alpha, beta, win, goodput, bw = 0.002, 300.0, 64e3, 0.9, 1e8
    doc = one_layer_doc(pull_bytes=200_000, push_bytes=150_000, steps=1)
    doc["ops"].append({"name": "pull2", "resource": "downlink", "ps": 0, "bytes": 90_000, "deps": ["ps0:read"]})
    doc["ops"][2]["deps"] = ["pull", "pull2"]
    step = doc["steps"][0]
    step["start_us"].append(10.0)
    step["duration_us"].append(0.0)
    starts = [10.0, 10.0]
    net = replay_link(starts, [200_000, 90_000], bw * goodput, win)
    ends = [n + alpha * b + beta for n, b in zip(net, [200_000, 90_000])]
    step["duration_us"][1], step["duration_us"][5] = ends[0] - 10.0, ends[1] - 10.0
    push_net = replay_link([step["start_us"][3]], [150_000], bw * goodput, win)[0]
    step["duration_us"][3] = push_net + alpha * 150_000 + beta - step["start_us"][3]
    doc["job"]["recorded_bandwidth_bps"] = bw
    c = calibrate(build_profile(**doc))
    assert (c.win_bytes, c.goodput) == (win, goodput)
    assert c.alpha_us_per_byte == pytest.approx(alpha, rel=1e-6) and c.beta_us == pytest.approx(beta, rel=1e-6)
    assert c.mean_abs_error_us == pytest.approx(0.0, abs=1e-6)


def test_calibration_needs_the_recorded_bandwidth() -> None:
    doc = one_layer_doc()
    del doc["job"]["recorded_bandwidth_bps"]
    with pytest.raises(CalibrationError, match="recorded at"):
        calibrate(build_profile(**doc))
    assert calibrate(build_profile(**doc), bandwidth_bps=8e7).transfers == 4  # 2 steps x (pull, push)


def test_calibration_on_a_real_trace_fits_within_a_few_percent() -> None:
    from tests.conftest import ps_async_data
    from advisor.importers.loader import load_profile

    c = calibrate(load_profile(ps_async_data("condensed", "cubic", "mlp_bw100.json.gz"), bandwidth_bps=1e8))
    # the paper's Table 1 reports 0.35-2.8 % median end-time error on its clusters
    assert c.median_rel_error < 0.05
    assert 0.85 <= c.goodput <= 1.0
