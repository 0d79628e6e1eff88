"""Connections of requests that got no answer in time, watched until the server shows it has read them.

A server that freezes (stopped, swapped out, a long pause) keeps the requests sent
meanwhile in its sockets and stamps them all when it thaws, however long after their
timeout. When to free such a request's rate-limit slot is then a bet, unless the
client waits for the server itself to show it has read the request: the first byte
of its late answer, or the connection's end. The stamp came before either, so the
slot frees a window after that sign, as for any answer. The late answer itself is read
as far as it has come (a late 429 is a refusal the server counted against the key).
"""

from __future__ import annotations

import http.client
import io
import logging
import selectors
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Callable

from .. import defaults
from ..clock import Clock, monotonic
from ..parts import Answer
from ..threads import LoopThread, ManagedThread
from .transport import parse_retry_after

__all__ = ["LateAnswers", "Settle"]

log = logging.getLogger(__name__)

#: Told once per watch: when the server showed it read the request (None: it showed nothing within the cap), and
#: its late answer as far as it had come then (None: the connection ended, or what came reads as no answer).
Settle = Callable[[float | None, Answer | None], None]

#: Connections watched at most at once (each holds a file descriptor); a request past it holds its slot for the
#: whole cap, which costs sends and never risks a rate-limit rejection.
_MAX_WATCHED = 512
#: Bytes of a late answer read at most: its head and the start of its body, what an answer rule reads.
_MAX_ANSWER_BYTES = 16384


@dataclass(slots=True)
class _Watch:
    settle: Settle
    ends_at: float
    connection: socket.socket | None


class LateAnswers:
    """One thread for every connection left without an answer: ``watch()`` hands one over, and its
    ``settle`` is called once, from that thread, with the time the server showed it read the request
    and its late answer, or with None once ``cap`` seconds have passed without a sign, or at ``close()``.
    A late answer is read as far as it has come when its first bytes show, never waited for (a
    status line split across packets reads as none: a server writes its head at once). Every ``settle``
    handed over is called exactly once, whatever happens: it gives back a rate-limit slot, and a slot
    left in flight holds its key (and a shared key's lease) for good."""

    def __init__(self, cap: float = defaults.LATE_ANSWER_CAP, *, clock: Clock = monotonic,
                 max_watched: int = _MAX_WATCHED) -> None:
        if cap <= 0 or max_watched < 0:
            raise ValueError("the cap must be positive and max_watched not negative")
        self._cap = cap
        self._clock = clock
        self._max_watched = max_watched
        # Guards `_new`, `_count` and `_closed`; the selector and `_watches` belong to the watching thread alone.
        self._lock = threading.Lock()
        self._new: list[_Watch] = []
        self._count = 0
        self._closed = False
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._watches: dict[socket.socket, _Watch] = {}
        self._unwatched: list[_Watch] = []  # past the limit: only the cap can free them
        self._thread = LoopThread("late-answers", self._loop)

    def __repr__(self) -> str:
        return f"<LateAnswers watching {self.watching}>"

    @property
    def watching(self) -> int:
        """Requests whose slot waits for a sign (or the cap) now."""
        with self._lock:
            return self._count

    def threads(self) -> list[ManagedThread]:
        """The watching thread (``OwnsThreads``); ``close()`` ends it."""
        return [self._thread]

    def watch(self, connection: socket.socket | None, settle: Settle) -> None:
        """Hand over the open ``connection`` of a request that got no answer in time; ``settle`` is called
        once from the watching thread, and the connection closed. None (a transport that keeps its
        sockets), or after ``close()``: the connection is closed and ``settle(None, None)`` called at
        once, in this thread."""
        watch: _Watch | None = _Watch(settle, self._clock() + self._cap, connection)
        with self._lock:
            if connection is not None and not self._closed:
                self._count += 1
                self._new.append(watch)
                watch = None
        if watch is not None:
            _close(connection)
            settle(None, None)
            return
        self._wake()

    def close(self) -> None:
        """End the watching thread: it closes every connection and settles its watch with None (the slot
        keeps the unanswered hold). Idempotent."""
        with self._lock:
            self._closed = True
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except (BlockingIOError, OSError):  # full: a wake-up is pending anyway; closed: the thread has ended
            pass

    def _loop(self) -> None:
        """Wait for a sign on any connection, or the next cap; safe to run again after it raised."""
        while True:
            with self._lock:
                closed = self._closed
                if closed:
                    watch, ending, self._new = None, self._new, []
                else:
                    watch = self._new.pop(0) if self._new else None
            if closed:  # settled outside the lock: a settle is foreign code
                self._end(ending)
                return
            if watch is not None:  # one at a time: a bug starting one loses no other
                self._start(watch)
                continue
            events = self._selector.select(self._until_next_cap())
            now = self._clock()
            for selected, _ in events:
                if selected.fileobj is self._wake_read:
                    _drain(self._wake_read)
                elif (received := _received(selected.fileobj)) is not None:
                    self._finish(self._watches[selected.fileobj], now, _late_answer(received))
            for watch in [w for w in (*self._watches.values(), *self._unwatched) if w.ends_at <= now]:
                self._finish(watch, None)

    def _start(self, watch: _Watch) -> None:
        if len(self._watches) >= self._max_watched:
            log.warning("more than %d requests without an answer: one holds its slot %.0f s", self._max_watched,
                        self._cap)
            _close(watch.connection)
            watch.connection = None
            self._unwatched.append(watch)
            return
        try:
            self._selector.register(watch.connection, selectors.EVENT_READ)
        except Exception as exc:  # nothing can show a sign on it: only the cap frees it
            if not isinstance(exc, (OSError, ValueError)):  # those say it is closed already; anything else is a bug
                log.exception("a timed-out send's connection cannot be watched: its slot waits out the cap")
            _close(watch.connection)
            watch.connection = None
            self._unwatched.append(watch)
            return
        self._watches[watch.connection] = watch

    def _until_next_cap(self) -> float | None:
        ends = [w.ends_at for w in (*self._watches.values(), *self._unwatched)]
        return max(0.0, min(ends) - self._clock()) if ends else None

    def _finish(self, watch: _Watch, seen_at: float | None, answer: Answer | None = None) -> None:
        """Settle ``watch`` whatever its bookkeeping raises: a slot left unsettled stays in flight for good."""
        try:
            if watch.connection is not None:
                del self._watches[watch.connection]
                self._selector.unregister(watch.connection)
                _close(watch.connection)
            else:
                self._unwatched.remove(watch)
        finally:
            self._settle(watch, seen_at, answer)

    def _settle(self, watch: _Watch, seen_at: float | None, answer: Answer | None = None) -> None:
        with self._lock:
            self._count -= 1
        try:
            watch.settle(seen_at, answer)
        except Exception:
            log.exception("settling a request's slot after its late answer failed")

    def _end(self, new: list[_Watch]) -> None:
        """Close every connection and settle every watch with None: no sign can come any more."""
        ending = [*new, *self._watches.values(), *self._unwatched]
        self._watches.clear()
        self._unwatched.clear()
        for watch in ending:
            _close(watch.connection)
            self._settle(watch, None)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()


