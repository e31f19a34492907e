"""The dataflow replay (Huang et al., section 2) on graphs small enough to run by hand: FIFO
queues per device shared by W workers, dependency counters, zero-byte control edges,
parallel servers, recorded service order; and the model's what-ifs on a hand-made profile."""

from __future__ import annotations

import math

import pytest

from advisor.core.huang.opdb import OpDatabase, OpEntry
from advisor.core.huang.replay import KIND_DOWNLINK, KIND_PS, KIND_UPLINK, KIND_WORKER, Replay, ReplayGraph, replay
from advisor.core.models.huang_replay import DEVICE_DB, MODELS
from advisor.core.models.protocol import ModelInputs
from advisor.core.profile import Profile, build_profile
from advisor.core.sim_types import NetworkModel
from advisor.errors import ModelInputError

MODEL = MODELS[0]
RATE = 8e6  # 8 Mbit/s: 1000 bytes take 1 ms


def _graph(kind: list[int], duration_ms: list[float], nbytes: list[int], deps: list[tuple[int, ...]],
           rank: list[int] | None = None) -> ReplayGraph:
    n = len(kind)
    return ReplayGraph(
        names=tuple(f"op{i}" for i in range(n)), kind=tuple(kind), ps=(0,) * n,
        duration_s=tuple(d * 1e-3 for d in duration_ms), bits=tuple(8.0 * b for b in nbytes),
        deps=tuple(deps), rank=(tuple(rank or range(n)),),
    )


# pull 1000 B (1 ms) -> compute 2 ms -> push 500 B (0.5 ms)
CHAIN = _graph([KIND_DOWNLINK, KIND_WORKER, KIND_UPLINK], [0, 2, 0], [1000, 0, 500], [(), (0,), (1,)])


def test_one_worker_chain_by_hand() -> None:
    # 1 + 2 + 0.5 = 3.5 ms a step, steps back to back
    result = replay(CHAIN, 1, RATE, 3)
    assert result.step_ends_s[0] == pytest.approx((3.5e-3, 7.0e-3, 10.5e-3))
    assert result.events == 9  # three ops finished per step


def test_two_workers_share_the_links_in_fifo_order() -> None:
    # Both pull at 0: the downlink serves w0 0-1 ms, then w1 1-2. Compute (own device): w0 1-3,
    # w1 2-4; pushes w0 3-3.5, w1 4-4.5. Step 2: w0 pulls 3.5-4.5, computes 4.5-6.5, pushes
    # 6.5-7; w1 releases its pull at 4.5 as w0's ends: 4.5-5.5, computes 5.5-7.5, pushes 7.5-8.
    # (w0's third step pulls at 7-8 ms, after w1's second pull: nothing above changes)
    result = replay(CHAIN, 2, RATE, 3)
    assert result.step_ends_s[0][:2] == pytest.approx((3.5e-3, 7.0e-3))
    assert result.step_ends_s[1][:2] == pytest.approx((4.5e-3, 8.0e-3))


def test_a_zero_byte_transfer_finishes_when_released_without_the_link() -> None:
    # a 0-byte control edge (op1) between pull (1 ms) and compute (2 ms): 3 ms; and a second
    # worker's zero-byte edges never wait behind the first one's pull
    g = _graph([KIND_DOWNLINK, KIND_UPLINK, KIND_WORKER], [0, 0, 2], [1000, 0, 0], [(), (0,), (1,)])
    assert replay(g, 1, RATE, 1).step_ends_s[0] == pytest.approx((3e-3,))


def test_dependency_counters_wait_for_every_input() -> None:
    # compute (op2) needs two pulls of 1000 and 3000 B on one FIFO downlink: 1 + 3 = 4 ms,
    # then 1 ms of compute: 5 ms
    g = _graph([KIND_DOWNLINK, KIND_DOWNLINK, KIND_WORKER], [0, 0, 1], [1000, 3000, 0], [(), (), (0, 1)])
    assert replay(g, 1, RATE, 1).step_ends_s[0] == pytest.approx((5e-3,))


