"""The transport's reading of URLs, Retry-After, and why no answer came (the kinds the worker acts on)."""

from __future__ import annotations

import email.utils
import socket

import pytest

from thread_client.errors import TransportError
from thread_client.io.transport import Transport, endpoint_of, parse_retry_after


@pytest.mark.parametrize("url, endpoint", [
    ("http://127.0.0.1:9999", "http://127.0.0.1:9999/api/request"),
    ("http://127.0.0.1:9999/", "http://127.0.0.1:9999/api/request"),
    ("http://127.0.0.1:9999/api/request", "http://127.0.0.1:9999/api/request"),
    ("https://ex.example/v2", "https://ex.example/v2/api/request"),
    ("https://ex.example/v2/api/request/", "https://ex.example/v2/api/request"),
])
def test_the_endpoint_is_found_from_a_base_or_a_full_url(url, endpoint):
    assert endpoint_of(url) == endpoint


def test_retry_after_in_seconds_or_as_an_http_date():
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    now = 1_800_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 90, usegmt=True), now=now) == pytest.approx(90)
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0.0
    for unreadable in (None, "", "soon", "inf", "nan", "Sun, 99 Foo 2026 00:00:00"):
        assert parse_retry_after(unreadable) is None


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_connection_is_unreachable_nothing_sent():
    transport = Transport(f"http://127.0.0.1:{closed_port()}", "KEY", timeout=1)
    with pytest.raises(TransportError) as failed:
        transport.send(1, "1")
    assert (failed.value.kind, failed.value.detail) == ("unreachable", "connection refused")


def test_a_name_that_does_not_resolve_is_unreachable(monkeypatch):
    # No name server may be asked from here, so the resolver's answer is played back.
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_such_name)
    transport = Transport("http://nonexistent.invalid", "KEY", timeout=1)
    with pytest.raises(TransportError) as failed:
        transport.send(1, "1")
    assert failed.value.kind == "unreachable" and failed.value.detail.startswith("name not resolved")


def test_no_answer_after_the_request_was_written_is_a_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts (in the kernel) and never answers
        transport = Transport(f"http://127.0.0.1:{silent.getsockname()[1]}", "KEY", timeout=0.2)
        with pytest.raises(TransportError) as failed:
            transport.send(1, "1")
    assert failed.value.kind == "timeout"
