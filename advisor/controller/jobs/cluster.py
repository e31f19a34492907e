"""The cluster side of the job kinds: which ``Kube`` calls read and write each kind, which kinds
are watched, and one cache over all of them.

Why: the reconcile loop, ingest and garbage collection address a job by (namespace, name)
and must not care whether it is a TFJob or a PyTorchJob. ``verbs_for`` gives the create /
patch / delete calls of an object's resource; ``JobCache`` answers ``get``/``keys``/
``has_synced`` over one informer per watched resource, as the single TFJob informer did.

A TFJob and a PyTorchJob of the same name in one namespace share a key: the TFJob is the one
the advisor sees (it is looked up first); the PyTorchJob is not acted on, and ``shadowed`` names
it so that the reconciler can tell its owner (docs/controller.md). PyTorchJobs are watched only when their CRD is served (API
discovery at start) and the setting ``watch_pytorchjobs`` is on (``watched_resources``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.controller.jobs.kinds import PYTORCHJOBS, TFJOBS, Resource, resource_named
from advisor.errors import KubeError

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Key = tuple[str, str]


@dataclass(frozen=True)
class JobVerbs:
    """The write calls of one job resource, as ``Kube`` methods bound to it."""

    create: Callable[..., JSON]  # (namespace, body)
    patch: Callable[..., JSON]  # (namespace, name, patch, *, resource_version=None)
    delete: Callable[..., None]  # (namespace, name, *, uid=None)


def verbs_for(kube: Any, kind: str) -> JobVerbs:
    """The calls for objects of ``kind`` (``TFJob``, ``PyTorchJob``); ``JobKindError`` for another."""
    res = resource_named(kind)
    if res is PYTORCHJOBS:
        return JobVerbs(kube.create_pytorchjob, kube.patch_pytorchjob, kube.delete_pytorchjob)
    return JobVerbs(kube.create_tfjob, kube.patch_tfjob, kube.delete_tfjob)


class InformerSource:
    """What ``Informer`` calls (its protocol names TFJobs), for any job resource."""

    def __init__(self, kube: Any, res: Resource) -> None:
        self._list = kube.list_pytorchjobs if res is PYTORCHJOBS else kube.list_tfjobs
        self._watch = kube.watch_pytorchjobs if res is PYTORCHJOBS else kube.watch_tfjobs

    def list_tfjobs(self, namespace: str | None, label_selector: str | None = None) -> tuple[list[JSON], str]:
        return self._list(namespace, label_selector)  # type: ignore[no-any-return]

    def watch_tfjobs(self, namespace: str | None, resource_version: str, timeout_s: float,
                     label_selector: str | None = None) -> Any:
        return self._watch(namespace, resource_version, timeout_s, label_selector)


def watched_resources(kube: Any, *, watch_pytorchjobs: bool) -> tuple[Resource, ...]:
    """TFJobs always; PyTorchJobs when enabled and their CRD is served. Said once, at start."""
    if not watch_pytorchjobs:
        log.info("PyTorchJobs are not watched: the setting watch_pytorchjobs is off")
        return (TFJOBS,)
    try:
        served = kube.served_resources(PYTORCHJOBS.group, PYTORCHJOBS.version)
    except KubeError as exc:  # discovery failed: watching a resource that may not exist would never sync
        log.warning("PyTorchJobs are not watched: API discovery of %s failed (%s); restart to retry",
                    PYTORCHJOBS.api_version, exc)
        return (TFJOBS,)
    if PYTORCHJOBS.plural not in served:
        log.info("PyTorchJobs are not watched: the API serves no %s.%s (the PyTorchJob CRD is not installed)",
                 PYTORCHJOBS.plural, PYTORCHJOBS.group)
        return (TFJOBS,)
    return (TFJOBS, PYTORCHJOBS)


class JobCache:
    """One cache over the informers of several job resources, looked up in their order."""

    def __init__(self, informers: Sequence[Any]) -> None:
        self.informers = tuple(informers)

    def get(self, namespace: str, name: str) -> JSON | None:
        for informer in self.informers:
            obj = informer.get(namespace, name)
            if obj is not None:
                return obj  # type: ignore[no-any-return]
        return None

    def shadowed(self, namespace: str, name: str) -> list[JSON]:
        """The objects of this key that ``get`` does not return (a later resource's, behind the first found)."""
        found = [obj for informer in self.informers if (obj := informer.get(namespace, name)) is not None]
        return found[1:]

    def keys(self) -> list[Key]:
        return sorted({key for informer in self.informers for key in informer.keys()})

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers)
