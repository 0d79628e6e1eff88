"""Per-key nonces: wall-clock microseconds, pushed up by one whenever the clock has not moved on."""

from __future__ import annotations

import threading

from ..clock import WallMicros, wall_micros

__all__ = ["INT64_MAX", "NonceGenerator"]

INT64_MAX = 2**63 - 1


class NonceGenerator:
    """Strictly increasing nonces for one key, safe to call from many threads.

    Starting from the wall clock makes a restarted client begin above every nonce
    its previous run sent (at a few hundred per second the counter never runs ahead
    of the clock), and taking ``max(last + 1, now)`` survives the clock stepping back.
    """

    def __init__(self, clock: WallMicros = wall_micros) -> None:
        self._clock = clock
        # Guards _last; held only for the arithmetic.
        self._lock = threading.Lock()
        self._last = 0

    def __repr__(self) -> str:
        return f"<NonceGenerator last={self._last}>"

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int:
        """The next nonce; raises OverflowError past the signed 64-bit range."""
        with self._lock:
            nonce = max(self._last + 1, self._clock())
            if nonce > INT64_MAX:
                raise OverflowError("nonce would not fit in a signed 64-bit integer")
            self._last = nonce
            return nonce

    def skip_ahead(self, step: int) -> None:
        """Jump ``step`` past both the last nonce and the clock, after the server refused one."""
        if step < 1:
            raise ValueError(f"step must be positive, got {step}")
        with self._lock:
            self._last = max(self._last, self._clock()) + step
