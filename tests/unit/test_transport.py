"""The transport's reading of URLs, Retry-After, and why no answer came (the kinds the worker acts on)."""

from __future__ import annotations

import email.utils
import math
import socket
import threading

import pytest

from thread_client.errors import AnswerTimedOut, ConnectFailed, ResetAfterSend, SendFenced, StaleConnection
from thread_client.io.transport import HttpTransport, endpoint_of, idle_limit, parse_retry_after
from thread_client.policy.retry_time import PAST_TIME_PAUSE


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
    # A date our clock has passed: the server's clock is behind ours; read as 0 it would be asked again at once.
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now=now) == PAST_TIME_PAUSE
    for unreadable in (None, "", "soon", "inf", "nan", "Sun, 99 Foo 2026 00:00:00",
                       "Fri, 31 Dec 99999999999999999999 23:59:59 GMT"):  # a year no clock can hold
        assert parse_retry_after(unreadable) is None


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_connection_is_unreachable_nothing_sent():
    transport = HttpTransport(f"http://127.0.0.1:{closed_port()}", "KEY", timeout=1)
    with pytest.raises(ConnectFailed) as failed:
        transport.send(1, "1")
    assert failed.value.detail == "connection refused"


def test_a_name_that_does_not_resolve_is_unreachable(monkeypatch):
    # No name server may be asked from here, so the resolver's answer is played back.
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_such_name)
    transport = HttpTransport("http://nonexistent.invalid", "KEY", timeout=1)
    with pytest.raises(ConnectFailed) as failed:
        transport.send(1, "1")
    assert failed.value.detail.startswith("name not resolved")


def test_no_answer_after_the_request_was_written_is_a_timeout_that_hands_over_its_open_connection():
    """A late answer on the socket a request went out on is the one sign a frozen server read it: the
    timeout hands that socket over open, and the transport's next send makes a fresh one."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts (in the kernel) and never answers
        transport = HttpTransport(f"http://127.0.0.1:{silent.getsockname()[1]}", "KEY", timeout=0.2)
        with pytest.raises(AnswerTimedOut) as timed_out:
            transport.send(1, "1")
        handed_over = timed_out.value.connection
        assert handed_over is not None and handed_over.fileno() >= 0
        server_side, _ = silent.accept()
        with server_side, handed_over:
            server_side.sendall(b"HTTP/1.1 200 OK\r\n")  # the late answer reaches the handed-over socket
            assert handed_over.recv(64).startswith(b"HTTP/1.1 200")
            with pytest.raises(AnswerTimedOut) as again:
                transport.send(2, "2")
            assert again.value.connection is not handed_over
            again.value.connection.close()


def test_on_sent_is_told_once_the_request_is_written_before_its_answer_is_read():
    """The key's next nonce may be drawn once this request's bytes left (``on_sent``), not only once its answer
    came: told on a silent server, after the request reached it and before any answer."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        transport = HttpTransport(f"http://127.0.0.1:{silent.getsockname()[1]}", "KEY", timeout=0.2)
        accepted: list[socket.socket] = []

        def arrived() -> bytes:
            """What the server side has received so far; it stays open and silent."""
            accepted.append(silent.accept()[0])
            return accepted[0].recv(4096)

        told = []
        with pytest.raises(AnswerTimedOut) as timed_out:
            transport.send(1, "1", on_sent=lambda: told.append(b"nonce=1" in arrived()))
        timed_out.value.connection.close()
        accepted[0].close()
    assert told == [True]


class ScriptedServer:
    """A one-thread HTTP server on a free loopback port that plays a script, one step per request
    read: ``("answer", headers)`` answers 200 OK and keeps the connection; ``("close", None)``
    closes it without an answer, as a server whose idle timeout fires just as the request arrives.
    Counts the connections it accepted, so a test can see a connection was replaced."""

    def __init__(self, *steps: tuple[str, dict[str, str] | None]) -> None:
        self._steps = list(steps)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, name="scripted-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._steps:
            connection, _ = self._listener.accept()
            self.connections += 1
            with connection:
                while self._steps and _read_request(connection):
                    action, headers = self._steps.pop(0)
                    if action == "close":
                        break
                    body = b'{"status": "OK"}'
                    head = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
                    connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body)

    def close(self) -> None:
        self._listener.close()
        self._thread.join(5)
        assert not self._thread.is_alive()


