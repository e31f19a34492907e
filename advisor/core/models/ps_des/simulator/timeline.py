"""A simulation timeline as a Chrome trace (JSON object format), for Perfetto or chrome://tracing.

Each worker is a process (``pid`` = worker index) with one thread per resource it uses
(compute, and downlink/uplink/ps of each parameter server); each parameter server is also
a process (``pid`` = workers + server index) showing, per worker, the transfers and updates
it serves, so link contention is visible in one place. Events are complete events
(``ph: "X"``) in microseconds. Nothing is written here: the caller serialises the dict.
"""

from __future__ import annotations

from typing import Any

from advisor.core.sim_types import SimulationResult, SimulationSettingsError, TimelineEvent

_RESOURCE_ORDER = {"worker": 0, "downlink": 1, "uplink": 2, "ps": 3}


def to_chrome_trace(result: SimulationResult) -> dict[str, Any]:
    """The result's timeline as ``{"traceEvents": [...], "displayTimeUnit": "ms"}``."""
    if result.timeline is None:
        raise SimulationSettingsError("the result has no timeline: simulate with record_timeline=True")
    events: list[dict[str, Any]] = []
    threads: dict[tuple[int, int], str] = {}
    n_ps = 1 + max((e.ps for e in result.timeline if e.ps is not None), default=0)
    for e in result.timeline:
        tid = _worker_tid(e)
        threads[(e.worker, tid)] = e.resource if e.ps is None else f"{e.resource} ps{e.ps}"
        events.append(_complete_event(e, e.worker, tid))
        if e.ps is not None:
            pid = result.workers + e.ps
            ps_tid = e.worker * 4 + _RESOURCE_ORDER[e.resource]
            threads[(pid, ps_tid)] = f"worker {e.worker} {e.resource}"
            events.append(_complete_event(e, pid, ps_tid))
    meta = [_name("process_name", w, 0, f"worker {w}") for w in range(result.workers)]
    meta += [_name("process_name", result.workers + i, 0, f"parameter server {i}") for i in range(n_ps)]
    meta += [_name("thread_name", pid, tid, name) for (pid, tid), name in sorted(threads.items())]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}


def _worker_tid(e: TimelineEvent) -> int:
    return 0 if e.ps is None else 1 + 3 * e.ps + _RESOURCE_ORDER[e.resource] - 1


def _complete_event(e: TimelineEvent, pid: int, tid: int) -> dict[str, Any]:
    return {
        "name": e.op,
        "cat": e.resource,
        "ph": "X",
        "ts": e.start_s * 1e6,
        "dur": (e.end_s - e.start_s) * 1e6,
        "pid": pid,
        "tid": tid,
        "args": {"worker": e.worker, "step": e.step},
    }


def _name(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
