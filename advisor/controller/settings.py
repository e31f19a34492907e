"""The controller's settings: one pydantic model read from the environment and a YAML file.

Operators set these through the Helm chart's ConfigMap (a YAML file, ``ADVISOR_CONFIG_FILE``)
or environment variables (``ADVISOR_`` prefix, ``__`` between nested names, e.g.
``ADVISOR_PRICES__WORKER_PER_HOUR=3.06``); the environment wins over the file. Every field is
documented in ``docs/controller.md`` and ``helm/advisor/README.md``; unknown keys are errors, so
a typo in the ConfigMap fails loudly at start instead of being silently ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from advisor.core.advice import DEFAULT_MODEL, ModelChoice
from advisor.core.cost import DEFAULT_CONFIDENCE
from advisor.core.models import registry
from advisor.core.online_calibration import MISSTATED
from advisor.core.units import UnitError, parse_bandwidth, parse_duration, parse_quantity
from advisor.errors import AdvisorError, ModelInputError

LEASE_RETRY_JITTER = 1.2  # client-go's JitterFactor: a standby's retries wait up to 1.2 retry periods

MEASURE = "measure"  # the bandwidth setting that measures it from each profile

CONFIG_FILE_ENV = "ADVISOR_CONFIG_FILE"


class SettingsError(AdvisorError, ValueError):
    """The controller's configuration cannot be used (the message names the field)."""


class Mode(StrEnum):
    """What the controller may do to a job (see docs/controller.md)."""

    ADVISE = "advise"  # annotate only
    INITIAL = "initial"  # hold the job suspended while profiling, then set Worker replicas and resume
    AUTO = "auto"  # also resize running jobs that allow it (spec.enableDynamicWorker)


class PredictionBackend(StrEnum):
    PROCESS = "process"  # a process pool inside the controller
    JOB = "job"  # one Kubernetes Job per prediction (same image, `advisor predict-job`)


class NodePrices(BaseModel):
    """Prices for one node type (value of the ``node_type_label`` in a pod template's nodeSelector)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    worker_per_hour: float = Field(ge=0)
    ps_per_hour: float = Field(ge=0)


QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"  # a Kubernetes resource quantity


class JobResources(BaseModel):
    """Requests and limits of a prediction Job's container (one simulation: one CPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    requests: dict[str, str] = Field(default_factory=lambda: {"cpu": "1", "memory": "512Mi"})
    limits: dict[str, str] = Field(default_factory=lambda: {"cpu": "1", "memory": "2Gi"})

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: dict[str, str]) -> dict[str, str]:
        for name, quantity in value.items():
            if not re.fullmatch(QUANTITY, quantity):
                raise ValueError(f"{name}: {quantity!r} is not a Kubernetes quantity (e.g. 500m, 2, 512Mi)")
        return value


_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"  # a label name or value (not empty)
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"  # RFC 1123


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is no label key (``[prefix/]name``) by the apiserver's rule, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and re.fullmatch(_SUBDOMAIN, prefix)):
        return f"{key!r}: the prefix must be a DNS subdomain (e.g. example.com), at most 253 characters"
    if not (len(name) <= 63 and re.fullmatch(_NAME, name)):
        return (f"{key!r}: the name must be 1-63 characters: alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric")
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is no label value by the apiserver's rule, or None ("" is one)."""
    if value and not (len(value) <= 63 and re.fullmatch(_NAME, value)):
        return (f"{value!r}: a label value must be empty or 1-63 characters: alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric")
    return None


