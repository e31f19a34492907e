"""The job-kind adapter on literal objects: TFJob with PS, TFJob without PS (MWMS), PyTorchJob."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from advisor.controller.jobs import kinds as jk
from advisor.controller.pipeline.policy import job_limits, job_model, job_prices
from advisor.controller.settings import load_settings
from advisor.controller.jobs.tfjob import OPT_IN, ProfilingSpec, build_profiling_tfjob, parse_tfjob, resize_patch
from advisor.core.models.registry import DEFAULT_MODEL
from advisor.core.profile import ProgramKind
from advisor.errors import JobKindError, TFJobError
from tests.controller.tfjobs import mwms_tfjob, pytorchjob, tfjob, with_uid

SPEC = ProfilingSpec("http://advisor.advisor-system.svc:8080", steps=50, warmup_steps=5, timeout_s=900, token="tok")


def env_of(replica: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in replica["template"]["spec"]["containers"][0]["env"]}


def operator_world_size(job_spec: Mapping[str, Any]) -> int:
    """training-operator v1.9 (pkg/controller.v1/pytorch/envvar.go): with a Master, every pod gets
    WORLD_SIZE = (sum of all replica specs' replicas) x nprocPerNode when that is an integer, else x 1."""
    total = sum(int(s.get("replicas", 1)) for s in job_spec["pytorchReplicaSpecs"].values())
    nproc = job_spec.get("nprocPerNode")
    return total * (int(nproc) if nproc is not None and str(nproc).isdigit() else 1)


# --- which kind ---------------------------------------------------------------------------------

def test_each_object_gets_its_kind_program_and_default_model() -> None:
    cases = [(tfjob(), jk.TF_PS, ProgramKind.TF_PS, DEFAULT_MODEL),
             (mwms_tfjob(), jk.TF_MWMS, ProgramKind.TF_MWMS, "ring-allreduce"),
             (pytorchjob(), jk.PYTORCH_DDP, ProgramKind.PYTORCH_DDP, "ring-allreduce")]
    for obj, kind, program, model in cases:
        got = jk.kind_of(with_uid(obj))
        assert got is kind and got.program is program and got.default_model == model
        assert jk.parse_job(with_uid(obj)).program == program.value


def test_an_unknown_kind_is_a_job_kind_error_naming_it() -> None:
    mpi = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m", "namespace": "ml"}}
    with pytest.raises(JobKindError, match=r"MPIJob ml/m: not a job kind the advisor handles"):
        jk.parse_job(mpi)
    with pytest.raises(JobKindError, match="Deployment"):
        jk.kind_of({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}})


# --- TFJob with PS: today's behaviour, unchanged ----------------------------------------------

def test_the_ps_kind_writes_exactly_what_the_tfjob_functions_write() -> None:
    obj = with_uid(tfjob(workers=3, chief=1))
    view = jk.parse_job(obj)
    assert view == parse_tfjob(obj)  # the same view the PS-only reader gives
    kind = jk.kind_of_view(view)
    dump = lambda o: json.dumps(o, sort_keys=False)  # noqa: E731 - key order included
    assert dump(kind.build_profiling_run(obj, view, SPEC, None)) == dump(build_profiling_tfjob(obj, view, SPEC))
    assert dump(kind.resize_patch(view, 6, resume=True)) == dump(resize_patch(view, 6, resume=True))
    # 6 workers with a Chief: Worker replicas 5
    assert kind.resize_patch(view, 6) == {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 5}}}}


# --- TFJob without PS (MultiWorkerMirroredStrategy) ---------------------------------------------

def test_a_tfjob_without_ps_counts_worker_and_chief_and_has_no_ps() -> None:
    view = jk.parse_job(with_uid(mwms_tfjob(workers=3, chief=1)))
    assert (view.program, view.workers, view.parameter_servers, view.kind) == ("tf-mwms", 4, 0, "TFJob")


