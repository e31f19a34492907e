"""List-then-watch of TFJobs, keeping a local cache, with client-go's reflector semantics.

Why: the controller must see every TFJob change exactly as the cluster has it, through server
restarts, watch timeouts and history compaction, without polling. The rules (client-go
``tools/cache/reflector.go``):

- LIST, deliver ADDED for every object (and DELETED, with the last known state, for cached
  objects gone since the previous list), then WATCH from the list's resourceVersion.
- Every event and BOOKMARK advances the resourceVersion; a watch that ends (server timeout,
  dropped connection) resumes from it, so nothing is missed and nothing re-listed.
- 410 Gone (the resourceVersion was compacted away) means relist at once.
- Other errors back off exponentially with jitter (0.8 s doubling to 30 s, as client-go),
  honouring a server's Retry-After, and the backoff resets after a success. Unlike client-go,
  which relists after most watch errors, this re-watches from the last resourceVersion; a
  resourceVersion that is too old comes back as 410 and then relists, so the result is the same.
- Every watch that ends is reported to ``on_restart`` with its reason: ``expired`` (410 Gone,
  relist), ``error`` (a failed list or watch call, after backoff) or ``timeout`` (the server
  ended the stream normally, re-watch); the controller counts these in
  ``advisor_watch_restarts_total``.
- A malformed object or a callback that raises is logged with the object's key, counted in
  ``stats`` and skipped: one bad object never stops the informer. (That is the one place here
  that catches every exception of the consumer's callback, on purpose.)

One thread per namespace when several are given, one for all namespaces otherwise. Callbacks are
serialized (never two at once) and see the cache already updated. Sleep and clock are injected.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from advisor.errors import KubeError, KubeGone

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
# What the controller never reads, dropped before caching (client-go's informer TransformFunc):
# managedFields (often the largest part of a TFJob), kubectl's copy of the whole applied object,
# and every status field but the conditions and startTime.
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
KEPT_STATUS = ("conditions", "startTime")
RESTART_REASONS = ("expired", "error", "timeout")


def slim(obj: JSON) -> JSON:
    """A shallow copy of ``obj`` without what the controller never reads (``obj`` is untouched)."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        notes = meta.get("annotations")
        if isinstance(notes, dict) and any(k in notes for k in DROPPED_ANNOTATIONS):
            meta["annotations"] = {k: v for k, v in notes.items() if k not in DROPPED_ANNOTATIONS}
        out["metadata"] = meta
    status = out.get("status")
    if isinstance(status, dict):
        out["status"] = {k: v for k, v in status.items() if k in KEPT_STATUS}
    return out


class WatchStreamLike(Protocol):
    def __iter__(self) -> Iterator[tuple[str, JSON]]: ...

    def close(self) -> None: ...


