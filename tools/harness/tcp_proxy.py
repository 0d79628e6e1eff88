"""A loopback TCP proxy that a test can cut or slow: what one daemon sees when its link to the store breaks
while the others' links (and its own link to the exchange) stay up, or when the exchange moves farther away."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from types import TracebackType

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``. ``cut()`` drops every connection and refuses new
    ones (closed at once, like a firewall's reset) until ``restore()``; ``half_close()`` ends every
    connection's way to the client only. ``delay``: seconds each chunk
    waits before it is forwarded, either way (a request and its answer each take it once more); it
    may be changed at any time."""

    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        # Guards _pairs and _cut.
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self.delay = 0.0
        self._closed = threading.Event()
        self._accepting = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    def __repr__(self) -> str:
        return f"<TcpProxy :{self.port} -> :{self._target[1]}{' cut' if self._cut else ''}>"

    def start(self) -> "TcpProxy":
        self._accepting.start()
        return self

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), name="proxy-pump", daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """Copy both ways until either side closes (or ``cut`` closes both)."""
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            try:
                while True:
                    for ready, _ in selector.select(timeout=0.5):
                        data = ready.fileobj.recv(65536)
                        if not data:
                            return
                        if self.delay:
                            time.sleep(self.delay)
                        ready.data.sendall(data)
                    if self._closed.is_set():
                        return
            except OSError:
                return
            finally:
                client.close()
                upstream.close()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            for end in (client, upstream):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def half_close(self) -> None:
        """End every connection's way to the client (a FIN) and leave the rest open, as a proxy that gives
        up on a slow upstream does: a request in flight reads the end of the connection, not its answer."""
        with self._lock:
            pairs = list(self._pairs)
        for client, _ in pairs:
            try:
                client.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._listener.close()

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
