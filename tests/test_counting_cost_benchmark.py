"""``benchmarks/counting_cost.py`` runs, and its calls count what they say: 5 rounds of N calls of
``StepCounter.step`` and of ``BatchEndSteps.batch_end`` (every round's batches going on from the
last) are 10 N steps on the exporter it scrapes."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_benchmark_prints_every_call_and_counts_every_step() -> None:
    run = subprocess.run([sys.executable, "-m", "benchmarks.counting_cost", "--steps", "1000"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    for call in ("StepCounter.step", "BatchEndSteps.batch_end", "GlobalStepProgress.due", "GlobalStepProgress.seen"):
        [line] = [row for row in run.stdout.splitlines() if row.startswith(call)]
        assert float(line.split()[-1]) > 0
    assert "(10000 steps counted)" in run.stdout
