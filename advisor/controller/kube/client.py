"""The one place that talks to the Kubernetes API.

Only this module imports ``kubernetes``. Everything it returns is plain JSON (``dict``), exactly
as the server sent it (typed client models would drop unknown fields and reformat times), and
every failure leaves it as one of the ``KubeError`` classes of ``advisor.errors``, translated
once here: HTTP errors from the server's ``Status`` body, urllib3 transport errors (refused,
dropped, timed out) as ``KubeUnavailable``. Calls go through the client's ``ApiClient`` (so
kubeconfig auth, in-cluster token refresh and TLS settings apply) but address resources by
path, one small code path for all kinds; every call has a timeout.

Built-in kinds' list items come without ``kind``/``apiVersion`` on the wire; they are filled in
here so any object can be handed to ``emit_event`` or used as an owner.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
import yaml  # type: ignore[import-untyped]  # kubeconfig parsing errors (a kubernetes dependency)
from kubernetes import client as k8s  # type: ignore[import-untyped]
from kubernetes import config as k8s_config  # type: ignore[import-untyped]

from advisor.core.units import rfc3339
from advisor.errors import (
    KubeAlreadyExists,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnavailable,
)

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
EVENT_MESSAGE_LIMIT = 1024  # bytes; events.k8s.io "note" and new-style core events (validation/events.go)
LIST_PAGE = 500  # client-go's reflector page size
MALFORMED = "MALFORMED"  # watch event type for a line that is not a watch event


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
        return "/".join(parts)


TFJOBS = Resource("kubeflow.org", "v1", "tfjobs", "TFJob")
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("", "v1", "events", "Event")
PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
JOBS = Resource("batch", "v1", "jobs", "Job")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
# Kueue's queues, read in cluster mode only (docs/allocation.md): a LocalQueue names its ClusterQueue
LOCALQUEUES = Resource("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue")
CLUSTERQUEUES = Resource("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", namespaced=False)


def _target(res: Resource, namespace: str | None, name: str | None) -> str:
    if name is not None:
        return f"{res.kind} {namespace}/{name}" if res.namespaced and namespace else f"{res.kind} {name}"
    return f"{res.plural} in {namespace}" if namespace else f"{res.plural} in all namespaces"


def _error(verb: str, target: str, code: int, body: Any, headers: Mapping[str, str] | None = None) -> KubeError:
    """The KubeError for an HTTP error answer (``body`` a Status dict, bytes or text)."""
    status: Mapping[str, Any] = {}
    if isinstance(body, (bytes, str)):
        try:
            status = json.loads(body or b"{}")
        except ValueError:
            status = {"message": body.decode(errors="replace") if isinstance(body, bytes) else body}
    elif isinstance(body, Mapping):
        status = body
    if not isinstance(status, Mapping):
        status = {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "(no message)")[:2000]
    retry = (headers or {}).get("Retry-After") or (status.get("details") or {}).get("retryAfterSeconds")
    retry_after = float(retry) if retry is not None and str(retry).replace(".", "", 1).isdigit() else None
    cls: type[KubeError]
    if code == 404:
        cls = KubeNotFound
    elif code == 409:
        cls = KubeAlreadyExists if reason == "AlreadyExists" else KubeConflict
    elif code == 410:
        cls = KubeGone
    elif code in (401, 403):
        cls = KubeForbidden
    elif code == 429 or code >= 500:
        cls = KubeUnavailable
    elif 400 <= code < 500:
        cls = KubeInvalid
    else:
        cls = KubeError
    return cls(f"{verb} {target}: {message} ({code} {reason or 'no reason'})",
               status=code, reason=reason, retry_after_s=retry_after)


def _transport_error(verb: str, target: str, exc: BaseException) -> KubeUnavailable:
    return KubeUnavailable(f"{verb} {target}: {type(exc).__name__}: {exc}")


class WatchStream:
    """The events of one watch request as ``(type, object)``; ``close()`` works from any thread.

    Types are the server's (ADDED, MODIFIED, DELETED, BOOKMARK) plus ``MALFORMED`` for a line
    that is not a watch event (the object is then ``{"line": <first 200 characters>}``). An
    ERROR event raises its KubeError (KubeGone for 410); a dropped connection raises
    KubeUnavailable; the server closing the stream (its timeout) ends the iteration.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse, verb: str, target: str) -> None:
        self._resp, self._verb, self._target = response, verb, target
        self._closed = False
        self._lines = self._read_lines()

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> tuple[str, JSON]:
        line = next(self._lines)
        try:
            event = json.loads(line)
        except ValueError:
            return MALFORMED, {"line": line[:200]}
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return MALFORMED, {"line": line[:200]}
        obj = event.get("object")
        if event["type"] == "ERROR":
            self.close()  # the server ends the stream after an ERROR; free the connection now
            raw_code = obj.get("code") if isinstance(obj, dict) else None
            code = raw_code if isinstance(raw_code, int) else 500
            raise _error(self._verb, self._target, code, obj)
        return event["type"], obj if isinstance(obj, dict) else {"object": obj}

    def close(self) -> None:
        """End the stream now (another thread's ``next()`` returns StopIteration)."""
        self._closed = True
        sock = getattr(getattr(self._resp, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._lines.close()  # runs its cleanup now, unless another thread is inside next()
        except ValueError:
            pass  # that thread wakes on the shut-down socket and cleans up itself

    def _read_lines(self) -> Generator[str, None, None]:
        buffer = b""
        try:
            for chunk in self._resp.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    if raw.strip():
                        yield raw.decode("utf-8", errors="replace")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not self._closed:
                raise _transport_error(self._verb, self._target, exc) from exc
        finally:
            self._resp.close()
            self._resp.release_conn()


class Kube:
    """Plain-JSON access to the objects the controller uses; every error is a KubeError."""

    def __init__(self, api_client: Any, *, request_timeout_s: float = 30.0) -> None:
        self.api = api_client
        self.request_timeout_s = request_timeout_s

    @classmethod
    def from_config(cls, kubeconfig: Path | None = None, context: str | None = None, *,
                    request_timeout_s: float = 30.0) -> Kube:
        """In-cluster config inside a pod (when no kubeconfig or context is named), else the
        kubeconfig: ``kubeconfig`` or, when None, $KUBECONFIG / ~/.kube/config."""
        cfg = k8s.Configuration()
        try:
            if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s_config.load_incluster_config(client_configuration=cfg)
            else:
                k8s_config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                            client_configuration=cfg, persist_config=False)
        except (k8s_config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
            where = str(kubeconfig) if kubeconfig else "in-cluster or default kubeconfig"
            raise KubeConfigError(f"cannot load Kubernetes configuration ({where}): {exc}") from exc
        return cls(k8s.ApiClient(cfg), request_timeout_s=request_timeout_s)

    def close(self) -> None:
        self.api.close()

    # --- TFJobs -----------------------------------------------------------------------------
    def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """All TFJobs (one namespace or all) and the list's resourceVersion, to watch from."""
        return self._list(TFJOBS, namespace, label_selector)

    def watch_tfjobs(self, namespace: str | None, resource_version: str, timeout_s: float,
                     label_selector: str | None = None) -> WatchStream:
        """TFJob changes after ``resource_version``, with BOOKMARKs; the server ends it after ``timeout_s``."""
        return self._watch(TFJOBS, namespace, resource_version, timeout_s, label_selector)

    def create_tfjob(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return self._call("create", "POST", TFJOBS, namespace, body=_typed(TFJOBS, body))

    def patch_tfjob(self, namespace: str, name: str, patch: Mapping[str, Any], *,
                    resource_version: str | None = None) -> JSON:
        """JSON merge patch; with ``resource_version`` it is a precondition (stale: KubeConflict)."""
        return self._merge_patch(TFJOBS, namespace, name, patch, resource_version)

    def delete_tfjob(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """With ``uid`` (a precondition) only that object: if the name is another's by now, KubeConflict."""
        self._delete(TFJOBS, namespace, name, uid)

    # --- PyTorchJobs (watched when the CRD exists: advisor.controller.jobs.cluster) ---------------
    def list_pytorchjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[JSON], str]:
        return self._list(PYTORCHJOBS, namespace, label_selector)

    def watch_pytorchjobs(self, namespace: str | None, resource_version: str, timeout_s: float,
                          label_selector: str | None = None) -> WatchStream:
        return self._watch(PYTORCHJOBS, namespace, resource_version, timeout_s, label_selector)

    def create_pytorchjob(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return self._call("create", "POST", PYTORCHJOBS, namespace, body=_typed(PYTORCHJOBS, body))

    def patch_pytorchjob(self, namespace: str, name: str, patch: Mapping[str, Any], *,
                         resource_version: str | None = None) -> JSON:
        """JSON merge patch; with ``resource_version`` it is a precondition (stale: KubeConflict)."""
        return self._merge_patch(PYTORCHJOBS, namespace, name, patch, resource_version)

    def delete_pytorchjob(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        self._delete(PYTORCHJOBS, namespace, name, uid)

    # --- discovery --------------------------------------------------------------------------
    def served_resources(self, group: str, version: str) -> set[str]:
        """The resources (plurals) the API serves in ``group``/``version``: empty when the group
        version is not served (e.g. its CRD is not installed). Discovery needs no RBAC."""
        target = f"/apis/{group}/{version}"
        try:
            resp = self._open("get", target, "GET", target, None, None, None, (self.request_timeout_s,) * 2)
        except KubeNotFound:
            return set()
        try:
            doc = json.loads(resp.read())
        except (ValueError, urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(f"discovery of {target}: {exc}") from exc
        finally:
            resp.release_conn()
        return {str(r.get("name")) for r in doc.get("resources") or [] if isinstance(r, Mapping)}

    # --- Secrets ----------------------------------------------------------------------------
    def create_secret(self, namespace: str, body: Mapping[str, Any], data: Mapping[str, bytes]) -> JSON:
        """Create the Secret ``body`` (metadata, type...) holding ``data``, base64-encoded on the wire."""
        secret = _typed(SECRETS, body)
        secret["data"] = {**(body.get("data") or {}), **{k: base64.b64encode(v).decode() for k, v in data.items()}}
        return self._call("create", "POST", SECRETS, namespace, body=secret)

    # --- ConfigMaps (the durable record of each profiling run's profile) ---------------------
    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return self._call("create", "POST", CONFIGMAPS, namespace, body=_typed(CONFIGMAPS, body))

    def get_configmap(self, namespace: str, name: str) -> JSON | None:
        try:
            return self._typed_result(CONFIGMAPS, self._call("get", "GET", CONFIGMAPS, namespace, name))
        except KubeNotFound:
            return None

    def patch_configmap(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """JSON merge patch."""
        return self._call("patch", "PATCH", CONFIGMAPS, namespace, name, body=dict(patch), content_type=MERGE_PATCH)

    def delete_configmap(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """With ``uid`` (a precondition) only that object: if the name is another's by now, KubeConflict."""
        self._delete(CONFIGMAPS, namespace, name, uid)

    # --- Events -----------------------------------------------------------------------------
    def emit_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str,
                   component: str = "advisor") -> JSON:
        """A core/v1 Event about ``obj`` (legacy style, as client-go's recorder writes it)."""
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, not {type_!r}")
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        now = rfc3339(time.time())
        involved = {k: v for k, v in {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                      "name": meta.get("name"), "namespace": meta.get("namespace"),
                                      "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}.items()
                    if v}
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved, "type": type_, "reason": reason, "message": truncate(message),
            "source": {"component": component}, "reportingComponent": component,
            "reportingInstance": socket.gethostname()[:128],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        return self._call("create", "POST", EVENTS, namespace, body=body)

    # --- Leases -----------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> JSON | None:
        try:
            return self._typed_result(LEASES, self._call("get", "GET", LEASES, namespace, name))
        except KubeNotFound:
            return None

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return self._call("create", "POST", LEASES, namespace, body=_typed(LEASES, body))

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        """PUT; ``body.metadata.resourceVersion`` makes it conditional (stale: KubeConflict)."""
        return self._call("update", "PUT", LEASES, namespace, name, body=_typed(LEASES, body))

    # --- batch/v1 Jobs and Pods -------------------------------------------------------------
    def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return self._call("create", "POST", JOBS, namespace, body=_typed(JOBS, body))

    def get_job(self, namespace: str, name: str) -> JSON:
        return self._typed_result(JOBS, self._call("get", "GET", JOBS, namespace, name))

    def delete_job(self, namespace: str, name: str) -> None:
        """Deletes the Job and (Background propagation) its pods; batch/v1 would orphan them by default."""
        self._delete(JOBS, namespace, name)

    def list_jobs(self, namespace: str | None, label_selector: str | None = None) -> list[JSON]:
        return self._list(JOBS, namespace, label_selector)[0]

    def list_pods(self, namespace: str | None, label_selector: str | None = None) -> list[JSON]:
        return self._list(PODS, namespace, label_selector)[0]

    # --- Kueue queues (cluster mode: a job's capacity is its ClusterQueue's quota) -------------
    def get_localqueue(self, namespace: str, name: str) -> JSON:
        """The LocalQueue; KubeNotFound when there is none (or Kueue is not installed)."""
        return self._typed_result(LOCALQUEUES, self._call("get", "GET", LOCALQUEUES, namespace, name))

    def get_clusterqueue(self, name: str) -> JSON:
        """The (cluster-scoped) ClusterQueue; KubeNotFound when there is none."""
        return self._typed_result(CLUSTERQUEUES, self._call("get", "GET", CLUSTERQUEUES, None, name))

    def get_node(self, name: str) -> JSON | None:
        """A node (cluster-scoped), for its labels; None when it is gone."""
        try:
            return self._typed_result(NODES, self._call("get", "GET", NODES, None, name))
        except KubeNotFound:
            return None


    # --- plumbing ---------------------------------------------------------------------------
    def _list(self, res: Resource, namespace: str | None, label_selector: str | None) -> tuple[list[JSON], str]:
        """Every item, in pages of LIST_PAGE; an expired continue token restarts without paging."""
        items: list[JSON] = []
        query: list[tuple[str, Any]] = [("labelSelector", label_selector)] if label_selector else []
        page = self._call("list", "GET", res, namespace, query=[*query, ("limit", LIST_PAGE)])
        rv = page["metadata"]["resourceVersion"]
        while True:
            items += page.get("items") or []
            token = page["metadata"].get("continue")
            if not token:
                break
            try:
                page = self._call("list", "GET", res, namespace, query=[*query, ("limit", LIST_PAGE), ("continue", token)])
            except KubeGone:
                log.info("continue token for %s expired; listing again in one piece", _target(res, namespace, None))
                return self._list_whole(res, namespace, query)
        return [self._typed_result(res, i) for i in items], rv

    def _list_whole(self, res: Resource, namespace: str | None, query: list[tuple[str, Any]]) -> tuple[list[JSON], str]:
        page = self._call("list", "GET", res, namespace, query=query)
        return [self._typed_result(res, i) for i in page.get("items") or []], page["metadata"]["resourceVersion"]

    def _watch(self, res: Resource, namespace: str | None, resource_version: str, timeout_s: float,
               label_selector: str | None) -> WatchStream:
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", resource_version),
                                        ("timeoutSeconds", max(1, int(timeout_s))), ("allowWatchBookmarks", "true")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        target = _target(res, namespace, None)
        timeout = (self.request_timeout_s, timeout_s + self.request_timeout_s)
        resp = self._open("watch", target, "GET", res.path(namespace), query, None, None, timeout)
        return WatchStream(resp, "watch", target)

    def _merge_patch(self, res: Resource, namespace: str, name: str, patch: Mapping[str, Any],
                     resource_version: str | None) -> JSON:
        body = dict(patch)
        if resource_version is not None:
            body["metadata"] = {**(patch.get("metadata") or {}), "resourceVersion": resource_version}
        return self._call("patch", "PATCH", res, namespace, name, body=body, content_type=MERGE_PATCH)

    def _delete(self, res: Resource, namespace: str, name: str, uid: str | None = None) -> None:
        body: JSON = {"propagationPolicy": "Background"}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        self._send("delete", "DELETE", res, namespace, name, body=body)

    def _call(self, verb: str, method: str, res: Resource, namespace: str | None, name: str | None = None, *,
              query: list[tuple[str, Any]] | None = None, body: Any = None, content_type: str | None = None) -> JSON:
        data = self._send(verb, method, res, namespace, name, query=query, body=body, content_type=content_type)
        try:
            answer = json.loads(data)
        except ValueError as exc:
            raise KubeUnavailable(f"{verb} {_target(res, namespace, name)}: the answer is not JSON: {exc}") from exc
        if not isinstance(answer, dict):
            raise KubeUnavailable(f"{verb} {_target(res, namespace, name)}: the answer is not a JSON object")
        return answer

    def _send(self, verb: str, method: str, res: Resource, namespace: str | None, name: str | None = None, *,
              query: list[tuple[str, Any]] | None = None, body: Any = None,
              content_type: str | None = None) -> bytes:
        shown = name or (body.get("metadata") or {}).get("name") if isinstance(body, dict) else name
        target = _target(res, namespace, shown)
        timeout = (self.request_timeout_s, self.request_timeout_s)
        resp = self._open(verb, target, method, res.path(namespace, name), query, body, content_type, timeout)
        try:
            return resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(verb, target, exc) from exc
        finally:
            resp.release_conn()

    def _open(self, verb: str, target: str, method: str, path: str, query: list[tuple[str, Any]] | None,
              body: Any, content_type: str | None, timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
        """Send one request; a non-2xx answer is raised as its KubeError, a 2xx returned unread."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            request = self.api.param_serialize(method=method, resource_path=path, query_params=query or [],
                                               header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(*request, _request_timeout=timeout).response
        except k8s.ApiException as exc:  # the REST layer raises these for TLS failures (status 0)
            if exc.status:
                raise _error(verb, target, exc.status, exc.body, exc.headers) from exc
            raise _transport_error(verb, target, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(verb, target, exc) from exc
        if 200 <= resp.status < 300:
            return resp
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError):
            data = b""
        finally:
            resp.release_conn()
        raise _error(verb, target, resp.status, data, resp.headers)

    @staticmethod
    def _typed_result(res: Resource, obj: JSON) -> JSON:
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        return obj


def _typed(res: Resource, body: Mapping[str, Any]) -> JSON:
    return {"apiVersion": res.api_version, "kind": res.kind, **body}


def truncate(message: str, limit: int = EVENT_MESSAGE_LIMIT) -> str:
    """``message`` cut to ``limit`` UTF-8 bytes, ending in "..." when cut."""
    data = message.encode()
    if len(data) <= limit:
        return message
    return data[: limit - 3].decode("utf-8", errors="ignore") + "..."
