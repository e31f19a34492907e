"""Observed throughput of a running job, read from Prometheus' HTTP query API.

Why: the online refit (``controller/pipeline/refit.py``) compares a job's prediction with what it
actually trains at. The training pods count their examples (``advisor/profiling/throughput.py``,
with ``ADVISOR_METRICS_PORT`` set) and Prometheus scrapes them through the chart's PodMonitor,
which labels every series with ``job_namespace`` and ``tfjob`` (the job's name, for any kind of
training job). This adapter asks Prometheus, over plain HTTP (the standard library's urllib),
two instant queries over the window:

- ``rate(advisor_training_examples_total{...}[W])``: examples/s per counting pod, summed here;
- ``count_over_time(advisor_training_examples_total{...}[W])``: samples per pod in the window,
  summed here (how much the rate rests on) and counted (how many pods it comes from);
- ``resets(advisor_training_examples_total{...}[W])``: how often a pod's counter went back in
  the window (a restarted pod), summed here: such a window mixes a restart into the rate, and
  the closed loop does not use it.

and, for a job with a deadline, its progress (``trained``): first
``max(advisor_training_progress_examples{...})``, the examples the job has trained by its global
step as its workers last read it (restored with a checkpoint, so a restarted pod's second pass
over the steps after the checkpoint is not counted twice; a departed pod's series goes stale with
it); where no pod exports that gauge (a program without a global step, PyTorch with SGD unless it
tells its step), the examples every pod counted over the job's life since it started,
``increase(advisor_training_examples_total{...}[S])``, summed here, counter resets added back and
pods that are gone included while their samples are kept: an upper bound by what restarted pods
trained again.

It returns an ``ObservedPoint`` or None when Prometheus has no such series (pods that do not
export, a scrape that has not started); ``ObservedQueryError`` when Prometheus cannot be reached
or answers something that is not a vector. No retries here: the refit asks again later.
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.errors import AdvisorError
from advisor.profiling.throughput import EXAMPLES, PROGRESS

EXAMPLES_TOTAL = EXAMPLES + "_total"
JOB_NAMESPACE_LABEL, JOB_NAME_LABEL = "job_namespace", "tfjob"  # the PodMonitor's relabelling (helm chart)
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a few hundred series at most; more is not an answer to our query


class ObservedQueryError(AdvisorError):
    """Prometheus could not be asked, or answered something that is not a query result."""


@dataclass(frozen=True, slots=True)
class ObservedPoint:
    """A job's throughput over ``window_s`` ending at ``at``, with ``workers`` workers."""

    workers: int
    examples_per_s: float  # summed over the job's counting pods
    window_s: float
    samples: int  # scraped samples in the window, summed over the pods
    series: int  # pods that reported in the window
    at: float  # the query's evaluation time (unix seconds)
    resets: int = 0  # counter resets in the window, summed over the pods (a restarted pod)


Opener = Callable[[urllib.request.Request, float], Any]  # (request, timeout) -> a response with .read()


class PrometheusClient:
    """Instant queries against one Prometheus (``base_url``: e.g. http://prometheus:9090)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, opener: Opener | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._open: Opener = opener or (lambda request, timeout: urllib.request.urlopen(request, timeout=timeout))

    def query(self, promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        """The instant vector ``promql`` evaluates to at ``at``: (labels, value) per series."""
        url = f"{self.base_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with self._open(request, self.timeout_s) as response:
                body = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:  # Prometheus' 400/422/503 carry an error document
            body = exc.read(MAX_ANSWER_BYTES + 1) if exc.fp is not None else b""
            raise ObservedQueryError(f"Prometheus at {self.base_url} answered {exc.code}: "
                                     f"{_error_text(body) or exc.reason}") from None
        # refused, DNS, timeout, a malformed URL, a connection dropped mid-answer
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ObservedQueryError(f"Prometheus at {self.base_url} cannot be reached: {reason}") from None
        if len(body) > MAX_ANSWER_BYTES:
            raise ObservedQueryError(f"Prometheus at {self.base_url} answered more than {MAX_ANSWER_BYTES} bytes")
        return _vector(body, self.base_url)


def selector(namespace: str, name: str, metric: str = EXAMPLES_TOTAL) -> str:
    """The series of one job's counting pods (of ``metric``: by default their counted examples)."""
    return (f'{metric}{{{JOB_NAMESPACE_LABEL}="{_quote(namespace)}",'
            f'{JOB_NAME_LABEL}="{_quote(name)}"}}')


