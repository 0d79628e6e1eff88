"""Base classes for the daemon's threads: a death is never silent, is restarted while a budget that recovers
over time lasts, and periodic work waits on the stop event."""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable

from .clock import Clock, monotonic

__all__ = ["RESTART_PERIOD", "SHUTDOWN_POLL", "LoopThread", "ManagedThread", "PeriodicThread", "RestartBudget"]

log = logging.getLogger(__name__)

#: Seconds over which a supervised thread's restarts are counted: a thread dying in a loop (a bug on every
#: pass) spends its budget within seconds; one dying now and then (a store's failover once a week) never does.
RESTART_PERIOD = 600.0
#: How often a serving loop (the control API's, the metrics endpoint's) looks whether it is asked to stop: a stop
#: waits this long at most (the standard library's half second would add as much to every drain).
SHUTDOWN_POLL = 0.1


class RestartBudget:
    """At most ``max_restarts`` restarts within any ``period`` seconds (a sliding window), by ``clock``.
    Used by the one thread it belongs to: no lock."""

    def __init__(self, max_restarts: int, period: float = RESTART_PERIOD, clock: Clock = monotonic) -> None:
        if max_restarts < 0 or period <= 0:
            raise ValueError(f"need max_restarts >= 0 and period > 0, got {max_restarts} and {period}")
        self.max_restarts = max_restarts
        self.period = period
        self._clock = clock
        self._restarts: deque[float] = deque()  # when each restart within the period was made, oldest first

    def __repr__(self) -> str:
        return f"<RestartBudget {self.recent} of {self.max_restarts} in {self.period:.0f} s>"

    @property
    def recent(self) -> int:
        """Restarts within the period, as of the last death."""
        return len(self._restarts)

    def allows_restart(self) -> bool:
        """A death now: True if it may be restarted (the restart is then counted), False if ``max_restarts``
        restarts were made within the last ``period`` already."""
        now = self._clock()
        while self._restarts and self._restarts[0] <= now - self.period:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        return True


class ManagedThread(threading.Thread):
    """A named daemon thread that supervises itself.

    Subclasses implement ``work()``, which must be safe to call again: when it
    raises, the traceback is logged and ``work()`` starts over, while its
    ``RestartBudget`` lasts. Past that the exception is kept in ``failure``, the
    ``on_give_up`` callback is told (the daemon stops, exit code 1) and the thread
    ends. The daemon reads ``failure`` after joining to tell a clean exit from a death.
    ``restarts`` counts every restart of the run.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.failure: BaseException | None = None
        self.restarts = 0
        self._budget = RestartBudget(0)
        self._on_give_up: Callable[["ManagedThread"], None] = lambda thread: None

    def supervise(
        self, max_restarts: int, on_give_up: Callable[["ManagedThread"], None], *, period: float = RESTART_PERIOD,
        clock: Clock = monotonic,
    ) -> None:
        """Restart ``work()`` after a death, at most ``max_restarts`` times within any ``period`` seconds;
        past that call ``on_give_up``. Before start()."""
        self._budget = RestartBudget(max_restarts, period, clock)
        self._on_give_up = on_give_up

    def run(self) -> None:
        while True:
            try:
                self.work()
                return
            except BaseException as exc:
                budget = self._budget
                if not budget.allows_restart():
                    self.failure = exc
                    log.critical("thread %s died for good: %d restarts within %.0f s already (%d in all)", self.name,
                                 budget.max_restarts, budget.period, self.restarts, exc_info=True)
                    self._on_give_up(self)
                    return
                self.restarts += 1
                log.critical("thread %s died; restarting it (%d of %d)", self.name, budget.recent, budget.max_restarts,
                             exc_info=True)

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
