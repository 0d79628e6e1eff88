"""The daemon end to end against the real reference server at its default latencies."""

from __future__ import annotations

import json
import signal
import socket
import subprocess

import pytest

from conftest import ROOT, assert_clean_run, read_summary, run_client, wait_for
from tools.harness.client_process import GRAVEYARD_FILE, client_command
from thread_client.config import Config
from thread_client.cli import build_daemon


@pytest.mark.slow
@pytest.mark.parametrize("threads_per_key", ["1", "2"])
def test_daemon_run_against_the_reference_server(start_server, tmp_path, threads_per_key):
    server = start_server()
    result, summary = run_client(server, tmp_path, "--duration", "4", "--threads-per-key", threads_per_key)
    assert result.returncode == 0, result.stderr
    assert_clean_run(summary, server.stats())
    assert summary["stop_reason"] == "duration reached"
    assert "accepted" in result.stdout and "created" in result.stdout  # metrics blocks and the summary were printed
    graveyard = (tmp_path / GRAVEYARD_FILE).read_text().splitlines()
    assert len(graveyard) == summary["graveyard"]
    assert all(json.loads(line)["reason"] == "shutdown" for line in graveyard)


@pytest.mark.slow
def test_far_from_the_exchange_the_order_rule_bets_nonces_never_a_strike_and_loses_nothing(start_server, tmp_path):
    # 0-150 ms each way: the learnt gap lets some sends be overtaken inside the server (a 400 that cost only
    # its slot, sent again under a fresh nonce); the window rule still allows no strike.
    server = start_server("--max-latency-ms", "150", "--seed", "7")
    source = tmp_path / "in.jsonl"
    ids = [f"far-{n}" for n in range(1, 601)]
    source.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    result, summary = run_client(server, tmp_path, "--source", str(source), "--duration", "90", timeout=120)
    assert result.returncode == 0, result.stdout
    assert summary["stop_reason"].startswith("input done") and summary["identity_holds"]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(ids) and {r["outcome"] for r in records} == {"accepted"}
    totals = server.stats()["totals"]
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0
    assert set(server.accepted()) == set(ids) and set(server.accepted().values()) == {1}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_the_daemon_cleanly(start_server, client_process, tmp_path, sig):
    server = start_server("--max-latency-ms", "5")
    process = client_process(server, tmp_path)
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 100)
    process.send_signal(sig)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    summary = read_summary(tmp_path)
    assert summary["stop_reason"] == sig.name
    assert_clean_run(summary, server.stats())
    assert "created" in out and "==" in out


def test_a_sigterm_while_the_daemon_is_still_starting_is_the_same_clean_stop(tmp_path):
    """Opening the keys can take long (a hold for the last run's sends is logged there, the server's clock is
    read): a SIGTERM then met the default handler, the process died (-15) and no summary was written. The start
    is caught here reading the server's clock (a fixed-window profile) from a listener that never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        process = subprocess.Popen(
            client_command(url, tmp_path, "--profile", "examples/profiles/fixed-window-weights.toml"),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            connection, _ = listener.accept()  # the daemon asks the server's clock: it is being built
            process.send_signal(signal.SIGTERM)
            connection.close()  # the clock read fails, the start goes on (and nothing more is let in)
            out, _ = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 0, out
    assert read_summary(tmp_path)["stop_reason"] == "SIGTERM"


def test_daemon_in_process_joins_every_thread(fast_server, tmp_path):
    config = Config(url=fast_server.url, duration=1.5, graveyard=str(tmp_path / "g.jsonl"), load="saturate",
                    metrics_interval=0.5)
    daemon = build_daemon(config)
    summary = daemon.run()
    assert all(not thread.is_alive() for thread in daemon.threads)
    assert summary.counts.balanced and summary.exit_code == 0
    assert daemon.shutdown() is summary  # idempotent
    assert fast_server.stats()["totals"]["accepted"] == summary.counts.accepted
