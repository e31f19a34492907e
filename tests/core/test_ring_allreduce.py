"""The ring all-reduce model against hand-computed steps, closed forms and invariants.

Synthetic profiles (``_backprop``) record a parameter-server step: the PS reads the variable, the
worker pulls it (a long pull, which an all-reduce job does not do), computes forward and one
backward op per gradient, pushes each gradient as its backward op ends, and the PS applies the
update after the last push. Every expected value below is derived by hand in the comment beside it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs, Samples
from advisor.core.models.ring_allreduce import HIERARCHICAL, MODELS, RING, HierarchicalParams, RingParams
from advisor.core.models.ring_allreduce.model import FRAMEWORKS, GENERIC, GLOO
from advisor.core.models.ring_allreduce.trace import bucket_plan, step_costs
from advisor.core.profile import Profile, ProgramKind, build_profile
from advisor.core.sim_types import NetworkModel
from advisor.errors import ModelInputError
from tests.conftest import ps_async_data
from tests.factories import one_layer

@pytest.fixture(autouse=True)
def _generic_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-computed cases here are of the ring's equations with the figures each test states
    (one-way goodput both ways, no collectives besides the gradients'): their synthetic PS profiles
    take the framework-free figures, not TensorFlow's ring that a PS trace maps to
    (tests/core/test_ring_frameworks.py checks that mapping)."""
    monkeypatch.setitem(FRAMEWORKS, ProgramKind.TF_PS, GENERIC)


RATE = 1e8  # bit/s
LAT = 50e-6  # s
MB = 1_000_000


def _backprop(
    fwd_us: float = 1000.0,
    bwd_us: tuple[float, ...] = (2000.0,),
    grad_bytes: tuple[int, ...] = (4 * MB,),
    update_us: float = 100.0,
    pull_us: float = 50_000.0,
    steps: int = 3,
    jitter_us: float = 0.0,
) -> Profile:
    """A PS step: read, pull, fwd, bwd_1 -> grad_1, bwd_2 -> grad_2, ..., update after every push.

    Step k adds ``k * jitter_us`` to the forward op (so steps differ only when jitter is given).
    """
    ops: list[dict[str, Any]] = [
        {"name": "ps0:read", "resource": "ps", "ps": 0},
        {"name": "pull", "resource": "downlink", "ps": 0, "bytes": 1000, "deps": ["ps0:read"]},
        {"name": "worker:fwd", "resource": "worker", "deps": ["pull"]},
    ]
    prev = "worker:fwd"
    for i, _ in enumerate(bwd_us):
        ops.append({"name": f"worker:bwd{i}", "resource": "worker", "deps": [prev]})
        ops.append({"name": f"push{i}", "resource": "uplink", "ps": 0, "bytes": grad_bytes[i], "deps": [f"worker:bwd{i}"]})
        prev = f"worker:bwd{i}"
    ops.append({"name": "ps0:update", "resource": "ps", "ps": 0, "deps": [f"push{i}" for i in range(len(bwd_us))]})
    timings = []
    for k in range(steps):
        fwd = fwd_us + k * jitter_us
        start = {"ps0:read": 0.0, "pull": 10.0, "worker:fwd": 10.0 + pull_us}
        dur = {"ps0:read": 10.0, "pull": pull_us, "worker:fwd": fwd}
        t = 10.0 + pull_us + fwd
        for i, b in enumerate(bwd_us):
            start[f"worker:bwd{i}"], dur[f"worker:bwd{i}"] = t, b
            t += b
            start[f"push{i}"], dur[f"push{i}"] = t, 500.0
        start["ps0:update"], dur["ps0:update"] = t + 500.0, update_us
        names = [op["name"] for op in ops]
        timings.append({"index": k, "start_us": [start[n] for n in names], "duration_us": [dur[n] for n in names]})
    return build_profile(job={"model": "backprop", "batch_size": 8}, ops=ops, steps=timings)


def _inputs(profile: Profile, **kwargs: Any) -> ModelInputs:
    return ModelInputs(profile=profile, network=NetworkModel(bandwidth_bps=RATE), **kwargs)


def _mean_step_s(samples: Samples) -> float:
    """Seconds per synchronous step: the last worker to finish ``steps`` steps took until_s."""
    return samples.until_s / samples.steps


def _throughput(samples: Samples) -> float:
    """Examples/s from time 0: every step ended by until_s, times the batch."""
    return sum(len(e) for e in samples.step_ends_s) * samples.batch_size / samples.until_s


def _closed_form(workers: int, nbytes: float, rate: float = RATE, latency: float = LAT) -> float:
    """The ring all-reduce time: 2(W-1) rounds, each the latency plus bytes/W over the link."""
    return 2 * (workers - 1) * (latency + 8 * nbytes / (workers * rate))


# --- no overlap: the closed form ------------------------------------------------------------

