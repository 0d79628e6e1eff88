"""One keep-alive HTTP connection to the exchange, owned by one worker thread."""

from __future__ import annotations

import http.client
import math
import socket
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from ..errors import TransportError

__all__ = ["Answer", "Transport"]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None


class Transport:
    """Sends ``GET /api/request`` for one API key over one persistent ``http.client`` connection.

    The stdlib connection is the layer urllib3 and requests are built on; used
    directly it costs the least CPU per call (see the README's transport note).
    It reconnects by itself after the server closes the connection, and after
    any failure the connection is dropped so the next call starts clean. Not
    thread-safe by design: each worker has its own.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float = 1.0) -> None:
        url = urlsplit(base_url)
        self._prefix = f"{url.path.rstrip('/')}/api/request?api_key={quote(api_key)}&nonce="
        self._connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=timeout)

    def send(self, nonce: int, req_id: int) -> Answer:
        """One attempt; raises TransportError when no answer came."""
        try:
            self._connection.request("GET", f"{self._prefix}{nonce}&req_id={req_id}")
            response = self._connection.getresponse()
            body = response.read()
        except (socket.timeout, TimeoutError) as exc:
            self._connection.close()
            raise TransportError("timeout", type(exc).__name__) from exc
        except ConnectionRefusedError as exc:
            self._connection.close()
            raise TransportError("refused", str(exc)) from exc
        except (OSError, http.client.HTTPException) as exc:
            self._connection.close()
            raise TransportError("connection", f"{type(exc).__name__}: {exc}") from exc
        # Retry-After only matters for a failure: no header lookup on the common 200 path.
        retry_after = None if response.status == 200 else _retry_after(response.getheader("Retry-After"))
        return Answer(response.status, body, retry_after)

    def close(self) -> None:
        self._connection.close()


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (the delay form; an HTTP date is ignored). Uncapped:
    the retry policy holds the one cap."""
    try:
        seconds = float(value) if value else math.nan
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None
