"""A controller wired to the API emulator over real HTTP, and a stand-in for the profiling pod.

The controller under test is the real ``Controller`` with the real ``Kube`` adapter (official
kubernetes client), store, HTTP API and informer; only the process backend's prediction runner can
be swapped for a canned one (``canned_prediction``) where a test is about the controller, not the
simulation. With the job backend nothing is swapped: ``tests.kube_emulator.job_runner`` runs the
prediction Jobs' real ``advisor predict-job`` processes.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes

from advisor.controller.app import Controller
from advisor.controller.kube.client import Kube
from advisor.controller.pipeline.predictions import ProcessPredictor
from advisor.controller.settings import ControllerSettings, PredictionBackend, load_settings
from advisor.controller.jobs.tfjob import PREFIX
from advisor.profiling.allreduce_bundle import build_allreduce_bundle, encode_allreduce_bundle
from advisor.profiling.bundle import build_bundle, encode_bundle
from advisor.profiling.upload import RetryPolicy, UploadResult, upload_bundle
from tests.conftest import ps_async_data
from tests.kube_emulator import KubeEmulator

NS = "ml"
FAST_LEASE = (1.0, 0.7, 0.1)  # lease duration, renew deadline, retry period (s)
JOB_IMAGE = "advisor:test"
INGEST_KEY = "test-ingest-key-shared-by-replicas"  # every replica of a test derives the same tokens  # the image tests.kube_emulator.job_runner "has"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings_for(tmp: Path, **overrides: Any) -> ControllerSettings:
    tmp.mkdir(parents=True, exist_ok=True)
    port = overrides.pop("http_port", None) or free_port()
    base: dict[str, Any] = dict(
        namespaces=[NS], store_path=tmp / "advisor.db", http_port=port, metrics_port=0,
        ingest_url=f"http://127.0.0.1:{port}",
        lease_namespace=NS, identity="replica-a", max_workers=4, prediction_target=0.05, resync_period_s=5,
        gc_period_s=3600, prices={"worker_per_hour": 1.0, "ps_per_hour": 1.0}, ingest_key=INGEST_KEY)
    base.update(overrides)
    return load_settings(**base)


def canned_prediction(profile_doc: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """A prediction with a hand-made curve (module-level so the process pool can run it).

    Throughput 100, 190, 260, 300 ex/s for W = 1..4 with a worker and a PS at 1/h: cost per
    example (W + 1) / thr is 0.0200, 0.0158, 0.0154, 0.0167: W = 3 is cheapest.
    """
    curve = []
    for w, thr in zip(range(1, 5), (100.0, 190.0, 260.0, 300.0)):
        curve.append({"workers": w, "throughput": thr, "low": thr * 0.98, "high": thr * 1.02, "steps": 200,
                      "events": 0, "cost_per_example": (w + 1) / 3600 / thr,
                      "baselines": {"cynthia": thr, "phase_queueing": thr}})
    return json.dumps({"schema": "advisor-prediction/1", "model": "canned", "job": {"parameter_servers": 1},
                       "curve": curve, "saturation_workers": 3, "recommended": {"workers": 3}, "notes": []})


def job_settings_for(tmp: Path, **overrides: Any) -> ControllerSettings:
    """Settings of a single replica with the job backend; prediction Jobs go to NS (its "own" namespace)."""
    base: dict[str, Any] = dict(leader_election=False, prediction_backend="job", prediction_job_image=JOB_IMAGE)
    return settings_for(tmp, **{**base, **overrides})


def start_controller(emu: KubeEmulator, settings: ControllerSettings, *, canned: bool = True,
                     runner: Callable[[Mapping[str, Any], Mapping[str, Any]], str] = canned_prediction) -> Controller:
    """``canned``: the process backend runs ``runner`` (module-level) instead of the simulation."""
    kube = Kube(kubernetes.client.ApiClient(emu.configuration()))
    controller = Controller(settings, kube, lease_timing=FAST_LEASE, predictor=None, job_poll_s=0.1)
    if canned and settings.prediction_backend is PredictionBackend.PROCESS:
        controller.predictor.shutdown()
        controller.predictor = ProcessPredictor(1, controller.metrics, controller.reconciler.prediction_done,
                                                runner=runner)
        controller.reconciler.predictor = controller.predictor
    controller.start()
    return controller


def reconciles(controller: Any) -> float:
    """How many reconciles the controller has run: its duration histogram's count (a bucket
    would count only those faster than its bound, which a loaded machine may never reach)."""
    samples = controller.metrics.reconcile_duration.collect()[0].samples
    return next(s.value for s in samples if s.name.endswith("_count"))


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def annotations(emu: KubeEmulator, name: str, resource: str = "tfjobs") -> dict[str, str]:
    obj = emu.get(resource, NS, name) or {}
    return dict(obj.get("metadata", {}).get("annotations") or {})


def phase(emu: KubeEmulator, name: str, resource: str = "tfjobs") -> str | None:
    return annotations(emu, name, resource).get(PREFIX + "phase")


def profiling_jobs(emu: KubeEmulator, resource: str = "tfjobs") -> list[dict[str, Any]]:
    return emu.list(resource, NS, label_selector=f"{PREFIX}role=profiling")


def create_job(emu: KubeEmulator, body: Mapping[str, Any], resource: str) -> dict[str, Any]:
    """Any job kind (``tfjobs``, ``pytorchjobs``) through the official client, as kubectl would."""
    api = kubernetes.client.CustomObjectsApi(kubernetes.client.ApiClient(emu.configuration()))
    return api.create_namespaced_custom_object("kubeflow.org", "v1", NS, resource, dict(body))


def profiled_replica(profiling_job: Mapping[str, Any]) -> dict[str, Any]:
    """The one traced replica of a profiling run of any kind: a TFJob's Worker, a PyTorchJob's Master."""
    spec = profiling_job["spec"]
    if "pytorchReplicaSpecs" in spec:
        return dict(spec["pytorchReplicaSpecs"]["Master"])
    return dict(spec["tfReplicaSpecs"]["Worker"])


def create_tfjob(emu: KubeEmulator, body: Mapping[str, Any]) -> dict[str, Any]:
    """Through the official client, as a user's kubectl would."""
    api = kubernetes.client.CustomObjectsApi(kubernetes.client.ApiClient(emu.configuration()))
    return api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs", dict(body))


