"""The generic cell rate algorithm (a leaky bucket), as nginx ``limit_req``, most gateways and Kraken's
decaying counter enforce it, modelled on the client's side so that no stamp can ever be refused."""

from __future__ import annotations

import math

from .base import MS_GUARD, ROUNDING_GUARD, RuleState

_GUARD = MS_GUARD + ROUNDING_GUARD

__all__ = ["Gcra"]


class Gcra(RuleState):
    """One unit every ``interval`` seconds, with ``burst`` units of tolerance: the server admits a send of
    cost c at stamp s if ``max(TAT, s) + (c - 1) x interval <= s + burst x interval``, then moves its
    theoretical arrival time TAT to ``max(TAT, s) + c x interval``.

    Why it never trips. Stamps admitted this way, in the order the server sees them, are exactly those
    with ``s_j - s_i >= (j - i - burst) x interval`` for every earlier i: no span of D seconds holds more
    than ``burst + 1 + D / interval`` units. The client knows each stamp only within [send, bound] (bound:
    the answer, or infinity while in flight), and every placement within those bounds is possible, so a
    send at ``a`` is safe exactly when

    * the units in flight, with the new ones, are at most ``burst + 1`` (they may all land at one instant);
    * ``a >= T - (burst + 1 - in_flight - cost) x interval``, where T is the TAT the server would reach from
      the settled sends stamped at their bounds, taken in the order they settled. Stamping them at their
      bounds is the worst case, and settling out of order only raises T (the sorted order gives the
      smallest maximum), so the client's T is never below the server's.

    ``MS_GUARD`` covers the whole milliseconds the server compares. With ``burst`` 0 the next send
    waits for the previous answer and an interval: ``1 / (interval + round trip)`` per second, the most
    any client can send without risking a refusal when it cannot see the stamps.
    """

    def __init__(self, interval: float, burst: int, memory: float | None = None) -> None:
        if not (0 < interval < math.inf) or burst < 0:
            raise ValueError(f"a bucket needs a positive interval and a burst not negative, got {interval}, {burst}")
        self._interval = interval
        self._burst = burst
        # How long the server's own state may remember a send, if longer than this bucket's (a sliding counter
        # honoured through a bucket remembers two of its periods).
        self._memory = memory
        self._tat = -math.inf  # the server's TAT at most, from the settled sends
        self._in_flight = 0  # units sent and not settled

    def __repr__(self) -> str:
        return f"<Gcra interval={self._interval:.6f} burst={self._burst} in_flight={self._in_flight}>"

    def _ready_from(self, tat: float, in_flight: int, cost: int) -> float:
        if in_flight + cost > self._burst + 1:
            return math.inf
        return tat - (self._burst + 1 - in_flight - cost) * self._interval + _GUARD

    def ready_at(self, now: float, cost: int) -> float:
        return self._ready_from(self._tat, self._in_flight, cost)

    def least_ready_at(self, now: float, cost: int) -> float:
        if cost > self._burst + 1:
            return math.inf
        return self._ready_from(max(self._tat, now) + self._in_flight * self._interval, 0, cost)

    def available(self, now: float) -> int:
        # The largest c with ``_ready_from(T, in_flight, c) <= now``: the room left, less the intervals T is ahead.
        room = self._burst + 1 - self._in_flight
        ahead = math.ceil((self._tat + _GUARD - now) / self._interval) if self._tat > -math.inf else 0
        return max(0, room - max(0, ahead))

    def take(self, now: float, cost: int) -> int:
        self._in_flight += cost
        return cost

    def settle(self, token: int, stamped_by: float) -> None:
        self._in_flight -= token
        self._tat = max(self._tat, stamped_by) + token * self._interval

    def cancel(self, token: int) -> None:
        self._in_flight -= token

    def widen(self) -> float:
        # T was built with the old interval: it moves on by the same widening of every interval the burst lets
        # ready_at subtract, so that no send becomes ready sooner than before.
        wider = self._interval * 1.005
        self._tat += (self._burst + 1) * (wider - self._interval)
        self._interval = wider
        return self._interval

    @property
    def pace(self) -> float:
        return self._interval

    @property
    def forget_after(self) -> float:
        return max((self._burst + 1) * self._interval + _GUARD, self._memory or 0.0)
