"""One keep-alive HTTP connection to the exchange, owned by one worker thread."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import urllib3
from urllib3.exceptions import HTTPError, TimeoutError as Urllib3Timeout

from .errors import TransportError

__all__ = ["Answer", "Transport"]

_RETRY_AFTER_CAP = 60.0


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None


class Transport:
    """Sends ``GET /api/request`` over a urllib3 pool of one connection (kept alive between calls).

    urllib3's own retries are off: every retry goes through the rate limiter and the DLQ.
    Not thread-safe by design; each worker has its own.
    """

    def __init__(self, base_url: str, timeout: float = 1.0) -> None:
        url = urlsplit(base_url)
        self._path = (url.path.rstrip("/") or "") + "/api/request"
        self._pool = urllib3.HTTPConnectionPool(
            url.hostname, url.port or 80, maxsize=1, block=False, retries=False, timeout=timeout
        )

    def send(self, api_key: str, nonce: int, req_id: int) -> Answer:
        """One attempt; raises TransportError when no answer came."""
        url = f"{self._path}?api_key={quote(api_key)}&nonce={nonce}&req_id={req_id}"
        try:
            response = self._pool.urlopen("GET", url, redirect=False)
        except Urllib3Timeout as exc:
            raise TransportError("timeout", type(exc).__name__) from exc
        except HTTPError as exc:
            raise TransportError("connection", type(exc).__name__) from exc
        return Answer(response.status, response.data, _retry_after(response.headers.get("Retry-After")))

    def close(self) -> None:
        self._pool.close()


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (the delay form; an HTTP date is ignored), capped."""
    try:
        return min(max(float(value), 0.0), _RETRY_AFTER_CAP) if value else None
    except ValueError:
        return None
