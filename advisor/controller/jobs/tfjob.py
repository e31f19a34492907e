"""Kubeflow TFJob objects (kubeflow.org/v1) as the controller reads and writes them: pure functions.

The API gives plain JSON; ``parse_tfjob`` turns it into a small typed view once, naming the field
when the object is not what training-operator v1.9 accepts, and the ``build_*``/``*_patch``
functions produce the exact JSON the controller sends (profiling run, resize, suspend). Nothing
here talks to the cluster, so every rule can be tested on literal objects.

Schema followed (training-operator v1.9): ``spec.tfReplicaSpecs`` maps replica types (``PS``,
``Worker``, ``Chief``, ``Master``, ``Evaluator``; the operator matches them case-insensitively)
to ``{replicas, restartPolicy, template}``; ``spec.runPolicy`` holds ``suspend``,
``activeDeadlineSeconds``, ``backoffLimit``, ``cleanPodPolicy``; ``spec.enableDynamicWorker``;
``status.conditions[]`` of types Created, Running, Restarting, Succeeded, Failed, Suspended.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.core.units import rfc3339
from advisor.errors import TFJobError

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
API_VERSION = f"{GROUP}/{VERSION}"
PREFIX = "training-advisor.io/"
OPT_IN = PREFIX + "enabled"
ROLE_LABEL = PREFIX + "role"
PROFILING_ROLE = "profiling"  # ROLE_LABEL's value on profiling runs and on their pods (a NetworkPolicy selects them)
PROFILING_FOR_LABEL = PREFIX + "profiling-for"
GENERATION_LABEL = PREFIX + "generation"
PROFILING_FOR_UID = PREFIX + "profiling-for-uid"  # annotation: the uid of the job a profiling run is for
TOKEN_MOUNT = "/var/run/secrets/advisor"
TOKEN_KEY = "token"
# The run's upload token, on the profiling pods' template, projected into TOKEN_MOUNT by the downward API.
TOKEN_ANNOTATION = PREFIX + "ingest-token"
# What queueing systems read on a job, copied onto its profiling run (plus the settings'
# profiling_propagate_labels / _annotations): Kueue's queue and priority class.
PROPAGATED_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")
PROPAGATED_ANNOTATIONS = ("kueue.x-k8s.io/queue-name",)
_REPLICA_TYPES = {"ps": "PS", "worker": "Worker", "chief": "Chief", "master": "Master", "evaluator": "Evaluator"}
_NAME_LIMIT = 63  # label values, and DNS-1035 labels such as Service names
# The training operator names each replica's Service and pod ``<job>-<type>-<index>``; the longest
# a profiling run gets is ``-worker-0``, and a Service name is a DNS-1035 label (63): so 54.
PROFILING_NAME_LIMIT = _NAME_LIMIT - len("-worker-0")


@dataclass(frozen=True, slots=True)
class TFJobView:
    """What the controller needs to know about one TFJob."""

    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    replicas: Mapping[str, int]  # canonical replica type -> count
    suspended: bool
    dynamic_workers: bool
    started: bool
    finished: str | None  # "Succeeded" / "Failed" when the job is over
    finished_message: str
    template_hash: str  # identity of what a profile depends on: the pod templates, not the counts
    node_types: Mapping[str, str]  # replica type -> node type from its nodeSelector, where given
    spec_keys: Mapping[str, str]  # canonical replica type -> the key as the job spells it
    # The job's API kind and the program kind its trace must be (advisor.controller.jobs.kinds):
    # TFJob with PS replicas (tf-ps), TFJob without (tf-mwms), PyTorchJob (pytorch-ddp).
    kind: str = KIND
    program: str = "tf-ps"
    # workers the job itself allows (a PyTorchJob's elasticPolicy min/max replicas, plus its Master)
    worker_range: tuple[int, int] | None = None
    # status.startTime (unix seconds): where a deadline's hours count from; None when not started or
    # not a time (the operator writes it; an unreadable one leaves the deadline planned from now)
    started_at: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def workers(self) -> int:
        """Replicas that compute gradients: Worker plus Chief/Master (TF's chief is a worker too)."""
        return self.replicas.get("Worker", 0) + self.replicas.get("Chief", 0) + self.replicas.get("Master", 0)

    @property
    def parameter_servers(self) -> int:
        return self.replicas.get("PS", 0)

    @property
    def is_profiling_run(self) -> bool:
        return self.labels.get(ROLE_LABEL) == "profiling"

    def opted_in(self, rule: str = "annotation") -> bool:
        return opted_in(self.labels, self.annotations, rule)


def opted_in(labels: Mapping[str, Any], annotations: Mapping[str, Any], rule: str = "annotation") -> bool:
    """The opt-in rule, on the raw metadata too (a job that does not parse may still have opted in).

    Profiling runs never opt in; otherwise every job with rule ``all``, or with the annotation.
    """
    if labels.get(ROLE_LABEL) == "profiling":
        return False
    return rule == "all" or str(annotations.get(OPT_IN, "")).lower() == "true"


def parse_tfjob(obj: Mapping[str, Any], *, node_type_label: str = "node.kubernetes.io/instance-type",
                require_ps: bool = True) -> TFJobView:
    """The typed view of a TFJob; ``TFJobError`` names the first field that is not as the API defines it.

    ``require_ps=False`` reads a TFJob without PS replicas too (MultiWorkerMirroredStrategy:
    Worker and Chief replicas); its view's ``program`` is then ``tf-mwms``."""
    meta = _mapping(obj.get("metadata"), "metadata")
    name, namespace = _text(meta.get("name"), "metadata.name"), _text(meta.get("namespace"), "metadata.namespace")
    where = f"TFJob {namespace}/{name}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    specs = _replica_specs(spec, where, require_ps=require_ps)
    run_policy = _mapping(spec.get("runPolicy", {}), f"{where}: spec.runPolicy")
    status = _mapping(obj.get("status") or {}, f"{where}: status")
    finished, message = finished_state(status)
    return TFJobView(
        namespace=namespace, name=name,
        uid=_text(meta.get("uid"), f"{where}: metadata.uid"),
        generation=_int(meta.get("generation", 1), f"{where}: metadata.generation", minimum=1),
        resource_version=str(meta.get("resourceVersion", "")),
        annotations=_string_map(meta.get("annotations"), f"{where}: metadata.annotations"),
        labels=_string_map(meta.get("labels"), f"{where}: metadata.labels"),
        replicas={kind: _int(s.get("replicas", 1), f"{where}: spec.tfReplicaSpecs.{kind}.replicas", minimum=0)
                  for kind, s in specs.items()},
        suspended=_bool(run_policy.get("suspend", False), f"{where}: spec.runPolicy.suspend"),
        dynamic_workers=_bool(spec.get("enableDynamicWorker", False), f"{where}: spec.enableDynamicWorker"),
        started=bool(status.get("startTime")) or _condition(status, "Running"),
        started_at=start_time(status),
        finished=finished, finished_message=message,
        template_hash=_template_hash(specs),
        node_types={kind: s["template"].get("spec", {}).get("nodeSelector", {}).get(node_type_label)
                    for kind, s in specs.items()
                    if s["template"].get("spec", {}).get("nodeSelector", {}).get(node_type_label)},
        spec_keys={_REPLICA_TYPES[str(k).lower()]: str(k) for k in spec["tfReplicaSpecs"]},
        program="tf-ps" if "PS" in specs else "tf-mwms",
    )


def _replica_specs(spec: Mapping[str, Any], where: str, *, require_ps: bool = True) -> dict[str, dict[str, Any]]:
    raw = _mapping(spec.get("tfReplicaSpecs"), f"{where}: spec.tfReplicaSpecs")
    specs: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        kind = _REPLICA_TYPES.get(str(key).lower())
        if kind is None:
            raise TFJobError(f"{where}: spec.tfReplicaSpecs has unknown replica type {key!r} "
                             f"(expected one of {', '.join(_REPLICA_TYPES.values())})")
        if kind in specs:
            raise TFJobError(f"{where}: spec.tfReplicaSpecs names {kind} twice")
        specs[kind] = replica_spec(value, f"{where}: spec.tfReplicaSpecs.{key}")
    if "PS" not in specs and require_ps:
        raise TFJobError(f"{where}: no PS replicas: the advisor models parameter-server training only")
    if not any(k in specs for k in ("Worker", "Chief", "Master")):
        raise TFJobError(f"{where}: no Worker (or Chief) replicas to profile")
    return specs


def replica_spec(value: Any, where: str) -> dict[str, Any]:
    """One replica spec of any kind (``where`` names it): an object whose pod template lists a container."""
    s = _mapping(value, where)
    template = _mapping(s.get("template"), f"{where}.template")
    containers = template.get("spec", {}).get("containers") if isinstance(template.get("spec"), Mapping) else None
    if not isinstance(containers, list) or not containers:
        raise TFJobError(f"{where}.template.spec.containers must list a container")
    return dict(s)


def _template_hash(specs: Mapping[str, Mapping[str, Any]]) -> str:
    """Hash of the replica specs without their counts: a resize must not ask for a new profile."""
    doc = {kind: {k: v for k, v in s.items() if k != "replicas"} for kind, s in sorted(specs.items())
           if kind != "Evaluator"}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def finished_state(status: Mapping[str, Any]) -> tuple[str | None, str]:
    """("Succeeded" or "Failed", the condition's message) once a TFJob is over, else (None, "")."""
    for kind in ("Succeeded", "Failed"):
        for c in status.get("conditions") or []:
            if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
                return kind, str(c.get("message") or c.get("reason") or "")
    return None, ""


def finished_reason(status: Mapping[str, Any]) -> str:
    """The reason of the Failed (or Succeeded) condition that is True; "" while not finished."""
    for kind in ("Failed", "Succeeded"):
        for c in status.get("conditions") or []:
            if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
                return str(c.get("reason") or "")
    return ""


def start_time(status: Mapping[str, Any]) -> float | None:
    """``status.startTime`` in unix seconds (RFC 3339, as the API writes it); None when absent or unreadable."""
    return parse_time(status.get("startTime"))


def parse_rfc3339(text: str | None) -> float | None:
    """The time ``rfc3339`` wrote (the controller's own annotations), exactly that form; None when
    absent or not such a time."""
    try:
        return dt.datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def parse_time(text: Any) -> float | None:
    """An ISO 8601 / RFC 3339 time (a metav1.Time) in unix seconds, without a zone UTC; None when
    absent or not such a time."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in status.get("conditions") or [])


# --- what the controller writes -----------------------------------------------------------------


def profiling_job_name(name: str, generation: int, attempt: int = 1) -> str:
    """``<name>-prof-g<generation>`` (try 1) or ``...-g<generation>-r<attempt>``, shortened with a
    hash of the name to PROFILING_NAME_LIMIT, so that every name the training operator derives
    from it (``<run>-worker-0`` Services and pods) is a valid DNS-1035 label. A name that does not
    start with a letter (DNS-1035) gets a ``p`` in front."""
    suffix = f"-prof-g{generation}" + (f"-r{attempt}" if attempt > 1 else "")
    base = name if name[:1].isalpha() else f"p{name}"
    full = base + suffix
    if len(full) <= PROFILING_NAME_LIMIT:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = base[:PROFILING_NAME_LIMIT - len(suffix) - 9].rstrip("-.")
    return f"{head}-{digest}{suffix}"


def profiling_run_owner(obj: Mapping[str, Any]) -> str | None:
    """The uid of the job a profiling TFJob was made for (what ``build_profiling_tfjob`` wrote)."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    return notes.get(PROFILING_FOR_UID)


@dataclass(frozen=True, slots=True)
class ProfilingSpec:
    """How the profiling run is set up (from the settings)."""

    ingest_url: str  # base, e.g. http://advisor.advisor-system.svc:8080
    steps: int
    warmup_steps: int
    timeout_s: int
    bandwidth_mbit: float | None = None
    token: str = ""  # the run's upload token (controller/state/tokens.py)
    attempt: int = 1
    labels: tuple[str, ...] = ()  # more label keys to copy from the job (profiling_propagate_labels)
    annotations: tuple[str, ...] = ()


def build_profiling_tfjob(
    obj: Mapping[str, Any], view: TFJobView, spec: ProfilingSpec, generation: int | None = None
) -> dict[str, Any]:
    """The 1-PS/1-worker profiling TFJob cloned from the user's job, owned by it, tracing switched on.

    ``generation`` is the one being profiled (default: the job's current one). What queueing
    systems read (PROPAGATED_LABELS / _ANNOTATIONS and the settings' extra keys, and
    ``runPolicy.schedulingPolicy`` sized for the run's two pods) is copied from the job.
    """
    generation = view.generation if generation is None else generation
    source = _replica_specs(obj["spec"], f"TFJob {view.namespace}/{view.name}")
    worker_kind = "Worker" if "Worker" in source else ("Chief" if "Chief" in source else "Master")
    env = profiling_env(view, spec, generation)
    replicas = {"PS": profiling_replica(source["PS"], env, spec.token),
                "Worker": profiling_replica(source[worker_kind], env, spec.token)}
    return profiling_object(obj, view, spec, generation, {"tfReplicaSpecs": replicas}, pods=2)


def build_profiling_mwms_tfjob(
    obj: Mapping[str, Any], view: TFJobView, spec: ProfilingSpec, generation: int | None = None
) -> dict[str, Any]:
    """The profiling TFJob of a job without PS (MultiWorkerMirroredStrategy): ONE Worker, cloned
    from the job's Worker template (else its Chief's or Master's), and nothing else. The training
    operator sets no TF_CONFIG for a job of one replica, so the strategy runs alone (one worker,
    no collective peers), which is the trace the ring model needs."""
    generation = view.generation if generation is None else generation
    source = _replica_specs(obj["spec"], f"TFJob {view.namespace}/{view.name}", require_ps=False)
    worker_kind = "Worker" if "Worker" in source else ("Chief" if "Chief" in source else "Master")
    env = profiling_env(view, spec, generation)
    replicas = {"Worker": profiling_replica(source[worker_kind], env, spec.token)}
    return profiling_object(obj, view, spec, generation, {"tfReplicaSpecs": replicas}, pods=1)


def profiling_object(obj: Mapping[str, Any], view: TFJobView, spec: ProfilingSpec, generation: int,
                     job_spec: Mapping[str, Any], *, pods: int) -> dict[str, Any]:
    """The profiling run of any job kind around its replica specs (``job_spec``): named, labelled
    and owned as every kind's run is, with the job's queueing labels and a run policy for ``pods``."""
    name = profiling_job_name(view.name, generation, spec.attempt)
    labels = {k: view.labels[k] for k in (*PROPAGATED_LABELS, *spec.labels) if k in view.labels}
    notes = {k: view.annotations[k] for k in (*PROPAGATED_ANNOTATIONS, *spec.annotations) if k in view.annotations}
    run_policy: dict[str, Any] = {"activeDeadlineSeconds": spec.timeout_s, "backoffLimit": 0,
                                  "cleanPodPolicy": "Running", "suspend": False}
    policy = (obj["spec"].get("runPolicy") or {}).get("schedulingPolicy")
    if isinstance(policy, Mapping):
        # the job's queue and priority, for a gang of the run's pods (not the job's size)
        run_policy["schedulingPolicy"] = {**{k: v for k, v in policy.items() if k != "minResources"},
                                          "minAvailable": pods}
    return {
        "apiVersion": API_VERSION,
        "kind": view.kind,
        "metadata": {
            "name": name,
            "namespace": view.namespace,
            "labels": {**labels, ROLE_LABEL: PROFILING_ROLE, PROFILING_FOR_LABEL: view.name[:_NAME_LIMIT],
                       GENERATION_LABEL: str(generation)},
            "annotations": {**notes, PROFILING_FOR_UID: view.uid},
            "ownerReferences": [owner_reference(view)],
        },
        "spec": {"runPolicy": run_policy, **job_spec},
    }


def owner_reference(view: TFJobView) -> dict[str, Any]:
    """Owned by the user's job, so the garbage collector deletes the run and its record with it.

    No ``blockOwnerDeletion``: where the OwnerReferencesPermissionEnforcement admission plugin
    runs (OpenShift, hardened clusters) setting it needs ``update`` on ``tfjobs/finalizers``,
    a right the controller has no other use for; without it a foreground deletion of the job
    simply does not wait for the profiling run.
    """
    return owner_ref(view.name, view.uid, view.kind)


def owner_ref(name: str, uid: str, kind: str = KIND) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "name": name, "uid": uid, "controller": False}