@pytest.mark.parametrize("workers", [2, 3, 4, 8, 32])
def test_one_bucket_after_all_compute_is_the_closed_form(workers: int) -> None:
    # The only gradient (4 MB) is ready when backward ends, so nothing overlaps: a step is
    # compute (fwd 1 ms + bwd 2 ms; the 50 ms pull is not an all-reduce cost) + the ring + the
    # update (0.1 ms). E.g. W = 4: 2*3*(50e-6 + 3.2e7 bit / (4 * 1e8 bit/s)) = 6 * 0.08005 = 0.4803 s.
    run = RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), workers, seed=1)
    comm = _mean_step_s(run.advance(40)) - 0.003 - 0.0001
    assert comm == pytest.approx(_closed_form(workers, 4 * MB), rel=0.01)
    if workers == 4:
        assert comm == pytest.approx(0.4803, rel=1e-9)


@pytest.mark.parametrize(("workers", "cores", "per_host", "beyond"),
                         [(2, 2, None, 0), (4, 2, None, 2), (8, 2, None, 6), (8, 2, 3, 1), (8, 1, 4, 3), (3, 4, None, 0)])
def test_workers_beyond_a_hosts_cores_lengthen_every_step(workers: int, cores: int, per_host: int | None,
                                                          beyond: int) -> None:
    # The closed-form step above (W = 4: 0.003 + 0.4803 + 0.0001 s) plus 20 ms for each worker
    # on the busiest host beyond its cores: W = 8 on one 2-core host 6 x 20 ms; 3 a host, 1; 4 a
    # host of 1 core, 3; none up to the cores.
    params = RingParams(latency_s=LAT, host_cores=cores, workers_per_host=per_host, host_cpu_s=0.02)
    with_host = _mean_step_s(RING.start(_inputs(_backprop()), params, workers, seed=1).advance(40))
    without = _mean_step_s(RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), workers, seed=1).advance(40))
    assert with_host - without == pytest.approx(0.02 * beyond, abs=1e-9)
    if workers == 4:
        assert with_host == pytest.approx(0.003 + 0.4803 + 0.0001 + 0.04, rel=1e-9)


def test_a_hierarchical_rings_hosts_are_its_nodes() -> None:
    # 4 GPUs a node on hosts of 2 cores: W = 8 is 2 workers beyond on each node (2 x 20 ms), unless
    # the hosts are stated otherwise (all 8 on one: 6 x 20 ms)
    node = HierarchicalParams(gpus_per_node=4, host_cores=2, host_cpu_s=0.02)
    assert node.host_seconds(8) == pytest.approx(0.04) and node.host_seconds(2) == 0.0
    assert node.model_copy(update={"workers_per_host": 8}).host_seconds(8) == pytest.approx(0.12)
    assert RingParams(host_cores=2, host_cpu_s=0.02).host_seconds(8) == pytest.approx(0.12)


def test_the_host_term_grows_with_the_megabytes_all_reduced() -> None:
    # 10 ms per MB a step for each worker beyond the cores: the 4 MB gradient (this file's traces
    # take the generic figures: no other collective) at W = 8 on one 2-core host is 6 x (5 ms +
    # 10 ms x 4) longer
    params = RingParams(latency_s=LAT, host_cores=2, host_cpu_s=0.005, host_cpu_s_per_mb=0.01,
                        transfer_cpu_s_per_mb=0.0, transfer_cpu_s_per_call=0.0)
    with_host = _mean_step_s(RING.start(_inputs(_backprop()), params, 8, seed=1).advance(40))
    without = _mean_step_s(RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), 8, seed=1).advance(40))
    assert with_host - without == pytest.approx(6 * (0.005 + 0.01 * 4), rel=1e-9)
    assert params.host_seconds(8, 4.0) == pytest.approx(0.27) and params.host_seconds(2, 4.0) == 0.0


@pytest.mark.parametrize(("workers", "floor"), [(1, 0.25 / 1.6), (2, 2 * 0.5 / 1.6), (8, 8 * 0.5 / 1.6)])
def test_no_step_is_shorter_than_the_hosts_cpu_allows(workers: int, floor: float) -> None:
    # Each worker needs 0.25 s of CPU a step, 50 ms a call and 50 ms per MB it all-reduces (one
    # 4 MB bucket: 0.25 s, none alone at W = 1); 2 cores of which the workers get 80 %: a step
    # takes at least W x 0.5 s / 1.6 (W = 8: 2.5 s, against 0.56 s on the links; W = 1: 0.25 s /
    # 1.6 against 3.1 ms of compute)
    params = RingParams(latency_s=LAT, host_cores=2, host_cpu_s=0.0, host_cpu_s_per_mb=0.0,
                        transfer_cpu_s_per_mb=0.05, transfer_cpu_s_per_call=0.05, host_utilization=0.8,
                        cpu_s_per_step=0.25)
    step = _mean_step_s(RING.start(_inputs(_backprop()), params, workers, seed=1).advance(40))
    assert step == pytest.approx(floor, rel=1e-9)
    assert params.host_floor(workers, 4.0, 1) == pytest.approx(floor, rel=1e-9)
    # a host of 1000 cores lets the links set the step again (W = 8 needs 5 ms of it), and with no
    # host stated there is no bound at all
    roomy = _mean_step_s(RING.start(_inputs(_backprop()), params.model_copy(update={"host_cores": 1000}), workers,
                                    seed=1).advance(40))
    plain = _mean_step_s(RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), workers, seed=1).advance(40))
    assert roomy == pytest.approx(plain, rel=1e-9)


