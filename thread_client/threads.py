"""Base classes for the daemon's threads: a death is never silent, is restarted up to a limit, and periodic
work waits on the stop event."""

from __future__ import annotations

import logging
import threading
from typing import Callable

__all__ = ["LoopThread", "ManagedThread", "PeriodicThread"]

log = logging.getLogger(__name__)


class ManagedThread(threading.Thread):
    """A named daemon thread that supervises itself.

    Subclasses implement ``work()``, which must be safe to call again: when it
    raises, the traceback is logged and ``work()`` starts over, up to
    ``max_restarts`` times. Past that the exception is kept in ``failure``, the
    ``on_give_up`` callback is told (the daemon stops, exit code 1) and the thread
    ends. The daemon reads ``failure`` after joining to tell a clean exit from a death.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.failure: BaseException | None = None
        self.restarts = 0
        self.max_restarts = 0
        self._on_give_up: Callable[["ManagedThread"], None] = lambda thread: None

    def supervise(self, max_restarts: int, on_give_up: Callable[["ManagedThread"], None]) -> None:
        """Restart ``work()`` up to ``max_restarts`` times after a death; then call ``on_give_up``. Before start()."""
        self.max_restarts = max_restarts
        self._on_give_up = on_give_up

    def run(self) -> None:
        while True:
            try:
                self.work()
                return
            except BaseException as exc:
                if self.restarts >= self.max_restarts:
                    self.failure = exc
                    log.critical("thread %s died for good after %d restarts", self.name, self.restarts, exc_info=True)
                    self._on_give_up(self)
                    return
                self.restarts += 1
                log.critical("thread %s died; restarting it (%d of %d)", self.name, self.restarts,
                             self.max_restarts, exc_info=True)

    def work(self) -> None:
        raise NotImplementedError


class LoopThread(ManagedThread):
    """A part's own loop (the lease keeper, the results writer) as a managed thread: the part keeps the loop's
    state, so ``loop`` must be safe to call again after it raised, and the daemon supervises, starts and
    joins the thread with its own (``parts.owned_threads``)."""

    def __init__(self, name: str, loop: Callable[[], None]) -> None:
        super().__init__(name)
        self._loop = loop

    def work(self) -> None:
        self._loop()


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