def profiling_env(view: TFJobView, spec: ProfilingSpec, generation: int) -> list[dict[str, str]]:
    """The environment every kind's profiling pod gets (ADVISOR_PROFILE=1, where to upload...)."""
    url = f"{spec.ingest_url.rstrip('/')}/v1/traces/{view.namespace}/{view.name}/{generation}"
    env = [
        {"name": "ADVISOR_PROFILE", "value": "1"},
        {"name": "ADVISOR_INGEST_URL", "value": url},
        {"name": "ADVISOR_TOKEN_FILE", "value": f"{TOKEN_MOUNT}/{TOKEN_KEY}"},
        {"name": "ADVISOR_PROFILE_STEPS", "value": str(spec.steps)},
        {"name": "ADVISOR_PROFILE_WARMUP", "value": str(spec.warmup_steps)},
        {"name": "ADVISOR_STOP_AFTER_UPLOAD", "value": "1"},
        # the profiling run is not the job: its steps must not count as the job's observed
        # throughput (advisor.profiling.throughput), so a metrics port set in the template is unset
        {"name": "ADVISOR_METRICS_PORT", "value": ""},
    ]
    if spec.bandwidth_mbit:
        env.append({"name": "ADVISOR_BANDWIDTH_MBIT", "value": f"{spec.bandwidth_mbit:g}"})
    return env