def test_near_the_cpu_bound_the_step_is_longer_than_both() -> None:
    # (t^k + f^k)^(1/k): a 3 s step against a 4 s bound with k = 2 is the 3-4-5 triangle's 5 s;
    # a sharp max without k, up to the host's cores, and for a huge k; nothing without a bound
    params = RingParams(host_cores=2, host_bound_exponent=2.0)
    assert float(params.bounded(np.float64(3.0), 8, 4.0)) == pytest.approx(5.0, rel=1e-12)
    assert float(params.bounded(np.float64(4.0), 8, 3.0)) == pytest.approx(5.0, rel=1e-12)
    assert float(params.bounded(np.float64(3.0), 2, 4.0)) == 4.0  # two workers on two cores: the max
    assert float(params.model_copy(update={"host_bound_exponent": None}).bounded(np.float64(3.0), 8, 4.0)) == 4.0
    assert float(params.model_copy(update={"host_bound_exponent": 1e6}).bounded(np.float64(3.0), 8, 4.0)) == 4.0
    assert float(params.bounded(np.float64(3.0), 8, 0.0)) == 3.0
    # k = 5, equal terms: 2^(1/5) longer than either, the most the turn ever adds
    five = params.model_copy(update={"host_bound_exponent": 5.0})
    assert float(five.bounded(np.float64(1.0), 8, 1.0)) == pytest.approx(2 ** 0.2, rel=1e-12)
    with pytest.raises(ValueError):
        RingParams(host_bound_exponent=0.5)  # below 1 the step would be longer than the two added
    # and so the sampled run: 8 workers on 2 cores, each needing 0.1 s of CPU a step, against the
    # step the links give (this trace's every step alike)
    need = RingParams(latency_s=LAT, host_cores=2, host_cpu_s=0.0, host_cpu_s_per_mb=0.0, transfer_cpu_s_per_mb=0.0,
                      transfer_cpu_s_per_call=0.0, cpu_s_per_step=0.1)
    plain = _mean_step_s(RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), 8, seed=1).advance(40))
    floor = need.host_floor(8)
    turned = _mean_step_s(RING.start(_inputs(_backprop()), need.model_copy(update={"host_bound_exponent": 2.0}), 8,
                                     seed=1).advance(40))
    assert turned == pytest.approx(math.hypot(plain, floor), rel=1e-9)


def test_the_steps_small_collectives_cost_their_own_cpu() -> None:
    # a step of one 4 MB bucket and two metric all-reduces: 50 ms for the bucket's call, 10 ms for
    # each small one, 50 ms per MB and 0.25 s of the worker's own; 8 workers on 2 cores at 80 %
    params = RingParams(host_cores=2, transfer_cpu_s_per_mb=0.05, transfer_cpu_s_per_call=0.05,
                        collective_cpu_s=0.01, host_utilization=0.8, cpu_s_per_step=0.25)
    assert params.host_floor(8, 4.0, 3, 2) == pytest.approx(8 * (0.25 + 0.05 + 2 * 0.01 + 0.2) / 1.6, rel=1e-12)
    # unset, a small collective costs what any all-reduce does
    unset = params.model_copy(update={"collective_cpu_s": None})
    assert unset.host_floor(8, 4.0, 3, 2) == pytest.approx(8 * (0.25 + 3 * 0.05 + 0.2) / 1.6, rel=1e-12)


def test_the_profiles_measured_cpu_is_the_bound_unless_stated() -> None:
    # an all-reduce profile's job.cpu_s_per_step (the hook's measurement) fills cpu_s_per_step when
    # unset; a stated value wins; a PS profile cannot carry one
    profile = _backprop()
    mwms = profile.model_copy(update={"job": profile.job.model_copy(update={"kind": ProgramKind.TF_MWMS,
                                                                           "cpu_s_per_step": 0.25})})
    assert RING.resolved(_inputs(mwms), RingParams()).cpu_s_per_step == 0.25
    assert RING.resolved(_inputs(mwms), RingParams(cpu_s_per_step=0.1)).cpu_s_per_step == 0.1
    assert RING.resolved(_inputs(profile), RingParams()).cpu_s_per_step is None
    with pytest.raises(ValueError, match="job.cpu_s_per_step is for all-reduce programs"):
        Profile.model_validate({**json.loads(profile.model_dump_json()),
                                "job": {**json.loads(profile.job.model_dump_json()), "cpu_s_per_step": 0.2}})


