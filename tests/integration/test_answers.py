"""The answer table's starred rows, URLs, kept connections, HTTPS and outages, against the real reference server."""

from __future__ import annotations

import json
import select
import signal
import time

import pytest

from conftest import KEY, KEYS, assert_clean_run, read_summary, run_client, scrape_text, wait_for
from thread_client import defaults
from thread_client.limits.keys import mask
from tools.harness.processes import free_port
from tools.harness.client_process import GRAVEYARD_FILE
from tools.harness.tls import tls_setup


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " ERROR " in line]


def graveyard_reasons(workdir) -> set[str]:
    path = workdir / GRAVEYARD_FILE
    return {json.loads(line)["reason"] for line in path.read_text().splitlines()} if path.exists() else set()


# -- the starred rows ----------------------------------------------------------------------

def test_a_403_retires_the_key_and_the_others_carry_its_work(start_server, tmp_path):
    server = start_server("--max-latency-ms", "5", "--forbidden-keys", KEYS[2])
    result, summary = run_client(server, tmp_path, "--duration", "3")
    assert result.returncode == 0, result.stdout
    assert summary["retired_keys"] == {mask(KEYS[2]): "forbidden"}
    loud = error_lines(result.stdout)
    assert len(loud) == 1 and mask(KEYS[2]) in loud[0] and "the other 4 keys carry its work" in loud[0]
    stats = server.stats()
    assert all(stats["keys"][key]["accepted"] > 0 for key in KEYS if key != KEYS[2])
    assert summary["identity_holds"] and summary["accepted"] == stats["totals"]["accepted"]


def test_a_wrong_endpoint_stops_at_once_with_exit_2_and_fails_no_request(start_server, tmp_path):
    server = start_server("--max-latency-ms", "2")
    wrong = f"{server.url}/v2"
    result, summary = run_client(server, tmp_path, "--url", wrong, "--duration", "60")
    assert result.returncode == 2, result.stdout
    loud = error_lines(result.stdout)
    assert len(loud) == 1 and f"{wrong}/api/request" in loud[0] and "404" in loud[0] and "--url" in loud[0]
    assert summary["stop_reason"] == "endpoint not found" and summary["duration_s"] < 10
    assert summary["identity_holds"] and summary["retries"] == 0
    assert graveyard_reasons(tmp_path) == {"shutdown: endpoint not found"}


def test_a_proxys_html_429_is_a_strike_that_holds_the_key(start_server, tmp_path):
    server = start_server("--max-latency-ms", "5", "--proxy-429-rate", "0.03")
    result, summary = run_client(server, tmp_path, "--duration", "3")
    assert result.returncode == 0, result.stdout
    stats = server.stats()
    assert stats["totals"]["proxy_429"] == summary["rate_limited"] > 0
    assert stats["totals"]["rate_limited"] == 0 and stats["totals"]["blocked"] == 0  # the exchange saw no strike
    assert summary["retired_keys"] == {}
    assert any("429 rate limited" in line and "held back" in line for line in error_lines(result.stdout))
    assert summary["identity_holds"] and summary["accepted"] == stats["totals"]["accepted"]


# -- URLs and kept connections -----------------------------------------------------------------

def test_the_full_endpoint_url_works_like_the_base(start_server, tmp_path):
    server = start_server("--max-latency-ms", "2")
    result, summary = run_client(server, tmp_path, "--url", f"{server.url}/api/request", "--duration", "2")
    assert result.returncode == 0
    assert f"against {server.url}/api/request" in result.stdout
    assert "5 keys (the reference server's public test keys) x 6 threads" in result.stdout
    assert_clean_run(summary, server.stats())


@pytest.mark.slow
def test_connections_the_server_closes_while_idle_cost_no_retry(start_server, tmp_path):
    # Two sends per key a second: every kept connection sits idle longer than the server keeps it. The server
    # says so (Keep-Alive: timeout=0.3), so the client replaces each one before sending on it: a server's close
    # can never cross a send (that race, with a server that says nothing, is forced in test_transport.py).
    server = start_server("--max-latency-ms", "2", "--idle-timeout", "0.3", "--announce-idle-timeout")
    result, summary = run_client(server, tmp_path, "--rate", "2", "--threads-per-key", "2", "--load", "saturate",
                                 "--duration", "4")
    assert result.returncode == 0, result.stdout
    assert summary["stale_connections"] >= 5
    assert summary["retries"] == 0 and summary["ambiguous_attempts"] == 0
    assert set(summary["outcomes"]) <= {"accepted", "expired"}
    assert_clean_run(summary, server.stats())


