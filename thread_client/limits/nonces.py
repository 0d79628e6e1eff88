"""Per-key nonces: wall-clock microseconds, pushed up by one whenever the clock has not moved on, and
never outside a block reserved first (a durable mark on this host, or a block in the shared store)."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..clock import WallMicros, wall_micros
from ..errors import StateNotWritten

__all__ = ["BLOCK", "INT64_MAX", "NonceGenerator", "Reserve"]

INT64_MAX = 2**63 - 1
#: How far ahead a block reaches: 10 s of microseconds. Nonces follow the clock, so this is one
#: reservation per key every 10 s (a durable mark on this host, or a round trip to the store).
BLOCK = 10_000_000
#: Called with the lowest nonce the block must cover; returns the block (first, last), ``first`` at or
#: above the one asked for, made safe (durable, or held in the store) before it returns. May raise: then
#: no nonce is handed out from it (an OSError, a mark the state dir refused, is raised as StateNotWritten).
Reserve = Callable[[int], tuple[int, int]]
#: After an early reservation failed (the store away, the disk full), the next early try waits this long
#: (microseconds): the current block still covers the nonces meanwhile, and no send pays for the retries.
EARLY_RETRY_US = 1_000_000

log = logging.getLogger(__name__)


class NonceGenerator:
    """Strictly increasing nonces for one key, safe to call from many threads.

    Nonces follow the wall clock, and ``max(last + 1, now)`` survives the clock
    stepping back within a run. Across runs (and processes) the wall clock is not
    enough: the skip-ahead after an invalid nonce runs ahead of it, clocks get set
    back, hosts disagree. So with ``reserve`` every nonce lies in a block reserved
    before it is handed out. A crash can then only skip nonces, never reuse one; the
    next run (or owner) starts above every block reserved (``start_above`` for a mark
    read back on this host).

    Reserving is I/O (two fsyncs, a store round trip), so it is kept apart from
    drawing: ``reserve_ahead()``, called holding no lock, reserves the block the next
    nonce needs, and the following one early once the current block is half used;
    ``next()`` only hands out numbers from a block already reserved, and may be
    called under a caller's lock.
    """

    def __init__(self, clock: WallMicros = wall_micros, *, start_above: int = 0, reserve: Reserve | None = None) -> None:
        if start_above < 0:
            raise ValueError("start_above must not be negative")
        self._clock = clock
        self._reserve = reserve
        # One reservation at a time; held across the reservation's I/O, and taken before _lock, never after.
        self._reserving = threading.Lock()
        # Guards the fields below, for the arithmetic only: never held during a reservation.
        self._lock = threading.Lock()
        self._last = start_above
        self._first = self._reserved_to = start_above  # the block nonces are drawn from now
        self._ahead: tuple[int, int] | None = None  # the block reserved early, drawn from once the current one ends
        self._generation = 0  # moves on when the blocks reserved so far are forgotten
        self._early_after = 0  # no early reservation before this (wall micros): the last one failed

    def __repr__(self) -> str:
        return f"<NonceGenerator last={self._last}>"

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int | None:
        """The next nonce, from a block already reserved (no I/O, no wait); None if no block covers it:
        call ``reserve_ahead()`` first, holding no lock. Raises OverflowError past the signed 64-bit range."""
        with self._lock:
            nonce = max(self._last + 1, self._clock())
            if nonce > INT64_MAX:
                raise OverflowError("nonce would not fit in a signed 64-bit integer")
            if self._reserve is not None:
                if nonce > self._reserved_to:
                    if self._ahead is None or nonce > self._ahead[1]:
                        return None
                    (self._first, self._reserved_to), self._ahead = self._ahead, None
                nonce = max(nonce, self._first)  # a block may start above the clock (the store's TIME)
            self._last = nonce
            return nonce

    def reserve_ahead(self) -> None:
        """Make sure a reserved block covers the next nonce, reserving it now if none does (this blocks
        for the reservation's I/O), and reserve the following block early once the current one is half
        used (unless another thread is reserving already). Never call it holding a lock ``next()`` is
        drawn under. Raises StateNotWritten if a durable mark could not be written, or what ``reserve``
        raises (KeyNotHeld): no nonce is handed out from that block."""
        if self._reserve is None:
            return
        with self._lock:
            wanted, needed = self._wanted()
        if wanted is None or not self._reserving.acquire(blocking=needed):
            return  # nothing due, or an early reservation runs already (the current block covers the next nonce)
        try:
            with self._lock:
                wanted, needed = self._wanted()
                generation = self._generation
            if wanted is None:
                return
            try:
                block = self._reserve(wanted)
            except Exception as exc:
                if not needed:  # an early reservation: the current block still covers the next nonces
                    with self._lock:
                        self._early_after = self._clock() + EARLY_RETRY_US
                    log.warning("nonces: reserving the next block early failed (%s); tried again in a second, "
                                "or when the current block ends", exc)
                    return
                if isinstance(exc, OSError):
                    raise StateNotWritten("a nonce mark", exc) from exc
                raise
            with self._lock:
                if generation == self._generation:  # else reserved under a lease given up meanwhile
                    self._add(block)
        finally:
            self._reserving.release()

    def _wanted(self) -> tuple[int | None, bool]:
        """(the nonce the next block must start at, or None if none is due yet; whether the next nonce needs
        it). Called with _lock held."""
        upcoming = max(self._last + 1, self._clock())
        if upcoming > INT64_MAX:
            return None, False  # next() refuses it: nothing to reserve
        if upcoming > self._reserved_to and (self._ahead is None or upcoming > self._ahead[1]):
            return upcoming, True
        if (self._ahead is None and self._reserved_to < INT64_MAX and 2 * upcoming > self._first + self._reserved_to
                and upcoming >= self._early_after):
            return self._reserved_to + 1, False
        return None, False

    def _add(self, block: tuple[int, int]) -> None:
        """Draw from ``block`` now if the current block is used up, else once it is. Called with _lock held."""
        if max(self._last + 1, self._clock()) > self._reserved_to:
            (self._first, self._reserved_to), self._ahead = block, None
        else:
            self._ahead = block

    def reserve_again(self) -> None:
        """Forget the blocks reserved so far (and one being reserved now): they may no longer be this
        process's (a shared key's lease was lost and taken again, and another owner reserved above them
        meanwhile). The next nonce needs a new block first."""
        with self._lock:
            self._reserved_to = min(self._reserved_to, self._last)
            self._ahead = None
            self._generation += 1

    def skip_ahead(self, step: int) -> None:
        """Jump ``step`` past both the last nonce and the clock, after the server refused one."""
        if step < 1:
            raise ValueError(f"step must be positive, got {step}")
        with self._lock:
            self._last = max(self._last, self._clock()) + step