def test_the_host_term_needs_the_hosts_cores() -> None:
    # host_cpu_s alone states no placement: every worker keeps cores of its own
    alone = RING.start(_inputs(_backprop()), RingParams(latency_s=LAT, host_cpu_s=0.5), 8, seed=1).advance(20)
    plain = RING.start(_inputs(_backprop()), RingParams(latency_s=LAT), 8, seed=1).advance(20)
    assert _mean_step_s(alone) == pytest.approx(_mean_step_s(plain), rel=1e-12)
    for bad in ({"host_cores": 0}, {"workers_per_host": 0}, {"host_cpu_s": -1e-3}, {"host_cpu_s_per_mb": -1.0},
                {"transfer_cpu_s_per_mb": -1.0}, {"host_utilization": 0.0}, {"host_utilization": 1.5},
                {"cpu_s_per_step": -0.1}, {"collective_cpu_s": -1e-3}, {"host_bound_exponent": 0.5}):
        with pytest.raises(ModelInputError, match=next(iter(bad))):
            registry.params_for(RING, bad)


def test_each_bucket_pays_the_latency_of_its_rounds() -> None:
    # Two 3 MB gradients both ready at the end (the second backward op is 0 us), bucket cap
    # 2 MiB: each fills a bucket alone, reduced one after the other. At W = 4 with a 1 ms
    # latency: 2 buckets x 6 rounds x 1 ms + 6 x 6e6 B x 8 / (4 x 1e8) = 0.012 + 0.72 = 0.732 s.
    profile = _backprop(bwd_us=(2000.0, 0.0), grad_bytes=(3 * MB, 3 * MB))
    run = RING.start(_inputs(profile), RingParams(bucket_mb=2, latency_s=1e-3), 4, seed=0)
    assert _mean_step_s(run.advance(20)) - 0.003 - 0.0001 == pytest.approx(0.732, rel=1e-9)


# --- overlap: between max(compute, communication) and their sum -----------------------------

@pytest.mark.parametrize(
    ("nbytes", "expected_s"),
    [
        # T = 2 * (50e-6 + 8e6 / 2e8) = 0.0801 s per 1 MB bucket. Bucket 1 ready at 21 ms
        # (fwd 1 + bwd 20), ends at 101.1 ms; bucket 2 ready at 41 ms waits for it, ends at
        # 181.2 ms; + update 0.1 ms = 0.1813 s. Communication-bound.
        (1 * MB, 0.1813),
        # T = 2 * (50e-6 + 8e5 / 2e8) = 0.0081 s per 100 kB bucket: bucket 1 ends at 29.1 ms,
        # bucket 2 (ready at 41 ms) at 49.1 ms; + 0.1 = 0.0492 s. Compute-bound, tail exposed.
        (100_000, 0.0492),
    ],
)
def test_overlapped_buckets_fall_between_max_and_sum(nbytes: int, expected_s: float) -> None:
    # A 0.05 MiB (52 429 B) cap puts each gradient in a bucket of its own.
    profile = _backprop(bwd_us=(20_000.0, 20_000.0), grad_bytes=(nbytes, nbytes))
    run = RING.start(_inputs(profile), RingParams(bucket_mb=0.05, latency_s=LAT), 2, seed=0)
    step = _mean_step_s(run.advance(30))
    assert step == pytest.approx(expected_s, rel=1e-9)
    compute = 0.041 + 0.0001
    comm = 2 * _closed_form(2, nbytes)
    assert max(compute, comm) <= step <= compute + comm


def test_the_default_bucket_holds_both_gradients_and_loses_the_overlap() -> None:
    # With DDP's 25 MiB cap both 1 MB gradients share one bucket, ready at 41 ms: 41 ms +
    # 2 * (50e-6 + 1.6e7 / 2e8) = 41 + 160.1 ms, + 0.1 ms update = 0.2012 s (the sum, no overlap).
    profile = _backprop(bwd_us=(20_000.0, 20_000.0), grad_bytes=(MB, MB))
    run = RING.start(_inputs(profile), RingParams(latency_s=LAT), 2, seed=0)
    assert _mean_step_s(run.advance(30)) == pytest.approx(0.2012, rel=1e-9)


# --- buckets --------------------------------------------------------------------------------

def test_buckets_fill_in_ready_order_and_close_at_the_cap() -> None:
    # Four 1 MiB gradients ready at the ends of bwd0..bwd3. DDP appends in ready order and
    # closes a bucket once it holds >= the cap: cap 1.5 MiB -> [0, 1], [2, 3]; cap 2 -> same;
    # cap 25 -> one bucket; cap 0.5 -> one bucket each.
    mib = 1024 * 1024
    profile = _backprop(bwd_us=(1.0, 1.0, 1.0, 1.0), grad_bytes=(mib,) * 4)
    costs = step_costs(profile)
    for cap, groups in ((1.5, [[0, 1], [2, 3]]), (2.0, [[0, 1], [2, 3]]), (25.0, [[0, 1, 2, 3]]),
                        (0.5, [[0], [1], [2], [3]])):
        plan = bucket_plan(costs, cap * mib)
        assert [m.tolist() for m in plan.members] == groups
        assert plan.bytes.tolist() == [len(g) * mib for g in groups]


