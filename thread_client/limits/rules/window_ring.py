"""A ring of slots, each free again a window after its send was surely stamped: rolling windows and concurrency."""

from __future__ import annotations

import heapq
import math

from .base import ROUNDING_GUARD, RuleState

__all__ = ["WindowRing"]


class WindowRing(RuleState):
    """At most ``limit`` units stamped in any window of the server (``window`` here: the server's period and
    the ``MS_GUARD``), or, with ``window`` 0, at most ``limit`` in flight at once (a concurrency limit).

    Why it never trips: a unit's slot frees only ``window`` after the latest instant its send can have been
    stamped, so when a slot is reused, every stamp it held has left the server's
    window whatever the latencies were; ``limit`` slots, ``limit`` stamps in any window. A fixed-window
    limit of the same figures is met too: every fixed window lies inside a rolling one. With ``window`` 0
    the slot frees at the answer, after which the server no longer counts the request as in flight.
    """

    def __init__(self, limit: int, window: float) -> None:
        if limit < 1 or window < 0:
            raise ValueError(f"a ring needs a limit of at least 1 and a window not negative, got {limit}, {window}")
        self._limit = limit
        self._window = window + ROUNDING_GUARD if window > 0 else 0.0
        # Slots free from the start (never used, or given back unspent), and the times the others free, as a
        # heap; the rest are in flight. A large limit (thousands a minute) costs only the slots it has used.
        self._idle = limit
        self._freeing: list[float] = []
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"<WindowRing limit={self._limit} window={self._window:.6f} in_flight={self._in_flight}>"

    def ready_at(self, now: float, cost: int) -> float:
        nth = cost - self._idle  # of the freeing slots, the one whose time it is
        if nth <= 0:
            return -math.inf
        if nth > len(self._freeing):
            return math.inf
        return self._freeing[0] if nth == 1 else heapq.nsmallest(nth, self._freeing)[-1]

    def least_ready_at(self, now: float, cost: int) -> float:
        nth = cost - self._idle
        if nth <= 0:
            return -math.inf
        # The slots in flight, answered now, all free a window from now: the nth free time counts them in.
        soonest = heapq.nsmallest(nth, self._freeing)
        answered_now = now + self._window
        before = sum(1 for free_at in soonest if free_at < answered_now)
        if before >= nth:
            return soonest[nth - 1]
        if before + self._in_flight >= nth:
            return answered_now
        return soonest[nth - self._in_flight - 1] if nth - self._in_flight <= len(soonest) else math.inf

    def available(self, now: float) -> int:
        return self._idle + sum(1 for free_at in self._freeing if free_at <= now)

    def take(self, now: float, cost: int) -> int:
        while self._freeing and self._freeing[0] <= now:  # free already: idle, so the heap holds only what is not
            heapq.heappop(self._freeing)
            self._idle += 1
        from_idle = min(cost, self._idle)
        self._idle -= from_idle
        for _ in range(cost - from_idle):
            heapq.heappop(self._freeing)
        self._in_flight += cost
        return cost

    def settle(self, token: int, stamped_by: float) -> None:
        self._in_flight -= token
        for _ in range(token):
            heapq.heappush(self._freeing, stamped_by + self._window)

    def cancel(self, token: int) -> None:
        self._in_flight -= token
        self._idle += token

    def widen(self) -> float:
        if self._window > 0:
            self._window += 0.005
        return self.pace

    @property
    def pace(self) -> float:
        return max(0.0, self._window - ROUNDING_GUARD)

    @property
    def forget_after(self) -> float:
        return self._window
