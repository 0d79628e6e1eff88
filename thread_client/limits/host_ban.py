"""A ban of the whole host (an exchange's ``418``): every key waits it out, and a ban that comes back soon
after the last one is taken to be longer, as exchanges lengthen them for repeat offenders."""

from __future__ import annotations

import threading
from typing import Callable

from .. import defaults
from ..clock import Clock, monotonic

__all__ = ["HostBan"]

_MIN_PAUSE = 1.0


class HostBan:
    """Holds every key for the length of a ban; ``hold_all`` is the key pool's.

    A ban answer names its length (``Retry-After``), or ``first_pause`` is taken. Answers to
    requests already in flight when the ban began say nothing new and extend nothing. A ban
    that follows the last one within ``memory`` seconds of its end is a repeat: it lasts at
    least twice the last one, whatever the server names (sending early only lengthens a ban).
    Every pause lies between a second (a ``Retry-After: 0`` would send straight back into the
    ban) and ``max_pause`` (three days, the longest ban exchanges document): a server's own length
    is never cut short, only an absurd one.
    """

    def __init__(
        self, hold_all: Callable[[float], None], *, first_pause: float = defaults.BAN_PAUSE,
        memory: float = defaults.BAN_MEMORY, max_pause: float = defaults.MAX_BAN, clock: Clock = monotonic,
    ) -> None:
        self._hold_all = hold_all
        self._max_pause = max(max_pause, _MIN_PAUSE)
        self._first_pause = first_pause
        self._memory = memory
        self._clock = clock
        # Guards the last ban's length and end; the keys are held outside it.
        self._lock = threading.Lock()
        self._pause = 0.0
        self._ends_at = -float("inf")
        self.bans = 0

    def __repr__(self) -> str:
        return f"<HostBan bans={self.bans} last={self._pause:.0f} s>"

    @property
    def active(self) -> bool:
        """Whether a ban holds the keys now (for metrics)."""
        with self._lock:
            return self._clock() < self._ends_at

    def banned(self, retry_after: float | None) -> float:
        """A ban answer came; returns how long from now no key sends (0: the ban known already covers it).
        The keys are held before it returns, either way: the worker that read the answer sends nothing
        more until the ban's end, even while the worker that read the first one is still holding them."""
        now = self._clock()
        with self._lock:
            named = retry_after if retry_after is not None else self._first_pause
            named = min(max(named, _MIN_PAUSE), self._max_pause)
            known = now < self._ends_at and now + named <= self._ends_at  # a send that left before the ban was known
            if known:
                pause = self._ends_at - now
            else:
                repeat = now < self._ends_at + self._memory and self.bans > 0 and now >= self._ends_at
                pause = min(max(named, 2 * self._pause), self._max_pause) if repeat else named
                self._pause, self._ends_at = pause, now + pause
                self.bans += 1
        self._hold_all(pause)  # idempotent: a limiter holds until the latest end it was given
        return 0.0 if known else pause
