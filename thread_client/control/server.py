"""The control API's HTTP server: the standard library's threading server, one short-lived thread per request,
bound at once and served by a thread the daemon supervises."""

from __future__ import annotations

import ipaddress
import logging
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence

from ..errors import ConfigError
from ..threads import SHUTDOWN_POLL, LoopThread, ManagedThread
from .routes import MAX_BODY, Reply, Router

__all__ = ["ControlServer", "check_control_host", "is_loopback"]

log = logging.getLogger(__name__)

#: A kept connection idle this long is closed, and its handler's thread ends.
_IDLE_TIMEOUT = 30.0


def check_control_host(host: str, token_file: str | None) -> None:
    """Refuse (ConfigError) to serve on ``host`` without ``token_file`` when other machines can reach it: the
    token then must be one the operator chose and keeps, checked before any file is made."""
    if not is_loopback(host) and token_file is None:
        raise ConfigError(f"--control-host {host} is reachable from other machines: give --control-token-file")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine alone (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    """Hands each request to the server's router; logs no poll (the page polls every second). Before that, it
    refuses (and closes the connection on) what it cannot read safely: a Host that is not the bound address nor
    localhost (a DNS-rebinding page under its own name), a chunked body, a body without its size or too big
    (never left unread, to be parsed as the next request)."""

    server: "_Server"
    protocol_version = "HTTP/1.1"  # the page's polls keep their connection
    timeout = _IDLE_TIMEOUT  # a connection that sends nothing for this long is closed (its thread ends)

    def do_GET(self) -> None:
        if self._host_allowed():
            self._answer(b"")

    def do_POST(self) -> None:
        if not self._host_allowed():
            return
        if "Transfer-Encoding" in self.headers:
            self._send(Reply.json({"error": "a chunked body is not taken: send its Content-Length"}, 411), close=True)
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._send(Reply.json({"error": f"a body of 0 to {MAX_BODY} bytes, with its Content-Length"}, 400),
                       close=True)
            return
        self._answer(self.rfile.read(length))

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _host_allowed(self) -> bool:
        """Whether the Host header names the bound address or this machine (or is absent); else 421, closed."""
        host = self.headers.get("Host")
        if host is None or _host_name(host) in self.server.names:
            return True
        self._send(Reply.json({"error": f"Host {host} is not this server's: use http://{self.server.names[0]}:"
                                        f"{self.server.server_port}/"}, 421), close=True)
        return False

    def _answer(self, body: bytes) -> None:
        self._send(self.server.router.route(self.command, self.path, self.headers.get("Authorization"), body,
                                            client=self.client_address[0]))

    def _send(self, reply: Reply, close: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _host_name(host: str) -> str:
    """The name of a Host header, without its port and brackets, in lower case."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1:name.find("]")] if "]" in name else name
    head, colon, port = name.rpartition(":")
    return head if colon and port.isdigit() else name


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], router: Router) -> None:
        self.router = router
        # The Host names served: the bound address first, then this machine's own.
        self.names = tuple(dict.fromkeys([_host_name(address[0]), "localhost", "127.0.0.1", "::1"]))
        super().__init__(address, _Handler)


class ControlServer:
    """Serves ``router`` on ``host``:``port`` (0 picks one), bound at once; its serving thread is made here and never
    started (``OwnsThreads``): the daemon supervises, starts and joins it as its own. Only a loopback ``host`` is
    served without ``token_file`` (ConfigError); OSError if the port cannot be bound."""

    def __init__(self, router: Router, port: int, host: str = "127.0.0.1", *, token_file: str | None = None) -> None:
        check_control_host(host, token_file)
        self._server = _Server((host, port), router)
        self.host = host
        self.port: int = self._server.server_port
        self._thread = LoopThread("control-server", partial(self._server.serve_forever, poll_interval=SHUTDOWN_POLL))

    def __repr__(self) -> str:
        return f"<ControlServer http://{self.host}:{self.port}/>"

    def threads(self) -> Sequence[ManagedThread]:
        return [self._thread]

    def close(self) -> None:
        """Stop serving (the thread then ends) and close the port; returns at once if it is not serving."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