def test_a_server_that_closes_every_connection_costs_a_reconnect_not_a_failure(start_server, tmp_path):
    # 'Connection: close' on every answer: the client connects afresh for each send and never reuses a closed
    # connection. One thread per key, so the only cost measured is the reconnect (with two, a slow accept
    # under load can let the second send's nonce overtake the first: the order rule's bet, not the close).
    server = start_server("--max-latency-ms", "2", "--close-every-answer")
    result, summary = run_client(server, tmp_path, "--threads-per-key", "1", "--duration", "3")
    assert result.returncode == 0, result.stdout
    assert set(summary["outcomes"]) <= {"accepted", "expired"}
    assert summary["retries"] == 0 and summary["stale_connections"] == 0 and summary["ambiguous_attempts"] == 0
    assert graveyard_reasons(tmp_path) <= {"shutdown"}  # only what waited in a queue when --duration ended
    assert_clean_run(summary, server.stats())


# -- HTTPS ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_https_with_a_private_ca(start_server, tmp_path):
    tls = tls_setup(tmp_path)
    server = start_server("--max-latency-ms", "2", *tls.server_args, ssl_context=tls.context)
    assert server.url.startswith("https://")
    result, summary = run_client(server, tmp_path, *tls.client_args, "--duration", "3")
    assert result.returncode == 0, result.stdout
    assert_clean_run(summary, server.stats())


def test_https_against_the_wrong_ca_is_an_outage_that_buries_nothing(start_server, tmp_path):
    (tmp_path / "server").mkdir()
    (tmp_path / "other").mkdir()
    tls, other_ca = tls_setup(tmp_path / "server"), tls_setup(tmp_path / "other")  # the other CA signed nothing here
    server = start_server("--max-latency-ms", "2", *tls.server_args, ssl_context=tls.context)
    result, summary = run_client(server, tmp_path, *other_ca.client_args, "--outage-after", "1", "--duration", "4")
    assert result.returncode == 4, result.stdout
    outage = [line for line in error_lines(result.stdout) if "outage" in line]
    assert len(outage) == 1 and "TLS error (certificate verify failed" in outage[0]
    assert summary["accepted"] == 0 and summary["identity_holds"]
    assert graveyard_reasons(tmp_path) <= {"shutdown"}


# -- outages -------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_server_never_up_is_named_and_nothing_is_buried_before_the_end(start_server, tmp_path):
    server = start_server("--max-latency-ms", "2")
    server.stop()
    result, summary = run_client(server, tmp_path, "--duration", "8")
    assert result.returncode == 4, result.stdout
    outage = [line for line in error_lines(result.stdout) if "outage" in line]
    assert len(outage) == 1 and "connection refused" in outage[0]
    assert "never reached the exchange" in result.stdout
    assert summary["accepted"] == 0 and summary["retries"] == 0 and summary["identity_holds"]
    assert graveyard_reasons(tmp_path) <= {"shutdown"}


@pytest.mark.slow
def test_a_ten_second_outage_mid_run_buries_nothing_and_full_speed_resumes(start_server, client_process, tmp_path):
    server = start_server("--max-latency-ms", "5")
    metrics_port = free_port()
    client = client_process(server, tmp_path, "--metrics-port", str(metrics_port))
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 100)
    server.stop()
    down_at = time.monotonic()
    wait_for(lambda: "thread_client_outage 1.0" in scrape_text(metrics_port), timeout=20)
    time.sleep(max(0.0, down_at + 10 - time.monotonic()))  # the scenario: ten seconds without the exchange
    server.start()
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 100)
    assert "thread_client_outage 0.0" in scrape_text(metrics_port)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    summary = read_summary(tmp_path)
    # Only the requests in flight when the server died spent a retry, one per worker thread at most (a send
    # refused costs none, nor does one the outage leaves unanswered): ten seconds of probes spent nothing.
    assert summary["identity_holds"] and summary["retries"] <= len(KEYS) * defaults.THREADS_PER_KEY
    assert graveyard_reasons(tmp_path) <= {"shutdown"}
    assert "connection refused" in out and "answers again after an outage" in out


def test_a_tls_connection_opened_ahead_of_its_first_send_carries_it_unreplaced(start_server, tmp_path):
    """TLS 1.3 session tickets wait unread on a connection opened before the permit: they read as "closed by
    the server", and the connection was replaced after the nonce had been drawn (a later nonce of the key
    could leave first; two handshakes per connection; a stale connection counted each time)."""
    from thread_client.io.transport import HttpTransport, tls_context

    tls = tls_setup(tmp_path)
    server = start_server("--max-latency-ms", "0", *tls.server_args, ssl_context=tls.context)
    transport = HttpTransport(f"{server.url}/api/request", KEY, ssl_context=tls_context(tls.client_args[1]))
    try:
        for nonce in range(1, 4):
            transport.connect()
            opened = transport._connection.sock
            wait_for(lambda: select.select([opened], [], [], 0)[0] != [])  # the tickets have come
            answer = transport.send(nonce, f"r{nonce}")
            assert answer.status == 200 and not answer.replaced_stale
            assert transport._connection.sock is opened
            transport.close()
    finally:
        transport.close()
