"""The order rule: how long a key's next send waits after its previous one, learnt from the answers.

Two sends on one key that leave ``d`` apart are swapped inside the server when the later one's
incoming latency is shorter by more than ``d``; the server then refuses the earlier one (a 400
invalid nonce) after it spent a rate-limit slot. A short gap risks that; a long one leaves slots
unused. Where an invalid nonce costs only its slot (the exchange contract), the gap to take is the
one that gets the most requests *accepted* per second, not the one that avoids every refusal.

How the rule estimates it, from what the daemon sees:

* the chance that two sends ``d`` apart swap, ``P(in1 - in2 > d)``, is read off the round trips:
  with incoming and outgoing latencies drawn alike, ``in1 - in2`` spreads as ``rtt - median(rtt)``
  does (exactly for symmetric shapes such as the uniform one, a little wider for long tails, which
  errs towards longer gaps), then scaled by how many invalid nonces came back against how many
  the estimate predicted for the gaps actually sent;
* a key sends at most ``min(1 / d, rate / (window + mean rtt))`` per second: the gap, or the
  window rule's slots, whichever binds; of those, a share ``P(swap)`` is refused;
* the gap taken maximizes the accepted rate, a little inside the point where the slots bind (both
  limits binding at once wastes some of each). With ``counted`` invalid nonces (the exchange counts
  them against the key), only gaps whose refusals stay well under 1 % of sends are considered.

The window rule is untouched: a gap, however short, can only cost a nonce, never a strike. The
rule is shared by every key of one API host (their latencies are the host's), and it follows the
latency as it changes: the estimate uses the last few hundred round trips.
"""

from __future__ import annotations

import bisect
import enum
import math
import threading
from collections import deque

from .. import defaults

__all__ = ["InvalidNonceCost", "OrderRule"]

# Refused sends a ``counted`` rule allows for, of all sends: half of the 1 % the key may afford.
_COUNTED_LIMIT = 0.005
# Where the slots bind, the gap is this share of the slots' pace (both rules binding at once waste both).
_INSIDE_SLOTS = 0.95
_GRID_MS = 2000  # gaps considered: 1 ms to 2 s
_EVEN = 0.001  # accepted rates this close are as good as equal
_SHORTEST = 0.002  # two sends of one key never leave closer than this (threads must not race the bytes)


class InvalidNonceCost(enum.Enum):
    """What a 400 invalid nonce costs at the exchange."""

    FREE = "free"  # only its slot (the exchange contract): the rule maximizes accepted requests per second
    COUNTED = "counted"  # counted against the key: the rule keeps refusals under 1 % of sends


