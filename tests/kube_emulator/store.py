"""The emulator's state: objects, one resourceVersion counter, event history and watchers.

This is what etcd plus the generic registry store do for a client, without HTTP: system metadata
(uid, resourceVersion, generation, creationTimestamp, generateName), optimistic concurrency,
status subresources, finalizers and deletionTimestamp, garbage collection of dependents, watch
history with a compaction floor, and per-watch selector filtering (an object that stops matching
a watch's selector is sent as DELETED, one that starts matching as ADDED, as the watch cache
does). Every method runs under one lock, so writes are totally ordered by resourceVersion.

Stored objects are never mutated in place: every write stores a fresh dict, so history entries
and paginated list snapshots can share them safely.
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime as dt
import itertools
import json
import queue
import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.kube_emulator import batch
from tests.kube_emulator import status as st
from tests.kube_emulator import validation
from tests.kube_emulator.patches import json_patch, merge_patch
from tests.kube_emulator.resources import ResourceType, find
from tests.kube_emulator.selectors import field_matcher, label_matcher

Key = tuple[str, str]  # (namespace or "", name)
Obj = dict[str, Any]
CLOSE_CLEAN, CLOSE_ABRUPT = b"", b"!"  # watcher queue sentinels
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphabet


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


@dataclass
class Event:
    rv: int
    res: ResourceType
    type: str  # ADDED / MODIFIED / DELETED
    obj: Obj
    old: Obj | None
    _lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, type_: str, obj: Obj | None = None) -> bytes:
        if type_ not in self._lines:
            self._lines[type_] = json.dumps({"type": type_, "object": obj or self.obj},
                                            separators=(",", ":")).encode() + b"\n"
        return self._lines[type_]

    def left_selector_line(self) -> bytes:
        """The watch cache's DELETED for an object that stopped matching a selector: the previous
        content, stamped with this event's resourceVersion (cacheWatcher.convertToWatchEvent)."""
        if "LEFT" not in self._lines:
            prev = copy.deepcopy(self.old or self.obj)
            prev["metadata"]["resourceVersion"] = str(self.rv)
            self._lines["LEFT"] = self.line("LEFT-DELETED", prev).replace(b'"LEFT-DELETED"', b'"DELETED"', 1)
        return self._lines["LEFT"]


@dataclass(eq=False)
class Watcher:
    """One open watch: its filter and a queue of ready-to-send lines."""

    res: ResourceType
    namespace: str | None
    labels: Callable[[Mapping[str, Any]], bool] | None
    fields: Callable[[Mapping[str, Any]], bool] | None
    queue: queue.SimpleQueue[bytes] = field(default_factory=queue.SimpleQueue)

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(meta.get("labels") or {}):
            return False
        return self.fields is None or self.fields(obj)

    def offer(self, ev: Event) -> None:
        now, before = self.matches(ev.obj), ev.type == "MODIFIED" and self.matches(ev.old)
        if ev.type == "MODIFIED" and now and not before:
            self.queue.put(ev.line("ADDED"))
        elif ev.type == "MODIFIED" and before and not now:
            self.queue.put(ev.left_selector_line())
        elif now:
            self.queue.put(ev.line(ev.type))


