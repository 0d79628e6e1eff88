"""Where a request to stop lands, from any thread or from a signal, without a lock a signal could deadlock on."""

from __future__ import annotations

import select
import signal
import socket
import threading
import time
from types import FrameType
from typing import Callable

from .exits import StopReason

__all__ = ["StopLatch"]

_FROM_THREAD = b"\0"
#: What ``signal.signal`` takes and gives back: a function, SIG_DFL or SIG_IGN, or None (set outside Python).
_Handler = Callable[[int, FrameType | None], object] | int | None


class StopLatch:
    """A self-pipe the main thread waits on.

    A signal handler that calls ``Event.set()`` can deadlock: it runs in the main
    thread, between two bytecodes, possibly while that thread holds the event's
    own lock. So signals never run Python code that locks: ``catch_signals()``
    installs no-op handlers and lets the interpreter write the signal number
    into the pipe (``signal.set_wakeup_fd``); ``wait()`` reads it. Other threads
    call ``request()``, which records the reason under a lock (no signal handler
    ever takes it) and writes a byte. The first reason wins; a signal's is its
    ``StopReason`` (``SIGTERM``).
    """

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        # Guards _reason; taken by threads and by the main thread in wait(), never by a signal handler.
        self._lock = threading.Lock()
        self._reason: StopReason | None = None
        self._caught: tuple[signal.Signals, ...] = ()
        # What catch_signals() replaced, put back by close(): a caller in the same process (a test, an embedder) keeps
        # its own Ctrl-C once the daemon is done, or never started.
        self._replaced: list[tuple[signal.Signals, _Handler]] = []
        self._replaced_wakeup_fd = -1

    def __repr__(self) -> str:
        return f"<StopLatch reason={self._reason!r}>"

    @property
    def reason(self) -> StopReason | None:
        return self._reason

    def request(self, reason: StopReason) -> bool:
        """Ask the main thread to stop; safe from any thread (not from a signal handler). True for
        the call whose reason counts (the first), so exactly one caller can say why."""
        with self._lock:
            first = self._reason is None
            if first:
                self._reason = reason
        try:
            self._writer.send(_FROM_THREAD)
        except (BlockingIOError, OSError):
            pass  # the pipe is full or closed: a wake-up is pending already
        return first

    def catch_signals(self, *signals: signal.Signals) -> None:
        """Route ``signals`` into the latch, each a ``StopReason`` (ValueError for one that is not). Call from the
        main thread, before any worker thread starts."""
        for signum in signals:
            StopReason.caught(signum)
        self._replaced_wakeup_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._replaced = [(signum, signal.signal(signum, _ignore)) for signum in signals]
        self._caught = signals

    def wait(self, timeout: float | None = None) -> StopReason | None:
        """Block until a stop is requested (the reason) or ``timeout`` seconds pass (None)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._reason is not None:
                    return self._reason
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            readable, _, _ = select.select([self._reader], [], [], remaining)
            if readable:
                self._take_signals()

    def _take_signals(self) -> None:
        try:
            data = self._reader.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        for byte in data:
            if byte in self._caught:  # not the byte of a thread's request, nor a signal another handler took
                with self._lock:
                    if self._reason is None:
                        self._reason = StopReason.caught(signal.Signals(byte))

    def close(self) -> None:
        """Give the signals back the handlers (and wake-up fd) they had before ``catch_signals`` and close the pipe;
        idempotent."""
        if self._caught and threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(self._replaced_wakeup_fd)
            for signum, handler in self._replaced:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self._caught, self._replaced = (), []
        self._reader.close()
        self._writer.close()


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python side of a caught signal: nothing. The interpreter has already written it to the latch."""
