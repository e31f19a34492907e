"""A whole running controller producing every series the dashboard shows, scraped by a real Prometheus.

``advisor controller`` runs as its own process (``controller_process``) against the API
emulator, and this module plays every other part, as ``tests/controller/test_end_to_end.py``
does: the user (TFJobs created with the official client), the training operator (a profiling
run's status), the profiling pods (real recorded traces, uploaded with ``advisor.profiling``'s
uploader; forged uploads), a replica that held the leader lease before this one, and the API
server's hiccups (history compacted, watches dropped). Prometheus scrapes the controller every
second from before it starts.

What happens, in order, and what it leaves on /metrics:

1. The lease is held by another replica: the controller stands by (``advisor_leader`` 0, so
   ``AdvisorNoLeader``'s expression has data) while the user creates the five jobs of ``JOBS``.
   Once Prometheus has recorded the 0, the other replica releases the lease and this one leads.
2. The API server compacts its history and drops every watch (the controller watches again);
   ``cnn``'s profiling run fails; ``mlp`` uploads its trace and is predicted for real in the
   controller's process pool; one forged upload.
3. After two scrapes, the same again with a difference Prometheus can see: ``resnet``'s run
   fails (the failed-runs counter rises); ``mlp-50`` (``initial`` mode, created suspended) is
   predicted from a second trace (the prediction histogram rises, so its rate and quantiles
   have values), then resized to its recommendation and resumed
   (``advisor_resizes_total{mode="initial"}``); four more forged uploads (more than three in 30
   minutes). ``no-workers`` has PS but no Worker replicas (nothing to profile): every resync (5 s)
   counts a reconcile error. The two predicted jobs share ``CLUSTER_MODE``'s 4 workers (the
   allocation's series). Then two more scrapes.

Throughout, one worker of ``mlp-50``'s real training run counts its examples with
``advisor.profiling``'s exporter (``training_worker``): the dashboard's observed-vs-predicted
panel and ``AdvisorPredictionFarFromObserved`` have their data.

Prometheus scrapes both through the scrape configs the Prometheus Operator generates from the
chart's own rendered ServiceMonitor and trainingPodMonitor (``operator_scrape``: target labels
``namespace``, ``pod``, ``service``, ``container``, ``endpoint``, ``job`` added, honor_labels
false), as a kube-prometheus-stack install would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.controller.kube.leader import micro_time
from advisor.controller.jobs.tfjob import PREFIX
from advisor.profiling.throughput import StepCounter, ThroughputExporter
from tests.controller.harness import NS, create_tfjob, phase, trace_body, upload_as_profiling_pod, wait_for
from tests.controller.tfjobs import tfjob
from tests.deploy import operator_scrape
from tests.deploy.controller_process import ControllerProcess, settings_for_process
from tests.deploy.helm_render import NAMESPACE, RELEASE, render_objects
from tests.deploy.prometheus_harness import PrometheusServer
from tests.kube_emulator import KubeEmulator

LEASE = "advisor-leader"
# mlp-50's worker pod, as service discovery finds it (the training operator's pod labels). It
# trains at 100 ex/s where ~53 are predicted at its one worker: AdvisorPredictionFarFromObserved's condition.
TRAINING_POD = operator_scrape.meta_labels(
    namespace=NS, pod="mlp-50-worker-0", container="tensorflow",
    pod_labels={"training.kubeflow.org/job-name": "mlp-50", "training.kubeflow.org/replica-type": "worker"})
# The controller's pod behind the chart's Service (release "advisor" in NAMESPACE: Service "advisor").
CONTROLLER_POD = operator_scrape.meta_labels(namespace=NAMESPACE, pod="advisor-5d8f7c9b4-x2x7q", container="advisor",
                                             service=RELEASE)
TRAINING_EXAMPLES_PER_S = 100.0
MAX_WORKERS = 4  # the predicted curve is W = 1..4 (short simulations)
PRICES = {"worker_per_hour": 3.06, "ps_per_hour": 0.40}
# the predicted jobs share 4 workers (the allocation series and annotations; advise and initial
# modes only annotate, so the flow's jobs keep the replicas it expects)
CLUSTER_MODE = {"cluster_mode": True, "cluster_capacity": {"workers": 4}, "cluster_debounce_s": 0.5}


@dataclass(frozen=True)
class FlowJob:
    name: str
    workers: int
    phase: str  # where the flow leaves it
    annotations: tuple[tuple[str, str], ...] = ()
    valid: bool = True  # False: PS replicas only, a job the advisor cannot read (InvalidSpec)
    suspended: bool = False  # created with spec.runPolicy.suspend: true


JOBS = (
    FlowJob("mlp", 6, "Predicted"),  # trace mlp_bw100; 6 workers: beyond its saturation point (at most 4)
    # trace mlp_bw50; initial mode, created held as docs/controller.md advises (suspended, marked as ours)
    FlowJob("mlp-50", 2, "Predicted", suspended=True,
            annotations=((PREFIX + "mode", "initial"), (PREFIX + "suspended-by-advisor", "true"))),
    FlowJob("cnn", 2, "Failed"),
    FlowJob("resnet", 2, "Failed"),
    FlowJob("no-workers", 2, "Failed", valid=False),  # (a job without PS is MWMS: supported)
)


@dataclass
class Flow:
    emu: KubeEmulator
    controller: ControllerProcess
    prom: PrometheusServer
    start: float  # wall time just before Prometheus's first scrape
    at: float = 0.0  # wall time just after the last scrape of the flow


@contextmanager
def scraped_controller(workdir: Path, *, rule_files: Sequence[Path] = ()) -> Iterator[Flow]:
    """Run the whole flow with Prometheus scraping; yield it with both still running."""
    with ExitStack() as stack:
        emu = stack.enter_context(KubeEmulator(namespaces=[NS], bookmark_interval_s=0.5))
        _hold_lease(emu, "advisor-previous")
        # One profiling try: cnn's failed run must end the job Failed for the dashboard, not be retried.
        settings = settings_for_process(workdir / "controller", leader_election=True, lease_name=LEASE,
                                        resync_period_s=5, max_workers=MAX_WORKERS, prices=PRICES,
                                        profiling_max_attempts=1, **CLUSTER_MODE)
        controller = stack.enter_context(ControllerProcess(emu, workdir / "controller", settings))
        (workdir / "prometheus").mkdir(parents=True, exist_ok=True)
        worker = stack.enter_context(training_worker(TRAINING_EXAMPLES_PER_S))
        start = time.time()
        target = f"127.0.0.1:{settings['metrics_port']}"
        prom = stack.enter_context(PrometheusServer(workdir / "prometheus", target, rule_files=rule_files,
                                                    scrape_configs=operator_scrape_configs(target, worker.port)))
        flow = Flow(emu, controller, prom, start)
        try:
            run(flow)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe controller's log:\n{controller.log_tail()}") from None
        yield flow


def operator_scrape_configs(controller: str, worker_port: int) -> list[dict[str, Any]]:
    """What the Prometheus Operator generates from the chart's ServiceMonitor and trainingPodMonitor."""
    objects = render_objects({"serviceMonitor": {"enabled": True}, "trainingPodMonitor": {"enabled": True}})
    monitors = {o["kind"]: o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor")}
    return [operator_scrape.scrape_config(monitors["ServiceMonitor"], controller, CONTROLLER_POD),
            operator_scrape.scrape_config(monitors["PodMonitor"], f"127.0.0.1:{worker_port}", TRAINING_POD)]


RESTORED_STEP = 1000  # the training worker's job resumed from a checkpoint at this global step


@contextmanager
def training_worker(examples_per_s: float, batch: int = 10) -> Iterator[ThroughputExporter]:
    """A worker of mlp-50's real training run, as ``advisor.profiling`` counts it with
    ADVISOR_METRICS_PORT set: steps of ``batch`` examples at a steady rate, served for scraping,
    and the job's progress by a global step restored at ``RESTORED_STEP`` that each step advances."""
    exporter = ThroughputExporter(0, addr="127.0.0.1")
    counter = StepCounter(exporter, batch)
    stop = threading.Event()

    def train() -> None:
        step = RESTORED_STEP
        while not stop.wait(batch / examples_per_s):
            counter.step()
            step += 1
            counter.global_step(step, batch)

    thread = threading.Thread(target=train, daemon=True, name="training-worker")
    thread.start()
    try:
        yield exporter
    finally:
        stop.set()
        thread.join()
        exporter.close()


def run(flow: Flow) -> None:
    emu, controller, prom = flow.emu, flow.controller, flow.prom
    controller.wait_for_probe("/healthz")
    for job in JOBS:
        create_tfjob(emu, _tfjob(job))
    wait_for("Prometheus to record the standby replica", lambda: prom.query("advisor_leader == 0"))
    emu.patch("leases", NS, LEASE, {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})  # a clean release
    controller.wait_for_probe("/readyz", timeout_s=30)
    runs = {job.name: wait_for(f"{job.name}'s profiling run", lambda j=job: emu.get("tfjobs", NS, f"{j.name}-prof-g1"))
            for job in JOBS if job.valid}

    _api_server_restart(emu)
    _fail(emu, runs["cnn"])
    _upload(emu, runs["mlp"], "mlp_bw100")
    _forge(emu, runs["mlp-50"], times=1)
    _wait_phases(emu, {"mlp": "Predicted", "cnn": "Failed"})
    prom.wait_for_scrapes(2)

    _fail(emu, runs["resnet"])
    _upload(emu, runs["mlp-50"], "mlp_bw50")
    _forge(emu, runs["mlp-50"], times=4)
    _wait_phases(emu, {job.name: job.phase for job in JOBS})
    wait_for("mlp-50 resized, resumed and annotated again", lambda: _resumed(emu, "mlp-50"))
    wait_for("both predicted jobs' share of the 4 workers", lambda: all(
        PREFIX + "allocated-workers" in emu.get("tfjobs", NS, name)["metadata"]["annotations"]
        for name in ("mlp", "mlp-50")))
    prom.wait_for_scrapes(2)
    flow.at = time.time()


def _resumed(emu: KubeEmulator, name: str) -> bool:
    job = emu.get("tfjobs", NS, name)
    workers = job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    return (job["spec"]["runPolicy"]["suspend"] is False
            and job["metadata"]["annotations"].get(PREFIX + "current-workers") == str(workers))


def _tfjob(job: FlowJob) -> dict[str, Any]:
    obj = tfjob(job.name, workers=job.workers, annotations=dict(job.annotations), suspend=job.suspended or None)
    if not job.valid:
        del obj["spec"]["tfReplicaSpecs"]["Worker"]
    return obj


def _hold_lease(emu: KubeEmulator, holder: str) -> None:
    """The Lease as a live replica leaves it: held, renewed just now, for longer than the flow takes."""
    now = micro_time(time.time())
    emu.seed({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": NS},
              "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300, "acquireTime": now, "renewTime": now,
                       "leaseTransitions": 0}})


