"""The producer thread: takes requests from a source and queues them, feeling backpressure."""

from __future__ import annotations

import threading
from typing import Iterator, Protocol

from ..clock import Clock, monotonic
from ..threads import ManagedThread
from .queues import QueueManager
from .request import Request

__all__ = ["Producer", "RequestSource"]


class RequestSource(Protocol):
    """Anything the producer can read request ids from."""

    def read(self, stop: threading.Event) -> Iterator[int]:
        """Yield request ids as they become available; return when exhausted or once ``stop`` is set."""
        ...


class Producer(ManagedThread):
    """Runs until the source ends or ``stop`` is set; a request caught by the stop while waiting
    for room in the main queue is buried as "shutdown"."""

    def __init__(
        self, queues: QueueManager, source: RequestSource, stop: threading.Event, *, clock: Clock = monotonic
    ) -> None:
        super().__init__("producer")
        self._queues = queues
        self._source = source
        self._stopping = stop
        self._clock = clock

    def work(self) -> None:
        for req_id in self._source.read(self._stopping):
            if not self._queues.submit(Request(str(req_id), self._clock()), self._stopping):
                return