def test_parallel_servers_overlap_independent_computations() -> None:
    # after the pull (1 ms), two independent computations of 2 and 3 ms: in sequence on one
    # server 1 + 2 + 3 = 6 ms; on two servers 1 + max(2, 3) = 4 ms
    g = _graph([KIND_DOWNLINK, KIND_WORKER, KIND_WORKER], [0, 2, 3], [1000, 0, 0], [(), (0,), (0,)])
    assert replay(g, 1, RATE, 1).step_ends_s[0] == pytest.approx((6e-3,))
    assert replay(g, 1, RATE, 1, worker_threads=2).step_ends_s[0] == pytest.approx((4e-3,))


def test_recorded_order_serves_a_step_in_the_order_the_trace_saw() -> None:
    # Two pulls released together: big (4000 B, 4 ms) feeding a 1 ms op, small (1000 B, 1 ms)
    # feeding a 5 ms op. Graph order (big first): big 0-4, small 4-5, ops on one worker
    # server: op(big) 4-5, op(small) 5-10 -> 10 ms. Recorded order (small first): small 0-1,
    # op(small) 1-6; big 1-5, op(big) 6-7 -> 7 ms.
    kind = [KIND_DOWNLINK, KIND_DOWNLINK, KIND_WORKER, KIND_WORKER]
    g = _graph(kind, [0, 0, 1, 5], [4000, 1000, 0, 0], [(), (), (0,), (1,)], rank=[1, 0, 3, 2])
    fifo = Replay(_graph(kind, [0, 0, 1, 5], [4000, 1000, 0, 0], [(), (), (0,), (1,)]), 1, RATE)
    fifo.run_until(1)
    assert fifo.ends[0] == pytest.approx([10e-3])
    ordered = Replay(g, 1, RATE, recorded_order=True)
    ordered.run_until(1)
    assert ordered.ends[0] == pytest.approx([7e-3])


def test_the_ps_compute_is_one_device_shared_by_the_workers() -> None:
    # each step: PS op 2 ms, then worker op 1 ms. Two workers: PS serves w0 0-2, w1 2-4;
    # w0 computes 2-3 (ends step 1 at 3), w1 4-5. w0's second PS op waits for w1's: 4-6, then 6-7.
    g = _graph([KIND_PS, KIND_WORKER], [2, 1], [0, 0], [(), (0,)])
    result = replay(g, 2, RATE, 2)
    assert result.step_ends_s[0] == pytest.approx((3e-3, 7e-3))
    assert result.step_ends_s[1][0] == pytest.approx(5e-3)


def test_a_replay_refuses_impossible_settings() -> None:
    with pytest.raises(ValueError, match="workers"):
        Replay(CHAIN, 0, RATE)
    with pytest.raises(ValueError, match="link_bps"):
        Replay(CHAIN, 1, 0.0)


# --- the model on a hand-made profile ----------------------------------------------------------

def _profile() -> Profile:
    """pull (1000 B) -> A: MatMul on (8, 100) -> B: MatMul on (8, 300) -> push (500 B).

    Recorded: A 100 us, B 260 us. Fit over the two sizes (800 and 2400 elements):
    b = (260 - 100) / 1600 = 0.1 us per element, a = 100 - 80 = 20 us.
    """
    ops = [
        {"name": "pull", "resource": "downlink", "ps": 0, "bytes": 1000},
        {"name": "worker:A", "resource": "worker", "deps": ["pull"], "op_type": "MatMul", "input_shapes": [[8, 100]]},
        {"name": "worker:B", "resource": "worker", "deps": ["worker:A"], "op_type": "MatMul", "input_shapes": [[8, 300]]},
        {"name": "push", "resource": "uplink", "ps": 0, "bytes": 500, "deps": ["worker:B"]},
    ]
    steps = [{"index": 0, "start_us": [0, 1000, 1100, 1360], "duration_us": [1000, 100, 260, 500]}]
    return build_profile(job={"batch_size": 8}, ops=ops, steps=steps)


def _inputs(**extras: object) -> ModelInputs:
    return ModelInputs(profile=_profile(), network=NetworkModel(RATE), extras=extras)


def _step_s(inputs: ModelInputs, **params: object) -> tuple[float, int]:
    samples = MODEL.start(inputs, MODEL.Params(**params), 1, 0).advance(4)
    ends = samples.step_ends_s[0]
    return float(ends[-1] - ends[-2]), samples.batch_size