def test_the_mwms_profiling_run_is_one_worker_alone() -> None:
    obj = with_uid(mwms_tfjob(workers=3, chief=1))
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "q", "minAvailable": 4}}
    view = jk.parse_job(obj)
    run = jk.kind_of_view(view).build_profiling_run(obj, view, SPEC, None)
    assert run["kind"] == "TFJob" and list(run["spec"]["tfReplicaSpecs"]) == ["Worker"]
    worker = run["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1 and worker["restartPolicy"] == "Never"
    env = env_of(worker)
    assert env["ADVISOR_PROFILE"] == "1"
    assert env["ADVISOR_INGEST_URL"] == "http://advisor.advisor-system.svc:8080/v1/traces/ml/mwms/1"
    # a gang of the run's one pod, in the job's queue
    assert run["spec"]["runPolicy"]["schedulingPolicy"] == {"queue": "q", "minAvailable": 1}
    assert run["metadata"]["ownerReferences"][0]["kind"] == "TFJob"


def test_a_chief_only_mwms_job_is_profiled_from_its_chief_template() -> None:
    obj = with_uid(mwms_tfjob(workers=0, chief=1))
    del obj["spec"]["tfReplicaSpecs"]["Worker"]
    obj["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["image"] = "chief:1"
    view = jk.parse_job(obj)
    run = jk.kind_of_view(view).build_profiling_run(obj, view, SPEC, None)
    assert run["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == "chief:1"


def test_the_mwms_resize_sets_worker_replicas_beside_the_chief() -> None:
    view = jk.parse_job(with_uid(mwms_tfjob(workers=3, chief=1)))
    # 5 workers = 1 Chief + 4 Worker
    assert jk.kind_of_view(view).resize_patch(view, 5) == {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}


# --- PyTorchJob -----------------------------------------------------------------------------------

def test_a_pytorchjob_counts_its_master_as_a_worker() -> None:
    # WORLD_SIZE of the job = 1 Master + 3 Worker = 4 ranks, each one training process
    view = jk.parse_job(with_uid(pytorchjob(workers=3), uid="u-p"))
    assert (view.kind, view.program, view.workers, view.parameter_servers) == ("PyTorchJob", "pytorch-ddp", 4, 0)
    assert view.spec_keys == {"Master": "Master", "Worker": "Worker"} and not view.dynamic_workers
    assert jk.parse_job(with_uid(pytorchjob(suspend=True))).suspended


def test_the_pytorch_profiling_run_is_one_master_with_world_size_one() -> None:
    obj = with_uid(pytorchjob(workers=3, elastic={"minReplicas": 1, "maxReplicas": 4, "rdzvBackend": "c10d"}))
    obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "master:1"
    view = jk.parse_job(obj)
    run = jk.kind_of_view(view).build_profiling_run(obj, view, SPEC, None)
    assert run["apiVersion"] == "kubeflow.org/v1" and run["kind"] == "PyTorchJob"
    spec = run["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Master"] and "elasticPolicy" not in spec
    master = spec["pytorchReplicaSpecs"]["Master"]
    assert master["replicas"] == 1 and master["restartPolicy"] == "Never"
    assert master["template"]["spec"]["containers"][0]["image"] == "master:1"
    assert operator_world_size(spec) == 1  # 1 Master x nprocPerNode "1": the program trains alone
    env = env_of(master)
    assert env["ADVISOR_PROFILE"] == "1" and env["ADVISOR_STOP_AFTER_UPLOAD"] == "1"
    assert env["ADVISOR_INGEST_URL"].endswith("/v1/traces/ml/ddp/1")
    assert run["metadata"]["ownerReferences"][0] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                     "name": "ddp", "uid": "uid-1", "controller": False}
    assert run["metadata"]["labels"]["training-advisor.io/role"] == "profiling"


def test_a_worker_only_elastic_pytorchjob_is_profiled_as_a_master_from_its_worker_template() -> None:
    obj = with_uid(pytorchjob(master=False, workers=2, elastic={"minReplicas": 2, "maxReplicas": 6}))
    view = jk.parse_job(obj)
    assert view.workers == 2 and view.dynamic_workers and view.worker_range == (2, 6)
    run = jk.kind_of_view(view).build_profiling_run(obj, view, SPEC, None)
    assert list(run["spec"]["pytorchReplicaSpecs"]) == ["Master"] and operator_world_size(run["spec"]) == 1


def test_the_pytorch_resize_sets_worker_replicas_beside_the_master() -> None:
    view = jk.parse_job(with_uid(pytorchjob(workers=3)))
    # 6 workers = 1 Master + 5 Worker; resuming sets runPolicy.suspend as for a TFJob
    assert jk.kind_of_view(view).resize_patch(view, 6, resume=True) == {
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 5}}, "runPolicy": {"suspend": False}}}


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda o: o["spec"].pop("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs must be an object"),
        (lambda o: o["spec"].update(pytorchReplicaSpecs={}), "no Master or Worker replicas"),
        (lambda o: o["spec"]["pytorchReplicaSpecs"].update(Chief={"template": {}}), "unknown replica type 'Chief'"),
        (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[]),
         "spec.pytorchReplicaSpecs.Worker.template.spec.containers must list a container"),
        (lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(template=[]),
         "spec.pytorchReplicaSpecs.Master.template"),
        (lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "Master.replicas must be 0 or 1"),
        (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="3"), "Worker.replicas"),
        (lambda o: o["spec"].update(nprocPerNode="4"), "nprocPerNode is 4: the advisor predicts one training process"),
        (lambda o: o["spec"].update(elasticPolicy={"nProcPerNode": 2}), "elasticPolicy.nProcPerNode is 2"),
        (lambda o: o["spec"].update(nprocPerNode="many"), "nprocPerNode must be auto, cpu, gpu or an integer"),
        (lambda o: o["spec"].update(elasticPolicy={"minReplicas": 0}), "elasticPolicy.minReplicas"),
        (lambda o: o["spec"].update(elasticPolicy={"minReplicas": 3, "maxReplicas": 2}), "elasticPolicy.maxReplicas"),
        (lambda o: o["spec"].update(runPolicy={"suspend": "no"}), "runPolicy.suspend"),
    ],
)
def test_pytorchjobs_the_advisor_cannot_handle_name_the_field(mutate, named: str) -> None:
    obj = with_uid(pytorchjob())
    mutate(obj)
    with pytest.raises(TFJobError, match=named.replace(".", r"\.")):
        jk.parse_job(obj)


