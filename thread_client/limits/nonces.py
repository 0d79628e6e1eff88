"""Per-key nonces: wall-clock microseconds, pushed up by one whenever the clock has not moved on, and
never below a durable mark a previous run left."""

from __future__ import annotations

import threading

from ..clock import WallMicros, wall_micros

__all__ = ["INT64_MAX", "MARK_BLOCK", "NonceGenerator"]

INT64_MAX = 2**63 - 1
#: How far ahead a durable mark is written: 10 s of microseconds, so one write per key every 10 s.
MARK_BLOCK = 10_000_000


class NonceGenerator:
    """Strictly increasing nonces for one key, safe to call from many threads.

    Nonces follow the wall clock, and ``max(last + 1, now)`` survives the clock
    stepping back within a run. Across runs the wall clock is not enough (the
    skip-ahead after an invalid nonce runs ahead of it, and clocks get set back),
    so with ``record_mark`` every nonce is covered by a durable high-water mark
    before it is handed out: when a nonce passes the mark, a new mark ``block``
    further on is recorded first. A crash can then only skip nonces, never reuse
    one; the next run starts above the mark (``start_above``).
    """

    def __init__(
        self,
        clock: WallMicros = wall_micros,
        *,
        start_above: int = 0,
        record_mark: Callable[[int], None] | None = None,
        block: int = MARK_BLOCK,
    ) -> None:
        if start_above < 0 or block < 1:
            raise ValueError("start_above must not be negative and block must be positive")
        self._clock = clock
        self._record_mark = record_mark
        self._block = block
        # Guards _last and _marked. Held for the arithmetic and, once per block, for recording the
        # mark: that write must finish before any nonce it covers leaves.
        self._lock = threading.Lock()
        self._last = start_above
        self._marked = start_above

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
            if self._record_mark is not None and nonce > self._marked:
                mark = min(nonce + self._block, INT64_MAX)
                self._record_mark(mark)
                self._marked = mark
            self._last = nonce
            return nonce

    def skip_ahead(self, step: int) -> None:
        """Jump ``step`` past both the last nonce and the clock, after the server refused one."""
        if step < 1:
            raise ValueError(f"step must be positive, got {step}")
        with self._lock:
            self._last = max(self._last, self._clock()) + step
