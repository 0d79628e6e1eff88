"""Fakes of the daemon's seams for unit tests: a transport that plays a script instead of a server."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Union

from thread_client.errors import TransportError
from thread_client.parts import Answer

__all__ = [
    "Call", "Connect", "ScriptedTransport", "Step", "UnscriptedSend", "answer", "blocked", "invalid_key", "invalid_nonce", "ok",
    "rate_limited", "server_error", "unavailable",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One send the worker made: what went on the wire."""

    nonce: int
    req_id: str
    params: dict[str, str] = field(default_factory=dict)
    method: str = ""  # the request's own endpoint ("": the profile's)
    path: str = ""


#: What one send gets: an answer, an error to raise, or a callable called with the send's ``Call``
#: that returns one of those two.
Step = Union[Answer, TransportError, Callable[[Call], Union[Answer, TransportError]]]
#: What opening one connection does: nothing (it opens at once), a ``TransportError`` to raise
#: (``ConnectFailed("...")``), or a callable called right then (a slow TLS handshake: it may block) that
#: returns one of those two.
Connect = Union[None, TransportError, Callable[[], Union[None, TransportError]]]


class UnscriptedSend(AssertionError):
    """Raised when the worker sends more than its script has steps for."""


class ScriptedTransport:
    """A ``Transport`` that answers from a script, in order (httpx's ``MockTransport``, in small).

    Each ``send`` records its ``Call``, then plays the next step:

    * an ``Answer`` is returned, as the server's answer;
    * a ``TransportError`` instance (``AnswerTimedOut("...")``, ``StaleConnection("...")``,
      ``ConnectFailed("...")``, ``ResetAfterSend("...")``) is raised;
    * a callable is called with the ``Call``, on the sending thread, right then (between this send
      and the next: the place to force a race, retire the key, let another send leave); what it
      returns, an ``Answer`` or a ``TransportError``, is then played as above.

    A send past the end of the script raises ``UnscriptedSend`` and is remembered, so
    ``assert_played()`` fails even if the worker swallowed the error: the fake never makes up an
    answer. Safe for one sending thread plus the test thread; a callable step runs outside the lock.

    Connections are scripted apart (``connects``): each one opened, by ``connect()`` or by a send
    with none open (as ``HttpTransport`` does), plays the next ``Connect``; past their end a
    connection opens at once. A step that raises, and ``close()``, leave no connection open.
    """

    endpoint = "scripted://exchange"

    def __init__(self, steps: Iterable[Step], connects: Iterable[Connect] = ()) -> None:
        # Guards every field below: the sending thread writes them, the test thread reads them.
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque(steps)
        self._connects: deque[Connect] = deque(connects)
        self._connected = False
        self._calls: list[Call] = []
        self._unscripted: list[Call] = []
        self._closed = False

    def __repr__(self) -> str:
        with self._lock:
            return f"<ScriptedTransport sent={len(self._calls)} steps_left={len(self._steps)} closed={self._closed}>"

    def connect(self) -> None:
        """Open a connection unless one is open: the next ``Connect`` is played."""
        with self._lock:
            if self._connected:
                return
            step = self._connects.popleft() if self._connects else None
        if callable(step):
            step = step()
        if isinstance(step, TransportError):
            raise step
        with self._lock:
            self._connected = True

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        self.connect()
        call = Call(nonce, req_id, dict(params or {}), method, path)
        with self._lock:
            self._calls.append(call)
            if not self._steps:
                self._unscripted.append(call)
                raise UnscriptedSend(f"send #{len(self._calls)} ({call}) is past the end of the script")
            step = self._steps.popleft()
        if on_sent is not None:  # the bytes left: whatever the step plays now happens after the send
            on_sent()
        if callable(step):
            step = step(call)
        if isinstance(step, TransportError):
            with self._lock:
                self._connected = False
            raise step
        if not isinstance(step, Answer):
            raise TypeError(f"a script step must be an Answer, a TransportError or a callable giving one: {step!r}")
        return step

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._connected = False

    @property
    def calls(self) -> list[Call]:
        """Every send so far, in order (those past the script's end too)."""
        with self._lock:
            return list(self._calls)

    @property
    def nonces(self) -> list[int]:
        """The nonce of every send so far, in order."""
        return [call.nonce for call in self.calls]

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def assert_played(self) -> None:
        """Fail unless every step was played and nothing was sent past them."""
        with self._lock:
            assert not self._unscripted, f"sent past the end of the script: {self._unscripted}"
            assert not self._steps, f"{len(self._steps)} step(s) never played: {list(self._steps)}"


# -- the contract's answers ------------------------------------------------------------------
# Written out from the exchange contract, not taken from the client's constants, so a client
# reading them wrong is caught.


def answer(status: int, payload: dict, retry_after: float | None = None, *, replaced_stale: bool = False) -> Answer:
    """An answer with a JSON body."""
    return Answer(status, json.dumps(payload).encode(), retry_after, replaced_stale)


def _error(status: int, message: str, retry_after: float | None = None) -> Answer:
    return answer(status, {"status": "error", "error_msg": message}, retry_after)


def ok(req_id: str, *, replaced_stale: bool = False) -> Answer:
    """200: the request ``req_id`` is accepted."""
    return answer(200, {"status": "OK", "req_id": req_id}, replaced_stale=replaced_stale)


def invalid_nonce() -> Answer:
    """400: the nonce is not above the last one accepted for the key."""
    return _error(400, "invalid nonce")


def invalid_key() -> Answer:
    """401: no such key."""
    return _error(401, "invalid api key")


def rate_limited(retry_after: float | None = None) -> Answer:
    """429: the key's window is full (one rejection counted against it)."""
    return _error(429, "exceeded rate limit", retry_after)


def blocked() -> Answer:
    """429: the key had too many rate-limit rejections and is dead for good."""
    return _error(429, "too many rate limit errors: blocked")


def unavailable(retry_after: float | None = None) -> Answer:
    """503, as a proxy or a server being restarted answers (not in the contract, but met)."""
    return _error(503, "service unavailable", retry_after)


def server_error() -> Answer:
    """500, as a failing server answers (not in the contract, but met)."""
    return _error(500, "internal server error")
