"""The proposed product rules (M*) and the bimodal report, as a prototype on top of lab_engine.

Settings -> parameters (see FINDINGS.md, section 5):
  request_queue_s q   from the user's network settings: loss-based CC (cubic, reno) -> the
                      bottleneck queue depth (tbf latency); bbr -> 0.005 (assumption: BBR keeps
                      about one or two BDP plus TSO bursts queued); unknown -> 0.005.
  share_sigma     1.0 fitted (held-out validated on this testbed; recalibrate per cluster)
  multi_flow_eta  0.85 fitted (idem)
Upper ("turn-taking") mode for the bimodal report: newcomer weight 0.1 for 100 ms, eta 0.85,
no request-path delay, no random shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_engine import Rules, simulate_lab

BBR_QUEUE_S = 0.005
SHARE_SIGMA = 1.0
MULTI_FLOW_ETA = 0.85
BIMODAL_RATIO = 1.3  # flag when the turn-taking mode exceeds the main prediction by more than this


def request_queue_s(congestion: str | None, queue_s: float | None) -> float:
    if congestion in ("cubic", "reno", "htcp") and queue_s is not None:
        return queue_s
    return BBR_QUEUE_S


def main_rules(congestion: str | None, queue_s: float | None) -> Rules:
    return Rules(rq_delay_s=request_queue_s(congestion, queue_s), rq_mode="drain", rq_dirs=(0,),
                 share_sigma=SHARE_SIGMA, link_eff_multi=MULTI_FLOW_ETA)


def turn_taking_rules() -> Rules:
    return Rules(incumbent_weight=0.1, incumbent_hold_s=0.1, link_eff_multi=MULTI_FLOW_ETA)


@dataclass(frozen=True)
class PointReport:
    workers: int
    throughput: float  # main prediction (M*)
    alternating: float  # turn-taking mode
    bimodal: bool

    def message(self) -> str:
        if not self.bimodal:
            return f"W={self.workers}: {self.throughput:.0f} ex/s"
        return (f"W={self.workers}: {self.throughput:.0f} ex/s if the workers drift or run in step, up to "
                f"{self.alternating:.0f} ex/s if they settle into alternating pulls and pushes (two "
                f"outcomes seen on real testbeds; which one depends on congestion control and the bottleneck "
                f"queue, which a 1-worker trace cannot show; shallow queues and BBR favour the higher one)")


def report_point(profile, network, settings, congestion=None, queue_s=None) -> PointReport:
    main = simulate_lab(profile, network, settings, main_rules(congestion, queue_s)).throughput(settings.warmup_steps)
    alt = main
    if settings.workers == 2:  # the only W where the testbed shows two stable phase regimes
        alt = simulate_lab(profile, network, settings, turn_taking_rules()).throughput(settings.warmup_steps)
    return PointReport(settings.workers, main, alt, alt > BIMODAL_RATIO * main)
