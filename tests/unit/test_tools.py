"""The measuring tools' arithmetic: bench windows, keys and verdicts, the soak's slope."""

from __future__ import annotations

import dataclasses

import pytest

from thread_client.config import DEFAULT_KEYS
from tools.bench import BenchRow, bench_keys, format_table, verdicts, window_percentile
from tools.soak import slope_per_minute


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


def test_soak_slope_is_a_least_squares_fit():
    assert slope_per_minute([(0, 100), (60, 110), (120, 120)]) == pytest.approx(10)
    assert slope_per_minute([(0, 5), (30, 5)]) == 0
    assert slope_per_minute([(0, 5)]) == 0


def bench_row(mode: str, accepted_per_s: float) -> BenchRow:
    numbers = {f.name: 0 for f in dataclasses.fields(BenchRow)}
    numbers.update(mode=mode, accepted_per_s=accepted_per_s, identity_holds=True, per_second=[], ratio_ceiling=1.0)
    return BenchRow(**numbers)


def test_the_jsonl_row_must_stay_within_one_percent_of_saturate():
    saturate = bench_row("saturate", 93.0)
    close, slow = bench_row("jsonl", 92.2), bench_row("jsonl", 91.5)
    assert "  [met] jsonl: within 1% of the saturate row's accepted/s" in verdicts(close, [saturate, close])
    assert "  [MISSED] jsonl: within 1% of the saturate row's accepted/s" in verdicts(slow, [saturate, slow])
    assert not any("saturate row" in line for line in verdicts(close, [close]))  # nothing to compare with


def test_a_real_limiter_s_row_is_judged_against_its_rate():
    fast = dataclasses.replace(bench_row("nginx", 96.0), keys=5, ratio_nominal=0.96)
    slow = dataclasses.replace(bench_row("flask-limiter", 94.0), keys=5, ratio_nominal=0.94)
    assert "  [met] nginx: >= 0.95 of the rate (20/s per key)" in verdicts(fast, [fast])
    assert "  [MISSED] flask-limiter: >= 0.95 of the rate (20/s per key)" in verdicts(slow, [slow])


def test_the_proxy_s_half_close_ends_the_way_to_the_client_and_keeps_the_way_up():
    """What the campaign's proxy-half-close plays: the client reads the end of its connection, while what
    it had sent still reaches the server."""
    import socket

    from tools.harness.tcp_proxy import TcpProxy

    with socket.create_server(("127.0.0.1", 0)) as server, TcpProxy(server.getsockname()[1]) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        upstream, _ = server.accept()
        upstream.settimeout(5)
        client.sendall(b"before")
        assert upstream.recv(6) == b"before"
        proxy.half_close()
        assert client.recv(10) == b""  # the end of the connection, no answer
        client.sendall(b"after")
        assert upstream.recv(5) == b"after"
        client.close()
        upstream.close()