def profiling_replica(source: Mapping[str, Any], env: list[dict[str, str]], token: str) -> dict[str, Any]:
    """One replica of a profiling run of any kind. The token is an annotation of the pod template,
    projected as the file ADVISOR_TOKEN_FILE names by a downwardAPI volume: no Secret, and the
    profiling hook reads a file as before. The pods are labelled ``ROLE_LABEL: profiling``, the one
    label that tells them from the job's training pods (the chart's NetworkPolicy admits uploads
    from them alone)."""
    replica = copy.deepcopy(dict(source))
    replica["replicas"] = 1
    replica["restartPolicy"] = "Never"
    template = replica["template"]
    meta = template.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), TOKEN_ANNOTATION: token}
    meta["labels"] = {**(meta.get("labels") or {}), ROLE_LABEL: PROFILING_ROLE}
    pod = template.setdefault("spec", {})
    names = {e["name"] for e in env}
    for container in pod["containers"]:
        container["env"] = [e for e in container.get("env") or [] if e.get("name") not in names] + env
        mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != "advisor-token"]
        container["volumeMounts"] = [*mounts, {"name": "advisor-token", "mountPath": TOKEN_MOUNT, "readOnly": True}]
    volumes = [v for v in pod.get("volumes") or [] if v.get("name") != "advisor-token"]
    field = f"metadata.annotations['{TOKEN_ANNOTATION}']"
    pod["volumes"] = [*volumes, {"name": "advisor-token", "downwardAPI": {
        "items": [{"path": TOKEN_KEY, "fieldRef": {"fieldPath": field}}], "defaultMode": 0o440}}]
    return replica


