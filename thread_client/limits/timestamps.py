"""Timestamps in place of nonces, for an API that checks ``|server time - timestamp| < recv_window``: our wall
clock corrected by an estimate of the server's clock, learnt from its answers (``Date``) or a time endpoint."""

from __future__ import annotations

import email.utils
import math
import threading
import time
from typing import Callable

__all__ = ["ServerClock", "ServerTimestamps"]

#: Wall-clock milliseconds since the epoch, as a float (the host's clock; tests pass a fake).
WallMillis = Callable[[], float]


def wall_millis() -> float:
    return time.time_ns() / 1e6


class ServerClock:
    """How far the server's clock is ahead of ours (ms), from answers the server stamped.

    A stamp ``T`` read between our ``sent`` and ``received`` says the offset lies in
    ``[T - received, T + resolution - sent]`` (a ``Date`` header has whole seconds:
    resolution 1000 ms). Every stamp narrows the interval kept; the estimate is its
    middle. Stamps taken across second boundaries narrow it to a few ms. A stamp
    that disagrees with the interval (the server's clock or ours was set) starts it
    anew from that stamp alone. Safe to call from every worker at once.
    """

    def __init__(self, wall_ms: WallMillis = wall_millis) -> None:
        self.wall_ms = wall_ms
        # Guards the interval and the estimate; held only for the arithmetic.
        self._lock = threading.Lock()
        self._low, self._high = -math.inf, math.inf
        self._offset = 0.0  # read without the lock: a float attribute is read whole
        self._date: tuple[str, float] = ("", 0.0)  # the last Date header read and its value (parsed once), as one

    def __repr__(self) -> str:
        return f"<ServerClock offset={self._offset:.0f} ms (±{(self._high - self._low) / 2:.0f})>"

    @property
    def offset_ms(self) -> float:
        return self._offset

    @property
    def learnt(self) -> bool:
        return math.isfinite(self._high - self._low)

    def now_ms(self) -> float:
        """The server's clock as we estimate it now."""
        return self.wall_ms() + self._offset

    def observe_date(self, date: str | None, sent_ms: float, received_ms: float) -> None:
        """An answer's ``Date`` header, read from an answer to a request sent at ``sent_ms`` (our wall clock)."""
        if not date:
            return
        last, last_ms = self._date
        if date != last:
            try:
                parsed = email.utils.parsedate_to_datetime(date)
            except (TypeError, ValueError, OverflowError):
                return
            if parsed.tzinfo is None:
                return
            last_ms = parsed.timestamp() * 1000
            self._date = (date, last_ms)
        self.observe(last_ms, sent_ms, received_ms, resolution_ms=1000)

    def observe(self, server_ms: float, sent_ms: float, received_ms: float, resolution_ms: float = 1.0) -> None:
        """A server stamp ``server_ms`` (true to ``resolution_ms``) taken between ``sent_ms`` and ``received_ms``."""
        low, high = server_ms - received_ms, server_ms + resolution_ms - sent_ms
        with self._lock:
            narrowed_low, narrowed_high = max(low, self._low), min(high, self._high)
            if narrowed_low > narrowed_high:  # a clock was set: what was learnt no longer holds
                narrowed_low, narrowed_high = low, high
            self._low, self._high = narrowed_low, narrowed_high
            self._offset = (narrowed_low + narrowed_high) / 2


class ServerTimestamps:
    """A key's "nonces" for a timestamp API: the server's clock as estimated now, in ms or µs. Not strictly
    increasing (the server does not ask it), so a corrected estimate takes effect on the next send. The
    interface of ``NonceGenerator``, shared by every key."""

    def __init__(self, clock: ServerClock, per_ms: int = 1) -> None:
        self._clock = clock
        self._per_ms = per_ms
        self._last = 0

    def __repr__(self) -> str:
        return f"<ServerTimestamps {self._clock!r}>"

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int:
        self._last = stamp = int(self._clock.now_ms() * self._per_ms)
        return stamp

    def skip_ahead(self, step: int) -> None:
        """A refused timestamp is not behind a counter: the answer's own ``Date`` re-teaches the clock."""

    def reserve_ahead(self) -> None:
        """Nothing to reserve: timestamps need no block."""

    def reserve_again(self) -> None:
        """Nothing is reserved: timestamps need no block."""
