"""Throughput of a synchronous run from its step logs (``advisor.profiling.step_logs``), by hand:
W workers in lockstep give exactly W x batch / t, where the window the recorders used before
(from the last worker's end of warm-up to the first worker's last step end) reads low."""

from __future__ import annotations

import pytest

from advisor.profiling.step_logs import synchronous_throughput


def lockstep(workers: int, warmup: int, timed: int, step_s: float, skew_s: float) -> list[list[float]]:
    """Worker k ends step i (0-based) at (i + 1) t + k d: every worker at step time t, each a
    little later than the one before, as workers leave an all-reduce one after the other."""
    return [[(i + 1) * step_s + k * skew_s for i in range(warmup + timed)] for k in range(workers)]


def window(ends: list[list[float]], batch: int, warmup: int) -> float:
    """The window definition, for comparison: the steps that end inside (last worker's end of
    warm-up, first worker's last end], times the batch, over the window's length."""
    start = max(e[warmup - 1] for e in ends)
    stop = min(e[-1] for e in ends)
    done = sum(1 for e in ends for t in e if start < t <= stop)
    return done * batch / (stop - start)


def test_lockstep_workers_give_exactly_w_times_batch_over_the_step_time() -> None:
    # W = 4 workers, 10 warm-up and N = 50 timed steps of t = 0.1 s, batch 32, 1 ms apart:
    # each worker times 50 steps over its own 50 x 0.1 = 5 s, so 4 x 50 x 32 / 5 = 1280 ex/s,
    # which is 4 x 32 / 0.1.
    ends = lockstep(4, 10, 50, 0.1, 1e-3)
    assert synchronous_throughput(ends, 32, 10) == pytest.approx(4 * 32 / 0.1, rel=1e-12)
    # The window: from 10 x 0.1 + 3 ms (worker 3's end of warm-up) to 60 x 0.1 (worker 0's last
    # end), 4.997 s; worker 0's 50 timed steps end inside it, workers 1-3's last steps 1-3 ms
    # after it: 200 - 3 = 197 steps, 197 x 32 / 4.997 = 1261.56 ex/s, 1.44 % low.
    old = window(ends, 32, 10)
    assert old == pytest.approx(197 * 32 / 4.997, rel=1e-12)
    assert old / 1280 - 1 == pytest.approx(-0.01441, abs=1e-5)


@pytest.mark.parametrize("workers", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("timed", [50, 100])
def test_the_window_drops_w_minus_1_steps_and_this_does_not(workers: int, timed: int) -> None:
    # A skew of 1 us in 0.2 s steps: the window reads low by (W - 1) / (W x N) (the W - 1 last
    # steps it drops) to within the skew's share of the span; 0.5 % at W = 2 and N = 100, 1.67 %
    # at W = 6 and N = 50.
    ends = lockstep(workers, 5, timed, 0.2, 1e-6)
    exact = workers * 16 / 0.2
    assert synchronous_throughput(ends, 16, 5) == pytest.approx(exact, rel=1e-9)
    assert window(ends, 16, 5) / exact - 1 == pytest.approx(-(workers - 1) / (workers * timed), abs=1e-4)


def test_asynchronous_workers_add_their_own_rates() -> None:
    # Worker 0 steps every 0.1 s, worker 1 every 0.25 s, out of phase: 32 / 0.1 + 32 / 0.25 = 448 ex/s.
    ends = [[0.1 * (i + 1) for i in range(40)], [0.03 + 0.25 * (i + 1) for i in range(16)]]
    assert synchronous_throughput(ends, 32, 2) == pytest.approx(320 + 128, rel=1e-12)


def test_without_warm_up_the_first_step_starts_the_span() -> None:
    # Ends at 1, 2, 3 s: the span is 1 -> 3 s, two timed steps of 8 examples: 8 ex/s.
    assert synchronous_throughput([[1.0, 2.0, 3.0]], 8, 0) == pytest.approx(8.0)


@pytest.mark.parametrize(("ends", "batch", "warmup", "message"), [
    ([[1.0, 2.0]], 8, 2, "worker 0 logged 2 step.s.: none after its 2 warm-up steps"),
    ([[1.0, 2.0, 3.0], [1.0]], 8, 0, "worker 1 logged 1 step"),
    ([[1.0, 3.0, 2.0, 4.0]], 8, 1, "step ends must increase"),
    ([[1.0, 1.0]], 8, 1, "step ends must increase"),
    ([], 8, 1, "no worker"),
    ([[1.0, 2.0]], 0, 1, "batch_size must be >= 1"),
])
def test_logs_it_cannot_measure_are_refused(ends: list[list[float]], batch: int, warmup: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synchronous_throughput(ends, batch, warmup)
