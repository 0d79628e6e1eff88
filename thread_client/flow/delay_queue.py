"""A closable queue whose items come out earliest-ready first, and only once their time has come."""

from __future__ import annotations

import heapq
import itertools
import queue
from typing import Any

from ..clock import Clock, monotonic
from ..errors import QueueClosed
from .closable import ClosableQueue

__all__ = ["DelayQueue"]


class DelayQueue(ClosableQueue):
    """The dead letter queue: failed requests wait here out their retry backoff.

    Unbounded (a retry must never be refused, not even once closed: what is put
    after ``close()`` waits for the shutdown's ``drain()``), built like
    ``queue.PriorityQueue``: entries are ``(ready_at, sequence, item)`` on a heap.
    ``get()`` blocks until the earliest item is ready; a ``put()`` of an earlier
    item wakes it through ``not_empty``, so nothing waits longer than it must.
    """

    def __init__(self, clock: Clock = monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._sequence = itertools.count()

    def _init(self, maxsize: int) -> None:
        self.queue: list[tuple[float, int, Any]] = []

    def _qsize(self) -> int:
        return len(self.queue)

    def _put(self, entry: tuple[float, int, Any]) -> None:
        heapq.heappush(self.queue, entry)

    def _get(self) -> tuple[float, int, Any]:
        return heapq.heappop(self.queue)

    def put_at(self, item: Any, ready_at: float) -> None:
        """Add ``item``, to come out no earlier than ``ready_at`` (monotonic seconds); never refused."""
        with self.not_empty:
            self._put((ready_at, next(self._sequence), item))
            self.unfinished_tasks += 1
            self.not_empty.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the earliest item once it is ready.

        Blocks at most ``timeout`` seconds (forever if None; not at all if ``block``
        is false) and raises queue.Empty if no item is ready by then, QueueClosed
        once the queue is closed.
        """
        with self.not_empty:
            now = self._clock()
            deadline = None if timeout is None or not block else now + timeout
            while True:
                if self._closed:
                    raise QueueClosed
                wait = self.queue[0][0] - now if self.queue else None
                if wait is not None and wait <= 0:
                    return self._get()[2]
                if not block or (deadline is not None and now >= deadline):
                    raise queue.Empty
                if deadline is not None:
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self.not_empty.wait(wait)
                now = self._clock()

    def drain(self) -> list[Any]:
        """Remove and return every item, ready or not, earliest first (shutdown)."""
        return [entry[2] for entry in super().drain()]
