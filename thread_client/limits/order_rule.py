"""The order rule: how long a key's next send waits after its previous one, learnt from the answers.

Two sends on one key that leave ``d`` apart are swapped inside the server when the later one's
incoming latency is shorter by more than ``d``; the server then refuses the earlier one (a 400
invalid nonce) after it spent a rate-limit slot. A short gap risks that; a long one leaves slots
unused. Where an invalid nonce costs only its slot (the exchange contract), the gap to take is the
one that gets the most requests *accepted* per second, not the one that avoids every refusal.

How the rule estimates it, from what the daemon sees:

* the chance that two sends ``d`` apart swap, ``P(in1 - in2 > d)``, is read off the round trips:
  ``in1 - in2`` spreads as ``share x (rtt1 - rtt2)`` does, where ``share`` is how much of the round
  trips' spread lies before the stamp: 1 if all of it (nothing varies after the stamp), 0 if none
  (nothing can swap), 1/sqrt(2) if the incoming and outgoing latencies are drawn alike. The round
  trips cannot tell where their spread lies; the refusals can: once enough sends were at risk (sent
  before the previous one's answer), ``share`` is the one under which the swaps predicted for the
  gaps actually sent match the invalid nonces that came back, and half a refusal more (the safe
  side of a rare event: none seen yet is no proof that none can come). Until then it is 1/sqrt(2);
* the gate opens at the gap or at the previous send's answer, whichever comes first, so a key sends
  at most ``min(1 / E[min(d, rtt)], rate / (window + mean rtt), threads / mean rtt)`` per second: the
  gate, the window rule's slots, or its threads, whichever binds; of those, a share ``P(swap)`` is
  refused (a send after its previous one's answer cannot overtake it: the chance of a send at risk is
  ``P(swap) / P(rtt > d)``, which is what the refusals are matched against);
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
import itertools
import math
import threading
from collections import deque

from .. import defaults

__all__ = ["InvalidNonceCost", "OrderRule"]

# Refused sends a ``counted`` rule allows for, of all sends: half of the 1 % the key may afford.
_COUNTED_LIMIT = 0.005
# Sends per second where both the gate and the slots pace a key: a smooth minimum of the two, lower where
# they are alike (both binding at once waste some of each), ~ the lesser where one is much slower.
_BOTH = 10.0
_GRID_MS = 2000  # gaps considered: 1 ms to 2 s
_EVEN = 0.001  # accepted rates this close are as good as equal
_SHORTEST = 0.002  # two sends of one key never leave closer than this (threads must not race the bytes)
# How much of the round trips' spread lies before the stamp, until the refusals tell: latencies drawn alike
# both ways (their variances add, so the incoming differences spread 1/sqrt(2) as wide as the round trips').
_ALIKE = 1 / math.sqrt(2)
_WIDEST = 2.0  # more refusals than even all-incoming latencies explain (a thread that sends late): no wider
_EVIDENCE = 64.0  # sends at risk (decayed alike) before the refusals decide the share
_PAIRINGS = (1, 7, 31, 127)  # each round trip is paired with the ones this far after it, for the differences


def _bucket(gap_ms: int) -> int:
    """A gap at risk as the fit counts it: to the ms below 100 ms, to 10 ms below a second, to 100 ms above (the
    fit's cost grows with the distinct gaps, and the swap chance changes slowly with long ones)."""
    step = 1 if gap_ms < 100 else 10 if gap_ms < 1000 else 100
    return gap_ms - gap_ms % step


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
        threads: int = defaults.THREADS_PER_KEY,
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
        self._threads = threads
        self._every = every
        self._warm_up = warm_up
        # Guards every field below.
        self._lock = threading.Lock()
        self._round_trips: deque[float] = deque(maxlen=samples)
        self._since_update = 0
        self._differences: list[float] = []  # of pairs of the round trips of the last update, sorted
        self._sorted: list[float] = []  # the round trips of the last update, sorted
        self._refused = 0.0  # invalid nonces seen, decayed at each update
        self._at_risk: dict[int, float] = {}  # sends after an unanswered one, by their gap in ms, decayed alike
        self._sent = 0.0  # first sends, decayed alike
        self._share = _ALIKE  # how much of the round trips' spread lies before the stamp
        self._lengthen = 1.0  # counted: how much longer than the estimate the refusals seen ask for

    def __repr__(self) -> str:
        return (f"<OrderRule gap={1000 * self.gap:.1f} ms cost={self.cost.value} samples={self.samples}"
                f" before-stamp={self._share:.2f}>")

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
            if after_unanswered is not None:
                gap_ms = _bucket(min(_GRID_MS, round(1000 * after_unanswered)))
                self._at_risk[gap_ms] = self._at_risk.get(gap_ms, 0.0) + 1

    def refused(self) -> None:
        """A send came back 400 invalid nonce."""
        with self._lock:
            self._refused += 1

    # -- with the lock held ---------------------------------------------------------------

    def _swap_chance(self, gap: float, share: float) -> float:
        """The chance that a send is overtaken by one ``gap`` seconds after it, if ``share`` of the round
        trips' spread lies before the stamp."""
        if share <= 0:
            return 0.0
        differences = self._differences
        return (len(differences) - bisect.bisect_right(differences, gap / share)) / len(differences)

    def _at_risk_chance(self, gap: float, share: float) -> float:
        """The chance that a send is overtaken by one ``gap`` seconds after it, sent before its answer (only
        such a send is told as at risk): a swap needs the first one's round trip longer than the gap."""
        longer = len(self._sorted) - bisect.bisect_right(self._sorted, gap)
        return min(1.0, self._swap_chance(gap, share) * len(self._sorted) / longer) if longer else 0.0

    def _fitted_share(self) -> float:
        """The share under which the swaps predicted for the sends at risk match the refusals seen."""
        if sum(self._at_risk.values()) < _EVIDENCE:
            return self._share
        target = self._refused + 0.5  # half a refusal more than seen: no refusal yet is not proof none can come

        def predicted(share: float) -> float:
            return sum(sends * self._at_risk_chance(gap_ms / 1000, share) for gap_ms, sends in self._at_risk.items())

        low, high = 0.0, _WIDEST
        if predicted(high) <= target:  # even the widest share predicts no more than that
            # More refusals than it explains: the widest (a thread that sends late). None that tell anything
            # (every send at risk was at a gap where nothing swaps): what is known stays.
            return high if self._refused > predicted(high) else self._share
        for _ in range(20):
            middle = (low + high) / 2
            low, high = (middle, high) if predicted(middle) < target else (low, middle)
        return high

    def _update(self) -> None:
        self._since_update = 0
        round_trips = list(self._round_trips)
        count = len(round_trips)
        self._differences = sorted(round_trips[n] - round_trips[(n + step) % count]
                                   for step in _PAIRINGS for n in range(count))
        self._sorted = ordered = sorted(round_trips)
        below = list(itertools.accumulate(ordered, initial=0.0))  # sums of the shortest round trips
        mean = below[-1] / count
        slots_per_s = min(self._rate / (self._window + mean), self._threads / mean if mean else math.inf)
        self._share = share = self._fitted_share()
        counted = self.cost is InvalidNonceCost.COUNTED
        if counted:  # the refusals themselves decide last: too many, and the gap grows whatever the estimate says
            seen = self._refused / self._sent if self._sent else 0.0
            self._lengthen = min(8.0, self._lengthen * 1.25) if seen > 2 * _COUNTED_LIMIT else max(
                1.0, self._lengthen * 0.97)
        self._refused *= 0.9
        self._sent *= 0.9
        self._at_risk = {gap_ms: sends * 0.9 for gap_ms, sends in self._at_risk.items() if sends > 0.05}
        limit = _COUNTED_LIMIT if counted else 1.0
        # Past the widest spread nothing swaps, and past the slots' pace a longer gap only slows the key: no
        # gap beyond both can be better. Up to the slots' pace even a swap-free gap is taken as long as it
        # can be (as good, and safer against a thread that sends late).
        spread_ms = int(1000 * share * self._differences[-1]) + 2
        longest = min(_GRID_MS, max(spread_ms, int(1000 / slots_per_s) + 1))
        best_rate, best_gap, shortest_allowed = -1.0, longest / 1000, None
        for gap_ms in itertools.chain(range(1, min(longest, 100) + 1), range(105, longest + 1, 5)):
            gap = gap_ms / 1000
            swap = self._swap_chance(gap, share)
            if swap > limit:
                continue
            if shortest_allowed is None:
                shortest_allowed = gap
            shorter = bisect.bisect_left(ordered, gap)  # the gate opens at their answers, the others' at the gap
            waited = below[shorter] + gap * (count - shorter)
            gate_per_s = count / waited if waited > 0 else math.inf  # round trips of 0: the gate never waits
            accepted = (gate_per_s ** -_BOTH + slots_per_s ** -_BOTH) ** (-1 / _BOTH) * (1 - swap)
            if accepted >= best_rate * (1 - _EVEN):  # of two gaps as good, the longer: it bets less
                best_rate, best_gap = max(best_rate, accepted), gap
        if shortest_allowed is None:  # no gap keeps the refusals under the limit: the longest there is
            self.gap = longest / 1000 * self._lengthen
            return
        self.gap = max(_SHORTEST, max(best_gap, shortest_allowed) * self._lengthen)
