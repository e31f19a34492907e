"""The DTS role allocation: the retries improve on the first greedy path, an unbounded search finds
the brute-force optimum, and a cluster that cannot hold a role is an error naming it."""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest

from advisor.core.dts import Architecture, allocate, parse_spec
from advisor.core.dts.allocation import nominal_rates
from advisor.core.dts.architectures import CLIENT, EDGE, SERVER, Assignment, evaluate, role_demands
from advisor.core.dts.spec import expand_processors
from advisor.errors import ModelInputError
from tests.core.test_dts_equations import proc

DNN = {"layers": 4, "gflop_per_sample": 1.0, "memory_gb": 8.0, "client_gflop_per_sample": 0.6,
       "server_gflop_per_sample": 0.4, "client_memory_gb": 4.0, "server_memory_gb": 6.0,
       "weights_gb": 2.0, "client_weights_gb": 0.5, "intermediate_gb": 0.05}


def spec(processors: list[dict[str, Any]], clients: int = 2, **extra: Any) -> Any:
    return parse_spec({"cluster": {"processors": processors}, "dnn": DNN,
                       "training": {"sample_gb": 0.01, "batch_size": 10, "batches_per_client": 5, "epochs": 1,
                                    "clients": clients}, **extra})


def brute_force(arch: Architecture, s: Any) -> float:
    """The fastest per-batch time over every injective assignment of processors to roles that fits in memory."""
    procs = [p for _, p in expand_processors(s.cluster)]
    need = {d.kind: d.memory_gb for d in role_demands(arch, s)}
    n = s.training.clients
    kinds = [SERVER] + [CLIENT] * n + ([EDGE] * n if arch is Architecture.FSL else [])
    g, b = nominal_rates(s)
    best = float("inf")
    for perm in permutations(range(len(procs)), len(kinds)):
        if any(procs[i].memory_gb < need[k] for i, k in zip(perm, kinds, strict=True)):
            continue
        roles = [(SERVER, perm[:1]), (CLIENT, perm[1:1 + n])] + ([(EDGE, perm[1 + n:])] if arch is Architecture.FSL
                                                               else [])
        best = min(best, float(evaluate(arch, s, Assignment(tuple(roles)), g, b).per_batch[0]))
    return best


# Equal links (so that the order within a role kind cannot matter), mixed power and memory: the
# 8 GB DNN fits on three processors only, the 6 GB server side on three, the 4 GB client side on five.
MIXED = [proc("a", 100, 2, 3), proc("b", 80, 2, 10), proc("c", 60, 2, 5), proc("d", 40, 2, 10),
         proc("e", 30, 2, 4.5), proc("f", 20, 2, 8)]


@pytest.mark.parametrize("arch", [Architecture.FL, Architecture.SL, Architecture.PSL, Architecture.FSL])
def test_an_unbounded_search_finds_the_brute_force_optimum(arch: Architecture) -> None:
    s = spec(MIXED)
    found = allocate(arch, s, max_paths=10**6)
    assert found.seconds_per_batch == pytest.approx(brute_force(arch, s), rel=1e-12)
    assert allocate(arch, s, max_paths=1).seconds_per_batch >= found.seconds_per_batch


def test_retrying_the_slowest_role_beats_the_first_greedy_path() -> None:
    # FL with 0.2 GB weights: a client computes 10 x 1 x 3 = 30 GFLOP per batch (0.43 s at the mean
    # 70 GFLOP/s) and exchanges 0.4 GB (0.1 s at the mean 3.75 GB/s), so clients are placed first and
    # by GFLOP/s: a and b. But a's link is 0.01 GB/s: its exchange takes 40 s and sets the max. The
    # first retry forbids a as a client (the largest delay): b and c become the clients, and the
    # batch takes 30 / 80 + 0.4 / 5 + the average (2 x 0.05 GFLOP / 10) = 0.375 + 0.08 + 0.01 = 0.465 s.
    s = spec([proc("a", 100, 0.01, 10), proc("b", 90, 5, 10), proc("c", 80, 5, 10), proc("d", 10, 5, 10)])
    s = parse_spec(s.model_dump() | {"dnn": DNN | {"weights_gb": 0.2, "client_weights_gb": 0.05}})
    first = allocate(Architecture.FL, s, max_paths=1)
    assert set(first.assignment.of(CLIENT)) == {0, 1}
    assert first.seconds_per_batch > 40
    better = allocate(Architecture.FL, s, max_paths=2)
    assert set(better.assignment.of(CLIENT)) == {1, 2} and better.assignment.of(SERVER) == (3,)
    assert better.seconds_per_batch == pytest.approx(0.465)
    assert better.paths == 2


