"""A queue that can be closed: every thread blocked on it wakes at once (Python 3.13's ``Queue.shutdown``, on 3.11)."""

from __future__ import annotations

import collections
import queue
import time
from typing import Any

from ..errors import QueueClosed

__all__ = ["ClosableQueue", "ClosablePriorityQueue"]

_NONE = object()  # a lane that holds nothing


class ClosableQueue(queue.Queue):
    """A ``queue.Queue`` whose ``close()`` wakes every waiter: from then on ``put()`` and ``get()`` raise
    QueueClosed at once, as 3.13's ``shutdown(immediate=True)`` does, however full the queue is; what
    it still holds is taken with ``drain()``. So a stop reaches a thread blocked on a queue at once,
    with no loop that wakes every so often to look at a flag.

    Subclasses change the order of items the way ``queue.PriorityQueue`` does (``_init``, ``_put``,
    ``_get``); ``put`` and ``get`` here are ``Queue``'s own loops with the closed check added.
    """

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self._closed = False  # guarded by self.mutex; set once by close(), which wakes both conditions

    def close(self) -> None:
        """Refuse every further put and get and wake every thread waiting in one. Idempotent."""
        with self.mutex:
            self._closed = True
            self.not_empty.notify_all()
            self.not_full.notify_all()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """``Queue.put``; raises QueueClosed if the queue is or gets closed before there is room."""
        with self.not_full:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if self._closed:
                    raise QueueClosed
                if self.maxsize <= 0 or self._qsize() < self.maxsize:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise queue.Full
                self.not_full.wait(remaining)
            self._put(item)
            self.unfinished_tasks += 1
            self.not_empty.notify()

    def get(self, block: bool = True, timeout: float | None = None, lane: str | None = None) -> Any:
        """``Queue.get``; raises QueueClosed if the queue is or gets closed before an item comes. What the
        named ``lane`` holds (a subclass's) is taken first."""
        with self.not_empty:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if self._closed:
                    raise QueueClosed
                if lane is not None and (pinned := self._take_from(lane)) is not _NONE:
                    return pinned
                if self._qsize():
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise queue.Empty
                self.not_empty.wait(remaining)
            item = self._get()
            self.not_full.notify()
            return item

    def _take_from(self, lane: str) -> Any:
        """What ``lane`` holds first, taken; ``_NONE``: this queue keeps no lanes."""
        return _NONE

    def snapshot(self) -> list[Any]:
        """A copy of the entries, in no set order, leaving them queued (for a reader such as metrics)."""
        with self.mutex:
            return list(self.queue)

    def drain(self) -> list[Any]:
        """Remove and return every item, in order, closed or not (the shutdown's last look)."""
        with self.mutex:
            items = [self._get() for _ in range(self._qsize())]
            self.not_full.notify_all()
            return items


class ClosablePriorityQueue(ClosableQueue, queue.PriorityQueue):
    """A ``queue.PriorityQueue`` that can be closed: lowest entry first.

    Beside the heap it keeps named lanes (``put_for``): an entry there is taken only by a ``get`` for its
    lane, before anything of the heap, and never waits for room (a request only one key's workers may send).
    ``release`` moves a lane's entries into the heap, for any taker."""

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self._lanes: dict[str, collections.deque[Any]] = {}

    def put_for(self, lane: str, item: Any) -> None:
        """Queue ``item`` for the takers of ``lane`` alone; raises QueueClosed once the queue is closed."""
        with self.mutex:
            if self._closed:
                raise QueueClosed
            self._lanes.setdefault(lane, collections.deque()).append(item)
            self.unfinished_tasks += 1
            self.not_empty.notify_all()  # only a taker of this lane may take it: a single wake-up could miss it

    def release(self, lane: str) -> int:
        """Move what ``lane`` holds into the heap (its takers are gone); how many entries."""
        with self.mutex:
            items = self._lanes.pop(lane, ())
            for item in items:
                self._put(item)
            self.not_empty.notify_all()
            return len(items)

    def _take_from(self, lane: str) -> Any:
        """The first entry ``lane`` holds, taken; ``_NONE`` if it holds none. Called with the mutex held."""
        pinned = self._lanes.get(lane)
        if not pinned:
            return _NONE
        item = pinned.popleft()
        if not pinned:
            del self._lanes[lane]
        return item

    def qsize(self) -> int:
        with self.mutex:
            return self._qsize() + sum(map(len, self._lanes.values()))

    def snapshot(self) -> list[Any]:
        with self.mutex:
            return [*self.queue, *(item for items in self._lanes.values() for item in items)]

    def drain(self) -> list[Any]:
        with self.mutex:
            lanes, self._lanes = self._lanes, {}
        return [*super().drain(), *(item for items in lanes.values() for item in items)]
