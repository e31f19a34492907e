"""The Grafana dashboard and the alerting rules query only what the controller exports, and every
dashboard query returns data from a real Prometheus scraping the controller's /metrics."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import promql
from tests.deploy.helm_render import CHART
from tests.deploy.prometheus_harness import (
    EXAMPLE_JOBS,
    PrometheusServer,
    activity,
    finite_values,
    populate_like_controller,
    prometheus_binary,
    serve_metrics,
)

DASHBOARD = CHART / "dashboards" / "advisor.json"
RULES = CHART / "alerts" / "advisor-rules.yaml"
RULE_TESTS = Path(__file__).with_name("advisor-rules.promtest.yaml")
# Labels Prometheus adds or PromQL defines, beside the controller's own.
IMPLICIT_LABELS = {"job", "instance", "le", "__name__"}
# Grafana's variables, set to what a user selecting everything would send.
VARIABLES = {
    "namespace": "|".join(sorted({j.namespace for j in EXAMPLE_JOBS})),
    "tfjob": "|".join(sorted({j.name for j in EXAMPLE_JOBS})),
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}


def metrics_module() -> Any:
    return pytest.importorskip("advisor.controller.metrics", reason="prometheus-client is not installed")


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str
    instant: bool


def dashboard_queries(doc: dict[str, Any] | None = None) -> list[Query]:
    doc = doc or dashboard()
    return [
        Query(p["title"], t["refId"], t["expr"], bool(t.get("instant")))
        for p in doc["panels"] if p["type"] != "row" for t in p["targets"]
    ]


def variable_queries(doc: dict[str, Any] | None = None) -> list[str]:
    doc = doc or dashboard()
    return [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]


def alert_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(r.get("alert") or r["record"], r["expr"]) for g in groups for r in g["rules"]]


def known_labels() -> set[str]:
    metrics = metrics_module().Metrics()
    labels = set(IMPLICIT_LABELS)
    for family in metrics.registry.collect():
        labels |= {name for sample in family.samples for name in sample.labels}
    for metric in vars(metrics).values():
        labels |= set(getattr(metric, "_labelnames", ()))
    return labels


# --- static checks ----------------------------------------------------------------------------


def test_dashboard_is_a_grafana_dashboard() -> None:
    doc = dashboard()
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel.get("description"), f"panel {panel['title']!r} needs a description"
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
    titles = " ".join(p["title"].lower() for p in doc["panels"])
    for subject in ("throughput", "recommended", "saturation", "cost", "profiling", "latency", "errors"):
        assert subject in titles, f"no panel about {subject}"


def test_every_query_uses_only_exported_metrics_and_labels() -> None:
    exported = metrics_module().metric_names()
    labels = known_labels()
    exprs = [(q.panel, q.expr) for q in dashboard_queries()] + [(name, e) for name, e in alert_exprs()]
    exprs += [("variable", promql.label_values_query(q)[0] or "") for q in variable_queries()]
    used: set[str] = set()
    for where, expr in exprs:
        found = promql.names(promql.substitute(expr, VARIABLES))
        assert found.metrics <= exported, f"{where}: {sorted(found.metrics - exported)} not exported by the controller"
        assert found.labels <= labels, f"{where}: labels {sorted(found.labels - labels)} exist on no metric"
        used |= found.metrics
    # Every per-job series the controller exports is on the dashboard.
    per_job = {n for n in exported if n.startswith(("advisor_predicted", "advisor_recommended", "advisor_saturation",
                                                     "advisor_current", "advisor_job_phase"))}
    assert per_job <= used, f"not shown: {sorted(per_job - used)}"


@pytest.mark.parametrize(
    ("expr", "metrics", "labels"),
    [
        # Aggregation with a label list before the argument; a range; a function.
        ("sum by (le, backend) (rate(m_bucket[5m]))", {"m_bucket"}, {"le", "backend"}),
        # Matching modifiers, offset with a bare duration, keywords.
        ("a offset 5m > on (ns) group_left b or vector(0)", {"a", "b"}, {"ns"}),
        # __name__ matcher, regex matchers, label list after the argument.
        ('sum(rate({__name__="c_total", x=~"y|z"}[1m])) by (w)', {"c_total"}, {"__name__", "x", "w"}),
        # Numbers in exponent form and `bool` are not metrics.
        ("histogram_quantile(0.95, h) > bool 1e3", {"h"}, set()),
        # Grafana variables are substituted before reading.
        ('g{tfjob=~"$tfjob"}[$__rate_interval]', {"g"}, {"tfjob"}),
    ],
)
def test_promql_reader(expr: str, metrics: set[str], labels: set[str]) -> None:
    found = promql.names(promql.substitute(expr, VARIABLES))
    assert (found.metrics, found.labels) == (metrics, labels)


def test_promql_reader_rejects_unknown_variables_and_bad_text() -> None:
    with pytest.raises(KeyError, match=r"\$cluster"):
        promql.substitute('up{cluster="$cluster"}', VARIABLES)
    with pytest.raises(promql.PromQLSyntaxError):
        promql.names("sum(up{a=\"b\")")


def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool is not installed (apt-get install -y --no-install-recommends prometheus)")
    return exe


def test_promtool_checks_the_alerting_rules() -> None:
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(alert_exprs())} rules found" in run.stdout


def test_alerting_rules_fire_when_they_should() -> None:
    """promtool's rule unit tests: each alert fires on the series that should trigger it, and not before."""
    run = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                         timeout=60, cwd=RULE_TESTS.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    assert tested == {name for name, _ in alert_exprs()}, "every alert needs a unit test"


