"""The job kinds the controller handles, behind one small protocol: the reconcile loop, ingest
and garbage collection know only this module, never a kind's JSON.

Why: a TFJob with parameter servers, a TFJob without (TF2 MultiWorkerMirroredStrategy) and a
PyTorchJob (DDP) differ in where their replicas and counts live, what a one-worker profiling run
of them looks like, which trace their program uploads and which model predicts them; the
loop's steps (profile, predict, annotate, resize) are the same. Each kind answers:

- ``parse``: the typed view (``TFJobView``, shared by all kinds: replica counts, suspend flag,
  template hash, ``workers`` counting Chief/Master as the framework does);
- ``build_profiling_run``: the one-worker run of that kind (env ``ADVISOR_PROFILE=1``...);
- ``resize_patch``: the merge patch setting the worker count (suspend/release patches are
  ``spec.runPolicy.suspend`` for every kind, ``tfjob.suspend_patch``/``release_patch``);
- ``program``: the ``ProgramKind`` its uploaded trace must have;
- ``default_model``: the model that predicts it when the job names none.

Pure functions of JSON, like ``tfjob.py``: ``kind_of`` picks the kind of an object, or raises
``JobKindError`` (a ``TFJobError``) naming what it cannot handle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor.controller.jobs import pytorchjob, tfjob
from advisor.controller.jobs.tfjob import ProfilingSpec, TFJobView
from advisor.core.models.registry import default_model_for
from advisor.core.profile import ProgramKind
from advisor.errors import JobKindError

JobView = TFJobView  # the view every kind returns (the name is older than the other kinds)
API_VERSION = tfjob.API_VERSION  # kubeflow.org/v1 for every kind here


@dataclass(frozen=True, slots=True)
class Resource:
    """An API resource whose objects are jobs: what a watch, a patch and RBAC name."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


TFJOBS = Resource(tfjob.GROUP, tfjob.VERSION, tfjob.PLURAL, tfjob.KIND)
PYTORCHJOBS = Resource(tfjob.GROUP, tfjob.VERSION, pytorchjob.PLURAL, pytorchjob.KIND)
RESOURCES = (TFJOBS, PYTORCHJOBS)


@dataclass(frozen=True)
class JobKind:
    """One job kind: its resource, the program it runs, and its three JSON functions."""

    name: str  # for messages and docs
    resource: Resource
    program: ProgramKind
    parse: Callable[..., TFJobView]  # (obj, *, node_type_label) -> view
    build_profiling_run: Callable[[Mapping[str, Any], TFJobView, ProfilingSpec, int | None], dict[str, Any]]
    resize_patch: Callable[..., dict[str, Any]]  # (view, workers, *, resume=False) -> merge patch

    @property
    def default_model(self) -> str:
        """The PS simulation's default for a PS program, the ring for an all-reduce one: before the
        profile says the regime (a synchronous PS profile switches it, ``policy.job_model``)."""
        return default_model_for(self.program.allreduce)

    @property
    def describe(self) -> str:
        return f"{self.name} ({self.program.value} program)"


def _parse_tf(obj: Mapping[str, Any], *, node_type_label: str = "node.kubernetes.io/instance-type") -> TFJobView:
    return tfjob.parse_tfjob(obj, node_type_label=node_type_label, require_ps=False)


TF_PS = JobKind("TFJob with parameter servers", TFJOBS, ProgramKind.TF_PS, _parse_tf,
                tfjob.build_profiling_tfjob, tfjob.resize_patch)
TF_MWMS = JobKind("TFJob without parameter servers (MultiWorkerMirroredStrategy)", TFJOBS, ProgramKind.TF_MWMS,
                  _parse_tf, tfjob.build_profiling_mwms_tfjob, tfjob.resize_patch)
PYTORCH_DDP = JobKind("PyTorchJob", PYTORCHJOBS, ProgramKind.PYTORCH_DDP, pytorchjob.parse_pytorchjob,
                      pytorchjob.build_profiling_pytorchjob, pytorchjob.resize_patch)
KINDS = (TF_PS, TF_MWMS, PYTORCH_DDP)
_BY_PROGRAM = {k.program.value: k for k in KINDS}


def resource_of(obj: Mapping[str, Any]) -> Resource:
    """The resource of an object by its ``apiVersion`` and ``kind``; ``JobKindError`` for any other."""
    api, kind = obj.get("apiVersion"), obj.get("kind")
    for res in RESOURCES:
        if kind == res.kind and api in (res.api_version, None):
            return res
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    raise JobKindError(f"{api} {kind} {where}: not a job kind the advisor handles "
                       f"(it handles {', '.join(f'{r.api_version} {r.kind}' for r in RESOURCES)})")


def resource_named(kind: str) -> Resource:
    for res in RESOURCES:
        if res.kind == kind:
            return res
    raise JobKindError(f"{kind}: not a job kind the advisor handles")


def parse_job(obj: Mapping[str, Any], *, node_type_label: str = "node.kubernetes.io/instance-type") -> TFJobView:
    """The typed view of any job the advisor handles (``TFJobError`` names what is wrong)."""
    return _parse(obj, node_type_label)


def _parse(obj: Mapping[str, Any], node_type_label: str) -> TFJobView:
    res = resource_of(obj)
    if res is PYTORCHJOBS:
        return pytorchjob.parse_pytorchjob(obj, node_type_label=node_type_label)
    return _parse_tf(obj, node_type_label=node_type_label)


def kind_of_view(view: TFJobView) -> JobKind:
    """The kind of a parsed job (its ``program`` decides: a TFJob with PS replicas is tf-ps)."""
    return _BY_PROGRAM[view.program]


def kind_of(obj: Mapping[str, Any], *, node_type_label: str = "node.kubernetes.io/instance-type") -> JobKind:
    """The kind of a job object; ``TFJobError``/``JobKindError`` when the advisor cannot handle it."""
    return kind_of_view(_parse(obj, node_type_label))


def trace_mismatch(view: TFJobView, traced: ProgramKind | str) -> str | None:
    """Why a trace of program kind ``traced`` cannot be this job's, naming both kinds; None if it can."""
    traced = ProgramKind(traced)
    kind = kind_of_view(view)
    if traced is kind.program:
        return None
    return (f"the trace is of a {traced.value} program, but {view.kind} {view.namespace}/{view.name} is a "
            f"{kind.name}, whose program traces as {kind.program.value}: upload a trace of the job's own program")
