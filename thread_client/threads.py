"""Base classes for the daemon's threads: a death is never silent, and periodic work waits on the stop event."""

from __future__ import annotations

import logging
import threading
from typing import Callable

__all__ = ["ManagedThread", "PeriodicThread"]

log = logging.getLogger(__name__)


class ManagedThread(threading.Thread):
    """A named daemon thread whose outermost handler logs the traceback and keeps the exception.

    Subclasses implement ``work()``; the daemon reads ``failure`` after joining to
    tell a clean exit from a death.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:
            self.failure = exc
            log.critical("thread %s died", self.name, exc_info=True)

    def work(self) -> None:
        raise NotImplementedError


class PeriodicThread(ManagedThread):
    """Calls ``tick()`` every ``interval`` seconds until ``stop`` is set; a failing tick is logged, not fatal."""

    def __init__(self, name: str, interval: float, stop: threading.Event, tick: Callable[[], None]) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        super().__init__(name)
        self._interval = interval
        self._stopping = stop
        self._tick = tick

    def work(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._tick()
            except Exception:
                log.exception("%s: tick failed", self.name)