def observe(client: PrometheusClient, namespace: str, name: str, workers: int, *, window_s: float,
            at: float) -> ObservedPoint | None:
    """The job's examples/s over the ``window_s`` before ``at``; None when no pod of it reported."""
    if not (math.isfinite(window_s) and window_s >= 1):
        raise ObservedQueryError(f"the observation window must be at least 1 s, got {window_s!r}")
    series, window = selector(namespace, name), f"[{int(window_s)}s]"
    rates = client.query(f"rate({series}{window})", at)
    counts = client.query(f"count_over_time({series}{window})", at)
    if not rates or not counts:
        return None
    resets = client.query(f"resets({series}{window})", at)
    total = sum(v for _, v in rates)
    if not math.isfinite(total) or total < 0:
        raise ObservedQueryError(f"Prometheus gave an examples/s of {total!r} for {namespace}/{name}")
    return ObservedPoint(workers=workers, examples_per_s=total, window_s=float(int(window_s)),
                         samples=int(sum(v for _, v in counts)), series=len(counts), at=at,
                         resets=int(sum(v for _, v in resets)))


def trained(client: PrometheusClient, namespace: str, name: str, *, since_s: float, at: float) -> float | None:
    """The examples the job has trained at ``at``: by its global step where a pod exports it (the
    furthest pod's), else what its pods counted over the ``since_s`` before ``at`` (its start), where
    examples a restarted pod trains again after its checkpoint are counted twice. None when no pod
    of it has a series there."""
    if not (math.isfinite(since_s) and since_s >= 1):
        raise ObservedQueryError(f"the progress range must be at least 1 s, got {since_s!r}")
    by_step = client.query(progress_query(namespace, name), at)
    if by_step:
        value = by_step[0][1]  # max() without grouping: one series
        if not math.isfinite(value) or value < 0:
            raise ObservedQueryError(f"Prometheus gave {value!r} examples trained by the global step of "
                                     f"{namespace}/{name}")
        return value
    found = client.query(counted_query(namespace, name, since_s), at)
    if not found:
        return None
    total = sum(v for _, v in found)
    if not math.isfinite(total) or total < 0:
        raise ObservedQueryError(f"Prometheus gave {total!r} examples trained for {namespace}/{name}")
    return total


def progress_query(namespace: str, name: str) -> str:
    """The job's progress by its global step: the furthest of its pods' last reads."""
    return f"max({selector(namespace, name, PROGRESS)})"


def counted_query(namespace: str, name: str, since_s: float) -> str:
    """The examples the job's pods counted over the last ``since_s``, per pod (summed by ``trained``)."""
    return f"increase({selector(namespace, name)}[{int(since_s)}s])"


def _vector(body: bytes, where: str) -> list[tuple[dict[str, str], float]]:
    try:
        doc = json.loads(body)
    except ValueError:
        raise ObservedQueryError(f"Prometheus at {where} answered something that is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        problem = doc.get("error") if isinstance(doc, dict) else None
        raise ObservedQueryError(f"Prometheus at {where} did not answer the query: {problem or 'no success status'}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise ObservedQueryError(f"Prometheus at {where} answered no instant vector")
    out = []
    for item in data["result"]:
        try:
            labels, (_, text) = item["metric"], item["value"]
            value = float(text)
        except (KeyError, TypeError, ValueError):
            raise ObservedQueryError(f"Prometheus at {where} answered a malformed sample: {str(item)[:200]}") from None
        if not isinstance(labels, dict):
            raise ObservedQueryError(f"Prometheus at {where} answered a sample without labels")
        if math.isnan(value):  # e.g. rate() of a single sample: no information, not an error
            continue
        out.append(({str(k): str(v) for k, v in labels.items()}, value))
    return out


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip()
    return str(doc.get("error") or "")[:300] if isinstance(doc, dict) else ""


def _quote(value: str) -> str:
    """A PromQL string literal's content (the names are DNS labels; escaped all the same)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