class Toleration(BaseModel):
    """A toleration of the prediction pods, in the Kubernetes spelling, checked as the apiserver
    checks it (ValidateTolerations) so a mistake fails at start, not in every Job create."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)  # one spelling, Kubernetes'
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    @model_validator(mode="after")
    def _as_the_apiserver(self) -> Toleration:
        if self.key and (problem := label_key_problem(self.key)):
            raise ValueError(f"key {problem}")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty (which tolerates every taint)")
        if self.operator == "Exists" and self.value:
            raise ValueError(f"value must be empty when operator is Exists, got {self.value!r}")
        if problem := label_value_problem(self.value):
            raise ValueError(f"value {problem}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute (only NoExecute taints evict)")
        return self

    def as_kubernetes(self) -> dict[str, Any]:
        """The core/v1 Toleration, empty fields left out."""
        doc = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect,
               "tolerationSeconds": self.toleration_seconds}
        return {name: v for name, v in doc.items() if v is not None and v != ""}


class NodeSpeed(BaseModel):
    """What a node of one kind (one value of a node label) is worth to a worker on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    speed: float = Field(gt=0, description="compute speed relative to the other entries (1: the reference)")
    link: str | None = Field(default=None, description="the node's link rate, e.g. 10Gbit/s; none: the job's")

    @field_validator("link")
    @classmethod
    def _link_readable(cls, value: str | None) -> str | None:
        if value is not None and parse_bandwidth(value) <= 0:  # UnitError (a ValueError) names an unknown unit
            raise ValueError(f"link must be > 0, got {value!r}")
        return value

    def link_bps(self) -> float | None:
        return parse_bandwidth(self.link) if self.link else None


class PriceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    worker_per_hour: float = Field(default=1.0, ge=0, description="price of one worker replica per hour")
    ps_per_hour: float = Field(default=0.0, ge=0, description="price of one parameter server replica per hour")
    node_type_label: str = Field(default="node.kubernetes.io/instance-type")
    node_types: dict[str, NodePrices] = Field(default_factory=dict)


