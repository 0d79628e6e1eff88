"""Connections of requests that got no answer in time, watched until the server shows it has read them.

A server that freezes (stopped, swapped out, a long pause) keeps the requests sent
meanwhile in its sockets and stamps them all when it thaws, however long after their
timeout. When to free such a request's rate-limit slot is then a bet, unless the
client waits for the server itself to show it has read the request: the first byte
of its late answer, or the connection's end. The stamp came before either, so the
slot frees a window after that sign, as for any answer.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Callable

from .. import defaults
from ..clock import Clock, monotonic
from ..threads import LoopThread, ManagedThread

__all__ = ["LateAnswers", "Settle"]

log = logging.getLogger(__name__)

#: Told once per watch: when the server showed it read the request, or None if it showed nothing within the cap.
Settle = Callable[[float | None], None]

#: Connections watched at most at once (each holds a file descriptor); a request past it holds its slot for the
#: whole cap, which costs sends and never risks a rate-limit rejection.
_MAX_WATCHED = 512


@dataclass(slots=True)
class _Watch:
    settle: Settle
    ends_at: float
    connection: socket.socket | None


class LateAnswers:
    """One thread for every connection left without an answer: ``watch()`` hands one over, and its
    ``settle`` is called once, from that thread, with the time the server showed it read the request,
    or with None once ``cap`` seconds have passed without a sign."""

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
        sockets): ``settle(None)`` at once, in this thread. After ``close()`` nothing is called back."""
        if connection is None:
            settle(None)
            return
        watch: _Watch | None = _Watch(settle, self._clock() + self._cap, connection)
        with self._lock:
            if not self._closed:
                self._count += 1
                self._new.append(watch)
                watch = None
        if watch is not None:
            _close(connection)
            return
        self._wake()

    def close(self) -> None:
        """End the watching thread and close every connection; nothing more is called back. Idempotent."""
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
                if self._closed:
                    new, self._new = self._new, []
                    self._end(new)
                    return
                watch = self._new.pop(0) if self._new else None
            if watch is not None:  # one at a time: a bug starting one loses no other
                self._start(watch)
                continue
            events = self._selector.select(self._until_next_cap())
            now = self._clock()
            for selected, _ in events:
                if selected.fileobj is self._wake_read:
                    _drain(self._wake_read)
                elif _shows_sign(selected.fileobj):
                    self._finish(self._watches[selected.fileobj], now)
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
        except (OSError, ValueError):  # closed already: nothing can show a sign on it, only the cap frees it
            watch.connection = None
            self._unwatched.append(watch)
            return
        self._watches[watch.connection] = watch

    def _until_next_cap(self) -> float | None:
        ends = [w.ends_at for w in (*self._watches.values(), *self._unwatched)]
        return max(0.0, min(ends) - self._clock()) if ends else None

    def _finish(self, watch: _Watch, seen_at: float | None) -> None:
        """Settle ``watch`` whatever its bookkeeping raises: a slot left unsettled stays in flight for good."""
        try:
            if watch.connection is not None:
                del self._watches[watch.connection]
                self._selector.unregister(watch.connection)
                _close(watch.connection)
            else:
                self._unwatched.remove(watch)
        finally:
            self._settle(watch, seen_at)

    def _settle(self, watch: _Watch, seen_at: float | None) -> None:
        with self._lock:
            self._count -= 1
        try:
            watch.settle(seen_at)
        except Exception:
            log.exception("settling a request's slot after its late answer failed")

    def _end(self, new: list[_Watch]) -> None:
        for watch in [*new, *self._watches.values()]:
            _close(watch.connection)
        self._watches.clear()
        self._unwatched.clear()
        self._count = 0
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()


def _close(connection: socket.socket | None) -> None:
    if connection is not None:
        connection.close()


def _shows_sign(connection: socket.socket) -> bool:
    """Whether what made ``connection`` readable is the server's sign: a byte of the answer, or its end. Over
    TLS a session ticket the handshake sends on its own makes the socket readable before the server has read
    the request: only application data (or the end) counts."""
    if not isinstance(connection, ssl.SSLSocket):
        return True
    try:
        connection.setblocking(False)
        connection.recv(1)
    except ssl.SSLWantReadError:
        return False
    except OSError:  # reset, or a TLS alert: the connection ended
        return True
    return True


def _drain(wake: socket.socket) -> None:
    try:
        while wake.recv(4096):
            pass
    except BlockingIOError:
        pass
