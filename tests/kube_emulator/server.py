"""A Kubernetes API server emulator for tests, served over real HTTP to the official client.

Why not kmock's ``KubernetesEmulator`` (kmock 0.8, ``kmock/_internal/k8s.py``)? Reading it
confirms the suspicion: lists answer ``metadata.resourceVersion: '...'`` and objects get no
resourceVersion, uid or generation; a watch always replays every object as ADDED and then
follows a bus, so it cannot resume from a resourceVersion and never answers 410 Gone; writes
never check resourceVersion (no 409 on a stale write); PUT is not even routed as an update, and
PATCH is a recursive dict merge whatever the Content-Type (JSON patch lists happen to work, a
strategic merge patch on a custom resource is not refused); there are no label or field
selectors, no pagination, no status subresource and no garbage collection; every lookup scans
all objects. It is also asyncio/aiohttp based, so it would need its own loop thread. Those are
exactly the behaviours a list-then-watch informer, optimistic concurrency and leader election
stand on, so this emulator is written on the standard library instead: nothing new is needed at
runtime, and each behaviour can be checked against the real apiserver's.

Not emulated (each answers loudly or is documented where it matters): server-side apply (415),
``dryRun`` (400 rather than a silent real write), managedFields, authentication and RBAC (every
request is allowed; 401/403 only through ``fail_next``), admission webhooks and CRD schema
validation, graceful pod deletion (pods go at once), Foreground propagation (treated as
Background), list ``resourceVersion``/``resourceVersionMatch`` (lists are always the latest),
watch-list (``sendInitialEvents``), the wait-then-504 for a watch from a future resourceVersion,
keyed-list merging in strategic merge patches, and the shared storage of core/v1 and
events.k8s.io/v1 Events (two separate tables here).

Layout: ``resources`` (the table of served kinds), ``store`` (the semantics: metadata,
concurrency, history, watchers, GC), ``patches``, ``selectors``, ``validation`` and ``batch``
(Job defaults and checks), ``status`` (error bodies), and this module (routing, chunked watch
streams, test controls). Nothing runs the Jobs it stores unless a test starts
``job_runner.JobRunner``, a stand-in for the Job controller and the kubelet.

Usage::

    with KubeEmulator(namespaces=["ml"]) as emu:
        api = kubernetes.client.ApiClient(emu.configuration())
        emu.seed({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "a", "namespace": "ml"}})
        emu.fail_next(verb="patch", resource="tfjobs", status=500, times=2)
        ...
        assert [c.verb for c in emu.calls(resource="tfjobs")] == ["list", "watch", "patch", ...]
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.kube_emulator import resources as rs
from tests.kube_emulator import status as st
from tests.kube_emulator.resources import ResourceType
from tests.kube_emulator.store import CLOSE_ABRUPT, CLOSE_CLEAN, Obj, Store, Watcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """One API request as RBAC sees it (verb, group, resource, subresource, namespace, name) + code.

    As in RBAC's RequestInfo, ``name`` is the one in the URL: None for create, list and watch.
    Discovery requests are logged with verb "get", an empty resource and the URL in ``path``.
    """

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str | None
    name: str | None
    code: int
    path: str = ""


@dataclass
class _Rule:
    method: str | None
    verb: str | None
    resource: str | None
    path_contains: str
    status: int
    times: int
    retry_after_s: int | None


@dataclass(frozen=True)
class _Route:
    res: ResourceType
    namespace: str | None
    name: str | None
    sub: str


class KubeEmulator:
    """Start with ``with KubeEmulator() as emu`` (or ``start()``/``stop()``); thread-safe controls."""

    def __init__(self, *, namespaces: tuple[str, ...] | list[str] = ("default",), history_limit: int = 10_000,
                 bookmark_interval_s: float = 1.0, default_watch_timeout_s: float = 1800.0,
                 absent: tuple[str, ...] = ()) -> None:
        """``absent``: resources (``pytorchjobs.kubeflow.org``) not served, as without their CRD:
        discovery leaves them out and every request for them is a 404."""
        self.store = Store(history_limit=history_limit)
        self.absent = frozenset(absent)
        self.bookmark_interval_s = bookmark_interval_s
        self.default_watch_timeout_s = default_watch_timeout_s
        self._rules: list[_Rule] = []
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        for ns in dict.fromkeys(["default", "kube-system", *namespaces]):
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> KubeEmulator:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.emulator = self
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="kube-emulator", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self.close_watches(abrupt=False)
        self._server.shutdown()
        self._server.server_close()
        self._server.drop_connections()
        self._server = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` pointing at this server."""
        import kubernetes.client

        cfg = kubernetes.client.Configuration(host=self.url)
        cfg.retries = False  # let tests see every failure the server injects
        return cfg

    def write_kubeconfig(self, path: Path, *, context: str = "emulator", namespace: str = "default") -> Path:
        """A kubeconfig (JSON is YAML) with one cluster, user and context for this server."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": context, "preferences": {},
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "emulator-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "emulator", "user": "tester", "namespace": namespace}}],
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    # --- objects ----------------------------------------------------------------------------
    def resource(self, name: str) -> ResourceType:
        """``tfjobs``, ``tfjobs.kubeflow.org``, ``events`` (core) or ``events.events.k8s.io``."""
        plural, _, group = name.partition(".")
        matches = [r for r in rs.RESOURCES if r.plural == plural and (not group or r.group == group)]
        matches.sort(key=lambda r: r.group != "")  # a bare plural means the core group when both exist
        if not matches:
            raise KeyError(f"the emulator serves no resource {name!r}")
        return matches[0]

    def seed(self, obj: Obj) -> Obj:
        """Store ``obj`` as if created (status and timestamps kept); its namespace is created if absent."""
        res = self._kind(obj)
        return self.store.create(res, obj.get("metadata", {}).get("namespace"), obj, seed=True)

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        try:
            return json.loads(json.dumps(self.store.get(self.resource(resource), namespace, name)))
        except st.ApiError:
            return None

    def list(self, resource: str, namespace: str | None = None, label_selector: str | None = None) -> list[Obj]:
        items = self.store.list(self.resource(resource), namespace, label_selector)["items"]
        return json.loads(json.dumps(items))

    def patch(self, resource: str, namespace: str | None, name: str, patch: Obj, *, subresource: str | None = None) -> Obj:
        """A JSON merge patch by another actor (a user, the training operator), with real semantics."""
        return self.store.patch(self.resource(resource), namespace, name, "application/merge-patch+json", patch, subresource)

    def delete(self, resource: str, namespace: str | None, name: str, *, propagation: str = "Background") -> Obj:
        return self.store.delete(self.resource(resource), namespace, name, {"propagationPolicy": propagation})

    def set_pod_log(self, namespace: str, name: str, text: str, container: str | None = None) -> None:
        with self.store.lock:
            self.store.pod_logs[(namespace, name, container)] = text

    @property
    def resource_version(self) -> int:
        with self.store.lock:
            return self.store.rv

    # --- faults -----------------------------------------------------------------------------
    def fail_next(self, *, method: str | None = None, verb: str | None = None, resource: str | None = None,
                  path_contains: str = "", status: int = 500, times: int = 1, retry_after_s: int | None = None) -> None:
        """Answer the next ``times`` matching requests with the real server's ``status`` error."""
        with self._lock:
            self._rules.append(_Rule(method.upper() if method else None, verb, resource, path_contains,
                                     status, times, retry_after_s))

    def expire_history(self) -> None:
        """Compact: watches from any resourceVersion older than now get 410, continue tokens too."""
        self.store.compact()

    def close_watches(self, *, abrupt: bool = True) -> None:
        """End every open watch; abrupt (default) drops the connection as an apiserver restart does."""
        for w in self.store.all_watchers():
            w.queue.put(CLOSE_ABRUPT if abrupt else CLOSE_CLEAN)

    def inject_raw_event(self, resource: str, line: bytes | str | Obj, namespace: str | None = None) -> int:
        """Send ``line`` (one watch event, possibly malformed) to the open watches of ``resource``."""
        data = json.dumps(line).encode() if isinstance(line, dict) else line.encode() if isinstance(line, str) else line
        res, sent = self.resource(resource), 0
        for w in self.store.all_watchers():
            if w.res is res and (namespace is None or w.namespace in (None, namespace)):
                w.queue.put(data.rstrip(b"\n") + b"\n")
                sent += 1
        return sent

    def open_watches(self, resource: str | None = None) -> int:
        res = self.resource(resource) if resource else None
        return sum(1 for w in self.store.all_watchers() if res is None or w.res is res)

    # --- request log ------------------------------------------------------------------------
    def calls(self, *, verb: str | None = None, resource: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if (verb is None or c.verb == verb)
                    and (resource is None or c.resource == resource)]

    def clear_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def _log(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def _injected(self, method: str, verb: str, route: _Route | None, path: str) -> st.ApiError | None:
        with self._lock:
            for rule in self._rules:
                if rule.times <= 0 or (rule.method and rule.method != method) or (rule.verb and rule.verb != verb):
                    continue
                if rule.resource and (route is None or rule.resource not in (route.res.plural, route.res.qualified)):
                    continue
                if rule.path_contains not in path:
                    continue
                rule.times -= 1
                return st.injected(rule.status, route.res if route else None, verb,
                                   route.namespace if route else None, route.name if route else None,
                                   rule.retry_after_s)
        return None

    def _kind(self, obj: Obj) -> ResourceType:
        for res in rs.RESOURCES:
            if res.api_version == obj.get("apiVersion") and res.kind == obj.get("kind"):
                return res
        raise KeyError(f"the emulator serves no {obj.get('apiVersion')} {obj.get('kind')}")

    # --- HTTP -------------------------------------------------------------------------------
    def handle(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        doc = _discovery(split.path, self.absent)
        if doc is not None and h.command == "GET":
            self._log(Call("get", "", "", "", None, None, 200, split.path))
            return _send(h, 200, doc)
        route = _route(split.path)
        if route is not None and route.res.qualified in self.absent:
            route = None
        verb = _verb(h.command, route, query)
        call = Call(verb, route.res.group if route else "", route.res.plural if route else "",
                    route.sub if route else "", route.namespace if route else None,
                    route.name if route else None, 0, split.path)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            if route is None:
                raise st.page_not_found()
            if (error := self._injected(h.command, verb, route, h.path)) is not None:
                raise error
            if query.get("dryRun"):
                raise st.bad_request("dryRun is not implemented by the test emulator")
            if verb == "watch":
                watcher = self.store.open_watch(route.res, route.namespace, query.get("resourceVersion"),
                                                query.get("labelSelector"), query.get("fieldSelector"))
                self._log(_with_code(call, 200))
                return self._stream(h, watcher, query)
            code, answer = self._dispatch(h, verb, route, query, body)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # an emulator bug or an input it did not foresee: answer as a real server would (500)
            # and leave the traceback in the test log
            log.exception("kube emulator: %s %s failed", h.command, h.path)
            err = st.ApiError(500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}")
            self._log(_with_code(call, 500))
            return _send(h, 500, err.body())
        except st.ApiError as err:
            if verb == "watch" and err.code == 410:  # the real server: 200, one ERROR event, close
                self._log(_with_code(call, 200))
                return self._stream_error(h, err)
            self._log(_with_code(call, err.code))
            return _send(h, err.code, err.body(), err.headers)
        self._log(_with_code(call, code))
        if isinstance(answer, str):
            return _send_text(h, code, answer)
        return _send(h, code, answer)

    def _dispatch(self, h: _Handler, verb: str, route: _Route, query: dict[str, str], raw: bytes) -> tuple[int, Any]:
        res, ns, name, sub = route.res, route.namespace, route.name, route.sub
        if res.namespaced and ns is None and verb not in ("list", "watch"):
            raise st.method_not_allowed() if verb == "create" else st.page_not_found()
        if (sub and sub not in res.subresources) or (sub == "log" and verb != "get"):
            raise st.page_not_found()
        if verb == "create" and name is not None:
            raise st.method_not_allowed()
        body = _json_body(raw) if verb in ("create", "update", "patch") or raw else None
        if verb == "get" and sub == "log":
            return 200, self._pod_log(ns or "", name or "", query)
        if verb == "get":
            return 200, self.store.get(res, ns, name or "")
        if verb == "list":
            return 200, self.store.list(res, ns, query.get("labelSelector"), query.get("fieldSelector"),
                                        int(query.get("limit") or 0), query.get("continue"))
        if verb == "create":
            return 201, self.store.create(res, ns, body)
        if verb == "update":
            return 200, self.store.update(res, ns, name or "", body, sub or None)
        if verb == "patch":
            ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
            return 200, self.store.patch(res, ns, name or "", ctype, body, sub or None)
        if verb == "delete":
            options = dict(body or {})
            if "propagationPolicy" in query:
                options["propagationPolicy"] = query["propagationPolicy"]
            return 200, self.store.delete(res, ns, name or "", options)
        raise st.method_not_allowed()

    def _pod_log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        pod = self.store.get(self.resource("pods"), namespace, name)
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container")
        if container is None and len(containers) > 1:
            raise st.bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]")
        if container is not None and containers and container not in containers:
            raise st.bad_request(f"container {container} is not valid for pod {name}")
        with self.store.lock:
            text = self.store.pod_logs.get((namespace, name, container)) or \
                self.store.pod_logs.get((namespace, name, None), "")
        if query.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(query["tailLines"]):])
        if query.get("limitBytes"):
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return text

    def _stream(self, h: _Handler, w: Watcher, query: dict[str, str]) -> None:
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else self.default_watch_timeout_s
        _start_chunked(h)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval_s
        try:
            for item in _pace(w, deadline, lambda: next_bookmark if bookmarks else deadline):
                if item == CLOSE_ABRUPT:
                    return _drop(h)
                if item == CLOSE_CLEAN:
                    break
                if item is None:  # bookmark time (or deadline)
                    line = self.store.bookmark(w)
                    if line is not None:
                        _chunk(h, line)
                        next_bookmark = time.monotonic() + self.bookmark_interval_s
                    continue
                _chunk(h, item)
            if bookmarks and (line := self.store.bookmark(w)) is not None:
                _chunk(h, line)  # the real server bookmarks before closing on timeout
            _end_chunked(h)
        except OSError:  # the client went away
            h.close_connection = True
        finally:
            self.store.close_watch(w)

    def _stream_error(self, h: _Handler, err: st.ApiError) -> None:
        _start_chunked(h)
        try:
            _chunk(h, json.dumps({"type": "ERROR", "object": err.body()}).encode() + b"\n")
            _end_chunked(h)
        except OSError:
            h.close_connection = True