def _read_request(connection: socket.socket) -> bool:
    """Read one request head (these tests send no body); False once the client has closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            return False
        data += chunk
    return True


def test_a_send_never_leaves_once_the_key_may_not_send_even_after_the_connect():
    """The key's gate (a shared key's lease, by its own deadline) is the last step before the bytes leave:
    a worker paused after its own check, or a slow connect, sends nothing past the lease's end."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        transport = HttpTransport(f"http://127.0.0.1:{listening.getsockname()[1]}", "KEY", timeout=2,
                                  may_send=lambda: False)
        with pytest.raises(SendFenced):
            transport.send(1, "1")
        server_side, _ = listening.accept()  # connected: only the request itself was held back
        transport.close()
        with server_side:
            assert server_side.recv(4096) == b""  # the connection ended with no byte of a request


def test_a_close_that_crosses_a_send_on_a_kept_connection_is_stale_and_the_next_send_reconnects():
    # The race the idle check cannot see: the server closes only once the request has arrived.
    server = ScriptedServer(("answer", None), ("close", None), ("answer", None))
    transport = HttpTransport(f"http://127.0.0.1:{server.port}", "KEY", timeout=2)
    try:
        assert transport.send(1, "1").status == 200
        with pytest.raises(StaleConnection):  # the same nonce may be sent again: the server never answered
            transport.send(2, "2")
        answer = transport.send(2, "2")
        assert answer.status == 200 and server.connections == 2
    finally:
        transport.close()
        server.close()


def test_a_connection_idle_near_the_announced_keep_alive_timeout_is_replaced_before_the_send(clock):
    server = ScriptedServer(("answer", {"Keep-Alive": "timeout=2, max=100"}), ("answer", None), ("answer", None))
    transport = HttpTransport(f"http://127.0.0.1:{server.port}", "KEY", timeout=2, clock=clock)
    try:
        assert transport.send(1, "1").status == 200
        clock.advance(0.9)  # within the limit: half the announced timeout
        second = transport.send(2, "2")
        assert not second.replaced_stale and server.connections == 1
        clock.advance(1.0)  # idle for 1.0 s of an announced 2: the server may close it any moment now
        third = transport.send(3, "3")
        assert third.replaced_stale and server.connections == 2
    finally:
        transport.close()
        server.close()


def test_a_connection_opened_ahead_carries_the_next_send_and_a_close_under_it_is_no_stale_one():
    """The worker opens the connection before it draws the nonce; the send then goes out on it. It never
    carried a request, so a close under this one is no stale keep-alive: the request may have been read."""
    server = ScriptedServer(("close", None), ("answer", None))
    transport = HttpTransport(f"http://127.0.0.1:{server.port}", "KEY", timeout=2)
    try:
        transport.connect()
        transport.connect()  # open already: nothing more
        with pytest.raises(ResetAfterSend):
            transport.send(1, "1")
        assert server.connections == 1
        transport.connect()
        assert transport.send(2, "2").status == 200 and server.connections == 2
    finally:
        transport.close()
        server.close()


@pytest.mark.parametrize("header, limit", [
    (None, math.inf), ("", math.inf), ("timeout=5, max=100", 4.0), ("max=100, Timeout=0.3", 0.15),
    ("timeout=120", 119.0), ("timeout=soon", math.inf), ("timeout=0", math.inf), ("timeout=inf", math.inf),
    ("timeout=nan", math.inf),
])
def test_the_idle_limit_keeps_a_margin_below_the_announced_timeout(header, limit):
    assert idle_limit(header) == pytest.approx(limit)
