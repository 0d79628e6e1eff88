"""The control API's HTTP server on a loopback port, spoken to byte by byte: a refused body never becomes the
next request of its connection, a chunked body is refused, a Host that is not the bound address is refused (a
DNS-rebinding page reads nothing), and a token file others may read is refused."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from test_control import TOKEN, FakePanel
from thread_client.control.routes import Router
from thread_client.control.server import ControlServer
from thread_client.control.token import control_token
from thread_client.errors import ConfigError

BOUND = 5.0


@pytest.fixture(scope="module")
def server():
    """One server for the module's requests (none changes it): its stop waits out a serving loop's half-second poll."""
    served = ControlServer(Router(FakePanel(), TOKEN), 0)
    (thread,) = served.threads()
    thread.start()
    yield served
    served.close()
    thread.join(BOUND)
    assert not thread.is_alive()


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes the connection (a kept one ends at the read timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as connection:
        connection.sendall(data)
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return answer


def test_a_body_refused_for_its_size_closes_the_connection_and_is_never_read_as_a_request(server):
    smuggled = b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    answer = exchange(server.port, b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9999999\r\n\r\n"
                      + smuggled)
    assert answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1 ") == 1
    assert b"Connection: close" in answer


def test_a_chunked_body_is_refused_and_the_connection_closed(server):
    body = b'{"ids": ["x"]}'
    answer = exchange(server.port, b"POST /api/v1/dead/requeue HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                      + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body
                      + b"\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 411") and answer.count(b"HTTP/1.1 ") == 1
    assert server._server.router._panel.calls == []


@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:80", b"127.0.0.1.evil.example"])
def test_a_host_that_is_not_the_bound_address_is_refused(server, host):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: it must read neither status nor dead letters."""
    answer = exchange(server.port, b"GET /api/v1/status HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 421"), answer[:60]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.1:{port}", "localhost:{port}"])
def test_the_bound_address_and_localhost_are_served(server, host):
    answer = exchange(server.port, b"GET /api/v1/status HTTP/1.1\r\nHost: " + host.format(port=server.port).encode()
                      + b"\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")


def test_a_token_file_that_group_or_others_may_read_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("abc\n")
    os.chmod(path, 0o640)
    with pytest.raises(ConfigError, match=r"can be read by group or others .*chmod 600"):
        control_token(str(path))
    os.chmod(path, 0o600)
    assert control_token(str(path)) == ("abc", False)
