"""The daemon end to end against the real reference server at its default latencies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from thread_client.config import Config
from thread_client.daemon import Daemon


def run_client(server, tmp_path, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict]:
    summary = tmp_path / "summary.json"
    command = [
        sys.executable, "-m", "thread_client", "--url", server.url, "--summary-json", str(summary),
        "--graveyard", str(tmp_path / "graveyard.jsonl"), "--metrics-interval", "1", *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    return result, json.loads(summary.read_text())


def assert_clean_run(summary: dict, server_stats: dict) -> None:
    totals = server_stats["totals"]
    assert summary["identity_holds"]
    assert summary["created"] == (
        summary["accepted"] + summary["graveyard"] + summary["main_queue"] + summary["dlq"] + summary["in_flight"]
    )
    assert summary["main_queue"] == summary["dlq"] == summary["in_flight"] == 0
    assert summary["threads_died"] == [] and summary["threads_alive"] == []
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0
    assert totals["invalid_nonce"] * 1000 <= max(totals["accepted"], 1000)
    assert totals["accepted"] == summary["accepted"] > 0


@pytest.mark.parametrize("threads_per_key", ["1", "2"])
def test_daemon_run_against_the_reference_server(start_server, tmp_path, threads_per_key):
    server = start_server()
    result, summary = run_client(server, tmp_path, "--duration", "4", "--threads-per-key", threads_per_key)
    assert result.returncode == 0, result.stderr
    assert_clean_run(summary, server.stats())
    assert summary["stop_reason"] == "duration reached"
    assert "accepted" in result.stdout and "created" in result.stdout  # metrics blocks and the summary were printed
    graveyard = (tmp_path / "graveyard.jsonl").read_text().splitlines()
    assert len(graveyard) == summary["graveyard"]
    assert all(json.loads(line)["reason"] == "shutdown" for line in graveyard)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_the_daemon_cleanly(start_server, tmp_path, sig):
    server = start_server("--max-latency-ms", "5")
    summary_path = tmp_path / "summary.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "thread_client", "--url", server.url, "--summary-json", str(summary_path),
         "--graveyard", str(tmp_path / "g.jsonl")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while server.stats()["totals"]["accepted"] < 100 and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for a condition (100 accepted), bounded by the deadline
    process.send_signal(sig)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    summary = json.loads(summary_path.read_text())
    assert summary["stop_reason"] == sig.name
    assert_clean_run(summary, server.stats())
    assert "created" in out and "==" in out


def test_daemon_in_process_joins_every_thread(fast_server, tmp_path):
    config = Config(url=fast_server.url, duration=1.5, graveyard=str(tmp_path / "g.jsonl"), load="saturate",
                    metrics_interval=0.5)
    daemon = Daemon(config)
    summary = daemon.run()
    assert all(not thread.is_alive() for thread in daemon.threads)
    assert summary.counts.balanced and summary.exit_code == 0
    assert daemon.shutdown() is summary  # idempotent
    assert fast_server.stats()["totals"]["accepted"] == summary.counts.accepted
