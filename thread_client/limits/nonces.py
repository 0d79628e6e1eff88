"""Per-key nonces: wall-clock microseconds, pushed up by one whenever the clock has not moved on, and
never outside a block reserved first (a durable mark on this host, or a block in the shared store)."""

from __future__ import annotations

import threading

from typing import Callable

from ..clock import WallMicros, wall_micros
from ..errors import StateNotWritten

__all__ = ["BLOCK", "INT64_MAX", "NonceGenerator", "Reserve"]

INT64_MAX = 2**63 - 1
#: How far ahead a block reaches: 10 s of microseconds. Nonces follow the clock, so this is one
#: reservation per key every 10 s (a durable mark on this host, or a round trip to the store).
BLOCK = 10_000_000
#: Called with the nonce about to be used once it passes the reserved block; returns the next block
#: (first, last), ``first`` at or above the one asked for, made safe (durable, or held in the store)
#: before it returns. May raise: then no nonce is handed out (an OSError, a mark the state dir refused,
#: is raised as StateNotWritten).
Reserve = Callable[[int], tuple[int, int]]


class NonceGenerator:
    """Strictly increasing nonces for one key, safe to call from many threads.

    Nonces follow the wall clock, and ``max(last + 1, now)`` survives the clock
    stepping back within a run. Across runs (and processes) the wall clock is not
    enough: the skip-ahead after an invalid nonce runs ahead of it, clocks get set
    back, hosts disagree. So with ``reserve`` every nonce lies in a block reserved
    before it is handed out: when a nonce passes the block, the next block is
    reserved first. A crash can then only skip nonces, never reuse one; the next
    run (or owner) starts above every block reserved (``start_above`` for a mark
    read back on this host).
    """

    def __init__(self, clock: WallMicros = wall_micros, *, start_above: int = 0, reserve: Reserve | None = None) -> None:
        if start_above < 0:
            raise ValueError("start_above must not be negative")
        self._clock = clock
        self._reserve = reserve
        # Guards _last and _reserved_to. Held for the arithmetic and, once per block, for reserving the
        # next block: that must finish before any nonce in it leaves.
        self._lock = threading.Lock()
        self._last = start_above
        self._reserved_to = start_above

    def __repr__(self) -> str:
        return f"<NonceGenerator last={self._last}>"

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int:
        """The next nonce; raises OverflowError past the signed 64-bit range, and StateNotWritten if the
        durable mark of the next block could not be written (no nonce is handed out)."""
        with self._lock:
            nonce = max(self._last + 1, self._clock())
            if nonce > INT64_MAX:
                raise OverflowError("nonce would not fit in a signed 64-bit integer")
            if self._reserve is not None and nonce > self._reserved_to:
                try:
                    first, self._reserved_to = self._reserve(nonce)
                except OSError as exc:
                    raise StateNotWritten("a nonce mark", exc) from exc
                nonce = max(nonce, first)
            self._last = nonce
            return nonce

    def reserve_again(self) -> None:
        """Forget the block reserved so far: it may no longer be this process's (a shared key's lease
        was lost and taken again, and another owner reserved above it meanwhile). The next nonce
        reserves a new block first."""
        with self._lock:
            self._reserved_to = min(self._reserved_to, self._last)

    def skip_ahead(self, step: int) -> None:
        """Jump ``step`` past both the last nonce and the clock, after the server refused one."""
        if step < 1:
            raise ValueError(f"step must be positive, got {step}")
        with self._lock:
            self._last = max(self._last, self._clock()) + step
