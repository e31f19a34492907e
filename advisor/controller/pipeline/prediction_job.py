"""The prediction Job (job backend) as the controller writes and reads it: pure functions.

``build_prediction_job`` gives the exact batch/v1 Job sent for one attempt at one prediction,
``build_token_secret`` the Secret holding its bearer token, and ``assess`` reads a Job and its
pods back into "still going" or "failed, because...". Nothing here talks to the cluster, so
every rule is tested on literal objects.

Why these choices:
- The name is ``advisor-predict-<key>-<attempt>``: deterministic, so a controller that restarts
  while a Job runs finds it by name (create answers 409) instead of starting a second one. The
  annotation ``ATTEMPT_ANNOTATION`` names the store's record of the attempt, so a replica whose
  create answers 409 can tell the same attempt's Job (made by another replica) from a Job left
  by a lost store.
- A new leader whose store does not know an attempt finds its Job by label (``ROLE``,
  ``KEY_LABEL``) and owner (``OWNER_ANNOTATION``: the controller that made it, named by its
  lease) and adopts it (``adoptable``) when it still runs within its deadline: its token is
  derived from the controller's key and the attempt (``state.tokens.prediction_token``), so the
  new leader checks it without the old leader's store, and no second Job runs.
- The pod gets no Kubernetes credentials (``automountServiceAccountToken: false``): it talks
  only to the controller's HTTP endpoint, with a token of its own from the Secret.
- The Secret is owned by the Job, so whatever deletes the Job (its TTL, garbage collection, a
  person) deletes the token too.
- ``terminationMessagePolicy: FallbackToLogsOnError`` puts the tail of a failed pod's output in
  its status, so the failure reason reaches the TFJob with a pod list, without reading logs.
- Security settings match the controller's Deployment (non-root UID 65532, read-only root,
  no capabilities, seccomp RuntimeDefault); ``/tmp`` is an emptyDir for numba's cache. The UID
  and GID can be changed (clusters that assign them, e.g. OpenShift's restricted SCC): the pod
  needs only ``/tmp``, which is also its working directory, since the image's WORKDIR is
  readable by 65532 alone.
- ``podFailurePolicy``: ``advisor predict-job`` exits ``EXIT_FINAL`` when the controller refuses
  it for good (job_client.py); that fails the Job at once instead of burning ``backoffLimit`` on
  a pod that would be refused again. A pod disrupted by the cluster (eviction, preemption, a
  drained node: condition ``DisruptionTarget``) is not counted: its replacement may well succeed.
- Scheduling (``nodeSelector``, ``tolerations``, ``priorityClassName``) comes from the settings,
  so platform teams can keep predictions off GPU nodes or on a batch pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.controller.jobs.tfjob import PREFIX, ROLE_LABEL, parse_time

ROLE = "prediction"
KEY_LABEL = PREFIX + "prediction-key"
JOB_LABEL = PREFIX + "prediction-job"  # on the pods too, to find a Job's pods
ATTEMPT_ANNOTATION = PREFIX + "prediction-attempt"  # the store record the Job was made for
# the controller that made the Job: "<lease namespace>/<lease name>", the same on every replica;
# a Job with it has a derived token (state/tokens.py), so any replica of that controller can adopt it
OWNER_ANNOTATION = PREFIX + "prediction-owner"
CONTAINER = "predict"
TOKEN_ENV = "ADVISOR_PREDICTION_TOKEN"
TOKEN_KEY = "token"
BACKOFF_LIMIT = 1  # one more pod after a failure (a lost node, an eviction); a bug fails twice, quickly
TTL_AFTER_FINISHED_S = 3600  # an hour to look at a finished Job before Kubernetes deletes it
RUN_AS = 65532  # the image's user (Dockerfile)
EXIT_FINAL = 3  # `advisor predict-job` refused for good (job_client.py): the Job fails without a retry
WORKDIR = "/tmp"  # the one writable path (an emptyDir), and readable whatever the UID
# Container states from which a pod will not start by itself (the kubelet keeps retrying them).
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "CreateContainerConfigError", "CreateContainerError"})
_MESSAGE_TAIL = 600  # characters of a pod's termination message quoted (the end of a traceback says most)


@dataclass(frozen=True, slots=True)
class PredictionJobSpec:
    """How prediction Jobs are made (from the settings)."""

    namespace: str  # the controller's own namespace
    image: str
    controller_url: str  # how the pod reaches the controller (the ingest URL)
    timeout_s: int  # activeDeadlineSeconds
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    image_pull_secrets: Sequence[str] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()  # Kubernetes Toleration objects, as sent
    priority_class_name: str = ""  # "": the cluster's default priority
    run_as_user: int = RUN_AS
    run_as_group: int = RUN_AS
    owner: str = ""  # OWNER_ANNOTATION's value: "<lease namespace>/<lease name>"


def prediction_job_name(key: str, attempt: int) -> str:
    return f"advisor-predict-{key}-{attempt}"


def attempt_of(job_name: str, key: str) -> int | None:
    """The attempt number in a name ``prediction_job_name`` made for ``key``; None for another name."""
    prefix = f"advisor-predict-{key}-"
    tail = job_name[len(prefix):] if job_name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True, slots=True)
class Found:
    """What the cluster holds for one prediction: the Job to adopt (None: none can be) and the
    highest attempt number any of its Jobs has (0: none), so a new attempt takes a free name."""

    job: Mapping[str, Any] | None
    highest_attempt: int


def adoptable(jobs: Sequence[Mapping[str, Any]], key: str, *, owner: str, now: float) -> Found:
    """Of the prediction Jobs listed for ``key``, the one a new leader adopts: made by this
    controller (``owner``) for an attempt it names, neither finished (Complete: its answer went to
    a replica that is gone; Failed) nor past its deadline (``activeDeadlineSeconds`` from its
    start); the latest attempt when several are."""
    highest, best, best_attempt = 0, None, 0
    for job in jobs:
        meta = job.get("metadata") or {}
        attempt = attempt_of(str(meta.get("name", "")), key)
        if attempt is None:
            continue
        highest = max(highest, attempt)
        notes = meta.get("annotations") or {}
        if notes.get(OWNER_ANNOTATION) != owner or not owner or not notes.get(ATTEMPT_ANNOTATION):
            continue
        if _finished(job) or _past_deadline(job, now):
            continue
        if attempt > best_attempt:
            best, best_attempt = job, attempt
    return Found(best, highest)


def _finished(job: Mapping[str, Any]) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed", "FailureTarget")
               and c.get("status") == "True" for c in (job.get("status") or {}).get("conditions") or [])


def _past_deadline(job: Mapping[str, Any], now: float) -> bool:
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    started = parse_time((job.get("status") or {}).get("startTime")) or parse_time(
        (job.get("metadata") or {}).get("creationTimestamp"))
    return isinstance(deadline, int) and started is not None and now - started > deadline


def token_secret_name(job_name: str) -> str:
    return f"{job_name}-token"


def build_prediction_job(key: str, attempt: int, spec: PredictionJobSpec, *, attempt_id: str = "") -> dict[str, Any]:
    """The Job for ``attempt`` at prediction ``key``; ``attempt_id`` names its store record."""
    name = prediction_job_name(key, attempt)
    labels = {ROLE_LABEL: ROLE, KEY_LABEL: key, JOB_LABEL: name, "app.kubernetes.io/managed-by": "advisor"}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": ["advisor"],
        "args": ["predict-job", "--controller", spec.controller_url, "--key", key],
        "env": [{"name": TOKEN_ENV,
                 "valueFrom": {"secretKeyRef": {"name": token_secret_name(name), "key": TOKEN_KEY}}}],
        "resources": {k: dict(v) for k, v in (("requests", spec.requests), ("limits", spec.limits)) if v},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "workingDir": WORKDIR,
        "volumeMounts": [{"name": "tmp", "mountPath": WORKDIR}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",  # also what podFailurePolicy requires
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": spec.run_as_user, "runAsGroup": spec.run_as_group,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.priority_class_name:
        pod["priorityClassName"] = spec.priority_class_name
    meta: dict[str, Any] = {"name": name, "namespace": spec.namespace, "labels": labels}
    notes = {ATTEMPT_ANNOTATION: attempt_id, OWNER_ANNOTATION: spec.owner}
    if any(notes.values()):
        meta["annotations"] = {k: v for k, v in notes.items() if v}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "podFailurePolicy": pod_failure_policy(),
            "activeDeadlineSeconds": spec.timeout_s,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def pod_failure_policy() -> dict[str, Any]:
    """Rules in the order the Job controller tries them (the first match decides): a refusal
    fails the Job now; a pod the cluster disrupted is replaced without counting as a failure."""
    return {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [EXIT_FINAL]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]}


def build_token_secret(job: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret (without its data) for the created ``job``, owned by it."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": token_secret_name(meta["name"]), "namespace": meta["namespace"],
                     "labels": {ROLE_LABEL: "prediction-token", JOB_LABEL: meta["name"]},
                     # No blockOwnerDeletion: setting it needs update rights on jobs/finalizers.
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                          "uid": meta["uid"]}]},
    }


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a Job and its pods say: ``failure`` is the reason when the prediction has failed;
    ``delete`` asks to delete a Job that would otherwise linger; ``note`` is the latest pod
    state worth quoting should the Job fail later (its pods may be gone by then)."""

    failure: str | None = None
    delete: bool = False
    note: str = ""