def _pace(w: Watcher, deadline: float, next_tick: Any) -> Iterator[bytes | None]:
    """Queue items as they come; None when a bookmark is due; stops at the deadline."""
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        wait = max(0.0, min(deadline, next_tick()) - now)
        try:
            yield w.queue.get(timeout=wait)
        except queue.Empty:
            if time.monotonic() < deadline:
                yield None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    emulator: KubeEmulator

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._conn_lock:
            self._connections.add(conn)
        return conn, addr

    def shutdown_request(self, request: Any) -> None:
        with self._conn_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        self.server.emulator.handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def _route(path: str) -> _Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) > 2 and rest[2] not in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    res = rs.find(group, version, rest[0])
    if res is None:
        return None
    return _Route(res, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else "")


def _verb(method: str, route: _Route | None, query: dict[str, str]) -> str:
    named = route is not None and route.name is not None
    if method == "GET":
        if named:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}.get(method, method.lower())


def _discovery(path: str, absent: frozenset[str] = frozenset()) -> Any:
    path = path.rstrip("/") or "/"
    if path == "/version":
        return rs.version_document()
    if path == "/api":
        return rs.api_versions()
    if path == "/apis":
        return rs.api_group_list()
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) == 2:
        return rs.resource_list("", parts[1])
    if parts[0] == "apis" and len(parts) == 2 and any(r.group == parts[1] for r in rs.RESOURCES):
        return rs.api_group(parts[1])
    if parts[0] == "apis" and len(parts) == 3:
        return rs.resource_list(parts[1], parts[2], absent)
    return None


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise st.bad_request(f"error decoding the request body: {exc}") from None


def _with_code(call: Call, code: int) -> Call:
    return Call(call.verb, call.group, call.resource, call.subresource, call.namespace, call.name, code, call.path)


def _send(h: _Handler, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    _respond(h, code, "application/json", data, headers)


def _send_text(h: _Handler, code: int, text: str) -> None:
    _respond(h, code, "text/plain", text.encode(), None)


def _respond(h: _Handler, code: int, ctype: str, data: bytes, headers: dict[str, str] | None) -> None:
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(data)


def _start_chunked(h: _Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()


def _chunk(h: _Handler, data: bytes) -> None:
    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _end_chunked(h: _Handler) -> None:
    h.wfile.write(b"0\r\n\r\n")


def _drop(h: _Handler) -> None:
    h.close_connection = True
    try:
        h.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
