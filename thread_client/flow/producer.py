"""The producer thread: takes requests from a source and queues them, feeling backpressure."""

from __future__ import annotations

import threading
from typing import Callable

from ..clock import Clock, monotonic
from ..parts import RequestSource
from ..request import FinalOutcome, InvalidInput, Request, UnknownFate
from ..threads import ManagedThread
from .queues import QueueManager

__all__ = ["Producer"]


class Producer(ManagedThread):
    """Runs until the source ends, ``stop`` is set (the source watches it) or the queues are closed.
    A line that is no request is recorded as ``invalid_input`` at once; a request caught by the stop
    while waiting for room in the main queue is buried as ``shutdown``, or left for the next run.
    When the source ends, it waits until every request taken in has its final outcome and calls
    ``on_exhausted``."""

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
                self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt, where=item.where),
                                    FinalOutcome.INVALID_INPUT, f"{item.where}: {item.reason}")
            elif isinstance(item, UnknownFate):
                self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt), FinalOutcome.UNKNOWN,
                                    item.reason)
            elif not self._queues.submit(Request(item.id, self._clock(), item.params, item.resumed,
                                                 receipt=item.receipt, where=item.where)):
                return
        if self._queues.wait_until_settled():
            self._on_exhausted()
