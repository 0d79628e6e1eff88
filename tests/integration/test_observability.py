"""The Prometheus endpoint and the log file during real runs."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, run_client, wait_for
from thread_client.config import DEFAULT_KEYS, Config
from thread_client.cli import build_daemon
from tools.harness.client_process import client_command


def test_metrics_endpoint_is_scraped_during_a_run(fast_server, tmp_path):
    config = Config(url=fast_server.url, graveyard=str(tmp_path / "g.jsonl"), metrics_port=0, load="saturate")
    with build_daemon(config) as daemon:
        port = daemon.metrics_server.port
        wait_for(lambda: daemon.queues.counts().accepted >= 50)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in ("created", "accepted", "retries", "expired", "dead_letters", "strikes", "bans"):
        assert families[f"thread_client_{name}"].type == "counter"
    assert families["thread_client_accepted"].samples[0].value >= 50
    attempts = families["thread_client_attempts"].samples
    assert {s.labels["key"] for s in attempts} <= {f"{k[:4]}...{k[-4:]}" for k in DEFAULT_KEYS}
    assert all(k not in text for k in DEFAULT_KEYS)  # keys only ever masked
    queues = {s.labels["queue"] for s in families["thread_client_queued_requests"].samples}
    assert queues == {"main", "dlq"}
    for gauge in ("in_flight_requests", "key_state", "limit_remaining", "queue_oldest_age_seconds",
                  "last_accepted_timestamp_seconds", "limiter_order_latency_seconds", "limiter_window_seconds"):
        assert families[f"thread_client_{gauge}"].type == "gauge"
    e2e = families["thread_client_end_to_end_latency_seconds"]
    assert e2e.type == "histogram"
    count = next(s.value for s in e2e.samples if s.name.endswith("_count"))
    buckets = [s.value for s in e2e.samples if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == count >= 50


@pytest.mark.slow
def test_log_file_rotates_and_per_request_lines_need_debug(fast_server, tmp_path):
    log = tmp_path / "client.log"
    result, _ = run_client(fast_server, tmp_path, "--duration", "2", "--log-level", "DEBUG", "--log-file", str(log),
                           "--log-max-bytes", "4000", "--log-backups", "2")
    assert result.returncode == 0
    files = sorted(path.name for path in tmp_path.glob("client.log*"))
    assert files == ["client.log", "client.log.1", "client.log.2"]
    assert all(path.stat().st_size <= 4000 for path in tmp_path.glob("client.log*"))
    assert "nonce" in log.read_text()  # per-request lines at DEBUG

    quiet = tmp_path / "quiet"
    quiet.mkdir()
    result, summary = run_client(fast_server, quiet, "--duration", "2", "--log-file", str(quiet / "client.log"))
    text = (quiet / "client.log").read_text()
    assert summary["accepted"] > 0 and " nonce " not in text and "accepted" in text  # metrics block, no per-request lines


def test_a_summary_file_the_disk_refuses_at_the_end_is_one_error_line_and_exit_1(fast_server, tmp_path):
    # The path passed the start-up check (it exists and is writable), then its write failed: a traceback, exit 1.
    command = client_command(fast_server.url, tmp_path, "--duration", "1", "--summary-json", "/proc/self/mem")
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == ("thread-client: error: --summary-json /proc/self/mem: "
                                                      "Input/output error (the summary is above)")