def assess(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], *, name: str, now: float,
           known_since: float, start_timeout_s: float) -> Verdict:
    """The state of prediction Job ``name`` (``job`` None: not in a list made at ``now``)."""
    note = _pod_note(pods)
    if job is None:
        if known_since < now:
            return Verdict(f"prediction Job {name} was deleted before it sent a result", note=note)
        return Verdict(note=note)  # created after the list was made
    for cond in (job.get("status") or {}).get("conditions") or []:
        if not isinstance(cond, Mapping) or cond.get("status") != "True":
            continue
        if cond.get("type") == "Failed":
            why = ": ".join(str(p) for p in (cond.get("reason"), cond.get("message")) if p) or "no reason given"
            return Verdict(f"prediction Job {name} failed: {why}" + (f"; {note}" if note else ""), note=note)
        if cond.get("type") == "Complete":
            return Verdict(f"prediction Job {name} completed without sending a result"
                           + (f"; {note}" if note else ""), note=note)
    stuck = _stuck(pods, now, start_timeout_s)
    if stuck:
        return Verdict(f"prediction Job {name}: its pod could not start within {start_timeout_s:g} s: {stuck}",
                       delete=True, note=note)
    return Verdict(note=note)


def _pod_note(pods: Sequence[Mapping[str, Any]]) -> str:
    """The newest pod's failure or wait, in words; "" when there is nothing to say."""
    if not pods:
        return ""
    newest = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    return _pod_state(newest)[0]