class ControllerSettings(BaseSettings):
    """Everything an operator can set; defaults suit a small cluster in ``advise`` mode."""

    config_file: ClassVar[str | None] = None  # set on the subclass ``load_settings`` makes for one file

    model_config = SettingsConfigDict(
        env_prefix="ADVISOR_", env_nested_delimiter="__", extra="forbid", frozen=True, validate_default=True
    )

    # What to watch and what to do.
    namespaces: list[str] = Field(default_factory=list, description="namespaces to watch; empty: all")
    opt_in: str = Field(default="annotation", pattern="^(annotation|all)$")
    # PyTorchJobs are watched when this is on AND the API serves their CRD (checked at start).
    watch_pytorchjobs: bool = True
    mode: Mode = Mode.ADVISE
    # Economics and policy.
    prices: PriceSettings = Field(default_factory=PriceSettings)
    bandwidth: str | None = Field(
        default=None, description="PS link capacity per direction, or 'measure' (from each profile's transfer "
                                  "times); None: as recorded with the profile, else measured")
    # How workers contend for the PS links (advisor/core/models/ps_des/contention.py, README "Accuracy"):
    # parameters of the models that have them. The defaults are the contention model's own
    # (tests/controller/test_prediction_settings.py keeps them equal).
    congestion_control: Literal["cubic", "reno", "bbr", "unknown"] = Field(
        default="unknown", description="the training pods' TCP congestion control")
    queue: str | None = Field(default=None, description="bottleneck queue depth, e.g. 20ms (used with cubic, reno)")
    share_sigma: float = Field(default=1.0, ge=0, le=5)
    multi_flow_goodput: float = Field(default=0.85, gt=0, le=1)
    equal_shares: bool = Field(default=False, description="Li et al.'s model instead of the contention rules "
                                                          "(the same as model: li2020-des)")
    model: str = Field(default=DEFAULT_MODEL, description="the throughput model (advisor models lists them); a "
                                                          "job's annotation training-advisor.io/predict-model overrides it")
    model_params: dict[str, Any] = Field(default_factory=dict, description="the model's parameters; the "
                                         "contention fields above fill those the model has, these win")
    min_workers: int = Field(default=1, ge=1)
    max_workers: int = Field(default=32, ge=1, le=512)
    budget_per_hour: float | None = Field(default=None, gt=0)
    saturation_threshold: float = Field(default=0.05, gt=0, lt=1)
    decision_confidence: float = Field(default=DEFAULT_CONFIDENCE, gt=0, lt=1, description="a job with a deadline "
                                       "gets the cheapest W that meets it with at least this probability; its "
                                       "annotation training-advisor.io/confidence overrides it")
    auto_min_gain: float = Field(default=0.10, gt=0, description="auto mode: least relative saving in cost per example to resize")
    auto_cooldown_s: int = Field(default=1800, ge=0)
    deadline_plan_resize: bool = Field(default=True, description="auto mode with online refit: size a job with a "
                                       "deadline counting on one resize after it is observed (core/correction.py)")
    deadline_resize_loss_s: float = Field(default=600.0, ge=0, description="the progress one resize is planned to "
                                          "lose (pods restart from a checkpoint), seconds; also charged to a "
                                          "running job's move to another W once its progress is known")
    # Online refit to observed throughput (docs/controller.md, "Online refit"; controller/pipeline/refit.py).
    # Loosely typed on purpose: a value that cannot work (a bad URL, a duration <= 0) is reported
    # by a Warning event on the jobs and a log line, and refit stays off; it never stops the controller.
    refit_enabled: bool = Field(default=False, description="refit a job's contention constants to its observed "
                                                          "throughput (needs Prometheus and ADVISOR_METRICS_PORT)")
    refit_prometheus_url: str = Field(default="", description="Prometheus' base URL, e.g. "
                                                             "http://prometheus-operated.monitoring.svc:9090")
    refit_min_observation_s: float | str = Field(default=900.0, description="time a job must run at one worker count "
                                                 "before it is observed; also the query's window (seconds)")
    refit_interval_s: float | str = Field(default=1800.0, description="least time between two observations of a job")
    refit_tolerance: float | str = Field(default=0.1, description="refit when observed and predicted throughput "
                                                                   "differ by more than this fraction")
    refit_query_timeout_s: float | str = Field(default=10.0, description="timeout of one Prometheus query (seconds)")
    # Cluster mode (docs/allocation.md; controller/pipeline/allocation.py): share a capacity between
    # the opted-in jobs instead of sizing each alone.
    cluster_mode: bool = Field(default=False, description="share a capacity between jobs: this setting's for jobs "
                                                          "without a Kueue queue label, their ClusterQueue's for the others")
    cluster_capacity: dict[str, int | float | str] = Field(
        default_factory=dict, description="the capacity of the jobs without a Kueue queue label: workers and/or "
                                          "resources, e.g. {workers: 16, cpu: 64, nvidia.com/gpu: 8}; empty: none")
    cluster_debounce_s: float = Field(default=10.0, ge=0, description="changes within this many seconds of the first "
                                                                      "make one reallocation")
    cluster_stability: float = Field(default=0.05, ge=0, description="keep the allocation in force unless a new one "
                                                                     "gains more than this fraction of goodput")
    # The closed loop's update (docs/decisions.md; core/online_calibration.py).
    refit_observation_noise: float | str = Field(default=0.03, description="relative noise of one observed "
                                                 "throughput (a log-scale sd; run-to-run spread on the testbed)")
    refit_rule: str = Field(default="posterior", description="how observations update the curve: posterior, "
                            "refit-condition, refit or condition (docs/decisions.md#the-closed-loop-how-a-running-job-corrects-its-own-curve)")
    refit_misstated: float | str = Field(default=MISSTATED, description="the posterior rule's prior probability that a "
                                         "job's stated values (link rate, contention constants, ring latency) are "
                                         "wrong, in (0, 1]; lower where they were fitted on this cluster "
                                         "(docs/decisions.md#the-update-rule)")
    # Worker speeds from the nodes the job's workers run on (docs/controller.md, "Worker speeds
    # from nodes"): node label -> label value -> {speed, link}. Empty: off (and no right on pods
    # or nodes is needed); the first label of a node found here decides.
    node_speeds: dict[str, dict[str, NodeSpeed]] = Field(default_factory=dict, description="e.g. "
                                                         "{node.kubernetes.io/instance-type: {p3.2xlarge: {speed: 1, "
                                                         "link: 10Gbit/s}}}")
    # Profiling runs.
    profiling_steps: int = Field(default=100, ge=10, le=10_000)
    profiling_warmup_steps: int = Field(default=5, ge=0)
    profiling_timeout_s: int = Field(default=1800, ge=60)
    # Profiling runs in clusters with a queueing system (docs/controller.md, "Profiling runs").
    profiling_max_attempts: int = Field(default=3, ge=1, le=10, description="tries per generation, retries included")
    profiling_retry_backoff_s: int = Field(default=30, ge=1, description="wait before try 2; doubles per try")
    profiling_propagate_labels: list[str] = Field(default_factory=list, description="more job labels to copy")
    profiling_propagate_annotations: list[str] = Field(default_factory=list, description="more annotations to copy")
    # Prediction.
    prediction_backend: PredictionBackend = PredictionBackend.PROCESS
    prediction_processes: int = Field(default=1, ge=1)
    prediction_target: float = Field(default=0.02, gt=0, lt=0.5, description="relative 95 % half-width")
    prediction_seed: int = 0
    prediction_job_image: str | None = Field(default=None, description="job backend: required (the chart sets it)")
    prediction_job_image_pull_secrets: list[str] = Field(default_factory=list)
    prediction_job_timeout_s: int = Field(default=1800, ge=60, description="the Job's activeDeadlineSeconds")
    prediction_job_start_timeout_s: int = Field(default=300, ge=1, description="a pod that cannot start fails then")
    prediction_job_resources: JobResources = Field(default_factory=JobResources)
    prediction_job_node_selector: dict[str, str] = Field(default_factory=dict, description="the pods' nodeSelector")
    prediction_job_tolerations: list[Toleration] = Field(default_factory=list)
    prediction_job_priority_class_name: str = Field(default="", max_length=253, description='"": cluster default')
    prediction_job_run_as_user: int = Field(default=65532, ge=1, description="the image's user; non-root")
    prediction_job_run_as_group: int = Field(default=65532, ge=0)
    # Plumbing.
    http_port: int = Field(default=8080, ge=0, le=65535, description="trace ingest and prediction Jobs' "
                                                                      "requests; 0 picks a free port (tests)")
    # /metrics and the probes on a port of their own, so a NetworkPolicy can open ingest to
    # profiling pods and metrics to Prometheus separately; equal to http_port: one port for all.
    metrics_port: int = Field(default=8081, ge=0, le=65535, description="/metrics, /healthz, /readyz; "
                                                                        "0 picks a free port (tests)")
    ingest_url: str = Field(default="http://advisor.advisor-system.svc:8080", description="how pods reach us")
    ingest_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    # The key profiling runs' upload tokens are derived from (controller/state/tokens.py): the same on
    # every replica, so a new leader accepts the tokens of runs in flight. The file wins.
    ingest_key: SecretStr | None = Field(default=None, description="the key itself (prefer the file)")
    ingest_key_file: Path | None = Field(default=None, description="file holding the key (a mounted Secret)")
    store_path: Path = Path("/var/lib/advisor/advisor.db")
    resync_period_s: int = Field(default=300, ge=5)
    gc_period_s: int = Field(default=600, ge=5)
    leader_election: bool = True
    lease_name: str = "advisor-leader"
    # client-go's defaults. A shorter lease fails over sooner after a crash (a standby waits the
    # lease out) and costs more renewals; the renew deadline must stay below the lease so a leader
    # that cannot renew stops before a standby may take over.
    lease_duration_s: float = Field(default=15.0, ge=1, description="how long a lease holds without renewal")
    lease_renew_deadline_s: float = Field(default=10.0, gt=0, description="a leader that cannot renew "
                                                                          "for this long stops leading")
    lease_retry_period_s: float = Field(default=2.0, gt=0, description="between renewals and between a "
                                                                       "standby's tries")
    lease_namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "advisor-system"))
    identity: str = Field(default_factory=lambda: os.environ.get("HOSTNAME", "advisor"))
    kubeconfig: Path | None = None
    kube_context: str | None = None
    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth_readable(cls, value: str | None) -> str | None:
        if value is not None and value.strip().lower() != MEASURE:
            parse_bandwidth(value)  # raises UnitError (a ValueError) naming the text
        return value

    @field_validator("queue")
    @classmethod
    def _queue_readable(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) < 0:
            raise ValueError(f"queue must be >= 0, got {value!r}")
        return value

    @field_validator("cluster_capacity")
    @classmethod
    def _capacity_readable(cls, value: dict[str, int | float | str]) -> dict[str, int | float | str]:
        for name, amount in value.items():
            number = parse_quantity(amount)  # UnitError (a ValueError) naming the text
            if name == "workers" and (number < 1 or number != int(number)):
                raise ValueError(f"workers must be a whole number >= 1, got {amount!r}")
        return value

    @field_validator("prediction_job_node_selector")
    @classmethod
    def _node_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if problem := label_key_problem(key) or label_value_problem(label):
                raise ValueError(problem)
        return value

    @field_validator("node_speeds")
    @classmethod
    def _node_speed_labels(cls, value: dict[str, dict[str, NodeSpeed]]) -> dict[str, dict[str, NodeSpeed]]:
        for key, values in value.items():
            for label in values:
                if problem := label_key_problem(key) or label_value_problem(label):
                    raise ValueError(problem)
        return value

    @field_validator("prediction_job_priority_class_name")
    @classmethod
    def _priority_class(cls, value: str) -> str:
        if value and not re.fullmatch(_SUBDOMAIN, value):
            raise ValueError(f"{value!r} is not a PriorityClass name (a lowercase DNS subdomain, e.g. batch-low)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ControllerSettings:
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) exceeds max_workers ({self.max_workers})")
        if not self.lease_duration_s > self.lease_renew_deadline_s > LEASE_RETRY_JITTER * self.lease_retry_period_s:
            raise ValueError(f"lease timing needs lease_duration_s ({self.lease_duration_s:g}) > lease_renew_deadline_s "
                             f"({self.lease_renew_deadline_s:g}) > {LEASE_RETRY_JITTER:g} x lease_retry_period_s "
                             f"({self.lease_retry_period_s:g})")
        try:
            self.model_choice().resolve()
        except ModelInputError as exc:
            raise ValueError(f"model: {exc}") from None
        if self.prediction_backend is PredictionBackend.JOB and not self.prediction_job_image:
            raise ValueError("prediction_backend 'job' needs prediction_job_image (the Helm chart sets it to the "
                             "controller's own image)")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = getattr(settings_cls, "config_file", None) or os.environ.get(CONFIG_FILE_ENV)
        if path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    def bandwidth_bps(self) -> float | None:
        """The configured capacity; None when unset or ``measure``."""
        return parse_bandwidth(self.bandwidth) if self.bandwidth and not self.measure_bandwidth() else None

    def measure_bandwidth(self) -> bool:
        """``bandwidth: measure``: every prediction measures it from its profile (core/bandwidth.py)."""
        return (self.bandwidth or "").strip().lower() == MEASURE

    def model_choice(self, synchronous: bool = False) -> ModelChoice:
        """The model predictions use and its parameters: ``model`` (``li2020-des`` with
        ``equal_shares``), the contention settings for the parameters the model has, then
        ``model_params``. ``synchronous``: for a trace of SyncReplicasOptimizer, where ``model`` is
        the asynchronous default, the synchronous default (``li2020-des-sync`` with ``equal_shares``)
        with those of the parameters it has: an asynchronous model cannot predict that trace."""
        name = registry.equal_shares_model() if self.equal_shares and self.model == DEFAULT_MODEL else self.model
        regime = synchronous and self.model == DEFAULT_MODEL
        if regime:
            name = registry.equal_shares_model(True) if self.equal_shares else registry.default_model_for(False, True)
        fields = registry.get(name).Params.model_fields
        legacy = {"congestion_control": self.congestion_control,
                  "queue_s": parse_duration(self.queue) if self.queue else None,
                  "share_sigma": self.share_sigma, "multi_flow_goodput": self.multi_flow_goodput}
        params = {k: v for k, v in legacy.items() if k in fields and v is not None}
        given = {k: v for k, v in self.model_params.items() if k in fields or not regime}
        return ModelChoice(name, {**params, **given})

    def prediction_fingerprint(self) -> str:
        """Hash of the settings a prediction depends on: when it changes, predictions are redone."""
        keys = ("prices", "bandwidth", "min_workers", "max_workers", "budget_per_hour", "saturation_threshold",
                "prediction_target", "prediction_seed", "congestion_control", "queue", "share_sigma",
                "multi_flow_goodput", "equal_shares", "model", "model_params")
        doc = self.model_dump(mode="json", include=set(keys))
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def load_settings(config_file: Path | None = None, **overrides: Any) -> ControllerSettings:
    """Read the settings (``config_file`` replaces ``ADVISOR_CONFIG_FILE``); errors name the field."""
    cls: type[ControllerSettings] = ControllerSettings
    if config_file is not None:
        if not config_file.is_file():
            raise SettingsError(f"settings file {config_file} does not exist")
        # A subclass that names the file, instead of setting ADVISOR_CONFIG_FILE for the whole process.
        cls = type("ControllerSettings", (ControllerSettings,), {"config_file": str(config_file)})
    try:
        return cls(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors())
        raise SettingsError(f"invalid controller settings: {problems}") from None
    except UnitError as exc:
        raise SettingsError(f"invalid controller settings: {exc}") from None