def _api_server_restart(emu: KubeEmulator) -> None:
    """History compacted and every watch dropped; back once the controller watches again."""
    watches = len(emu.calls(verb="watch", resource="tfjobs"))
    emu.expire_history()
    emu.close_watches()
    wait_for("the controller to watch TFJobs again",  # from where it was, or after listing (410 Gone)
             lambda: len(emu.calls(verb="watch", resource="tfjobs")) > watches and emu.open_watches("tfjobs") > 0)


def _fail(emu: KubeEmulator, profiling_run: dict[str, Any]) -> None:
    """What the training operator writes when a replica of the run fails."""
    name = profiling_run["metadata"]["name"]
    condition = {"type": "Failed", "status": "True", "reason": "TFJobFailed",
                 "message": f"TFJob {NS}/{name} has failed because 1 Worker replica(s) failed."}
    emu.patch("tfjobs", NS, name, {"status": {"conditions": [condition]}}, subresource="status")


def _upload(emu: KubeEmulator, profiling_run: dict[str, Any], trace: str) -> None:
    result = upload_as_profiling_pod(emu, profiling_run, trace_body(trace))
    if result.status != 202:
        raise AssertionError(f"the upload of {trace} was refused: {result.status} {result.message}")


def _forge(emu: KubeEmulator, profiling_run: dict[str, Any], times: int) -> None:
    for _ in range(times):
        result = upload_as_profiling_pod(emu, profiling_run, b"{}", token="forged")
        if result.status != 403:
            raise AssertionError(f"a forged upload got {result.status}, not 403")


def _wait_phases(emu: KubeEmulator, phases: dict[str, str], timeout_s: float = 60.0) -> None:
    try:
        wait_for(f"phases {phases}", lambda: all(phase(emu, name) == p for name, p in phases.items()), timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; they are {({name: phase(emu, name) for name in phases})}") from None
