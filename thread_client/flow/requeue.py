"""The DLQ-requeue thread: moves requests whose backoff is over back to the front of the main queue."""

from __future__ import annotations

import threading

from .queues import QueueManager
from ..threads import ManagedThread

__all__ = ["Requeuer"]


class Requeuer(ManagedThread):
    def __init__(self, queues: QueueManager, stop: threading.Event, poll: float = 0.25) -> None:
        super().__init__("dlq-requeue")
        self._queues = queues
        self._stopping = stop
        self._poll = poll

    def work(self) -> None:
        while not self._stopping.is_set():
            self._queues.requeue_ready(self._stopping, timeout=self._poll)