class TFJobSource(Protocol):
    """What the informer needs of ``advisor.controller.kube.client.Kube``."""

    def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[JSON], str]: ...

    def watch_tfjobs(self, namespace: str | None, resource_version: str, timeout_s: float,
                     label_selector: str | None = None) -> WatchStreamLike: ...


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (n = 1, 2...): initial * factor**(n-1) * (1 + jitter * U[0,1)), capped."""

    initial_s: float = 0.8
    max_s: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0

    def delay(self, failures: int, rng: random.Random) -> float:
        base = self.initial_s * self.factor ** max(0, failures - 1)
        return min(self.max_s, base * (1.0 + self.jitter * rng.random()))


@dataclass
class InformerStats:
    """Counters for logs, metrics and tests (updated under a lock; read them as a snapshot)."""

    lists: int = 0
    watches: int = 0
    events: int = 0  # watch events delivered
    relists_after_gone: int = 0
    errors: int = 0  # failed list/watch calls (each followed by a backoff)
    malformed: int = 0
    callback_errors: int = 0
    watch_timeouts: int = 0  # watches the server ended normally (then re-watched)


@dataclass
class _Scope:
    namespace: str | None  # None: all namespaces
    rv: str | None = None
    synced: bool = False
    stream: WatchStreamLike | None = None
    failures: int = 0

    def owns(self, key: Key) -> bool:
        return self.namespace is None or key[0] == self.namespace


@dataclass
class _Shared:
    cache: dict[Key, JSON] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    deliver: threading.Lock = field(default_factory=threading.Lock)


class Informer:
    def __init__(self, kube: TFJobSource, namespaces: Sequence[str] | None, on_event: Callable[[str, JSON], None],
                 *, label_selector: str | None = None, watch_timeout_s: float = 300.0,
                 backoff: Backoff = Backoff(), sleep: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                 on_restart: Callable[[str], None] | None = None, what: str = "TFJob") -> None:
        if namespaces is not None and not namespaces:
            raise ValueError("namespaces must be None (all namespaces) or name at least one namespace")
        self._kube, self._on_event = kube, on_event
        self._on_restart = on_restart
        self._what = what  # the kind, in log lines
        self._selector, self._watch_timeout_s = label_selector, watch_timeout_s
        self._backoff, self._sleep, self._clock = backoff, sleep, clock
        self._rng = rng or random.Random()
        self._scopes = [_Scope(ns) for ns in (dict.fromkeys(namespaces) if namespaces is not None else [None])]
        self._shared = _Shared()
        self.stats = InformerStats()
        self._stop = threading.Event()
        self._crash: BaseException | None = None

    # --- public -----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set (blocks). Re-raises a bug that killed a reflector."""
        self._stop = stop
        threads = [threading.Thread(target=self._guarded, args=(scope,), daemon=True,
                                    name=f"informer-{scope.namespace or 'all'}") for scope in self._scopes]
        for t in threads:
            t.start()
        while not stop.wait(0.1) and self._crash is None:
            pass
        stop.set()
        for scope in self._scopes:
            self._close_stream(scope)
        for t in threads:
            t.join()
        if self._crash is not None:
            raise self._crash

    def has_synced(self) -> bool:
        """True once every namespace has been listed."""
        return all(scope.synced for scope in self._scopes)

    def get(self, namespace: str, name: str) -> JSON | None:
        with self._shared.lock:
            obj = self._shared.cache.get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def keys(self) -> list[Key]:
        with self._shared.lock:
            return sorted(self._shared.cache)

    # --- one reflector per scope ------------------------------------------------------------
    def _guarded(self, scope: _Scope) -> None:
        try:
            self._reflect(scope)
        except BaseException as exc:  # a bug: hand it to run(), which stops and re-raises it
            self._crash = exc
            self._stop.set()

    def _reflect(self, scope: _Scope) -> None:
        while not self._stop.is_set():
            try:
                if scope.rv is None:
                    self._relist(scope)
                self._watch(scope)
            except KubeGone as exc:
                log.info("%s: %s; listing again", _where(scope, self._what), exc)
                self._count("relists_after_gone")
                self._restarted("expired")
                scope.rv = None
            except KubeError as exc:
                scope.failures += 1
                self._count("errors")
                self._restarted("error")
                delay = max(self._backoff.delay(scope.failures, self._rng), exc.retry_after_s or 0.0)
                log.warning("%s: %s; retrying in %.1f s", _where(scope, self._what), exc, delay)
                self._pause(delay)

    def _relist(self, scope: _Scope) -> None:
        items, rv = self._kube.list_tfjobs(scope.namespace, self._selector)
        self._count("lists")
        scope.failures = 0
        seen: set[Key] = set()
        for obj in items:
            key = _key(obj)
            if key is None:
                self._malformed(scope, "list item", obj)
                continue
            seen.add(key)
            self._apply("ADDED", key, obj)
        with self._shared.lock:
            vanished = [k for k in self._shared.cache if scope.owns(k) and k not in seen]
        for key in vanished:
            with self._shared.lock:
                last = self._shared.cache.get(key)
            if last is not None:
                self._apply("DELETED", key, last)
        scope.rv, scope.synced = rv, True

    def _watch(self, scope: _Scope) -> None:
        """One watch request from ``scope.rv``; returns when the server ends it."""
        if scope.rv is None:
            return
        stream = self._kube.watch_tfjobs(scope.namespace, scope.rv, self._watch_timeout_s, self._selector)
        scope.stream = stream
        if self._stop.is_set():  # stop arrived while opening: run() may have missed this stream
            self._close_stream(scope)
        self._count("watches")
        started, count = self._clock(), 0
        try:
            for type_, obj in stream:
                count += 1
                self._on_watch_event(scope, type_, obj)
                scope.failures = 0
        finally:
            scope.stream = None
        if self._stop.is_set():
            return
        self._count("watch_timeouts")
        self._restarted("timeout")
        if count == 0 and self._clock() - started < 1.0:
            # client-go's "very short watch": a server closing at once must not make us spin
            scope.failures += 1
            self._pause(self._backoff.delay(scope.failures, self._rng))

    def _on_watch_event(self, scope: _Scope, type_: str, obj: Any) -> None:
        rv = _resource_version(obj)
        if type_ == "BOOKMARK":
            if rv is None:
                self._malformed(scope, "bookmark", obj)
            else:
                scope.rv = rv
            return
        key = _key(obj) if type_ in EVENT_TYPES else None
        if rv is not None and type_ in EVENT_TYPES:
            scope.rv = rv  # the revision is seen even if the object is unusable
        if key is None or rv is None:
            self._malformed(scope, f"{type_} event", obj)
            return
        self._count("events")
        self._apply(type_, key, obj)

    # --- cache and delivery -----------------------------------------------------------------
    def _apply(self, type_: str, key: Key, obj: JSON) -> None:
        with self._shared.deliver:
            with self._shared.lock:
                if type_ == "DELETED":
                    self._shared.cache.pop(key, None)
                else:
                    self._shared.cache[key] = slim(obj)
            try:
                self._on_event(type_, obj)
            except Exception:  # the consumer's bug must not stop the informer: log, count, go on
                self._count("callback_errors")
                log.exception("%s %s/%s: the %s handler failed; event skipped", self._what, key[0], key[1], type_)

    def _count(self, name: str) -> None:
        with self._shared.lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _restarted(self, reason: str) -> None:
        if self._on_restart is not None and not self._stop.is_set():
            try:
                self._on_restart(reason)
            except Exception:  # a metrics hook must never stop the informer
                log.exception("TFJob informer: the restart hook failed")

    def _malformed(self, scope: _Scope, what: str, obj: Any) -> None:
        self._count("malformed")
        log.warning("%s: skipped a malformed %s (%s): %.200r", _where(scope, self._what), what, _describe(obj), obj)

    def _pause(self, seconds: float) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            self._stop.wait(seconds)

    def _close_stream(self, scope: _Scope) -> None:
        stream = scope.stream
        if stream is not None:
            stream.close()


def _key(obj: Any) -> Key | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    namespace, name = meta.get("namespace"), meta.get("name")
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        return None
    return namespace, name


def _resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) and rv else None  # opaque: compared and sent back, never parsed


def _describe(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(meta, Mapping):
        return f"key {meta.get('namespace')}/{meta.get('name')}"
    return "no metadata"


def _where(scope: _Scope, what: str = "TFJob") -> str:
    return f"{what} informer ({scope.namespace or 'all namespaces'})"