class Store:
    def __init__(self, history_limit: int = 10_000, first_rv: int = 1000) -> None:
        self.lock = threading.RLock()
        self.rv = first_rv
        self.floor = first_rv  # watches from an RV below this get 410 (the watch cache's oldest-1)
        self.history: list[Event] = []
        self.history_rvs: list[int] = []
        self.history_limit = history_limit
        self.objects: dict[ResourceType, dict[Key, Obj]] = {}
        self.watchers: dict[ResourceType, set[Watcher]] = {}
        self.uids: dict[str, tuple[ResourceType, Key]] = {}
        self.dependents: dict[str, set[tuple[ResourceType, Key]]] = {}
        self.snapshots: OrderedDict[str, list[Obj]] = OrderedDict()
        self.pod_logs: dict[tuple[str, str, str | None], str] = {}
        self._snap_ids = itertools.count(1)

    # --- reads ------------------------------------------------------------------------------
    def table(self, res: ResourceType) -> dict[Key, Obj]:
        return self.objects.setdefault(res, {})

    def get(self, res: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self.table(res).get((namespace or "", name))
            if obj is None:
                raise st.not_found(res, name)
            return obj

    def list(self, res: ResourceType, namespace: str | None, label_selector: str | None = None,
             field_selector: str | None = None, limit: int = 0, cont: str | None = None) -> Obj:
        labels = label_matcher(label_selector)
        fields = field_matcher(field_selector, res.plural, res.namespaced)
        with self.lock:
            if cont:
                rv, items = self._resume(cont)
            else:
                probe = Watcher(res, namespace, labels, fields)
                rv = self.rv
                table = self.table(res)
                items = [table[k] for k in sorted(table) if probe.matches(table[k])]
            meta: Obj = {"resourceVersion": str(rv)}
            if limit and len(items) > limit:
                snap = str(next(self._snap_ids))
                self.snapshots[snap] = items[limit:]
                while len(self.snapshots) > 64:
                    self.snapshots.popitem(last=False)
                token = json.dumps({"rv": rv, "snapshot": snap}).encode()
                meta["continue"] = base64.urlsafe_b64encode(token).decode()
                if labels is None and fields is None:
                    meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
        if not res.custom:  # built-in lists carry kind/apiVersion on the list, not the items
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    def _resume(self, cont: str) -> tuple[int, list[Obj]]:
        try:
            token = json.loads(base64.urlsafe_b64decode(cont.encode()))
            rv, snap = int(token["rv"]), str(token["snapshot"])
        except (ValueError, KeyError, TypeError):
            raise st.bad_request("continue key is not valid: illegal base64 data") from None
        if snap not in self.snapshots or rv < self.floor:
            raise st.expired(
                "The provided continue parameter is too old to display a consistent list result. You can start "
                "a new list without the continue parameter, or use the continue token in this response to "
                "retrieve the remainder of the results. Continuing with the provided token results in an "
                "inconsistent list - objects that were created, modified, or deleted between the time the "
                "first chunk was returned and now may show up in the list.")
        return rv, self.snapshots.pop(snap)

    # --- writes -----------------------------------------------------------------------------
    def create(self, res: ResourceType, namespace: str | None, body: Any, *, seed: bool = False) -> Obj:
        obj = self._decode(res, body)
        meta = obj["metadata"]
        with self.lock:
            self._place(res, namespace, meta)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise st.invalid(res, "", [("metadata.name", "Required value: name or generateName is required")])
                meta["name"] = self._generate(res, meta)
            if res.namespaced and not seed and ("", meta["namespace"]) not in self.table(_namespaces()):
                raise st.namespace_not_found(meta["namespace"])
            if key_of(obj) in self.table(res):
                raise st.already_exists(res, meta["name"])
            self._prepare_create(res, obj, seed)
            validation.check(res, obj)
            if seed and res.namespaced:
                self._ensure_namespace(meta["namespace"])
            return self._commit(res, "ADDED", obj, None)

    def update(self, res: ResourceType, namespace: str | None, name: str, body: Any,
               subresource: str | None = None, *, require_rv: bool = True) -> Obj:
        new = self._decode(res, body)
        with self.lock:
            old = self.get(res, namespace, name)
            self._check_identity(res, namespace, name, new)
            rv = new["metadata"].get("resourceVersion") or ""
            if not rv and require_rv and not res.unconditional_update:
                raise st.invalid(res, name, [("metadata.resourceVersion",
                                              "Invalid value: 0x0: must be specified for an update")])
            if rv and not rv.isdigit():
                raise st.bad_request(f"invalid resourceVersion {rv!r}")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise st.conflict(res, name)
            return self._write(res, old, new, subresource)

    def patch(self, res: ResourceType, namespace: str | None, name: str, content_type: str, body: Any,
              subresource: str | None = None) -> Obj:
        with self.lock:
            old = self.get(res, namespace, name)
            if content_type == "application/merge-patch+json" or (
                    content_type == "application/strategic-merge-patch+json" and not res.custom):
                if not isinstance(body, dict):
                    raise st.bad_request("json: cannot unmarshal the patch into map[string]interface{}")
                patched = merge_patch(old, body)
            elif content_type == "application/json-patch+json":
                patched = json_patch(old, body)
            else:
                raise st.unsupported_patch(res)
            if isinstance(patched, dict) and isinstance(patched.get("metadata"), dict) \
                    and patched["metadata"].get("resourceVersion") is None:
                patched["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self.update(res, namespace, name, patched, subresource, require_rv=False)

    def delete(self, res: ResourceType, namespace: str | None, name: str, options: Mapping[str, Any]) -> Obj:
        with self.lock:
            obj = self.get(res, namespace, name)
            self._preconditions(res, obj, options.get("preconditions") or {})
            orphan = options.get("orphanDependents")
            policy = options.get("propagationPolicy") or ("Orphan" if orphan or (
                orphan is None and res.orphan_by_default) else "Background")
            if obj["metadata"].get("finalizers"):
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                marked = copy.deepcopy(obj)
                marked["metadata"]["deletionTimestamp"] = now_rfc3339()
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
                if marked["metadata"].get("generation"):
                    marked["metadata"]["generation"] += 1
                return self._commit(res, "MODIFIED", marked, obj)
            gone = self._remove(res, obj, orphan=policy == "Orphan")
            if res.return_deleted_object:
                return gone
            details = {"name": name, "kind": res.plural, "uid": obj["metadata"]["uid"]}
            if res.group:
                details["group"] = res.group
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    # --- watch ------------------------------------------------------------------------------
    def open_watch(self, res: ResourceType, namespace: str | None, resource_version: str | None,
                   label_selector: str | None, field_selector: str | None) -> Watcher:
        w = Watcher(res, namespace, label_matcher(label_selector),
                    field_matcher(field_selector, res.plural, res.namespaced))
        with self.lock:
            if not resource_version or resource_version == "0":
                table = self.table(res)
                for k in sorted(table):
                    if w.matches(table[k]):
                        w.queue.put(Event(0, res, "ADDED", table[k], None).line("ADDED"))
            else:
                if not resource_version.isdigit():
                    raise st.bad_request(f"invalid resource version: {resource_version}")
                requested = int(resource_version)
                if requested < self.floor:
                    raise st.too_old(requested, self.floor)
                start = bisect.bisect_right(self.history_rvs, requested)
                for ev in self.history[start:]:
                    if ev.res is res:
                        w.offer(ev)
            self.watchers.setdefault(res, set()).add(w)
        return w

    def close_watch(self, w: Watcher) -> None:
        with self.lock:
            self.watchers.get(w.res, set()).discard(w)

    def bookmark(self, w: Watcher) -> bytes | None:
        """A BOOKMARK line at the current RV, or None while events are still queued for ``w``."""
        with self.lock:
            if not w.queue.empty():
                return None
            obj = {"kind": w.res.kind, "apiVersion": w.res.api_version,
                   "metadata": {"resourceVersion": str(self.rv)}}
            return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"

    def compact(self) -> None:
        with self.lock:
            self.history.clear()
            self.history_rvs.clear()
            self.floor = self.rv
            self.snapshots.clear()

    def all_watchers(self) -> list[Watcher]:
        with self.lock:
            return [w for ws in self.watchers.values() for w in ws]

    # --- internals --------------------------------------------------------------------------
    def _decode(self, res: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise st.bad_request(f"the body of the request must be a {res.kind} object")
        obj = copy.deepcopy(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if res.custom and (not api_version or not kind):
            missing = "Kind" if not kind else "apiVersion"
            raise st.bad_request(f"Object '{missing}' is missing in '{json.dumps(body)[:200]}'")
        if api_version and api_version != res.api_version:
            raise st.bad_request(f"the API version in the data ({api_version}) does not match the expected "
                                 f"API version ({res.api_version})")
        if kind and kind != res.kind:
            raise st.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise st.bad_request("json: cannot unmarshal metadata into Go struct field of type v1.ObjectMeta")
        return obj

    def _place(self, res: ResourceType, namespace: str | None, meta: Obj) -> None:
        if not res.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise st.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = meta.get("namespace") or namespace or "default"

    def _generate(self, res: ResourceType, meta: Obj) -> str:
        while True:
            name = meta["generateName"] + "".join(random.choice(_NAME_CHARS) for _ in range(5))
            if (meta.get("namespace", ""), name) not in self.table(res):
                return name

    def _prepare_create(self, res: ResourceType, obj: Obj, seed: bool) -> None:
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4()) if not (seed and meta.get("uid")) else meta["uid"]
        meta["creationTimestamp"] = meta.get("creationTimestamp") if seed and meta.get("creationTimestamp") else now_rfc3339()
        for system in ("resourceVersion", "selfLink", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(system, None)
        if not seed:
            meta.pop("deletionTimestamp", None)
        if res.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if res.status_subresource and not seed:
            obj.pop("status", None)  # PrepareForCreate: create cannot set status
            if res.plural == "namespaces":
                obj["status"] = {"phase": "Active"}
            elif res.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        if batch.is_job(res.group, res.plural):
            batch.default_job(obj)

    def _check_identity(self, res: ResourceType, namespace: str | None, name: str, new: Obj) -> None:
        meta = new["metadata"]
        if meta.get("name", name) != name:
            raise st.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        meta["name"] = name
        self._place(res, namespace, meta)

    def _write(self, res: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource == "status":
            body, new = new, copy.deepcopy(old)  # status writes change .status only
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
        elif res.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        meta, old_meta = new["metadata"], old["metadata"]
        for system in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if res.generation and subresource != "status" and _spec_of(new) != _spec_of(old):
            meta["generation"] = old_meta.get("generation", 0) + 1
        validation.check(res, new, old)
        if new == old:
            return old  # a no-op write is not stored: no new resourceVersion, no watch event
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(res, new, orphan=False, previous=old)
        return self._commit(res, "MODIFIED", new, old)

    def _preconditions(self, res: ResourceType, obj: Obj, pre: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        for field_, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if pre.get(field_) and pre[field_] != meta.get(field_):
                raise st.conflict(res, meta["name"], f"Precondition failed: {label} in precondition: "
                                  f"{pre[field_]}, {label} in object meta: {meta.get(field_)}")

    def _remove(self, res: ResourceType, obj: Obj, orphan: bool, previous: Obj | None = None) -> Obj:
        if res.plural == "namespaces":
            self._empty_namespace(obj["metadata"]["name"])
        gone = self._commit(res, "DELETED", copy.deepcopy(obj), previous or obj)
        self._collect(obj["metadata"]["uid"], orphan=orphan)
        return gone

    def _collect(self, owner_uid: str, orphan: bool) -> None:
        """Garbage collection of an owner's dependents (synchronous here; background upstream)."""
        for res, key in sorted(self.dependents.pop(owner_uid, set()), key=lambda d: (d[0].plural, d[1])):
            dep = self.table(res).get(key)
            if dep is None:
                continue
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            if orphan or any(r.get("uid") in self.uids for r in refs):
                kept = copy.deepcopy(dep)
                if refs:
                    kept["metadata"]["ownerReferences"] = refs
                else:
                    kept["metadata"].pop("ownerReferences", None)
                self._commit(res, "MODIFIED", kept, dep)
            else:
                self.delete(res, key[0] or None, key[1], {"propagationPolicy": "Background"})

    def _empty_namespace(self, namespace: str) -> None:
        for res, table in list(self.objects.items()):
            if res.namespaced:
                for key in [k for k in table if k[0] == namespace]:
                    if key in table:
                        self.delete(res, namespace, key[1], {"propagationPolicy": "Background"})

    def _ensure_namespace(self, namespace: str) -> None:
        if ("", namespace) not in self.table(_namespaces()):
            self.create(_namespaces(), None, {"metadata": {"name": namespace}})

    def _commit(self, res: ResourceType, type_: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key, table = key_of(obj), self.table(res)
        uid = obj["metadata"]["uid"]
        if type_ == "DELETED":
            table.pop(key, None)
            self.uids.pop(uid, None)
        else:
            table[key] = obj
            self.uids[uid] = (res, key)
        self._index_owners(res, key, old if type_ != "ADDED" else None, None if type_ == "DELETED" else obj)
        ev = Event(self.rv, res, type_, obj, old)
        self.history.append(ev)
        self.history_rvs.append(self.rv)
        if len(self.history) > self.history_limit:
            drop = len(self.history) // 2
            del self.history[:drop], self.history_rvs[:drop]
            self.floor = self.history_rvs[0] - 1
        for w in self.watchers.get(res, ()):
            w.offer(ev)
        return obj

    def _index_owners(self, res: ResourceType, key: Key, old: Obj | None, new: Obj | None) -> None:
        def owners(o: Obj | None) -> set[str]:
            refs = (o or {}).get("metadata", {}).get("ownerReferences") or []
            return {r["uid"] for r in refs if isinstance(r, dict) and r.get("uid")}
        before, after = owners(old), owners(new)
        for uid in before - after:
            self.dependents.get(uid, set()).discard((res, key))
        for uid in after - before:
            self.dependents.setdefault(uid, set()).add((res, key))


def _spec_of(obj: Obj) -> Obj:
    """What a change to bumps generation: everything but metadata (status is reset beforehand)."""
    return {k: v for k, v in obj.items() if k != "metadata"}


def _namespaces() -> ResourceType:
    ns = find("", "v1", "namespaces")
    if ns is None:
        raise LookupError("the resource table must serve namespaces")
    return ns