def trace_body(run: str = "mlp_bw100") -> bytes:
    """What ``advisor.profiling`` uploads for a real recorded run (tests/data/ps-async/tf-native)."""
    folder = ps_async_data("tf-native", run)
    meta = json.loads((folder / "meta.json").read_text())
    with gzip.open(folder / "runmetadata.jsonl.gz", "rt") as fh:
        steps = [json.loads(line) for line in fh if line.strip()]
    return encode_bundle(build_bundle(steps, meta))


def pod_token(profiling_job: Mapping[str, Any]) -> str:
    """The token file the kubelet projects into the profiling pod: the downwardAPI volume's
    item, read from the pod template's annotation it names."""
    template = profiled_replica(profiling_job)["template"]
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "advisor-token")
    if "secret" in volume:  # a controller older than issue 15 (e.g. an installed console script): a Secret
        raise LookupError(f"the token is in Secret {volume['secret']['secretName']}, not the pod template")
    path = volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]  # metadata.annotations['<key>']
    key = path.split("['", 1)[1].rstrip("']")
    return str(template["metadata"]["annotations"][key])


def upload_as_profiling_pod(emu: KubeEmulator, profiling_job: Mapping[str, Any], body: bytes,
                            token: str | None = None, port: int | None = None) -> UploadResult:
    """Do what the profiling pod does: read the env and the mounted token, POST the bundle."""
    container = profiled_replica(profiling_job)["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    if token is None:
        try:
            token = pod_token(profiling_job)
        except LookupError:
            secret = emu.get("secrets", NS, profiling_job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"][
                "volumes"][-1]["secret"]["secretName"])
            token = base64.b64decode(secret["data"]["token"]).decode()
    url = env["ADVISOR_INGEST_URL"]
    if port is not None:  # the Service would route to whichever replica is ready
        url = url.replace(url.split("/")[2], f"127.0.0.1:{port}")
    return upload_bundle(url, body, token, policy=RetryPolicy(attempts=1))


RECORDED_ALLREDUCE = {  # kind -> a one-worker bundle its hook recorded (tests/data/allreduce/<cfg>/README.md)
    "pytorch-ddp": Path(__file__).resolve().parent.parent / "data" / "allreduce" / "ddp-comm" / "profile.json.gz",
    "tf-mwms": Path(__file__).resolve().parent.parent / "data" / "allreduce" / "mwms-mlp4m-bw50" / "profile.json.gz",
}


def allreduce_trace_body(kind: str) -> bytes:
    """What an all-reduce program's profiling hook uploads (``kind``: ``pytorch-ddp`` or ``tf-mwms``).

    The ONE place the end-to-end tests of the synchronous job kinds get their trace: the bundle
    the real hook recorded (``RECORDED_ALLREDUCE``: advisor.profiling.torch in a real DDP program,
    advisor.profiling.keras_mwms in real Keras), exactly as it was uploaded. A kind with no
    recording falls back to a small hand-built bundle (the step of
    tests/importers/test_allreduce_upload.py): 3 gradients a (4 MB), b (2 MB), c (1 MB); forward
    0..10 ms, backward 10..25 ms with c ready at 13, b at 18, a at 24 ms, optimizer 26..28 ms, a
    30 ms step; batch 32.
    """
    recorded = RECORDED_ALLREDUCE.get(kind)
    if recorded is not None:
        return recorded.read_bytes()
    step = {"wall_us": 30_000.0, "backward_start_us": 10_000.0, "backward_end_us": 25_000.0,
            "grad_ready_us": [24_000.0, 18_000.0, 13_000.0], "optimizer_us": [26_000.0, 2_000.0]}
    steps = [{**step, "index": i, "wall_us": 30_000.0 + 100.0 * (i % 3)} for i in range(20)]
    bundle = build_allreduce_bundle(kind, {"batch_size": 32, "model": "toy", "world_size": 1},
                                    [("a", 4_000_000), ("b", 2_000_000), ("c", 1_000_000)], steps,
                                    buckets=[[2, 1], [0]] if kind == "pytorch-ddp" else None)
    return encode_allreduce_bundle(bundle)

