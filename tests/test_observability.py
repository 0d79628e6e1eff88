"""The Prometheus endpoint during a real run, and the bench's window arithmetic."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import run_client, wait_for
from thread_client.bench import bench_keys, format_table, window_percentile
from thread_client.config import DEFAULT_KEYS, Config
from thread_client.daemon import Daemon


def test_metrics_endpoint_is_scraped_during_a_run(fast_server, tmp_path):
    config = Config(url=fast_server.url, graveyard=str(tmp_path / "g.jsonl"), metrics_port=0, load="saturate")
    with Daemon(config) as daemon:
        port = daemon.metrics_server.port
        wait_for(lambda: daemon.queues.counts().accepted >= 50)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in ("created", "accepted", "retried", "expired", "graveyard"):
        assert families[f"thread_client_{name}"].type == "counter"
    assert families["thread_client_accepted"].samples[0].value >= 50
    attempts = families["thread_client_attempts"].samples
    assert {s.labels["key"] for s in attempts} <= {f"{k[:4]}...{k[-4:]}" for k in DEFAULT_KEYS}
    assert all(k not in text for k in DEFAULT_KEYS)  # keys only ever masked
    queues = {s.labels["queue"] for s in families["thread_client_queue_size"].samples}
    assert queues == {"main", "dlq"}
    for gauge in ("in_flight", "blocked_keys", "limiter_order_latency_seconds", "limiter_window_seconds"):
        assert families[f"thread_client_{gauge}"].type == "gauge"
    e2e = families["thread_client_end_to_end_latency_seconds"]
    assert e2e.type == "histogram"
    count = next(s.value for s in e2e.samples if s.name.endswith("_count"))
    buckets = [s.value for s in e2e.samples if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == count >= 50


def test_window_percentile_interpolates_between_scrapes():
    before = [(0.1, 0.0), (0.2, 0.0), (float("inf"), 0.0)]
    after = [(0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0)]
    assert window_percentile(before, after, 50) == pytest.approx(100.0)
    assert window_percentile(before, after, 75) == pytest.approx(150.0)
    assert window_percentile(after, after, 99) == 0.0


def test_bench_keys_are_deterministic_and_distinct():
    assert bench_keys(5) == DEFAULT_KEYS
    twenty = bench_keys(20)
    assert len(set(twenty)) == 20 and twenty == bench_keys(20) and all(len(k) == 32 for k in twenty)
    assert "mode" in format_table([]).splitlines()[0]


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


def test_soak_slope_is_a_least_squares_fit():
    from thread_client.soak import slope_per_minute

    assert slope_per_minute([(0, 100), (60, 110), (120, 120)]) == pytest.approx(10)
    assert slope_per_minute([(0, 5), (30, 5)]) == 0
    assert slope_per_minute([(0, 5)]) == 0
