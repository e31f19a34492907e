"""Every Prometheus metric the controller exports, in one namespace (``advisor_``).

One registry per controller instance (not the process-global default), so tests can run
several controllers in one process and the Grafana dashboard's queries can be checked against
exactly this list (``METRIC_NAMES``). Names follow the Prometheus conventions: base units
(seconds), ``_total`` for counters, labels for dimensions that have few values. Per-job series
are removed when the job goes away, so a long-lived controller does not leak series.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from advisor.controller.kube.informer import RESTART_REASONS

# Not "namespace": the Prometheus Operator's scrape configs (honorLabels false) add the target's
# own namespace/pod/service/job labels, and a clashing label of ours would arrive renamed to
# exported_namespace. job_namespace and tfjob clash with no target label the operator adds.
JOB_LABELS = ("job_namespace", "tfjob")
PREDICTION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
PHASES = ("Pending", "Profiling", "Predicting", "Predicted", "Failed")
PREDICTION_OUTCOMES = ("succeeded", "failed", "retried")  # retried: its worker process died, it runs again
# superseded: by a new generation; opted_out: stopped because the job no longer opts in
PROFILING_OUTCOMES = ("started", "succeeded", "failed", "timed_out", "superseded", "opted_out")
RECONCILE_ERROR_REASONS = ("conflict", "api", "internal", "invalid_object")
RESIZE_MODES = ("initial", "auto")
# refitted: new constants applied; unchanged: fitted, the constants kept; agrees: observed within
# tolerance of the prediction, nothing to refit; failed: the refit's prediction failed; no_data:
# Prometheus has no series of the job; unavailable: Prometheus unreachable or its answer unusable
REFIT_OUTCOMES = ("refitted", "unchanged", "agrees", "failed", "no_data", "unavailable")
WATCH_RESTART_REASONS = RESTART_REASONS  # the informer reports them


class Metrics:
    """The controller's metrics; attributes are the prometheus_client objects."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.predicted_throughput = Gauge(
            "advisor_predicted_throughput_examples_per_second",
            "Predicted training throughput (examples/s summed over workers) with this many workers.",
            (*JOB_LABELS, "workers"), registry=r)
        self.predicted_throughput_bound = Gauge(
            "advisor_predicted_throughput_bound_examples_per_second",
            "Lower or upper end of the 95 % interval of the predicted throughput.",
            (*JOB_LABELS, "workers", "bound"), registry=r)
        self.predicted_cost = Gauge(
            "advisor_predicted_cost_per_million_examples",
            "Predicted cost (price units) of one million examples with this many workers.",
            (*JOB_LABELS, "workers"), registry=r)
        self.recommended_workers = Gauge(
            "advisor_recommended_workers", "Cost-optimal worker count within policy.", JOB_LABELS, registry=r)
        self.saturation_workers = Gauge(
            "advisor_saturation_workers", "Worker count at which the predicted curve saturates.", JOB_LABELS,
            registry=r)
        self.predicted_current_throughput = Gauge(
            "advisor_predicted_current_throughput_examples_per_second",
            "Predicted throughput at the job's current worker count, to compare with the observed "
            "sum by (job_namespace, tfjob) (rate(advisor_training_examples_total[10m])).", JOB_LABELS, registry=r)
        self.current_workers = Gauge(
            "advisor_current_workers", "Worker replicas in the job's spec.", JOB_LABELS, registry=r)
        self.job_phase = Gauge(
            "advisor_job_phase", "1 for the phase each watched job is in.", (*JOB_LABELS, "phase"), registry=r)
        self.prediction_duration = Histogram(
            "advisor_prediction_duration_seconds", "Wall time of one prediction (whole curve).", ("backend",),
            buckets=PREDICTION_BUCKETS, registry=r)
        self.predictions = Counter(
            "advisor_predictions_total", "Predictions finished, by outcome.", ("outcome",), registry=r)
        self.profiling_runs = Counter(
            "advisor_profiling_runs_total",
            "Profiling runs by outcome (started, succeeded, failed, timed_out, superseded).", ("outcome",), registry=r)
        self.reconcile_duration = Histogram(
            "advisor_reconcile_duration_seconds", "Wall time of one reconcile, simulation excluded.",
            buckets=RECONCILE_BUCKETS, registry=r)
        self.reconcile_errors = Counter(
            "advisor_reconcile_errors_total", "Reconciles that failed, by reason.", ("reason",), registry=r)
        self.ingest_accepted = Counter(
            "advisor_ingest_accepted_total", "Trace uploads accepted.", registry=r)
        self.ingest_rejections = Counter(
            "advisor_ingest_rejections_total",
            "Trace uploads rejected, by reason (unauthorized, too_large, malformed, unsupported, unknown_job, conflict, timeout, error).",
            ("reason",), registry=r)
        self.resizes = Counter(
            "advisor_resizes_total", "Worker-count changes the controller made, by mode.", ("mode",), registry=r)
        self.refits = Counter(
            "advisor_refits_total", "Online refits to observed throughput and observations of jobs, by outcome "
            "(refitted, unchanged, agrees, failed, no_data, unavailable).", ("outcome",), registry=r)
        self.watched_jobs = Gauge(
            "advisor_watched_tfjobs", "Opted-in TFJobs the controller currently tracks.", registry=r)
        self.watch_restarts = Counter(
            "advisor_watch_restarts_total", "Watch streams restarted, by reason (expired, error, timeout).",
            ("reason",), registry=r)
        self.leader = Gauge(
            "advisor_leader", "1 while this replica holds the leader lease.", registry=r)
        # Cluster mode (controller/pipeline/allocation.py): a pool is "settings" (the cluster_capacity
        # setting) or "clusterqueue/<name>"; resource is "workers", "cpu" (cores), "memory" (bytes)...
        self.allocated_workers = Gauge(
            "advisor_allocated_workers", "Workers the cluster allocation gives the job (0: it waits for room).",
            JOB_LABELS, registry=r)
        self.allocation_capacity = Gauge(
            "advisor_allocation_capacity", "Capacity of a pool of jobs sharing it, per resource.",
            ("pool", "resource"), registry=r)
        self.allocation_used = Gauge(
            "advisor_allocation_used", "What the allocation gives the jobs of a pool, per resource.",
            ("pool", "resource"), registry=r)
        self.reallocations = Counter(
            "advisor_reallocations_total", "Reallocations of workers across the jobs of every pool.", registry=r)

        # Every known label value at zero from the start: a counter series born at 1 shows no
        # increase() in Prometheus, so the first failure or prediction would be invisible.
        for counter, values in ((self.predictions, PREDICTION_OUTCOMES), (self.profiling_runs, PROFILING_OUTCOMES),
                                (self.reconcile_errors, RECONCILE_ERROR_REASONS), (self.resizes, RESIZE_MODES),
                                (self.watch_restarts, WATCH_RESTART_REASONS), (self.refits, REFIT_OUTCOMES)):
            for value in values:
                counter.labels(value)

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        for p in PHASES:
            self.job_phase.labels(namespace, name, p).set(1.0 if p == phase else 0.0)

    def forget_job(self, namespace: str, name: str, workers: Iterable[int] = ()) -> None:
        """Drop every per-job series of a job that is gone."""
        for gauge in (self.recommended_workers, self.saturation_workers, self.current_workers,
                      self.predicted_current_throughput, self.allocated_workers):
            remove_series(gauge, namespace, name)
        for p in PHASES:
            remove_series(self.job_phase, namespace, name, p)
        for w in workers:
            remove_series(self.predicted_throughput, namespace, name, str(w))
            remove_series(self.predicted_cost, namespace, name, str(w))
            for bound in ("lower", "upper"):
                remove_series(self.predicted_throughput_bound, namespace, name, str(w), bound)

    def exposition(self) -> tuple[bytes, str]:
        """The text format for /metrics and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def remove_series(metric: Gauge, *labels: str) -> None:
    """Drop one labelled series; a series never set is not an error."""
    try:
        metric.remove(*labels)
    except KeyError:
        pass


def metric_names() -> frozenset[str]:
    """Every series name a PromQL query may use: gauges as named, counters with ``_total``,
    histograms with ``_bucket``, ``_sum`` and ``_count``."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return frozenset(
        family.name + suffix for family in Metrics().registry.collect() for suffix in suffixes[family.type]
    )