# --- a real Prometheus ------------------------------------------------------------------------


@dataclass
class Scraped:
    prom: PrometheusServer
    at: float  # a time just after the last scrape
    start: float  # a time just before the first


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    """Prometheus scraping the controller's /metrics: state set, then two rounds of activity
    between scrapes so rates and histogram quantiles have something to show."""
    if prometheus_binary() is None:
        pytest.skip("the prometheus server is not installed (apt-get install -y --no-install-recommends prometheus)")
    metrics = metrics_module().Metrics()
    populate_like_controller(metrics)
    activity(metrics, 0)
    workdir = tmp_path_factory.mktemp("prometheus")
    with serve_metrics(metrics) as target, PrometheusServer(workdir, target, rule_files=[RULES]) as prom:
        start = time.time()
        prom.wait_for_scrapes(1)
        for round_ in (1, 2):
            activity(metrics, round_)
            prom.wait_for_scrapes(1)
        yield Scraped(prom, time.time(), start)


def test_every_dashboard_query_returns_data(scraped: Scraped) -> None:
    empty = []
    for q in dashboard_queries():
        expr = promql.substitute(q.expr, VARIABLES)
        values = finite_values(scraped.prom.query(expr, at=scraped.at))
        if not q.instant:
            values += finite_values(scraped.prom.query_range(expr, scraped.start, scraped.at, 1))
        if not values:
            empty.append(f"{q.panel} [{q.ref}]: {expr}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_template_variables_list_the_jobs(scraped: Scraped) -> None:
    namespace_query, tfjob_query = variable_queries()
    selector, label = promql.label_values_query(namespace_query)
    assert sorted(scraped.prom.label_values(label, selector)) == sorted({j.namespace for j in EXAMPLE_JOBS})
    selector, label = promql.label_values_query(promql.substitute(tfjob_query, VARIABLES))
    assert sorted(scraped.prom.label_values(label, selector)) == sorted(j.name for j in EXAMPLE_JOBS)


def test_dashboard_shows_the_controller_values(scraped: Scraped) -> None:
    """Spot checks that a panel shows the number the controller set, not just some number."""
    prom, at = scraped.prom, scraped.at
    (watched,) = prom.query("max(advisor_watched_tfjobs)", at=at)
    assert float(watched["value"][1]) == len(EXAMPLE_JOBS)
    curve = prom.query('advisor_predicted_throughput_examples_per_second{tfjob="mlp-ps"}', at=at)
    by_w = {int(s["metric"]["workers"]): float(s["value"][1]) for s in curve}
    # mlp-ps: 1450 examples/s with one worker, linear up to W = 5, then +4 % of one worker per worker.
    assert by_w[1] == pytest.approx(1450.0) and by_w[5] == pytest.approx(5 * 1450.0)
    assert by_w[6] == pytest.approx((5 + 0.04) * 1450.0)
    phases = prom.query(f'max by (tfjob, phase) (advisor_job_phase{{tfjob=~"{VARIABLES["tfjob"]}"}} == 1)', at=at)
    assert {s["metric"]["tfjob"]: s["metric"]["phase"] for s in phases} == {j.name: j.phase for j in EXAMPLE_JOBS}


def test_prometheus_loads_and_evaluates_the_alerting_rules(scraped: Scraped) -> None:
    deadline = time.monotonic() + 10
    while True:
        rules = scraped.prom.rules()
        if all(r["health"] != "unknown" for r in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert {r["name"] for r in rules} == {name for name, _ in alert_exprs()}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]


def test_dashboard_renders_to_png(scraped: Scraped, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from tests.deploy.dashboard_png import render_dashboard

    out = render_dashboard(dashboard(), scraped.prom, tmp_path / "dashboard.png", VARIABLES,
                           start=scraped.start, end=scraped.at)
    assert out.stat().st_size > 20_000