def test_several_processes_per_pod_is_an_unsupported_shape() -> None:
    with pytest.raises(JobKindError, match="unsupported job shape"):
        jk.parse_job(with_uid(pytorchjob(nproc_per_node="8")))


def test_nproc_per_node_auto_or_one_is_one_process_per_pod() -> None:
    for value in ("auto", "gpu", "1"):
        assert jk.parse_job(with_uid(pytorchjob(nproc_per_node=value))).workers == 4


# --- traces of the wrong kind ---------------------------------------------------------------------

def test_a_trace_of_another_program_kind_is_refused_naming_both() -> None:
    ps = jk.parse_job(with_uid(tfjob("ps")))
    mwms = jk.parse_job(with_uid(mwms_tfjob()))
    ddp = jk.parse_job(with_uid(pytorchjob()))
    message = jk.trace_mismatch(ps, "pytorch-ddp")
    assert message is not None and "pytorch-ddp" in message and "tf-ps" in message and "TFJob ml/ps" in message
    message = jk.trace_mismatch(mwms, ProgramKind.TF_PS)
    assert message is not None and "tf-ps" in message and "tf-mwms" in message
    assert jk.trace_mismatch(ddp, "tf-mwms") is not None
    assert (jk.trace_mismatch(ps, "tf-ps"), jk.trace_mismatch(mwms, "tf-mwms"), jk.trace_mismatch(ddp, "pytorch-ddp")) \
        == (None, None, None)


# --- policy per kind -------------------------------------------------------------------------------

def test_all_reduce_jobs_default_to_the_ring_and_may_name_another_model() -> None:
    settings = load_settings()
    assert job_model(settings, jk.parse_job(with_uid(tfjob()))).name == settings.model_choice().name
    assert job_model(settings, jk.parse_job(with_uid(mwms_tfjob()))).name == "ring-allreduce"
    assert job_model(settings, jk.parse_job(with_uid(pytorchjob()))).name == "ring-allreduce"
    named = pytorchjob(annotations={"training-advisor.io/predict-model": "ring-allreduce-hierarchical"})
    assert job_model(settings, jk.parse_job(with_uid(named))).name == "ring-allreduce-hierarchical"


def test_an_elastic_policy_narrows_the_worker_limits() -> None:
    settings = load_settings(min_workers=1, max_workers=8)
    view = jk.parse_job(with_uid(pytorchjob(master=False, workers=2, elastic={"minReplicas": 2, "maxReplicas": 4})))
    limits = job_limits(settings, view, job_prices(settings, view))
    assert (limits.min_workers, limits.max_workers) == (2, 4)
    # with a Master, which is a worker too: Worker 2..4 + 1 Master = 3..5 workers
    view = jk.parse_job(with_uid(pytorchjob(workers=2, elastic={"minReplicas": 2, "maxReplicas": 4})))
    limits = job_limits(settings, view, job_prices(settings, view))
    assert (limits.min_workers, limits.max_workers) == (3, 5)
    outside = jk.parse_job(with_uid(pytorchjob(master=False, elastic={"minReplicas": 10, "maxReplicas": 12})))
    with pytest.raises(TFJobError, match="allows 10..12 workers"):
        job_limits(settings, outside, job_prices(settings, outside))


