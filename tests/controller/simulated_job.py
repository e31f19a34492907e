"""A training job whose true throughput is a measured curve, seen as the controller sees a real one:
through its pods' ``advisor_training_examples_total`` counters, scraped into a Prometheus.

Why: the closed loop must be proven on the metric path the training pods use, not on numbers
handed to it. ``SimulatedJob`` advances one counter per worker pod (``<job>-worker-<i>``) at
the measured examples/s of the job's current worker count, times a per-window noise, and
``Counters`` stores every scrape as Prometheus stores samples. ``Counters.evaluate`` answers the
instant queries ``controller/pipeline/observed.py`` sends from those samples as
Prometheus does (``rate`` from the first and last sample of the window, counter resets
added back; ``count_over_time``; ``resets``; ``increase``, from 0 for a pod that started in the
range; a series without samples in the window is absent; the progress gauge, which these pods do
not export, is absent too, so a deadline's progress comes from the counters),
so a restarted pod (a counter back to 0) and a pod that stops reporting look as they would.
``PrometheusOnCounters`` serves it over real HTTP (the end-to-end test); ``opener`` serves it
in-process to a ``PrometheusClient`` (``benchmarks/closed_loop.py``, in simulated time).
"""

from __future__ import annotations

import io
import json
import math
import random
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.controller.fake_prometheus import PROGRESS, SELECTOR, FakePrometheus

Series = tuple[str, str, str]  # (namespace, job, pod)


@dataclass
class Counters:
    """Every scrape of every pod's counter: (time, value) in order."""

    samples: dict[Series, list[tuple[float, float]]] = field(default_factory=dict)

    def scrape(self, series: Series, at: float, value: float) -> None:
        self.samples.setdefault(series, []).append((at, value))

    def evaluate(self, function: str, namespace: str, name: str, window_s: float, at: float) -> list[dict[str, Any]]:
        """The instant vector of ``function(series[window])`` at ``at`` (Prometheus' JSON result items)."""
        out = []
        for (ns, job, pod), points in self.samples.items():
            if (ns, job) != (namespace, name):
                continue
            seen = [(t, v) for t, v in points if at - window_s < t <= at]
            if not seen:
                continue
            resets = sum(1 for (_, a), (_, b) in zip(seen, seen[1:]) if b < a)
            increase = sum(b - a if b >= a else b for (_, a), (_, b) in zip(seen, seen[1:]))
            if function == "rate":
                if len(seen) < 2:
                    continue
                value = increase / (seen[-1][0] - seen[0][0])
            elif function == "increase":  # a pod that started inside the range counts from 0 (as
                # Prometheus' extrapolation stops at a counter's zero point)
                value = increase + (seen[0][1] if points[0] == seen[0] else 0.0)
            else:
                value = float(len(seen) if function == "count_over_time" else resets)
            out.append({"metric": {"job_namespace": ns, "tfjob": job, "pod": pod}, "value": [at, str(value)]})
        return out

    def answer(self, args: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if PROGRESS.match(args.get("query", "")):  # the pods export no global step's progress: no series
            return 200, {"status": "success", "data": {"resultType": "vector", "result": []}}
        m = SELECTOR.match(args.get("query", ""))
        if m is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"unexpected query {args.get('query')!r}"}
        function, namespace, name, window = m.groups()
        result = self.evaluate(function, namespace, name, float(window), float(args["time"]))
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


@dataclass
class SimulatedJob:
    """One job's worker pods: each counts ``truth(W) / W`` examples/s while W workers train, times
    ``1 + noise`` drawn per observation window (``noise``: the relative sd of a window's mean)."""

    namespace: str
    name: str
    truth: Callable[[int], float]
    counters: Counters
    noise: float = 0.03
    window_s: float = 900.0
    seed: int = 0
    _values: dict[int, float] = field(default_factory=dict)  # pod index -> its counter
    _factor: dict[int, float] = field(default_factory=dict)  # window index -> its noise factor
    _silent: set[int] = field(default_factory=set)
    workers_seen: list[tuple[float, int]] = field(default_factory=list)  # (time, W) whenever W changed

    def factor(self, at: float) -> float:
        window = int(at // self.window_s)
        if window not in self._factor:
            rng = random.Random(self.seed * 1_000_003 + window)
            self._factor[window] = math.exp(rng.gauss(0.0, self.noise))
        return self._factor[window]

    def run(self, start: float, end: float, workers: int, scrape_s: float) -> float:
        """Train from ``start`` to ``end`` with ``workers`` workers, scraped every ``scrape_s``;
        the examples trained. Pods at index >= W stop reporting; a new pod starts at 0."""
        if not self.workers_seen or self.workers_seen[-1][1] != workers:
            self.workers_seen.append((start, workers))
            for gone in [i for i in self._values if i >= workers]:
                del self._values[gone]
        per_pod = self.truth(workers) / workers
        done, t = 0.0, start
        while t < end - 1e-9:
            step = min(scrape_s, end - t)
            t += step
            rate = per_pod * self.factor(t)
            for i in range(workers):
                self._values[i] = self._values.get(i, 0.0) + rate * step
                done += rate * step
                if i not in self._silent:
                    self.counters.scrape((self.namespace, self.name, self.pod(i)), t, self._values[i])
        return done

    def pod(self, i: int) -> str:
        return f"{self.name}-worker-{i}"

    def restart(self, i: int) -> None:
        """Pod ``i`` restarts: its counter starts again from 0 (Prometheus sees a reset)."""
        self._values[i] = 0.0

    def silence(self, i: int, silent: bool = True) -> None:
        """Pod ``i`` trains on but its series is not scraped (a broken exporter or scrape)."""
        (self._silent.add if silent else self._silent.discard)(i)


class PrometheusOnCounters(FakePrometheus):
    """``FakePrometheus`` over real HTTP, answering from ``counters`` instead of a table."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        super().__init__()

    def answer(self, path: str, args: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if path != "/api/v1/query" or self.status != 200:
            return super().answer(path, args)
        return self.counters.answer(args)


def opener(counters: Counters, queries: list[str] | None = None) -> Callable[[urllib.request.Request, float], Any]:
    """An opener for ``PrometheusClient`` that answers in-process (no socket) from ``counters``."""

    def open_(request: urllib.request.Request, timeout: float) -> Any:
        url = urllib.parse.urlsplit(request.full_url)
        args = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if queries is not None:
            queries.append(args["query"])
        _, doc = counters.answer(args)
        return _Response(json.dumps(doc).encode())

    return open_


class _Response(io.BytesIO):
    """What ``urlopen`` gives: a readable body usable as a context manager (BytesIO is one)."""
