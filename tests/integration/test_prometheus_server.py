"""A real Prometheus server scraping a running daemon: the target is up, a rate query gives the daemon's rate,
the alert rules load, and every query of the Grafana dashboard runs and names only metrics the daemon serves."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, scrape_text, wait_for
from thread_client import defaults
from thread_client.cli import build_daemon
from thread_client.config import DEFAULT_KEYS, Config
from tools.harness.prometheus_process import PrometheusProcess

pytestmark = pytest.mark.skipif(bool(PrometheusProcess.missing()), reason=PrometheusProcess.missing())

DASHBOARD = ROOT / "deploy" / "grafana" / "thread-client.json"
RATE_WINDOW = 10  # seconds: ten scrapes
# Grafana's own variables, as it would fill them against a 1 s scrape: every daemon, a rate interval of 4 scrapes.
GRAFANA_VARIABLES = {"$__rate_interval": "4s", "$instance": ".*"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every target of every panel, Grafana's variables filled in."""
    queries = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((panel["title"], expr))
    return queries


def most_accepted_per_second(window: float) -> float:
    """The most any ``window`` seconds can hold: every key's ring full at both edges (the reference limits: 20 per
    1.001 s), with a quarter more for Prometheus extrapolating a window's first and last scrapes to its edges."""
    return len(DEFAULT_KEYS) * defaults.RATE * (window / defaults.WINDOW + 1) / window * 1.25


@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_daemon_and_runs_every_dashboard_query(fast_server, tmp_path):
    config = Config(url=fast_server.url, graveyard=str(tmp_path / "g.jsonl"), metrics_port=0, load="saturate")
    with build_daemon(config) as daemon:
        with PrometheusProcess([f"127.0.0.1:{daemon.metrics_server.port}"], scrape_interval=1.0) as prometheus:
            wait_for(lambda: prometheus.query('up{job="thread-client"} == 1') != [], timeout=15)
            rate = f"rate(thread_client_accepted_total[{RATE_WINDOW}s])"
            wait_for(lambda: any(float(sample["value"][1]) > 0 for sample in prometheus.query(rate)), timeout=15)
            [sample] = prometheus.query(rate)
            assert 0 < float(sample["value"][1]) <= most_accepted_per_second(RATE_WINDOW)

            # A rule's health is "unknown" until its group's first evaluation (every second): waited for.
            wait_for(lambda: all(rule["health"] != "unknown"
                                 for rule in prometheus.api("rules")["groups"][0]["rules"]), timeout=15)
            [group] = prometheus.api("rules")["groups"]
            assert group["name"] == "thread-client" and len(group["rules"]) == 9
            assert all(rule["health"] == "ok" for rule in group["rules"]), group["rules"]

            # The series scraped, and the families the daemon declares without one yet (unmatched answers, by status).
            declared = re.findall(r"^# TYPE (\S+)", scrape_text(daemon.metrics_server.port), re.MULTILINE)
            served = set(prometheus.api("label/__name__/values")) | set(declared)
            for title, expr in dashboard_queries():
                prometheus.query(expr)  # PrometheusQueryError, with Prometheus's words, if it does not run
                named = set(re.findall(r"\bthread_client_\w+", expr))
                assert named <= served, f"{title}: {sorted(named - served)} are not served"
