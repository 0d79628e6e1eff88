"""The producer thread: creates requests with consecutive ids and queues them, feeling backpressure."""

from __future__ import annotations

import itertools
import random
import threading

from .clock import Clock, monotonic
from .queue_manager import QueueManager
from .request import Request
from .threads import ManagedThread

__all__ = ["LOADS", "Producer"]

#: "exercise": the original load, a request then a sleep of randint(0, 21) ms (~91-95/s offered).
#: "saturate": no sleep; the main queue stays full, to measure capacity.
LOADS = ("exercise", "saturate")
_EXERCISE_MAX_GAP_MS = 21


class Producer(ManagedThread):
    """Runs until ``stop`` is set; a request caught by the stop while waiting for room is buried as "shutdown"."""

    def __init__(
        self,
        queues: QueueManager,
        stop: threading.Event,
        *,
        load: str = "exercise",
        rng: random.Random | None = None,
        clock: Clock = monotonic,
    ) -> None:
        if load not in LOADS:
            raise ValueError(f"load must be one of {LOADS}, got {load!r}")
        super().__init__("producer")
        self._queues = queues
        self._stopping = stop
        self._load = load
        self._rng = rng or random.Random()
        self._clock = clock

    def work(self) -> None:
        for req_id in itertools.count(1):
            if self._stopping.is_set():
                return
            now = self._clock()
            if not self._queues.submit(Request(req_id, now, now + self._queues.ttl), self._stopping):
                return
            if self._load == "exercise":
                self._stopping.wait(self._rng.randint(0, _EXERCISE_MAX_GAP_MS) / 1000)