class OrderRule:
    """The gap between two sends of one key, learnt from the round trips and the invalid nonces.

    ``gap`` is read without a lock (a float swapped whole); ``answered``, ``sent`` and
    ``refused`` are called by the limiters (under their own locks: this lock is always taken
    last). Until ``warm_up`` round trips are known, the gap is ``start`` (with ``counted`` refusals:
    infinite, one request in flight per key, since nothing is known to bet on).
    """

    def __init__(
        self,
        start: float = defaults.ORDER_LATENCY,
        *,
        rate: int = defaults.RATE,
        window: float = defaults.WINDOW,
        cost: InvalidNonceCost = InvalidNonceCost.FREE,
        samples: int = 512,
        every: int = 64,
        warm_up: int = 64,
    ) -> None:
        # Counted refusals are not bet on before anything is known: one request in flight until then.
        self.gap = math.inf if cost is InvalidNonceCost.COUNTED else max(_SHORTEST, start)
        self.cost = cost
        self._rate = rate
        self._window = window
        self._every = every
        self._warm_up = warm_up
        # Guards every field below.
        self._lock = threading.Lock()
        self._round_trips: deque[float] = deque(maxlen=samples)
        self._since_update = 0
        self._sorted: list[float] = []  # the round trips of the last update, sorted
        self._median = 0.0
        self._refused = 0.0  # invalid nonces seen, decayed at each update
        self._predicted = 0.0  # invalid nonces the estimate predicted for the gaps sent, decayed alike
        self._sent = 0.0  # first sends, decayed alike
        self._lengthen = 1.0  # counted: how much longer than the estimate the refusals seen ask for

    def __repr__(self) -> str:
        return f"<OrderRule gap={1000 * self.gap:.1f} ms cost={self.cost.value} samples={self.samples}>"

    @property
    def samples(self) -> int:
        """Round trips the estimate is drawn from now (the last few hundred)."""
        with self._lock:
            return len(self._round_trips)

    def answered(self, round_trip: float) -> None:
        """A first send was answered ``round_trip`` seconds after it left (whatever the answer)."""
        if not 0 <= round_trip < math.inf:  # no such answer: nothing to learn from it
            return
        with self._lock:
            self._round_trips.append(round_trip)
            self._since_update += 1
            if self._since_update >= self._every and len(self._round_trips) >= self._warm_up:
                self._update()

    def sent(self, after_unanswered: float | None) -> None:
        """A first send left, ``after_unanswered`` seconds after the previous send of its key if that
        one is still unanswered (it is refused if this one overtakes it), else None."""
        if after_unanswered is None and self.cost is InvalidNonceCost.FREE:
            return  # nothing to predict, and free refusals are not counted against sends: no lock on the send path
        with self._lock:
            self._sent += 1
            if after_unanswered is not None and self._sorted:
                self._predicted += self._swap_chance(after_unanswered, 1.0)

    def refused(self) -> None:
        """A send came back 400 invalid nonce."""
        with self._lock:
            self._refused += 1

    # -- with the lock held ---------------------------------------------------------------

    def _swap_chance(self, gap: float, scale: float) -> float:
        """The chance that a send is overtaken by one ``gap`` seconds after it, as the round trips say."""
        above = len(self._sorted) - bisect.bisect_right(self._sorted, self._median + gap)
        return min(1.0, scale * above / len(self._sorted))

    def _update(self) -> None:
        self._since_update = 0
        self._sorted = sorted(self._round_trips)
        self._median = self._sorted[len(self._sorted) // 2]
        mean = sum(self._sorted) / len(self._sorted)
        slots_per_s = self._rate / (self._window + mean)
        # How far the refusals seen stray from the prediction (both start at one, so a few do not swing it).
        scale = min(4.0, max(0.5, (self._refused + 1) / (self._predicted + 1)))
        counted = self.cost is InvalidNonceCost.COUNTED
        if counted:  # the refusals themselves decide last: too many, and the gap grows whatever the estimate says
            seen = self._refused / self._sent if self._sent else 0.0
            self._lengthen = min(8.0, self._lengthen * 1.25) if seen > 2 * _COUNTED_LIMIT else max(
                1.0, self._lengthen * 0.97)
        self._refused *= 0.9
        self._predicted *= 0.9
        self._sent *= 0.9
        limit = _COUNTED_LIMIT if counted else 1.0
        # Past the widest spread nothing swaps, and past the slots' pace a longer gap only slows the key: no
        # gap beyond both can be better. Up to the slots' pace even a swap-free gap is taken as long as it
        # can be (as good, and safer against a thread that sends late).
        spread_ms = int(1000 * (self._sorted[-1] - self._median)) + 2
        longest = min(_GRID_MS, max(spread_ms, int(1000 / slots_per_s) + 1))
        best_rate, best_gap, shortest_allowed = -1.0, longest / 1000, None
        for gap_ms in range(1, longest + 1):
            gap = gap_ms / 1000
            swap = self._swap_chance(gap, scale)
            if swap > limit:
                continue
            if shortest_allowed is None:
                shortest_allowed = gap
            accepted = min(1 / gap, slots_per_s) * (1 - swap)
            if accepted >= best_rate * (1 - _EVEN):  # of two gaps as good, the longer: it bets less
                best_rate, best_gap = max(best_rate, accepted), gap
        if shortest_allowed is None:  # no gap keeps the refusals under the limit: the longest there is
            self.gap = longest / 1000 * self._lengthen
            return
        gap = max(min(best_gap, _INSIDE_SLOTS / slots_per_s), shortest_allowed)
        self.gap = max(_SHORTEST, gap * self._lengthen)
