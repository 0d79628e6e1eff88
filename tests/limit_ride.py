"""A client riding limit rules in virtual time, judged by the reference server's own limit models.

Pure and fast: no threads, no sockets. Each key owns a list of rule states (some shared with other keys, as
an account or host scope shares them); each send is stamped after an incoming delay, finished after the
server's work and answered after an outgoing delay; the client settles it at its answer. The judge replays
the stamps, in the order the server saw them, through ``original_server``'s models in whole milliseconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Callable

from thread_client.limits.rules import RuleState

__all__ = ["Ride", "Send", "adversarial_ride", "ride"]


@dataclass(frozen=True)
class Send:
    """One request: its key, and the delays (seconds) before its stamp, of the server's work, and back."""

    key: int
    incoming: float
    work: float
    outgoing: float


@dataclass
class Ride:
    sent_at: list[float] = field(default_factory=list)
    stamps: list[tuple[float, int, int, float]] = field(default_factory=list)  # (stamp, order, key, done)

    @property
    def rate(self) -> float:
        """Sends per second from the first send to the last."""
        return self._rate_from(0)

    @property
    def steady_rate(self) -> float:
        """Sends per second over the last three quarters: past the first burst an idle limit allows."""
        return self._rate_from(len(self.sent_at) // 4)

    def _rate_from(self, first: int) -> float:
        """The sends from the ``first``-th one's instant up to the last one's, that instant's own left out, per
        second of that span: a burst at one instant (a window's, a ring's) counts once per period, not once more."""
        start, end = self.sent_at[first], self.sent_at[-1]
        if end <= start:
            return math.inf
        return (bisect.bisect_left(self.sent_at, end) - bisect.bisect_left(self.sent_at, start)) / (end - start)


#: Hears of an answer before its send is settled: (sent at, the server done with it, answered at).
Answered = Callable[[float, float, float], None]


def ride(keys: list[list[tuple[RuleState, int]]], sends: list[Send], threads: int,
         on_answer: Answered | None = None) -> Ride:
    """Send ``sends`` in order, each as soon as its key has a free thread and every state of the key lets
    its cost through; ``keys[k]`` is key k's (state, cost) pairs. ``on_answer`` reads each answer (its
    ``Date``) before the states hear of it."""
    now = 0.0
    # (answered at, order, key, [(state, token)], sent at, done at)
    answers: list[tuple[float, int, int, list, float, float]] = []
    busy = [0] * len(keys)
    result = Ride()
    for order, send in enumerate(sends):
        states = keys[send.key]
        while True:
            while answers and answers[0][0] <= now:
                answered_at, _, key, tokens, sent_at, done_at = heapq.heappop(answers)
                busy[key] -= 1
                if on_answer is not None:
                    on_answer(sent_at, done_at, answered_at)
                for state, token in tokens:
                    state.settle(token, answered_at)
            ready = max(state.ready_at(now, cost) for state, cost in states) if busy[send.key] < threads else math.inf
            if ready <= now:
                break
            now = min(ready, answers[0][0] if answers else math.inf)
            assert now < math.inf, "no send can ever fit: the states are stuck"
        tokens = [(state, state.take(now, cost)) for state, cost in states]
        busy[send.key] += 1
        stamp = now + send.incoming
        heapq.heappush(answers, (stamp + send.work + send.outgoing, order, send.key, tokens, now, stamp + send.work))
        result.sent_at.append(now)
        result.stamps.append((stamp, order, send.key, stamp + send.work))
    return result


def adversarial_ride(state: RuleState, largest_send: int, draw: random.Random, sends: int, threads: int,
                     hold: float) -> list[tuple[float, int, int, float]]:
    """One state under the worst the worker does to it: sends of mixed cost, some cancelled (they never left),
    some left unanswered and settled at a timeout with a later bound (the unanswered hold), some settled late
    (a late answer's sign), the rest answered; each stamp placed anywhere the client cannot rule out, with
    weight at both ends of its [send, bound]. Returns the stamps as (instant, order, cost, bound): the server is
    done with the send no later than its bound."""
    now, busy, order = 0.0, 0, 0
    settles: list[tuple[float, int, str, object, float]] = []  # (when, order, how, token, bound)
    stamps: list[tuple[float, int, int, float]] = []
    while order < sends or settles:
        while settles and settles[0][0] <= now:
            _, _, how, token, bound = heapq.heappop(settles)
            busy -= 1
            if how == "cancel":
                state.cancel(token)
            else:
                state.settle(token, bound)
        if order >= sends:
            now = max(now, settles[0][0]) if settles else now
            continue
        cost = draw.randint(1, min(largest_send, 4))
        ready = state.ready_at(now, cost) if busy < threads else math.inf
        if ready > now:
            now = min(ready, settles[0][0] if settles else math.inf)
            assert now < math.inf, "no send can ever fit: the state is stuck"
            continue
        token = state.take(now, cost)
        busy, order = busy + 1, order + 1
        fate, round_trip = draw.random(), draw.choice([0.0, 0.0005, 0.001, draw.uniform(0, 0.06)])
        if fate < 0.1:
            heapq.heappush(settles, (now + round_trip, order, "cancel", token, 0.0))
            continue
        if fate < 0.25:  # timed out, then settled with the unanswered hold
            timeout = now + draw.uniform(0, 0.1)
            settled_at, bound = timeout, timeout + hold
        elif fate < 0.35:  # a late answer's sign
            settled_at = bound = now + draw.uniform(0, 0.2)
        else:
            settled_at = bound = now + round_trip
        heapq.heappush(settles, (settled_at, order, "settle", token, bound))
        place = draw.random()
        stamps.append((now if place < 0.35 else bound if place < 0.7 else draw.uniform(now, bound), order, cost, bound))
    return stamps
