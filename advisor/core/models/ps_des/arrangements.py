"""Two workers on a parameter server settle into one of two arrangements; how likely each is.

At W = 2 real workers either **alternate** (one pulls while the other pushes, each then nearly
as fast as alone) or **drift** (share the links unevenly, or run in step). The contention rules
predict the drifting arrangement; ``two_way.alternating_rate`` is the alternating one. A
1-worker trace cannot tell which will happen, but the network can make one likelier: the
testbed's runs show which each took, read from its step log by ``alternated``, and ``TESTBED``
counts them per network setting: the runs of ``tests/data/ps-async/measured`` and those the
project recorded on its own namespace testbed (``tests/data/ps-traces``; ``tests/data/ps-arrangements``,
taken to count these: W = 2 repeated under both queues and BBR; ``tests/data/ps-async-held-out``).

Which runs count: those where the model reports two outcomes (``outlook``: the alternating
bound, ``contention.alternating_bound``, exceeds the prediction by more than ``BIMODAL_RATIO``):
the transfer-bound MLP at 100 Mbit/s, and the project's CNN (0.44 MB a step), whose bound is
1.4x its prediction. ``ps-async``'s compute-bound CNN (alternation would change little, and the
model reports one outcome) never alternated under cubic or bbr.

The probability of alternation for a stated setting is Laplace's rule of succession over the
runs of that setting, (k + 1) / (n + 2): 3 of 11 alternated with a 100 ms queue, 2 of 7 with a
20 ms one and 6 of 6 under BBR, so 31 %, 33 % and 88 %, rather than 0 % or 100 % from a few runs.
A setting the testbed did not run, or one not stated, is *unknown*: 50 %, said as such. Loss-based control (cubic, reno) counts as the
testbed's cubic; a stated queue counts as the 20 ms one up to ``SHORT_QUEUE_LIMIT_S`` (half-way
between 20 and 100 ms on a log scale) and as the 100 ms one above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advisor.core.models.ps_des.contention import CongestionControl, Contention

ALTERNATING = "alternating"
DRIFTING = "drifting"
# a step log alternates when at least this share of one worker's step ends fall in the middle half
# of the other's step (random phases put half there, workers in step almost none); the testbed's
# W = 2 runs show 0.87-0.99 against 0.22-0.43 (benchmarks/model_error.py prints each)
MIDDLE_SHARE = 0.75
SHORT_QUEUE_LIMIT_S = math.sqrt(0.020 * 0.100)  # 44.7 ms: the geometric mean of the two queues run


@dataclass(frozen=True, slots=True)
class Count:
    """How many of a setting's testbed runs alternated at W = 2: ``files``, one W = 2 run each,
    and ``recorded``, the project's own files (paths under tests/data), each with one or more."""

    setting: str
    alternated: int
    runs: int
    files: tuple[str, ...]
    recorded: tuple[str, ...] = ()

    @property
    def probability(self) -> float:
        """Laplace's rule of succession: (k + 1) / (n + 2)."""
        return (self.alternated + 1) / (self.runs + 2)


# tests/core/test_arrangements.py recounts these from the step logs. ``files``: ps-async's runs (0 of
# 2, 1 of 1 and 2 of 2 alternated); ``recorded``: the project's (3 of 9 with the 100 ms queue, the
# CNN's two among them, 1 of 6 with the 20 ms one, where ps-async's one run had alternated, and 4 of
# 4 under BBR)
TESTBED = {
    "loss-based, deep queue": Count("cubic with a 100 ms queue", 3, 11,
                                    ("cubic/mlp_bw100.json", "cubic/mlp_bw100_repeat.json"),
                                    ("ps-traces/mlp_ps1_bw100.measured.json.gz",
                                     "ps-arrangements/mlp_ps1_bw100_q100.w2.measured.json.gz",
                                     "ps-async-held-out/mlp_ps1_bw100.r1.measured.json.gz",
                                     "ps-async-held-out/mlp_ps1_bw100.r2.measured.json.gz",
                                     "ps-async-held-out/cnn_ps1_bw100.r1.measured.json.gz",
                                     "ps-async-held-out/cnn_ps1_bw100.r2.measured.json.gz")),
    "loss-based, short queue": Count("cubic with a 20 ms queue", 2, 7, ("cubic_q20ms/mlp_bw100.json",),
                                     ("ps-arrangements/mlp_ps1_bw100_q20.r1.measured.json.gz",
                                      "ps-arrangements/mlp_ps1_bw100_q20.w2.measured.json.gz",
                                      "ps-arrangements/mlp_ps1_bw100_q20.r2.measured.json.gz")),
    "bbr": Count("bbr", 6, 6, ("bbr/mlp_bw100.json", "bbr/mlp_bw100_repeat.json"),
                 ("ps-arrangements/mlp_ps1_bw100_bbr.r1.measured.json.gz",)),
}