def test_trace_costs_drop_pulls_and_move_the_update_after_the_buckets() -> None:
    # one_layer: read 10, pull 100, compute 50 + k, push 100, update 20 (us). An all-reduce
    # step keeps only the compute (50 + k us, gradient ready at its end) and the update (20 us).
    costs = step_costs(one_layer(steps=2))
    assert costs.compute_s.tolist() == pytest.approx([50e-6, 51e-6])
    assert costs.update_s.tolist() == pytest.approx([20e-6, 20e-6])
    assert costs.ready_s[:, 0].tolist() == pytest.approx([50e-6, 51e-6])
    assert costs.grad_names == ("push",)


def test_prepared_profiles_keep_the_client_gap_and_drop_the_ps_parsing() -> None:
    # As advice.prepare_profile prepares a trace for the PS model: the parsing overhead split
    # out of each transfer (PS-specific, dropped here) and the client's gap between steps (a
    # worker op after everything, so after the all-reduce: wall 310 us - span 280 us = 30 us on
    # top of the 20 us update in step 0; 311 - 281 = 30 us in step 1).
    from advisor.core.preprocess import add_client_gap, split_parsing_overhead
    from tests.factories import one_layer_doc

    doc = one_layer_doc(steps=2)
    for k, step in enumerate(doc["steps"]):
        step["wall_us"] = 310.0 + k
    prepared = add_client_gap(split_parsing_overhead(build_profile(**doc), 0.01, 5.0))
    costs = step_costs(prepared)
    assert costs.compute_s.tolist() == pytest.approx([50e-6, 51e-6])
    assert costs.update_s.tolist() == pytest.approx([50e-6, 50e-6])
    assert costs.ready_s[:, 0].tolist() == pytest.approx([50e-6, 51e-6])


# --- W = 1, determinism, invariants ---------------------------------------------------------

def test_one_worker_runs_at_the_traces_own_compute_rate() -> None:
    # one_layer steps: compute 50 or 51 us + update 20 us, drawn uniformly: 70.5 us per step on
    # average, batch 4 -> 4 / 70.5e-6 = 56 738 ex/s. No ring at W = 1 (2(W-1) = 0 rounds).
    run = RING.start(_inputs(one_layer(steps=2)), RingParams(), 1, seed=3)
    assert _throughput(run.advance(20_000)) == pytest.approx(4 / 70.5e-6, rel=2e-3)
    exact = RING.start(_inputs(_backprop()), RingParams(), 1, seed=3)  # 1 + 2 + 0.1 ms, batch 8
    assert _throughput(exact.advance(50)) == pytest.approx(8 / 0.0031, rel=1e-12)