def _pod_state(pod: Mapping[str, Any]) -> tuple[str, bool]:
    """(what is wrong with the pod, whether it is stuck: a wait the kubelet cannot get out of)."""
    pod_name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        term, waiting = state.get("terminated") or {}, state.get("waiting") or {}
        if term.get("exitCode") not in (None, 0):
            message = str(term.get("message") or term.get("reason") or "").strip()
            if len(message) > _MESSAGE_TAIL:
                message = "..." + message[-_MESSAGE_TAIL:]
            return f"pod {pod_name} exited with code {term['exitCode']}" + (f": {message}" if message else ""), False
        if waiting.get("reason") in STUCK_REASONS:
            text = f"pod {pod_name} is waiting: {waiting['reason']}"
            return text + (f": {waiting['message']}" if waiting.get("message") else ""), True
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            # Not "stuck": a cluster autoscaler may yet add a node; the Job's deadline bounds it.
            text = f"pod {pod_name} is not scheduled: {cond.get('reason') or 'no reason given'}"
            return text + (f": {cond['message']}" if cond.get("message") else ""), False
    return "", False


def _stuck(pods: Sequence[Mapping[str, Any]], now: float, timeout_s: float) -> str:
    """Why a pod of the Job has been unable to start for ``timeout_s`` (image, Secret), or ""."""
    for pod in pods:
        created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        if created is None or now - created < timeout_s:
            continue
        text, stuck = _pod_state(pod)
        if stuck:
            return text
    return ""