# Synchronous PS with one gradient per update (R = 1 < W: W = 2 with one backup worker). No barrier
# holds the workers together: their phases **drift** (wander over the step: the model's point,
# ``sync.py``'s module docstring), settle into **alternation** (one pulls after the other's update,
# so every gradient is fresh and each update costs about one uncontended step: T(1)), or, more
# rarely, lock nearly in step. The testbed's runs (tests/data/ps-sync ``<job>_backup1.<repeat>`` and
# its ``one-gradient`` folder, W = 2), read by ``alternated``: tests/core/test_arrangements.py
# recounts them from the step logs. Five of thirteen alternated (0.78-1.0); seven drifted
# (0.54-0.73) and one held nearly in step (0.00), all three counted as not alternating.
ONE_GRADIENT = Count("one gradient per update (one backup worker at W = 2)", 5, 13,
                     tuple(f"{folder}{job}_backup1.r{k}.measured.json.gz"
                           for folder, jobs, repeats in (("", ("cnn_bw100", "mlp_bw100"), 2),
                                                         ("one-gradient/", ("cnn_bw50", "mlp_bw50", "mlpmid_bw100"), 3))
                           for job in jobs for k in range(1, repeats + 1)))


@dataclass(frozen=True, slots=True)
class Chance:
    """The probability of the alternating arrangement for a network setting, and why."""

    probability: float
    known: bool
    basis: str


def setting_of(contention: Contention) -> str | None:
    """The testbed's network setting (a key of ``TESTBED``) that the stated congestion control and
    queue count as; None when they do not say (module docstring)."""
    cc = contention.congestion_control
    if cc is CongestionControl.BBR:
        return "bbr"
    if cc.loss_based and contention.queue_s is not None:
        return "loss-based, short queue" if contention.queue_s <= SHORT_QUEUE_LIMIT_S else "loss-based, deep queue"
    return None


def alternation_chance(contention: Contention) -> Chance:
    """How likely two workers are to alternate under the stated congestion control and queue."""
    cc = contention.congestion_control
    key = setting_of(contention)
    if key is None:
        why = "no congestion control stated" if cc is CongestionControl.UNKNOWN else \
            f"{cc.value} without a stated queue (--queue)"
        return Chance(0.5, False, f"unknown: {why}")
    count = TESTBED[key]
    stated = cc.value + (f", queue {contention.queue_s * 1e3:g} ms" if contention.queue_s is not None and
                         cc.loss_based else "")
    return Chance(count.probability, True,
                  f"{stated}: {count.alternated} of {count.runs} testbed runs with {count.setting} alternated")


def middle_share(ends_a: Sequence[float], ends_b: Sequence[float]) -> float:
    """The share of worker b's step ends that fall in the middle half of worker a's step
    (phase 0.25-0.75 between a's surrounding step ends); NaN when none falls inside a's steps."""
    a = np.sort(np.asarray(ends_a, dtype=np.float64))
    b = np.asarray(ends_b, dtype=np.float64)
    i = np.searchsorted(a, b)
    inside = (i > 0) & (i < len(a))
    if not inside.any():
        return math.nan
    lo, hi = a[i[inside] - 1], a[i[inside]]
    phase = (b[inside] - lo) / np.where(hi > lo, hi - lo, np.inf)
    return float(np.mean((phase > 0.25) & (phase < 0.75)))


def alternated(ends_a: Sequence[float], ends_b: Sequence[float]) -> bool:
    """Whether two workers' step ends show the alternating arrangement (``MIDDLE_SHARE``)."""
    share = middle_share(ends_a, ends_b)
    return not math.isnan(share) and share >= MIDDLE_SHARE
