"""A fixed window aligned to the server's clock, as the learnt offset places it: a rolling ring until it can."""

from __future__ import annotations

import itertools
import math

from ..timestamps import ServerClock
from .base import MS_GUARD, ROUNDING_GUARD, RuleState
from .window_ring import WindowRing

__all__ = ["AlignedWindow"]

_GUARD_MS = MS_GUARD * 1000


class AlignedWindow(RuleState):
    """At most ``limit`` units stamped in each window k = [k x P, (k+1) x P) of the server's clock (ms), where
    ``clock`` learns how far that clock is ahead of ours (this client's clock in ms, as the limiter's).

    Why it never trips. The clock gives the offset as an interval [low, high], never a point; a stamp made at
    our instant s reads between ``1000 s + low`` and ``1000 s + high`` on the server's clock, and a guard of
    1 ms on each side covers its whole milliseconds. A send at ``a`` is stamped no earlier than ``a``, so in
    window ``first(a)`` = the window of ``1000 a + low - 1 ms`` or a later one; settled with a bound ``b``
    (its answer, or the unanswered hold), in ``last(b)`` = the window of ``1000 b + high + 1 ms`` or an
    earlier one. The state counts each send in every window it might land in: from ``first`` on while in
    flight, ``first`` to ``last`` once settled; and allows a send only if every window from its ``first``
    on stays within ``limit`` with it. Whatever window the server puts each stamp in, it counted there.

    It keeps counts per window boundary (a send adds its cost where its windows start and takes it off after
    the last), folded up as windows pass: memory is bounded by the windows ahead, not by the sends.

    Until the clock is learnt to within half a window, it is the ring of the same figures (safe whatever the
    alignment) and every send still counts: taken blind, from the first window on while in flight; settled
    blind, it keeps the aligned counts off until its window surely ended. The ring sees every send but vets
    only those sent while it rules: should the clock grow too loose again (no reading for long, a widened
    guard), the ring rules again only once every send it did not vet surely left its window. (A step of
    the server's clock is outside the argument: its own windows jump with it.)
    With the windows known and threads enough, a key sends ``limit`` units each period: ``L / P``.

    The clock's lock is taken under the limiter's (never the other way round: the clock calls nothing).
    """

    def __init__(self, limit: int, period: float, clock: ServerClock) -> None:
        if limit < 1 or not 0 < period < math.inf:
            raise ValueError(f"a fixed window needs a limit of at least 1 and a positive period, got {limit}, {period}")
        self._limit = limit
        self._period_ms = period * 1000
        self._clock = clock
        self._ring = WindowRing(limit, period + MS_GUARD)
        self._guard_ms = _GUARD_MS
        # Units added where a send's windows start and taken off after its last: the load of window k is the sum
        # of the entries up to k. ``_open``: the units in flight, by their first window (-inf: taken blind).
        self._starts: dict[float, int] = {}
        self._open: dict[float, int] = {}
        self._blind_until = -math.inf  # a send settled blind may be counted in a window until then
        # The units the windows let through (not the ring) still in flight, and until when the settled ones may
        # be counted in a window: the ring, which did not vet them, rules again only after both.
        self._unvetted = 0
        self._unvetted_until = -math.inf

    def __repr__(self) -> str:
        return (f"<AlignedWindow limit={self._limit} period={self._period_ms:.0f} ms "
                f"in_flight={sum(self._open.values())} {self._clock!r}>")

    def _windows_rule(self, now: float) -> tuple[float, float] | None:
        """The offset's bounds if the windows decide at ``now``, else None (the ring does)."""
        offset = self._offset(now)
        return offset if offset is not None and now >= self._blind_until else None

    def _ring_from(self) -> float:
        """When the ring may vet sends again: every send the windows let through surely left its window."""
        return math.inf if self._unvetted else self._unvetted_until

    def _offset(self, now: float) -> tuple[float, float] | None:
        """The learnt offset's bounds (ms) if narrow enough to place sends in windows, else None."""
        bounds = self._clock.interval(now * 1000)
        if bounds is None or bounds[1] - bounds[0] + 2 * self._guard_ms > self._period_ms / 2:
            return None
        return bounds

    def _window(self, server_ms: float) -> int:
        return math.floor(server_ms / self._period_ms)

    def _ready_over(self, starts: dict[float, int], low: float, cost: int) -> float:
        """The earliest instant whose ``first`` window lies past every window that ``cost`` more would overfill."""
        edges = sorted(starts)
        loads = list(itertools.accumulate(starts[edge] for edge in edges))
        if (loads[-1] if loads else 0) + cost > self._limit:  # what is in flight may all land in one window
            return math.inf
        for index in range(len(edges) - 2, -1, -1):
            if loads[index] + cost > self._limit:  # windows edges[index] .. edges[index + 1] - 1 are full
                return (edges[index + 1] * self._period_ms - low + self._guard_ms) / 1000 + ROUNDING_GUARD
        return -math.inf

    def ready_at(self, now: float, cost: int) -> float:
        offset = self._windows_rule(now)
        if offset is None:
            return max(self._ring.ready_at(now, cost), self._ring_from())
        return self._ready_over(self._starts, offset[0], cost)

    def least_ready_at(self, now: float, cost: int) -> float:
        offset = self._windows_rule(now)
        if offset is None:
            answered_now = now + (self._period_ms + self._guard_ms) / 1000 if self._unvetted else -math.inf
            return max(self._ring.least_ready_at(now, cost), self._unvetted_until, answered_now)
        answered_now = dict(self._starts)  # each send in flight, answered now, ends with the window of now
        after = self._window(now * 1000 + offset[1] + self._guard_ms) + 1
        answered_now[after] = answered_now.get(after, 0) - sum(self._open.values())
        return self._ready_over(answered_now, offset[0], cost)

    def available(self, now: float) -> int:
        offset = self._windows_rule(now)
        if offset is None:
            return self._ring.available(now) if now >= self._ring_from() else 0
        # The room left in the fullest window a send now might land in: the first one's and every later one's.
        first = self._window(now * 1000 + offset[0] - self._guard_ms)
        load, fullest = 0, 0
        for edge in sorted(self._starts):
            load += self._starts[edge]
            if edge <= first:
                fullest = load
            else:
                fullest = max(fullest, load)
        return max(0, self._limit - fullest)

    def take(self, now: float, cost: int) -> tuple[float, float, int, bool]:
        self._ring.take(now, cost)
        offset = self._offset(now)  # the clock read once: the windows decide if it is narrow and not blind
        unvetted = offset is not None and now >= self._blind_until
        self._unvetted += cost if unvetted else 0
        first = -math.inf if offset is None else self._window(now * 1000 + offset[0] - self._guard_ms)
        if offset is not None:
            self._fold_before(first)
        self._starts[first] = self._starts.get(first, 0) + cost
        self._open[first] = self._open.get(first, 0) + cost
        return now, first, cost, unvetted

    def _fold_before(self, window: int) -> None:
        """Sum the entries of windows before ``window`` into it: no send can land there any more."""
        passed = [edge for edge in self._starts if edge < window]
        if passed:
            self._starts[window] = self._starts.get(window, 0) + sum(self._starts.pop(edge) for edge in passed)

    def settle(self, token: tuple[float, float, int, bool], stamped_by: float) -> None:
        sent_at, first, cost, unvetted = token
        self._ring.settle(cost, stamped_by)
        self._give_back(first, cost, unvetted)
        window_ended = stamped_by + (self._period_ms + self._guard_ms) / 1000
        if unvetted:
            self._unvetted_until = max(self._unvetted_until, window_ended)
        offset = self._offset(stamped_by)
        if offset is None:  # its windows cannot be told: none of them is counted on until it surely ended
            self._blind_until = max(self._blind_until, window_ended)
            return
        low, high = offset
        start = self._window(sent_at * 1000 + low - self._guard_ms)
        end = self._window(stamped_by * 1000 + high + self._guard_ms) + 1
        self._starts[start] = self._starts.get(start, 0) + cost
        self._starts[end] = self._starts.get(end, 0) - cost

    def cancel(self, token: tuple[float, float, int, bool]) -> None:
        _, first, cost, unvetted = token
        self._ring.cancel(cost)
        self._give_back(first, cost, unvetted)

    def _give_back(self, first: float, cost: int, unvetted: bool) -> None:
        """The send taken from ``first`` is no longer in flight; its entries out."""
        self._unvetted -= cost if unvetted else 0
        self._open[first] -= cost
        if not self._open[first]:
            del self._open[first]
        self._starts[first] = self._starts.get(first, 0) - cost

    def widen(self) -> float:
        self._guard_ms += 5
        return self._ring.widen()

    @property
    def pace(self) -> float:
        return self._period_ms / 1000

    @property
    def forget_after(self) -> float:
        return self._ring.forget_after