def test_the_model_replays_the_profile_by_hand() -> None:
    # 1 ms pull + 0.1 + 0.26 ms compute + 0.5 ms push = 1.86 ms
    step, batch = _step_s(_inputs())
    assert step == pytest.approx(1.86e-3) and batch == 8


def test_batch_size_what_if_by_hand() -> None:
    # batch 16: A on (16, 100) = 1600 elements -> 20 + 160 = 180 us; B on (16, 300) = 4800
    # -> 20 + 480 = 500 us; transfers unchanged: 1 + 0.18 + 0.5 + 0.5 = 2.18 ms, 16 examples a step
    step, batch = _step_s(_inputs(), batch_size=16)
    assert step == pytest.approx(2.18e-3) and batch == 16
    # the recorded batch size changes nothing
    assert _step_s(_inputs(), batch_size=8)[0] == pytest.approx(1.86e-3)


def test_a_device_database_retimes_the_compute() -> None:
    # a database from a device twice as slow on these shapes: A 200 us, B 520 us:
    # 1 + 0.2 + 0.52 + 0.5 = 2.22 ms
    entries = tuple(
        OpEntry(op_type="MatMul", device="worker", input_shapes=((8, n),), count=1, mean_us=t, min_us=t, max_us=t)
        for n, t in ((100, 200.0), (300, 520.0))
    )
    step, _ = _step_s(_inputs(**{DEVICE_DB: OpDatabase(entries, "slow")}))
    assert step == pytest.approx(2.22e-3)


def test_an_op_the_database_cannot_time_names_it() -> None:
    only_relu = OpDatabase((OpEntry(op_type="Relu", device="worker", input_shapes=((4,),), count=1,
                                    mean_us=1.0, min_us=1.0, max_us=1.0),), "other")
    inputs = _inputs(**{DEVICE_DB: only_relu})
    with pytest.raises(ModelInputError, match=r"huang-replay.*'worker:A'.*no MatMul on worker"):
        MODEL.check(inputs, MODEL.Params())
    # the paper's fallback, online profiling: the op keeps its own recorded time
    MODEL.check(inputs, MODEL.Params(fallback="trace"))
    assert _step_s(inputs, fallback="trace")[0] == pytest.approx(1.86e-3)


def test_missing_inputs_are_named() -> None:
    with pytest.raises(ModelInputError, match="needs a profile"):
        MODEL.check(ModelInputs(network=NetworkModel(RATE)), MODEL.Params())
    with pytest.raises(ModelInputError, match="bandwidth"):
        MODEL.check(ModelInputs(profile=_profile()), MODEL.Params())
    with pytest.raises(ModelInputError, match="OpDatabase"):
        MODEL.check(_inputs(**{DEVICE_DB: "db.json"}), MODEL.Params())
    with pytest.raises(ModelInputError, match="worker speeds"):
        MODEL.check(ModelInputs(profile=_profile(), network=NetworkModel(RATE), worker_speeds=(1.0, 0.0)), MODEL.Params())
    with pytest.raises(ModelInputError, match="parameter servers"):
        MODEL.check(ModelInputs(profile=_profile(), network=NetworkModel(RATE), parameter_servers=2), MODEL.Params())


def test_a_slower_worker_computes_longer() -> None:
    # speed 0.5: compute 0.36 ms -> 0.72 ms: 1 + 0.72 + 0.5 = 2.22 ms a step
    inputs = ModelInputs(profile=_profile(), network=NetworkModel(RATE), worker_speeds=(0.5,))
    assert _step_s(inputs)[0] == pytest.approx(2.22e-3)


def test_link_bound_and_throughput_within_it() -> None:
    # the busiest link carries 1000 B a step: 8e6 / 8000 = 1000 steps/s x 8 examples
    inputs = _inputs()
    assert MODEL.link_bound(inputs, MODEL.Params(), 4) == pytest.approx(8000.0)
    samples = MODEL.start(inputs, MODEL.Params(), 4, 0).advance(200)
    half = samples.until_s / 2
    done = sum(int(((e > half) & (e <= samples.until_s)).sum()) for e in samples.step_ends_s)
    assert done * samples.batch_size / half <= 8000.0 * 1.02  # window edges: at most a step per worker
    assert not math.isinf(MODEL.link_bound(inputs, MODEL.Params(batch_size=16), 1))