def resize_patch(view: TFJobView, workers: int, *, resume: bool = False,
                 field: str = "tfReplicaSpecs") -> dict[str, Any]:
    """Merge patch setting the Worker replicas so that Worker + Chief = ``workers`` (and resuming).

    ``field`` is where the kind keeps its replica specs (a PyTorchJob's ``pytorchReplicaSpecs``,
    whose Master is a worker too, as TF's Chief is)."""
    if "Worker" not in view.spec_keys:
        raise TFJobError(f"{view.kind} {view.namespace}/{view.name} has no Worker replicas to resize")
    chiefs = view.replicas.get("Chief", 0) + view.replicas.get("Master", 0)
    key = view.spec_keys["Worker"]
    patch: dict[str, Any] = {"spec": {field: {key: {"replicas": max(workers - chiefs, 0)}}}}
    if resume:
        patch["spec"]["runPolicy"] = {"suspend": False}
    return patch


def suspend_patch() -> dict[str, Any]:
    return {"spec": {"runPolicy": {"suspend": True}},
            "metadata": {"annotations": {PREFIX + "suspended-by-advisor": "true"}}}


def release_patch() -> dict[str, Any]:
    """Undo ``suspend_patch``: resume the job and drop the advisor's mark (replicas untouched)."""
    return {"spec": {"runPolicy": {"suspend": False}},
            "metadata": {"annotations": {PREFIX + "suspended-by-advisor": None}}}


# --- field readers --------------------------------------------------------------------------------


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TFJobError(f"{where} must be an object, found {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TFJobError(f"{where} must be a non-empty string")
    return value


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TFJobError(f"{where} must be an integer >= {minimum}, found {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TFJobError(f"{where} must be true or false, found {value!r}")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    m = _mapping(value, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
        raise TFJobError(f"{where} must map strings to strings")
    return dict(m)
