"""Observed throughput from Prometheus (controller/pipeline/observed.py) and the refit settings' checks.

The adapter talks real HTTP to a stand-in for Prometheus' query API (fake_prometheus.py) or to
a bare socket server for answers Prometheus itself would not give; every bad answer or setting
must end in one error that names the problem, never a crash.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from advisor.controller.pipeline.observed import ObservedQueryError, PrometheusClient, observe, selector
from advisor.controller.pipeline.refit import RefitSettingsError, refit_config
from tests.controller.fake_prometheus import FakePrometheus, Pod
from tests.controller.harness import free_port, settings_for


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as p:
        yield p


def test_examples_per_second_is_summed_over_the_jobs_pods(prom: FakePrometheus) -> None:
    prom.jobs[("ml", "mnist")] = [Pod("mnist-worker-0", 40.0, 30), Pod("mnist-worker-1", 41.5, 29),
                                  Pod("mnist-chief-0", 39.0, 30)]
    prom.jobs[("ml", "other")] = [Pod("other-worker-0", 1000.0, 30)]  # another job: not counted
    point = observe(PrometheusClient(prom.url), "ml", "mnist", 3, window_s=600, at=1_000_000.0)
    assert point is not None
    # 40 + 41.5 + 39 = 120.5 examples/s; 30 + 29 + 30 = 89 samples from 3 pods
    assert (point.workers, point.examples_per_s, point.samples, point.series) == (3, 120.5, 89, 3)
    assert (point.window_s, point.at) == (600.0, 1_000_000.0)
    assert point.resets == 0
    # what was asked: the three queries over the job's series, at the given time
    sel = 'advisor_training_examples_total{job_namespace="ml",tfjob="mnist"}'
    assert [q["query"] for q in prom.queries] == [f"rate({sel}[600s])", f"count_over_time({sel}[600s])",
                                                  f"resets({sel}[600s])"]
    assert {q["time"] for q in prom.queries} == {"1000000.000"}


def test_counter_resets_in_the_window_are_summed_over_the_pods(prom: FakePrometheus) -> None:
    prom.jobs[("ml", "mnist")] = [Pod("mnist-worker-0", 40.0, 30, resets=2), Pod("mnist-worker-1", 41.0, 30, resets=1)]
    point = observe(PrometheusClient(prom.url), "ml", "mnist", 2, window_s=600, at=1e6)
    assert point is not None and point.resets == 3


def test_no_series_is_no_observation(prom: FakePrometheus) -> None:
    assert observe(PrometheusClient(prom.url), "ml", "silent", 2, window_s=60, at=1e6) is None


def test_prometheus_failing_is_an_error_that_says_so(prom: FakePrometheus) -> None:
    prom.status = 503
    with pytest.raises(ObservedQueryError, match="answered 503: the fake is down"):
        observe(PrometheusClient(prom.url), "ml", "mnist", 2, window_s=60, at=1e6)


def test_unreachable_prometheus_is_an_error_that_names_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ObservedQueryError, match=f"Prometheus at {url} cannot be reached"):
        observe(PrometheusClient(url, timeout_s=2), "ml", "mnist", 2, window_s=60, at=1e6)


def test_a_prometheus_that_does_not_answer_in_time_is_unreachable() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ObservedQueryError, match="cannot be reached: .*timed out"):
            PrometheusClient(url, timeout_s=0.2).query("up", 1e6)
    finally:
        listener.close()


class _Canned(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("body", "problem"), [
    (b"<html>proxy error</html>", "not JSON"),
    (b'{"status": "error", "error": "query timed out"}', "did not answer the query: query timed out"),
    (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "no instant vector"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}', "malformed sample"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]}}',
     "malformed sample"),
])
def test_answers_that_are_no_query_result_are_errors(body: bytes, problem: str) -> None:
    handler = type("Handler", (_Canned,), {"body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ObservedQueryError, match=problem):
            PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}").query("up", 1e6)
    finally:
        server.shutdown()
        server.server_close()


def test_a_nan_sample_carries_no_information_and_is_left_out() -> None:
    body = (b'{"status": "success", "data": {"resultType": "vector", "result": ['
            b'{"metric": {"pod": "a"}, "value": [1, "NaN"]}, {"metric": {"pod": "b"}, "value": [1, "2.5"]}]}}')
    handler = type("Handler", (_Canned,), {"body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}").query("up", 1e6) == [
            ({"pod": "b"}, 2.5)]
    finally:
        server.shutdown()
        server.server_close()


def test_label_values_are_quoted_for_promql() -> None:
    assert selector("ml", 'a"b\\c') == 'advisor_training_examples_total{job_namespace="ml",tfjob="a\\"b\\\\c"}'


def test_a_window_under_one_second_is_refused(prom: FakePrometheus) -> None:
    with pytest.raises(ObservedQueryError, match="at least 1 s"):
        observe(PrometheusClient(prom.url), "ml", "mnist", 2, window_s=0.5, at=1e6)


# --- the refit settings ------------------------------------------------------------------------------


def test_refit_is_off_by_default_and_reads_durations(tmp_path) -> None:
    assert refit_config(settings_for(tmp_path)) is None
    cfg = refit_config(settings_for(tmp_path, refit_enabled=True, refit_prometheus_url="http://prom:9090/",
                                    refit_min_observation_s="600s", refit_interval_s=1200, refit_tolerance="0.2"))
    assert cfg is not None
    assert (cfg.prometheus_url, cfg.min_observation_s, cfg.interval_s, cfg.tolerance) == (
        "http://prom:9090/", 600.0, 1200.0, 0.2)


@pytest.mark.parametrize(("overrides", "problem"), [
    ({"refit_prometheus_url": ""}, "refit_prometheus_url '' is not an http"),
    ({"refit_prometheus_url": "prometheus:9090"}, "refit_prometheus_url 'prometheus:9090' is not an http"),
    ({"refit_min_observation_s": 0}, "refit_min_observation_s must be a duration of at least 1 s"),
    ({"refit_interval_s": -60}, "refit_interval_s must be a duration of at least 1 s"),
    ({"refit_interval_s": "half an hour"}, "refit_interval_s: cannot read duration"),
    ({"refit_query_timeout_s": 0}, "refit_query_timeout_s must be a duration"),
    ({"refit_tolerance": 1.5}, r"refit_tolerance must be a fraction in \[0, 1\)"),
    ({"refit_tolerance": "some"}, "refit_tolerance must be a number"),
])
def test_a_refit_setting_that_cannot_work_loads_but_names_the_problem(tmp_path, overrides, problem) -> None:
    # the controller starts with it (load_settings does not refuse it); the refit reports it
    settings = settings_for(tmp_path, refit_enabled=True, **{"refit_prometheus_url": "http://prom:9090", **overrides})
    with pytest.raises(RefitSettingsError, match=problem):
        refit_config(settings)


def test_check_config_names_a_refit_setting_that_cannot_work_and_exits_2(tmp_path, capsys) -> None:
    from advisor.cli import main

    config = tmp_path / "config.yaml"
    config.write_text("refit_enabled: true\nrefit_prometheus_url: http://prom:9090\nrefit_interval_s: -1\n")
    assert main(["controller", "--config", str(config), "--check-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refit_interval_s must be a duration of at least 1 s" in err[0]
    config.write_text("refit_enabled: true\nrefit_prometheus_url: http://prom:9090\n")
    assert main(["controller", "--config", str(config), "--check-config"]) == 0
