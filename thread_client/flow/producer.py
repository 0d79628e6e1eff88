"""The producer thread: takes requests from a source and queues them, feeling backpressure."""

from __future__ import annotations

import threading
from typing import Callable, Iterator, Protocol

from ..clock import Clock, monotonic
from ..io.sources import InvalidInput, UnknownFate, Work
from ..threads import ManagedThread
from .queues import QueueManager
from .request import Request

__all__ = ["Producer", "RequestSource"]


class RequestSource(Protocol):
    """Anything the producer can read requests from."""

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput | UnknownFate]:
        """Yield requests (or lines that are none) as they come; return when exhausted or once ``stop`` is set."""
        ...


class Producer(ManagedThread):
    """Runs until the source ends or ``stop`` is set. A line that is no request is recorded as
    ``invalid_input`` at once; a request caught by the stop while waiting for room in the main
    queue is buried as "shutdown". When the source ends, it waits until every request taken in
    has its final outcome and calls ``on_exhausted``."""

    def __init__(
        self,
        queues: QueueManager,
        source: RequestSource,
        stop: threading.Event,
        *,
        on_exhausted: Callable[[], None] = lambda: None,
        clock: Clock = monotonic,
    ) -> None:
        super().__init__("producer")
        self._queues = queues
        self._source = source
        self._stopping = stop
        self._on_exhausted = on_exhausted
        self._clock = clock

    def work(self) -> None:
        for item in self._source.read(self._stopping):
            if isinstance(item, InvalidInput):
                reason = f"invalid input: {item.where}: {item.reason}"
                self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt), reason)
            elif isinstance(item, UnknownFate):
                self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt), f"unknown: {item.reason}")
            elif not self._queues.submit(
                Request(item.id, self._clock(), item.params, item.resumed, receipt=item.receipt), self._stopping
            ):
                return
        if self._queues.wait_until_settled(self._stopping):
            self._on_exhausted()