def test_same_seed_same_samples_and_chunks_do_not_matter() -> None:
    profile = _backprop(steps=10, jitter_us=300.0, bwd_us=(2000.0, 1000.0), grad_bytes=(MB, 2 * MB))
    inputs = _inputs(profile)
    one = RING.start(inputs, RingParams(), 4, seed=7).advance(300)
    two = RING.start(inputs, RingParams(), 4, seed=7).advance(300)
    chunked = RING.start(inputs, RingParams(), 4, seed=7)
    chunked.advance(37)
    chunked.advance(150)
    three = chunked.advance(300)
    other = RING.start(inputs, RingParams(), 4, seed=8).advance(300)
    for a, b in zip(one.step_ends_s, two.step_ends_s, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(one.step_ends_s, three.step_ends_s, strict=True):
        np.testing.assert_array_equal(a, b)
    assert one.until_s == three.until_s
    assert other.until_s != one.until_s


def test_the_step_is_set_by_the_slowest_of_w_draws() -> None:
    # Forward 1 ms + k ms in step k = 0..9, backward 2 ms, update 0.1 ms, a 1 kB gradient. The
    # expected step time grows with W as the mean of the max of W uniform draws of k:
    # E[max] = sum_{j=1..9} P(max >= j) = sum_j (1 - (j/10)^W), so W = 8 waits longer than W = 2.
    profile = _backprop(steps=10, jitter_us=1000.0, grad_bytes=(1000,))
    steps = {w: _mean_step_s(RING.start(_inputs(profile), RingParams(), w, seed=0).advance(4000)) for w in (1, 2, 8)}
    for w, step in steps.items():
        e_max_k = sum(1 - (j / 10) ** w for j in range(1, 10))
        comm = _closed_form(w, 1000)
        assert step == pytest.approx(0.003 + 1e-3 * e_max_k + comm + 0.0001, rel=0.02)
    assert steps[1] < steps[2] < steps[8]


def _invariants(profile: Profile, inputs: ModelInputs, model: Any, params: Any, workers: list[int]) -> None:
    single = _throughput(model.start(inputs, params, 1, seed=0).advance(400))
    assert model.link_bound(inputs, params, 1) == math.inf
    for w in workers:
        thr = _throughput(model.start(inputs, params, w, seed=0).advance(400))
        assert 0 < thr <= w * single * 1.001
        assert thr <= model.link_bound(inputs, params, w)


def test_invariants_on_synthetic_profiles() -> None:
    profile = _backprop(steps=10, jitter_us=500.0, bwd_us=(5000.0, 3000.0), grad_bytes=(2 * MB, 100_000))
    inputs = _inputs(profile, goodput=0.9)
    _invariants(profile, inputs, RING, RingParams(bucket_mb=1), [2, 3, 4, 8, 16, 32])
    _invariants(profile, inputs, HIERARCHICAL, HierarchicalParams(gpus_per_node=4), [2, 4, 5, 8, 16, 32])


def test_link_bound_is_the_ring_traffic_over_the_link() -> None:
    # 4 MB gradient, W = 4: each link carries 2 * 3/4 * 3.2e7 bits = 4.8e7 bits per step at
    # 0.5 * 1e8 bit/s (goodput 0.5): 0.96 s per step, so at most 4 * 8 / 0.96 = 33.33 ex/s.
    inputs = _inputs(_backprop(), goodput=0.5)
    assert RING.link_bound(inputs, RingParams(), 4) == pytest.approx(4 * 8 / 0.96, rel=1e-12)


# --- heterogeneous workers ------------------------------------------------------------------

def test_a_half_speed_worker_sets_the_pace() -> None:
    # Worker 1 at speed 0.5 computes 2 x 3 ms and updates in 2 x 0.1 ms; the ring waits for its
    # gradient, so every step takes 6 ms + T + 0.2 ms, with T at W = 2 = 2 * (50e-6 + 3.2e7/2e8)
    # = 0.3201 s: 0.3263 s per step.
    run = RING.start(_inputs(_backprop(), worker_speeds=(1.0, 0.5)), RingParams(), 2, seed=0)
    seen = run.advance(50)
    slow = seen.step_ends_s[1]
    assert np.diff(slow) == pytest.approx(np.full(len(slow) - 1, 0.3263), rel=1e-9)


def test_the_slowest_link_sets_the_ring_rate() -> None:
    # Worker 2's link is 5e7 bit/s: every round waits for it, so the ring is the closed form at 5e7.
    inputs = _inputs(_backprop(), worker_bandwidths_bps=(1e8, 1e8, 5e7))
    run = RING.start(inputs, RingParams(), 3, seed=0)
    assert _mean_step_s(run.advance(20)) - 0.0031 == pytest.approx(_closed_form(3, 4 * MB, rate=5e7), rel=1e-9)
    # Workers beyond the list run at the network rate: W = 2 does not include the slow link.
    run2 = RING.start(inputs, RingParams(), 2, seed=0)
    assert _mean_step_s(run2.advance(20)) - 0.0031 == pytest.approx(_closed_form(2, 4 * MB), rel=1e-9)


# --- hierarchical ---------------------------------------------------------------------------

def test_hierarchical_with_one_gpu_per_node_is_the_flat_ring() -> None:
    profile = _backprop(steps=10, jitter_us=400.0, bwd_us=(3000.0, 2000.0), grad_bytes=(3 * MB, MB))
    inputs = _inputs(profile)
    flat = RING.start(inputs, RingParams(bucket_mb=1), 6, seed=2).advance(100)
    hier = HIERARCHICAL.start(inputs, HierarchicalParams(bucket_mb=1, gpus_per_node=1), 6, seed=2).advance(100)
    for a, b in zip(flat.step_ends_s, hier.step_ends_s, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("workers", "expected_comm_s"),
    [
        # One node of 4 GPUs: a flat ring on the intra-node links (1e9 bit/s, 10 us):
        # 2*3*(10e-6 + 3.2e7 / (4 * 1e9)) = 6 * 0.00801 = 0.04806 s.
        (4, 0.04806),
        # 16 GPUs = 2 nodes of 8: reduce-scatter + all-gather inside, 2*7*(10e-6 + 3.2e7/(8e9))
        # = 14 * 0.00401 = 0.05614 s, plus the 2-node ring 2*1*(50e-6 + 3.2e7/(2 * 1e8)) = 0.3201 s.
        (16, 0.37624),
    ],
)
def test_hierarchical_closed_form(workers: int, expected_comm_s: float) -> None:
    params = HierarchicalParams(gpus_per_node=8, intra_node_bandwidth_bps=1e9, intra_node_latency_s=10e-6)
    run = HIERARCHICAL.start(_inputs(_backprop()), params, workers, seed=0)
    assert _mean_step_s(run.advance(20)) - 0.0031 == pytest.approx(expected_comm_s, rel=1e-9)


def test_hierarchical_link_bound_counts_both_levels() -> None:
    # W = 16, 8 per node: 2*7/8 * 3.2e7 / 1e9 + 2*1/2 * 3.2e7 / 1e8 = 0.056 + 0.32 = 0.376 s per
    # step at best, so 16 * 8 / 0.376 ex/s.
    params = HierarchicalParams(gpus_per_node=8, intra_node_bandwidth_bps=1e9)
    assert HIERARCHICAL.link_bound(_inputs(_backprop()), params, 16) == pytest.approx(16 * 8 / 0.376, rel=1e-12)


# --- refusals -------------------------------------------------------------------------------

def test_missing_or_invalid_inputs_are_refused_by_name() -> None:
    profile = _backprop()
    cases = [
        (ModelInputs(network=NetworkModel(bandwidth_bps=RATE)), "inputs.profile"),
        (ModelInputs(profile=profile), "inputs.network"),
        (_inputs(profile, goodput=0.0), "goodput"),
        (_inputs(profile, worker_bandwidths_bps=(1e8, 0.0)), "worker_bandwidths_bps[1]"),
        (_inputs(profile, worker_speeds=(1.0, -1.0)), "worker_speeds[1]"),
        (_inputs(_backprop(grad_bytes=(0,))), "UPLINK"),
    ]
    for inputs, field in cases:
        with pytest.raises(ModelInputError, match=f"ring-allreduce.*{field.replace('[', '.').replace(']', '.')}"):
            RING.check(inputs, RingParams())
        with pytest.raises(ModelInputError):
            RING.start(inputs, RingParams(), 2, seed=0)
    RING.check(_inputs(profile), RingParams())  # the valid case passes


def test_bad_parameters_are_refused_by_name() -> None:
    for values, field in (({"bucket_mb": 0}, "bucket_mb"), ({"latency_s": -1}, "latency_s"),
                          ({"bucket_size": 25}, "bucket_size")):
        with pytest.raises(ModelInputError, match=field):
            registry.params_for(RING, values)
    with pytest.raises(ModelInputError, match="gpus_per_node"):
        registry.params_for(HIERARCHICAL, {"gpus_per_node": 0})
    with pytest.raises(ModelInputError, match="HierarchicalParams"):
        HIERARCHICAL.check(_inputs(_backprop()), RingParams())


def test_the_package_is_registered() -> None:
    assert "advisor.core.models.ring_allreduce" in registry.MODULES
    assert [m.name for m in MODELS] == ["ring-allreduce", "ring-allreduce-hierarchical"]


# --- real traces ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp_bw100", "mlp_bw50", "cnn_bw100", "cnn_bw50"])
def test_real_traces_smoke(name: str) -> None:
    from advisor.importers.loader import load_profile

    profile = load_profile(ps_async_data("condensed", "cubic", f"{name}.json.gz"))
    bandwidth = 100e6 if name.endswith("100") else 50e6
    inputs = ModelInputs(profile=profile, network=NetworkModel(bandwidth_bps=bandwidth), goodput=0.95)
    # The trace's own compute rate, read independently of the model: every worker op of a step
    # plus the optimizer's update ops (TF names them GradientDescent), batch / mean step.
    worker = [i for i, op in enumerate(profile.ops) if op.resource.value == "worker"]
    update = [i for i, op in enumerate(profile.ops) if op.resource.value == "ps" and "GradientDescent" in op.name]
    per_step = [sum(s.duration_us[i] for i in worker + update) * 1e-6 for s in profile.steps]
    own_rate = profile.job.batch_size / float(np.mean(per_step))
    single = _throughput(RING.start(inputs, RingParams(), 1, seed=0).advance(3000))
    assert single == pytest.approx(own_rate, rel=0.03)
    _invariants(profile, inputs, RING, RingParams(), [2, 4, 8])
    _invariants(profile, inputs, HIERARCHICAL, HierarchicalParams(gpus_per_node=4), [2, 4, 8])


# --- where the samples end ----------------------------------------------------------------------

def test_the_samples_end_when_every_worker_has_ended_the_step() -> None:
    """Workers at speeds 1, 0.98, 0.96 end each step at different moments (the update, 0.1 ms
    at speed 1, runs after the common all-reduce at each worker's speed). The samples hold all
    W x N step ends, and end at the slowest worker's N-th; the window of curve.py then counts
    every timed step: W x N x batch over the span is the rate of W workers at one step time."""
    inputs = _inputs(_backprop(), worker_speeds=(1.0, 0.98, 0.96))
    seen = RING.start(inputs, RingParams(latency_s=LAT), 3, seed=0).advance(40)
    last = [float(e[-1]) for e in seen.step_ends_s]
    assert [len(e) for e in seen.step_ends_s] == [40, 40, 40] and seen.until_s == max(last) > min(last)
    from advisor.core.curve import CurveSettings, run_point

    point = run_point(RING.start(inputs, RingParams(latency_s=LAT), 3, seed=0), 3,
                      CurveSettings(workers=(3,), steps=40, warmup_steps=10))
    ends = np.array([e for e in seen.step_ends_s])
    step_s = (ends[2, -1] - ends[2, 9]) / 30  # the slowest worker's own step time
    assert point.throughput == pytest.approx(3 * 8 / step_s, rel=1e-9)


# --- which bucket layout a prediction replays, and what it reports ----------------------------

def _ddp(buckets: list[list[str]] | None) -> Profile:
    """An all-reduce profile: forward 10 ms; gradients c (1 MB), b (2 MB), a (4 MB) ready at 13,
    18, 24 ms of backward; optimizer 2 ms; recorded buckets {c, b} then {a}, or none."""
    ops: list[dict[str, Any]] = [{"name": "forward", "resource": "worker"}]
    prev = "forward"
    for name, nbytes in (("c", MB), ("b", 2 * MB), ("a", 4 * MB)):
        ops.append({"name": f"backward/{name}", "resource": "worker", "deps": [prev]})
        ops.append({"name": f"gradient/{name}", "resource": "uplink", "ps": 0, "bytes": nbytes,
                    "deps": [f"backward/{name}"]})
        prev = f"backward/{name}"
    ops.append({"name": "optimizer", "resource": "worker", "deps": [prev, "gradient/a", "gradient/b", "gradient/c"]})
    # forward, backward/c, gradient/c, backward/b, gradient/b, backward/a, gradient/a, optimizer
    start = [0.0, 10e3, 13e3, 13e3, 18e3, 18e3, 24e3, 24e3]
    duration = [10e3, 3e3, 0.0, 5e3, 0.0, 6e3, 0.0, 2e3]
    return build_profile(job={"batch_size": 8, "kind": "pytorch-ddp", "buckets": buckets}, ops=ops,
                         steps=[{"index": 0, "start_us": start, "duration_us": duration}])


@pytest.mark.parametrize(("buckets", "given", "expected", "as_used"), [
    # the framework's layout, bucket_mb unset: {c, b} = 3 MB, then {a} = 4 MB; no cap was used
    ([["gradient/c", "gradient/b"], ["gradient/a"]], {},
     {"source": "recorded", "bucket_mb": None, "count": 2, "bytes": [3 * MB, 4 * MB]}, None),
    # bucket_mb given: the model groups the 7 MB (< 25 MiB) into one bucket, whatever was recorded
    ([["gradient/c", "gradient/b"], ["gradient/a"]], {"bucket_mb": 25},
     {"source": "bucket_mb", "bucket_mb": 25.0, "count": 1, "bytes": [7 * MB]}, 25.0),
    # 2 MiB cap: c + b = 3 MB >= 2 MiB closes the first bucket, a (4 MB) fills the second
    (None, {"bucket_mb": 2}, {"source": "bucket_mb", "bucket_mb": 2.0, "count": 2, "bytes": [3 * MB, 4 * MB]}, 2.0),
    # nothing recorded, nothing given: DDP's default 25 MiB is the cap used, and reported as used
    (None, {}, {"source": "bucket_mb", "bucket_mb": 25.0, "count": 1, "bytes": [7 * MB]}, 25.0),
])
def test_the_outlook_says_which_layout_was_replayed(buckets: list[list[str]] | None, given: dict[str, float],
                                                    expected: dict[str, Any], as_used: float | None) -> None:
    inputs = _inputs(_ddp(buckets))
    outlook = RING.outlook(inputs, registry.params_for(RING, given), {1: 1.0})
    assert outlook.details["buckets"] == expected
    # a pytorch-ddp profile: the latency and two-way share left unset are gloo's, reported as used;
    # DDP runs no other collective per step; no placement on hosts stated, gloo's host figure reported
    assert outlook.params == {"bucket_mb": as_used, "latency_s": GLOO.latency_s, "two_way_share": GLOO.two_way_share,
                              "host_cores": None, "workers_per_host": None, "host_cpu_s": GLOO.host_cpu_s,
                              "host_cpu_s_per_mb": GLOO.host_cpu_s_per_mb,
                              "transfer_cpu_s_per_mb": GLOO.transfer_cpu_s_per_mb,
                              "transfer_cpu_s_per_call": GLOO.transfer_cpu_s_per_call,
                              "host_utilization": GLOO.host_utilization, "cpu_s_per_step": None,
                              "host_bound_exponent": GLOO.host_bound_exponent,
                              "collective_cpu_s": GLOO.collective_cpu_s}
    assert outlook.details["collectives"] == {"bytes": [], "source": "framework"}


def test_reported_params_reproduce_the_prediction() -> None:
    """The prediction's model_params, given back as parameters, give the same curve: unset
    (null) keeps the recorded layout, which an explicit 25 MiB default would not."""
    from advisor.core.advice import AdviceRequest, ModelChoice, advise
    from advisor.core.curve import CurveSettings

    profile = _ddp([["gradient/c", "gradient/b"], ["gradient/a"]])
    curve = CurveSettings(workers=(1, 2, 3), steps=60, warmup_steps=5)

    def predict(params: dict[str, Any]) -> Any:
        return advise(profile, AdviceRequest(network=NetworkModel(bandwidth_bps=1e9), curve=curve, side_by_side=(),
                                             model=ModelChoice("ring-allreduce", params)))

    first = predict({})
    assert first.params["bucket_mb"] is None and first.details["buckets"]["source"] == "recorded"
    again = predict(json.loads(json.dumps(dict(first.params))))  # as the controller stores and reads them
    assert [p.throughput for p in again.points] == [p.throughput for p in first.points]
    capped = predict({"bucket_mb": 25})
    assert capped.params["bucket_mb"] == 25.0 and capped.details["buckets"]["count"] == 1
    assert capped.point(2).throughput < first.point(2).throughput  # one 7 MB bucket after backward: less overlap