def _close(connection: socket.socket | None) -> None:
    """Close a connection handed over; one that fails to close is past watching all the same."""
    if connection is not None:
        try:
            connection.close()
        except OSError:
            pass


def _received(connection: socket.socket) -> bytes | None:
    """What made ``connection`` readable, read without waiting: the start of the late answer, b"" if the
    connection ended first (the server's sign too), None if it is no sign. Over TLS a session ticket the
    handshake sends on its own makes the socket readable before the server has read the request: only
    application data (or the end) counts."""
    received = bytearray()
    try:
        connection.setblocking(False)
        while len(received) < _MAX_ANSWER_BYTES and (chunk := connection.recv(_MAX_ANSWER_BYTES - len(received))):
            received += chunk
    except (BlockingIOError, ssl.SSLWantReadError):  # all that has come so far
        if not received:
            return None
    except OSError:  # reset, or a TLS alert: the connection ended
        pass
    return bytes(received)


class _Received:
    """What came on a connection, as the socket ``http.client`` reads an answer from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self._data)


def _late_answer(received: bytes) -> Answer | None:
    """The answer in ``received``, its body as far as it came; None if no status line can be read there.
    Never raises: the bytes are the server's, and what http.client raises on them varies."""
    response = http.client.HTTPResponse(_Received(received))  # type: ignore[arg-type]
    try:
        response.begin()
        body = response.read()
    except http.client.IncompleteRead as exc:
        body = exc.partial
    except Exception:  # not an HTTP answer, or a head cut short
        return None
    retry_after = None if response.status == 200 else parse_retry_after(response.getheader("Retry-After"))
    return Answer(response.status, body, retry_after)


def _drain(wake: socket.socket) -> None:
    try:
        while wake.recv(4096):
            pass
    except BlockingIOError:
        pass
