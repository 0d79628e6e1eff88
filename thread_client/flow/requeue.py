"""The DLQ-requeue thread: moves requests whose backoff is over back to the front of the main queue."""

from __future__ import annotations

from ..errors import QueueClosed
from ..threads import ManagedThread
from .queues import QueueManager

__all__ = ["Requeuer"]


class Requeuer(ManagedThread):
    """Blocks on the DLQ until a request is ready, then on the main queue until it has room; ends when
    the queues are closed (the stop wakes it at once)."""

    def __init__(self, queues: QueueManager) -> None:
        super().__init__("dlq-requeue")
        self._queues = queues

    def work(self) -> None:
        try:
            while True:
                self._queues.requeue_ready()
        except QueueClosed:
            return