def test_the_spec_bounds_the_paths() -> None:
    s = spec(MIXED, max_paths=3)
    assert allocate(Architecture.FSL, s).paths <= 3
    assert allocate(Architecture.FSL, s, max_paths=50).paths > 3


def test_a_client_role_no_processor_can_hold_names_the_processor_and_the_role() -> None:
    # Every processor has 6 GB; an FL client must hold the whole 8 GB DNN.
    s = spec([proc("p1", 100, 1, 6), proc("p2", 100, 1, 5), proc("p3", 100, 1, 6)])
    with pytest.raises(ModelInputError) as err:
        allocate(Architecture.FL, s)
    msg = str(err.value)
    assert err.value.model == "dts"
    assert "FL" in msg and "'p1'" in msg and "'client'" in msg and "8 GB" in msg and "6 GB" in msg


def test_a_server_side_too_big_for_the_one_large_processor_left() -> None:
    # SL's server side needs 6 GB: only big (7 GB) can take it; 2 clients of 4 GB fit on the rest.
    # With the server side at 7.5 GB none can, and the closest (big, 7 GB) is named.
    ok = spec([proc("big", 10, 1, 7), proc("x", 100, 1, 4), proc("y", 100, 1, 4)])
    assert allocate(Architecture.SL, ok).assignment.of(SERVER) == (0,)
    bad = parse_spec(ok.model_dump() | {"dnn": DNN | {"server_memory_gb": 7.5}})
    with pytest.raises(ModelInputError, match=r"SL: processor 'big' has 7 GB .* role 'server' needs 7.5 GB"):
        allocate(Architecture.SL, bad)


def test_a_pipeline_that_does_not_fit_in_all_memory() -> None:
    # 4 layers of 2 GB; the processors hold 1 + 1 + 0 layers.
    s = spec([proc("p1", 100, 1, 3), proc("p2", 100, 1, 2.5), proc("p3", 100, 1, 1)])
    with pytest.raises(ModelInputError, match=r"PL: .*4 layers needs 2 GB .* hold 2; the largest, 'p1', has 3 GB"):
        allocate(Architecture.PL, s)


def test_fsl_needs_2n_plus_1_processors() -> None:
    s = spec([proc("p", 100, 1, 10, ) | {"count": 4}])
    with pytest.raises(ModelInputError, match=r"FSL: needs 5 processors \(2 clients \+ 2 edge servers \+ 1 server\)"):
        allocate(Architecture.FSL, s)


def test_the_greedy_pass_leaves_the_memory_a_later_role_needs() -> None:
    # SL with a 4 GFLOP/sample server side: the server does 2 clients x 10 x 4 x 3 = 240 GFLOP per batch
    # (2.06 s at the mean 116.7 GFLOP/s, + 2 GB of split traffic at 1 GB/s), a client 18 GFLOP (0.15 s,
    # + 2.1 GB), so the server is placed first and by GFLOP/s would take 'big'. But the two clients
    # need 6 GB each and only 'big' and 'x' have it, so the server must take 'y' (2 GB is enough for
    # its 1 GB side) -- in the first pass, not after a pass that got stuck.
    s = spec([proc("big", 200, 1, 7), proc("x", 100, 1, 7), proc("y", 50, 1, 2)])
    s = parse_spec(s.model_dump() | {"dnn": DNN | {"server_memory_gb": 1.0, "client_memory_gb": 6.0,
                                                   "server_gflop_per_sample": 4.0}})
    found = allocate(Architecture.SL, s, max_paths=1)
    assert found.passes == 1 and found.assignment.of(SERVER) == (2,)
    assert set(found.assignment.of(CLIENT)) == {0, 1}
