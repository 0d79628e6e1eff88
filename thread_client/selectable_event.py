"""An ``Event`` that ``poll()`` can wait on beside a pipe: a thread blocked on input wakes when it is set."""

from __future__ import annotations

import socket
import threading

__all__ = ["SelectableEvent"]


class SelectableEvent(threading.Event):
    """A ``threading.Event`` whose ``fileno()`` turns readable once it is set, and stays so.

    A thread that waits for input on a pipe cannot also wait on an Event; with this one it polls
    both (``select.poll`` on the pipe and on the event) and a stop wakes it at once, with no loop that
    looks at a flag every so often. A stop is set once and never taken back: ``clear()`` is refused.
    ``close()`` lets go of the socket pair, once nothing polls it any more.
    """

    def __init__(self) -> None:
        super().__init__()
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)

    def fileno(self) -> int:
        """The end to poll for reading: readable from ``set()`` on."""
        return self._reader.fileno()

    def set(self) -> None:
        super().set()
        try:
            self._writer.send(b"\0")
        except OSError:  # full (readable already), or closed (nothing polls it any more)
            pass

    def clear(self) -> None:
        raise ValueError("a SelectableEvent is set once: a stop is not taken back")

    def close(self) -> None:
        """Close the socket pair; idempotent."""
        self._reader.close()
        self._writer.close()
