"""What the console shows that the metrics do not keep: accepts per second over the last seconds, per key, and
the latest failed attempts."""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..clock import Clock, monotonic
from ..flow.listener import Listener
from ..policy.answers import Outcome

__all__ = ["ConsoleFeed", "RATE_SECONDS", "RECENT_ERRORS", "RecentError"]

#: The accept rates are over this many seconds (one counter per second and key).
RATE_SECONDS = 10
#: The failed attempts kept, newest first.
RECENT_ERRORS = 20


@dataclass(frozen=True, slots=True)
class RecentError:
    at: float  # Unix time
    key: str  # masked
    request: str
    outcome: str
    detail: str


class _PerSecond:
    """A ring of ``RATE_SECONDS`` one-second counters: constant memory, O(1) per count."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = [0] * RATE_SECONDS
        self.seconds = [-1] * RATE_SECONDS  # the whole second each counter is for

    def count(self, second: int) -> None:
        slot = second % RATE_SECONDS
        if self.seconds[slot] != second:
            self.seconds[slot], self.counts[slot] = second, 0
        self.counts[slot] += 1

    def total(self, second: int) -> int:
        """The counts of the ``RATE_SECONDS`` seconds up to and with ``second``."""
        return sum(n for at, n in zip(self.seconds, self.counts) if second - RATE_SECONDS < at <= second)


class ConsoleFeed(Listener):
    """A ``Listener`` for the console: each accept counted in its key's ring, each failed attempt kept among the
    latest ``RECENT_ERRORS``. A hook holds the lock for one increment or one append; reads copy under it."""

    def __init__(self, clock: Clock = monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        # Guards _accepts and _errors; held for one increment or append, or one read.
        self._lock = threading.Lock()
        self._accepts: dict[str, _PerSecond] = collections.defaultdict(_PerSecond)
        self._errors: collections.deque[RecentError] = collections.deque(maxlen=RECENT_ERRORS)

    def attempted(self, key: str, outcome: Outcome, round_trip: float | None = None) -> None:
        if outcome is Outcome.ACCEPTED:
            second = int(self._clock())
            with self._lock:
                self._accepts[key].count(second)

    def failed(self, key: str, request_id: str, outcome: Outcome, detail: str) -> None:
        error = RecentError(self._wall(), key, request_id, outcome.value, detail)
        with self._lock:
            self._errors.append(error)

    def accepted_per_s(self) -> dict[str, float]:
        """Masked key name -> accepts per second over the last ``RATE_SECONDS`` (a key with none yet is absent)."""
        second = int(self._clock())
        with self._lock:
            return {key: ring.total(second) / RATE_SECONDS for key, ring in self._accepts.items()}

    def recent_errors(self) -> list[RecentError]:
        """The latest failed attempts, newest first."""
        with self._lock:
            return list(reversed(self._errors))
