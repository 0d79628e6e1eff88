"""The producer thread: takes requests from a source and queues them, feeling backpressure."""

from __future__ import annotations

from typing import Callable

from ..clock import Clock, monotonic
from ..errors import StateNotWritten
from ..exits import StopReason
from ..parts import RequestSource
from ..request import FinalOutcome, InvalidInput, Request, UnknownFate, Work
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
    ``on_stop``: that line and the rest are left for the next run. Stopped, it takes in what the source
    read ahead and no next run can read again (a pipe's lines), for the stop to record."""

    def __init__(
        self,
        queues: QueueManager,
        source: RequestSource,
        stop: SelectableEvent,
        *,
        on_exhausted: Callable[[], None] = lambda: None,
        on_stop: Callable[[StopReason, str], None] = lambda reason, message: None,
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
            self._on_stop(StopReason.OUTPUT_FAILED, f"{exc}: no more input is read")
            ended = False
        if not ended:
            # Stopped: what the source read ahead and no next run can read again is taken in all the same,
            # to be recorded with the stop's outcome (the queues are closed, or close soon and drain it).
            for item in self._source.left_over():
                self._queue(item)
        elif self._queues.wait_until_settled():
            self._on_exhausted()

    def _take_in(self) -> bool:
        """Queue each request of the source: True once it has ended, False if stopped or the queues closed first."""
        for item in self._source.read(self._stopping):
            if not self._queue(item):
                return False
        return not self._stopping.is_set()

    def _queue(self, item: Work | InvalidInput | UnknownFate) -> bool:
        """Queue a request, or record a line that is none; False if the queues are closed (it is recorded then)."""
        if isinstance(item, InvalidInput):
            invalid = Request(item.id, self._clock(), receipt=item.receipt, where=item.where, digest=item.digest)
            self._queues.reject(invalid, FinalOutcome.INVALID_INPUT, f"{item.where}: {item.reason}")
        elif isinstance(item, UnknownFate):
            self._queues.reject(Request(item.id, self._clock(), receipt=item.receipt), FinalOutcome.UNKNOWN,
                                item.reason)
        else:
            return self._queues.submit(Request(item.id, self._clock(), item.params, item.resumed, item.sent_on,
                                               receipt=item.receipt, where=item.where, method=item.method,
                                               path=item.path, weight=item.weight))
        return True
