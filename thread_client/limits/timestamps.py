"""Timestamps in place of nonces, for an API that checks ``|server time - timestamp| < recv_window``: our
clock corrected by an estimate of the server's clock, learnt from its answers (``Date``) or a time endpoint."""

from __future__ import annotations

import collections
import email.utils
import math
import threading
import time
from typing import Callable

__all__ = ["AGREE", "ServerClock", "ServerTimestamps"]

#: Milliseconds of a clock, as a float: ours (the daemon's monotonic clock), or the wall clock (a guess).
Millis = Callable[[], float]
#: Readings that must agree before the estimate is used: a lone reading may come from a skewed node.
AGREE = 3
#: Of the last ``RECENT`` readings, ``STEP`` that agree among themselves and not with the estimate mean the
#: server's clock was set: a majority, so one skewed node among several never moves the estimate.
RECENT, STEP = 9, 5
#: How fast two clocks may drift apart (1000 ppm: a crystal's worst is 100, ntpd slews at up to 500): each edge
#: of the interval widens by this much per ms since a reading last set it, so the interval keeps holding the
#: offset between readings. A clock slewed faster (chrony after a large step) is outside the argument; one that
#: was set shows as readings that disagree, and a limit aligned to the clock waits for them (``interval``).
DRIFT = 1e-3


def wall_millis() -> float:
    return time.time_ns() / 1e6


def monotonic_millis() -> float:
    return time.monotonic() * 1000


class ServerClock:
    """How far the server's clock is ahead of ours (ms), from answers the server stamped.

    A stamp ``T`` read between our ``sent`` and ``received`` says the offset lies in
    ``[T - received, T + resolution - sent]`` (a ``Date`` header has whole seconds:
    resolution 1000 ms). The estimate is the interval every reading that agrees with it
    narrows (stamps taken across second boundaries narrow it to a few ms), widened by
    ``DRIFT`` as it ages. A reading that disagrees (a skewed node, or the clock was set)
    moves it by nothing: only ``STEP`` of the last ``RECENT`` readings agreeing among
    themselves start it anew from their common part. It is ``learnt`` once ``AGREE``
    readings agree. Ours is ``local_ms``: the daemon's monotonic clock, so a limit rule
    can map its own instants to the server's; ``guess_ms`` (the wall clock) stands in
    for ``now_ms`` until a reading came. Safe to call from every worker at once.
    """

    def __init__(self, local_ms: Millis = monotonic_millis, guess_ms: Millis = wall_millis,
                 date_lag_ms: float = 1000.0) -> None:
        self.local_ms = local_ms
        self._date_lag_ms = date_lag_ms  # how far behind the server's clock a Date may be (a cached one)
        self._guess_ms = guess_ms
        # Guards the interval, its ages, the count and the recent readings; held only for the arithmetic.
        self._lock = threading.Lock()
        self._low, self._high = -math.inf, math.inf
        self._low_at = self._high_at = 0.0  # when (local ms) a reading last set each edge
        self._agreed = 0  # readings merged into the interval since it last started
        self._recent: collections.deque[tuple[float, float, bool]] = collections.deque(maxlen=RECENT)
        self._offset = 0.0  # read without the lock: a float attribute is read whole
        self._date: tuple[str, float] = ("", 0.0)  # the last Date header read and its value (parsed once), as one

    def __repr__(self) -> str:
        return f"<ServerClock offset={self._offset:.0f} ms (±{(self._high - self._low) / 2:.0f})>"

    @property
    def offset_ms(self) -> float:
        return self._offset

    @property
    def learnt(self) -> bool:
        return self._agreed >= AGREE

    def interval(self, at_ms: float) -> tuple[float, float] | None:
        """The offset's bounds (ms) at our ``at_ms``, aged by the drift; None until ``learnt``, and while one of
        the last ``RECENT`` readings disagrees with them: a skewed node, or the first sign that the server's
        clock was set, which a limit aligned to that clock must not bet on until it is settled either way."""
        with self._lock:
            if self._agreed < AGREE or not all(agrees for _, _, agrees in self._recent):
                return None
            return self._aged(at_ms)

    def _aged(self, at_ms: float) -> tuple[float, float]:
        """The interval widened by the drift since each edge was set; called with the lock held."""
        return (self._low - DRIFT * max(0.0, at_ms - self._low_at),
                self._high + DRIFT * max(0.0, at_ms - self._high_at))

    def now_ms(self) -> float:
        """The server's clock as we estimate it now (the guess until a reading came)."""
        return self.local_ms() + self._offset if self._agreed else self._guess_ms()

    def ahead_of_guess_ms(self) -> float:
        """How far ahead of the guess (the wall clock) the server's clock is estimated now: for the log."""
        return self.now_ms() - self._guess_ms()

    def observe_date(self, date: str | None, sent_ms: float, received_ms: float) -> None:
        """An answer's ``Date`` header, read from an answer to a request sent at ``sent_ms`` (our ``local_ms``)."""
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
        self.observe(last_ms, sent_ms, received_ms, resolution_ms=1000 + self._date_lag_ms)

    def observe(self, server_ms: float, sent_ms: float, received_ms: float, resolution_ms: float = 1.0) -> None:
        """A server stamp ``server_ms`` (true to ``resolution_ms``) taken between ``sent_ms`` and ``received_ms``."""
        low, high = server_ms - received_ms, server_ms + resolution_ms - sent_ms
        with self._lock:
            aged_low, aged_high = self._aged(received_ms)
            agrees = max(low, aged_low) <= min(high, aged_high)
            self._recent.append((low, high, agrees))
            if agrees:
                if low > aged_low:
                    self._low, self._low_at = low, received_ms
                if high < aged_high:
                    self._high, self._high_at = high, received_ms
                self._agreed += 1
            else:
                step = self._step()
                if step is None:
                    return
                (self._low, self._high), self._agreed = step
                self._low_at = self._high_at = received_ms
                self._recent.clear()
            self._offset = (self._low + self._high) / 2

    def _step(self) -> tuple[tuple[float, float], int] | None:
        """The part that most of the recent disagreeing readings share, and how many share it, if ``STEP`` or
        more do (the clock was set); else None. Called with the lock held."""
        dissent = [(low, high) for low, high, agrees in self._recent if not agrees]
        best: tuple[tuple[float, float], int] | None = None
        for point, _ in dissent:  # the deepest point of intervals is one of their lower ends
            sharing = [(low, high) for low, high in dissent if low <= point <= high]
            if len(sharing) >= STEP and (best is None or len(sharing) > best[1]):
                best = (max(low for low, _ in sharing), min(high for _, high in sharing)), len(sharing)
        return best


class ServerTimestamps:
    """A key's "nonces" for a timestamp API: the server's clock as estimated now, in ms, µs or s. Not strictly
    increasing (the server does not ask it), so a corrected estimate takes effect on the next send. The
    interface of ``NonceGenerator``, shared by every key."""

    def __init__(self, clock: ServerClock, per_ms: float = 1) -> None:
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
