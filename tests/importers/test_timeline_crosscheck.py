"""TensorFlow's own Chrome-trace timeline agrees with the times the importer reads.

The timeline lacks tensor names and sizes (so it cannot be imported), but its events carry
the same clock: every profiled op of step k must appear there with the same duration and
the same start, up to one constant offset (the profile's times are relative to the step).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from advisor.importers.loader import load_profile
from tests.conftest import ps_async_data


@pytest.mark.parametrize("run", ["mlp_bw100", "cnn_bw50"])
@pytest.mark.parametrize("step", [10, 50, 90])
def test_timeline_times_match_the_profile(run: str, step: int) -> None:
    profile = load_profile(ps_async_data("tf-native", run))
    timing = next((s for s in profile.steps if s.index == step), None)
    if timing is None:
        pytest.skip(f"step {step} was skipped as incomplete")
    doc = json.loads(ps_async_data("tf-native", run, "timeline", f"step_{step}.json").read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    named = {}
    for e in events:
        if e["name"] != "RecvTensor":
            place = "worker" if "/job:worker/" in procs[e["pid"]] else "ps0"
            named[f"{place}:{e['args']['name']}"] = (e["ts"], e["dur"])
    offsets = Counter(named[op.name][0] - timing.start_us[i] for i, op in enumerate(profile.ops) if op.name in named)
    offset, _ = offsets.most_common(1)[0]
    for i, op in enumerate(profile.ops):
        if op.resource.is_transfer:
            continue
        ts, dur = named[op.name]
        assert (ts - offset, dur) == (timing.start_us[i], timing.duration_us[i]), op.name
    # transfers are anonymous in the timeline: compare the multisets of (start, duration)
    recv = Counter((e["ts"] - offset, e["dur"]) for e in events if e["name"] == "RecvTensor")
    ours = Counter((timing.start_us[i], timing.duration_us[i]) for i, op in enumerate(profile.ops) if op.resource.is_transfer)
    assert recv == ours
