"""The producer thread: takes requests from a source and queues them, feeling backpressure."""

from __future__ import annotations

from typing import Callable

from ..clock import Clock, monotonic
from ..errors import StateNotWritten
from ..exits import OUTPUT_FAILED
from ..parts import RequestSource
from ..request import FinalOutcome, InvalidInput, Request, UnknownFate
from ..selectable_event import SelectableEvent
from ..threads import ManagedThread
from .queues import QueueManager

__all__ = ["Producer"]


class Producer(ManagedThread):
    """Runs until the source ends, ``stop`` is set (the source watches it) or the queues are closed.
    A line that is no request is recorded as ``invalid_input`` at once; a request caught by the stop
    while waiting for room in the main queue is buried as ``shutdown``, or left for the next run.
    When the source ends, it waits until every request taken in has its final outcome and calls
    ``on_exhausted``. If the state dir cannot take a line's id in, it reads no further and calls
    ``on_stop``: that line and the rest are left for the next run."""

    def __init__(
        self,
        queues: QueueManager,
        source: RequestSource,
        stop: SelectableEvent,
        *,
        on_exhausted: Callable[[], None] = lambda: None,
        on_stop: Callable[[str, str], None] = lambda reason, message: None,
        clock: Clock = monotonic,
    ) -> None:
        super().__init__("producer")
        self._queues = queues
        self._source = source
        self._stopping = stop
        self._on_exhausted = on_exhausted
        self._on_stop = on_stop
        self._clock = clock

    def work(self) -> None:
        try:
            ended = self._take_in()
        except StateNotWritten as exc:
            self._on_stop(OUTPUT_FAILED, f"{exc}: no more input is read")
            return
        if ended and self._queues.wait_until_settled():
            self._on_exhausted()

    def _take_in(self) -> bool:
        """Queue each request of the source: True once it has ended, False if the queues closed first."""
        for item in self._source.read(self._stopping):
            if isinstance(item, InvalidInput):
                invalid = Request(item.id, self._clock(), receipt=item.receipt, where=item.where, digest=item.digest)
                self._queues.reject(invalid, FinalOutcome.INVALID_INPUT, f"{item.where}: {item.reason}")
            elif isinstance(item, UnknownFate):
                self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt), FinalOutcome.UNKNOWN,
                                    item.reason)
            elif not self._queues.submit(Request(item.id, self._clock(), item.params, item.resumed,
                                                 receipt=item.receipt, where=item.where)):
                return False
        return True