def test_opt_in_reads_the_same_annotation_on_every_kind() -> None:
    assert jk.parse_job(with_uid(pytorchjob())).annotations[OPT_IN] == "true"
    assert not jk.parse_job(with_uid(pytorchjob(opted_in=False))).opted_in()


def test_a_prediction_of_an_all_reduce_job_has_no_ps_and_is_valid() -> None:
    """advise() writes parameter_servers 0 for an all-reduce profile; a prediction Job's answer
    saying so must pass the controller's check (it refused anything below 1 before)."""
    from advisor.controller.pipeline.predictions import PredictionResultError, validate_prediction
    from tests.controller.harness import canned_prediction

    doc = json.loads(canned_prediction({}, {}))
    doc["job"]["parameter_servers"] = 0
    validate_prediction(doc, max_workers=4)
    for bad in (-1, True, 1.0):
        doc["job"]["parameter_servers"] = bad
        with pytest.raises(PredictionResultError, match="parameter_servers"):
            validate_prediction(doc, max_workers=4)


def test_garbage_collection_deletes_an_orphaned_profiling_run_through_its_own_kind() -> None:
    """A profiling PyTorchJob whose job is gone is deleted with delete_pytorchjob, a TFJob's with
    delete_tfjob (each resource has its own RBAC grant and path)."""
    from advisor.controller.pipeline.gc import collect_garbage
    from advisor.controller.jobs.cluster import JobCache
    from advisor.controller.web.metrics import Metrics

    def orphan(kind: str, name: str) -> dict[str, Any]:
        return {"apiVersion": "kubeflow.org/v1", "kind": kind,
                "metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}",
                             "labels": {"training-advisor.io/role": "profiling",
                                        "training-advisor.io/profiling-for": "gone",
                                        "training-advisor.io/generation": "1"},
                             "annotations": {"training-advisor.io/profiling-for-uid": "u-gone"}}}

    class Cache:
        def __init__(self, objs: list[dict[str, Any]]) -> None:
            self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}

        def get(self, ns: str, name: str) -> dict[str, Any] | None:
            return self.objs.get((ns, name))

        def keys(self) -> list[tuple[str, str]]:
            return sorted(self.objs)

        def has_synced(self) -> bool:
            return True

    class Kube:
        deleted: list[tuple[str, str]] = []

        def delete_tfjob(self, ns: str, name: str, *, uid: str | None = None) -> None:
            self.deleted.append(("TFJob", name))

        def delete_pytorchjob(self, ns: str, name: str, *, uid: str | None = None) -> None:
            self.deleted.append(("PyTorchJob", name))

        create_tfjob = patch_tfjob = create_pytorchjob = patch_pytorchjob = None

    class Store:
        def runs_updated_before(self, t: float) -> list[Any]:
            return []

    kube = Kube()
    cache = JobCache([Cache([orphan("TFJob", "a-prof-g1")]), Cache([orphan("PyTorchJob", "b-prof-g1")])])
    assert collect_garbage(kube, cache, Store(), Metrics(), now=1e9, max_age_s=60) == 2
    assert sorted(kube.deleted) == [("PyTorchJob", "b-prof-g1"), ("TFJob", "a-prof-g1")]


@pytest.mark.parametrize("make", [tfjob, mwms_tfjob, pytorchjob], ids=["ps", "mwms", "ddp"])
def test_the_bandwidth_setting_reaches_every_kinds_profiling_pods(make: Any) -> None:
    """The controller's bandwidth (ProfilingSpec.bandwidth_mbit, from its bandwidth setting) is
    ADVISOR_BANDWIDTH_MBIT in every pod of the run: a PS trace records it as meta.bw_mbit, an
    all-reduce bundle as its link (controller-setting), since its transfers cannot measure it."""
    obj = with_uid(make())
    view = jk.parse_job(obj)
    spec = ProfilingSpec(SPEC.ingest_url, steps=50, warmup_steps=5, timeout_s=900, token="tok", bandwidth_mbit=2500.0)
    run = jk.kind_of_view(view).build_profiling_run(obj, view, spec, None)
    replicas = run["spec"].get("tfReplicaSpecs") or run["spec"]["pytorchReplicaSpecs"]
    assert [env_of(r)["ADVISOR_BANDWIDTH_MBIT"] for r in replicas.values()] == ["2500"] * len(replicas)
    unset = jk.kind_of_view(view).build_profiling_run(obj, view, SPEC, None)
    unset_replicas = unset["spec"].get("tfReplicaSpecs") or unset["spec"]["pytorchReplicaSpecs"]
    assert all("ADVISOR_BANDWIDTH_MBIT" not in env_of(r) for r in unset_replicas.values())
