"""Per-key rate limiter that cannot trip the server's limits, whatever the latencies.

The server stamps a request at an instant ``s`` the client cannot see, somewhere
between the send and the answer. Two kinds of rule pace the sends of one key:

* Limit rules (never risk a strike): each of the API's limits that applies to the
  key (its own, its account's, the host's: ``rules``) is a state that lets a send
  through only if no placement of the stamps within what the client knows can
  break it (``rules.base``); by default one ring of ``rate`` slots, each free again
  ``window`` seconds after its request's *answer* came back (``s <= answer``). A
  request whose answer did not come in time is known stamped only once the server
  shows it read it (``release_late``: a late answer, its connection's end); one
  reset after it was sent counts as stamped ``unanswered_hold`` seconds from now.
* Order rule (bets only a nonce retry): the next send waits until the previous
  send on the key was answered, or a gap after it, whichever comes first: the
  gap an ``OrderRule`` learns from the answers (the most accepted requests per
  second), or a fixed ``order_latency`` (infinite: one request in flight).

The nonce of each send is drawn in the same critical section that orders the
send, at least a gap after the previous one, and only once the worker's
connection is open; the key's next permit is asked for only once the bytes of
this one left (the workers' turn), so nonces leave the client in the order the
server must see them, and only the network can swap them. A send is told to the
order rule when its permit is given back, so a cancelled one (it never left) is
never counted. The nonce's block is reserved before the lock is taken
(``NonceGenerator.reserve_ahead``).
"""

from __future__ import annotations

import contextlib
import enum
import math
import threading
from dataclasses import dataclass
from typing import Hashable, Iterator, Sequence

from .. import defaults
from ..clock import Clock, monotonic
from ..errors import KeyPaused, LimiterClosed, LimiterTimeout, SendOvertaken
from .nonces import NonceGenerator
from .order_rule import OrderRule
from .rules import LimitRule, RuleState
from .scopes import SharedRule
from .timestamps import ServerTimestamps

__all__ = ["LimiterState", "PausedBy", "Permit", "ThreadSafeRateLimiter"]

_NOTHING = contextlib.nullcontext()  # what a key that shares no rule takes for the shared rules' locks
_FIRST_NONCE_SKIP = 1_000  # microseconds
_MAX_NONCE_SKIP = 3_600_000_000  # one hour of microseconds


class PausedBy(enum.Enum):
    """Who paused a key: each pause is lifted by its own resume, so resuming the daemon leaves a key the operator
    paused paused, and the cluster console's resume a key paused on the member's own control API."""

    OPERATOR = "operator"  # this key, from the daemon's own control API
    CLUSTER = "cluster"  # this key, from the cluster console (the store's flag, which the lease keeper follows)
    DAEMON = "daemon"  # every key: the daemon takes no work
    RETIRED = "retired"  # this key, retired by the operator (``ApiKey.retire``): for the rest of the run, no resume
    PARKED = "parked"  # this key, for its strikes (``ApiKey.retire``, until ``unpark``): not even a send in doubt


#: The pauses that still let a send in doubt be settled (a resend of its nonce, a status ask).
_SETTLING_PASSES = frozenset({PausedBy.OPERATOR, PausedBy.CLUSTER, PausedBy.DAEMON, PausedBy.RETIRED})


@dataclass(frozen=True, slots=True)
class Permit:
    """The right to send one request now: what it spent of each limit rule (``tokens``, in the limiter's
    order of rules), its nonce, its place in the send order.
    ``resend``: the same send again (same nonce, same place), after an attempt whose fate is unknown.
    ``after_unanswered``: seconds after the key's previous send, if that one was still unanswered (what
    the order rule is told once this send surely left, when the permit is given back uncancelled).
    ``units``: how many usual sends (the profile's endpoint at weight 1) it weighs at most in any rule; None if it
    spends of a rule the usual send does not (no count of usual sends says what it weighs)."""

    tokens: tuple[Hashable, ...]
    nonce: int
    sent_at: float
    sequence: int
    resend: bool = False
    after_unanswered: float | None = None
    units: int | None = 1

    @classmethod
    def of_earlier_run(cls, nonce: int) -> "Permit":
        """The send of an earlier run of the client, known only by its nonce: what a resend after a
        restart repeats. It came before every send of this run (sequence 0) and holds nothing of any rule."""
        return cls(tokens=(), nonce=nonce, sent_at=-math.inf, sequence=0)


@dataclass(frozen=True, slots=True)
class LimiterState:
    """An immutable snapshot for metrics and tests; ``ready_in`` is the seconds until a send is
    allowed (0: now; inf: only an answer can tell); ``window`` the first rule's ``pace`` (a ring's window,
    a bucket's interval), widened by strikes; ``remaining`` each rule's name with the units a send could
    spend of it now (``RuleState.available``); ``held_for`` the seconds a hold has left (0: none); ``paused_by``
    the pauses in force."""

    in_flight: int
    ready_in: float
    window: float
    order_latency: float
    held: bool
    closed: bool
    remaining: tuple[tuple[str, int], ...] = ()
    held_for: float = 0.0
    paused_by: frozenset[PausedBy] = frozenset()


class ThreadSafeRateLimiter:
    """Paces the sends of one API key; many worker threads may share it.

    ``acquire()`` blocks until every rule allows a send and returns a ``Permit``;
    every permit must be given back with ``release()`` once its answer (or its
    failure) is known.

    ``rules``: the limit states the key spends from, each with the rule that says what
    a send costs of it (its own states first, then ``SharedRule``s other keys spend
    from too); without them, one ring of ``rate`` slots freed ``window`` after each
    answer. ``endpoint``: the profile's own (``METHOD /path``, as a cost table names it),
    where a send of ``costs=None`` goes.
    """

    def __init__(
        self,
        rate: int = defaults.RATE,
        *,
        name: str = "key",
        window: float = defaults.WINDOW,
        rules: Sequence[tuple[RuleState | SharedRule, LimitRule]] | None = None,
        endpoint: str = "",
        order_latency: float = defaults.ORDER_LATENCY,
        unanswered_hold: float = defaults.HTTP_TIMEOUT,  # an answer can come no later than the HTTP timeout
        order_rule: OrderRule | None = None,
        nonces: NonceGenerator | ServerTimestamps | None = None,
        clock: Clock = monotonic,
    ) -> None:
        if rate < 1:
            raise ValueError(f"rate must be at least 1, got {rate}")
        if window <= 0 or order_latency < 0 or unanswered_hold < 0:
            raise ValueError("window must be positive and the latencies not negative")
        if rules is None:
            ring = LimitRule.ring(rate, window)
            rules = [(ring.new_state(), ring)]
        if not rules:
            raise ValueError("a limiter needs at least one rule")
        self.name = name
        self.nonces = nonces if nonces is not None else NonceGenerator()
        self._clock = clock
        self._unanswered_hold = unanswered_hold
        # The learnt gap, shared with the host's other keys; none for a fixed order latency (or one in flight).
        self._order_rule = order_rule if math.isfinite(order_latency) else None
        # Guards every field below and this key's own rule states. `_changed` is notified whenever a send may
        # have become possible sooner (a slot freed, the order gate opened; a sharer's answer; a resume) and on close.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Each state with its rule, in one order (the permits' tokens and the costs follow it); the shared ones
        # are locked after ours, in rank order, and told whom to wake.
        self._shared = sorted((state for state, _ in rules if isinstance(state, SharedRule)), key=lambda state: state.rank)
        self._rules = [(state.state if isinstance(state, SharedRule) else state, rule) for state, rule in rules]
        self._endpoint = endpoint
        self._usual_costs = self.costs_of("", 1)  # a send of the profile's own endpoint and weight 1
        for shared in self._shared:
            shared.listen(self._wake)
        self._order_latency = order_latency
        self._out = 0  # permits handed out and not given back
        self._looking_threads = 0  # threads in acquire() or wait_ready(); read without the lock by _wake
        self._order_open_at = -math.inf
        self._held_until = -math.inf
        # When each send given back unanswered (or an earlier run's, expected) may be stamped at the latest, and how
        # many usual sends it weighs (``Permit.units``); those past are dropped as it is read.
        self._unanswered: list[tuple[float, int | None]] = []
        self._units_out = 0  # what the permits out weigh, in usual sends
        self._unknown_out = 0  # permits out whose weight no count of usual sends says
        self._sequence = 0
        self._last_sent_at = -math.inf  # the latest first send's departure, and whether it is answered yet
        self._last_answered = True
        self._nonce_skip = _FIRST_NONCE_SKIP  # doubles with every invalid nonce, back to the first on an accept
        self._closed = False
        self._taking = True  # False once the daemon stops: wait_ready() refuses, permits out are still given back
        self._paused_by: set[PausedBy] = set()  # while not empty, no fresh permit: wait_ready() waits for a resume

    def __repr__(self) -> str:
        state = self.state()
        return (
            f"<ThreadSafeRateLimiter {self.name} in_flight={state.in_flight} window={state.window:.3f}"
            f" order_latency={state.order_latency:.3f} held={state.held} closed={state.closed}>"
        )

    # -- decisions (called with the lock held, and the shared rules' locks) ----

    def _shared_locked(self) -> contextlib.AbstractContextManager:
        """The shared rules' locks, taken in rank order (called with our own lock held)."""
        if not self._shared:
            return _NOTHING
        stack = contextlib.ExitStack()
        for shared in self._shared:
            stack.enter_context(shared.lock)
        return stack

    def costs_of(self, endpoint: str, weight: int) -> tuple[int, ...]:
        """What a send to ``endpoint`` (``METHOD /path``; "": the profile's own) of ``weight`` spends of each
        rule, in the limiter's order. Raises ValueError if it can never fit one (more than the rule allows)."""
        return tuple(rule.cost_of(endpoint or self._endpoint, weight) for _, rule in self._rules)

    def _delay_until_free(self, now: float, costs: tuple[int, ...], resend: bool = False) -> float:
        """Seconds until every rule allows a send of ``costs`` (0 if now, inf if only an answer can tell).
        A resend is the send the order gate is waiting on, so only the limit rules apply to it."""
        ready_at = max(-math.inf if resend else self._order_open_at, self._held_until)
        for (state, _), cost in zip(self._rules, costs):
            if cost:
                ready_at = max(ready_at, state.ready_at(now, cost))
        return max(0.0, ready_at - now)

    def _least_delay(self, now: float, costs: tuple[int, ...]) -> float:
        """A lower bound of the delay: as if every request in flight were answered right now."""
        ready_at = max([self._held_until] + [state.least_ready_at(now, cost)
                                             for (state, _), cost in zip(self._rules, costs) if cost])
        return max(0.0, ready_at - now)

    def _take(self, now: float, resend_of: Permit | None, costs: tuple[int, ...]) -> Permit | None:
        """The permit of a send now; None, with nothing taken, if no reserved block covers its nonce."""
        if resend_of is not None and resend_of.sequence != self._sequence:
            raise SendOvertaken(self.name)
        nonce = resend_of.nonce if resend_of is not None else self.nonces.next()
        if nonce is None:
            return None
        tokens = tuple(state.take(now, cost) if cost else None for (state, _), cost in zip(self._rules, costs))
        self._out += 1
        if resend_of is not None:
            return self._counted(Permit(tokens, nonce, now, resend_of.sequence, resend=True,
                                        units=self._units_of(costs)))
        after_unanswered = None if self._last_answered else now - self._last_sent_at
        self._order_open_at = now + self._gap()
        self._last_sent_at, self._last_answered = now, False
        self._sequence += 1
        return self._counted(Permit(tokens, nonce, now, self._sequence, after_unanswered=after_unanswered,
                                    units=self._units_of(costs)))

    def _counted(self, permit: Permit) -> Permit:
        """Count what ``permit`` weighs among the permits out. Called with the lock held."""
        if permit.units is None:
            self._unknown_out += 1
        else:
            self._units_out += permit.units
        return permit

    def _units_of(self, costs: tuple[int, ...]) -> int | None:
        """How many usual sends a send of ``costs`` weighs at most in any rule (``Permit.units``)."""
        if costs == self._usual_costs:
            return 1
        units = 0
        for cost, usual in zip(costs, self._usual_costs):
            if cost and not usual:
                return None
            if cost:
                units = max(units, math.ceil(cost / usual))
        return units

    def _settle(self, permit: Permit, stamped_by: float | None) -> None:
        """Give back what ``permit`` spent of each rule: stamped no later than ``stamped_by`` (None: it never
        reached the server). Called with the lock held; takes the shared ones'."""
        self._out -= 1
        if permit.units is None:
            self._unknown_out -= 1
        else:
            self._units_out -= permit.units
        with self._shared_locked():
            for (state, _), token in zip(self._rules, permit.tokens):
                if token is None:
                    continue  # the send spent nothing of this rule
                if stamped_by is None:
                    state.cancel(token)
                else:
                    state.settle(token, stamped_by)

    def _looking(self) -> contextlib.AbstractContextManager:
        """Counts a thread that reads the rules and may wait on them (called with the lock held), from before
        its first read: a sharer that frees a shared rule after that read sees it (``_wake``). A key that
        shares no rule is woken by nobody else: nothing to count on its hot path."""
        return self._counted_looking() if self._shared else _NOTHING

    @contextlib.contextmanager
    def _counted_looking(self) -> Iterator[None]:
        self._looking_threads += 1
        try:
            yield
        finally:
            self._looking_threads -= 1

    def _wake(self) -> None:
        """A sharer freed some of a shared rule: let every waiter look again. Called with no lock held; skipped
        (a racy read, on the safe side) when no thread is looking: one that starts later reads the freed state."""
        if self._looking_threads:
            with self._changed:
                self._changed.notify_all()

    def _wake_sharers(self) -> None:
        """Tell the keys sharing a rule with this one that some of it is free. Called with no lock held."""
        for shared in self._shared:
            shared.wake_sharers(but=self._wake)

    # -- public API ----------------------------------------------------------

    def acquire(
        self, timeout: float | None = None, *, resend_of: Permit | None = None, costs: tuple[int, ...] | None = None,
        settling: bool = False,
    ) -> Permit:
        """Block until a send is allowed and return its permit.

        ``costs``: what the send spends of each rule (``costs_of``); None: a send of the profile's own
        endpoint and weight 1.

        ``resend_of``: a slot to send ``resend_of``'s nonce again (its fate unknown), past the
        order gate that waits on it; no new nonce is drawn, and SendOvertaken is raised if a later
        send on the key has left since. Raises LimiterTimeout as soon as no slot can free within
        ``timeout`` seconds (at once if that is already certain), and LimiterClosed if the limiter
        is or gets closed; KeyPaused, at once, for a fresh send while the key is paused. A resend, or a fresh send
        that is ``settling`` one already out (a status ask), is let through the operator's or the daemon's pause and
        the operator's retirement (they stop new work, never the settling of a send that left before it), not
        through a park: nothing at all leaves a parked key. A fresh nonce's block is reserved first, without the
        lock (a durable mark, a store round trip: StateNotWritten or KeyNotHeld if it fails, with nothing taken).
        """
        deadline = math.inf if timeout is None else self._clock() + timeout
        costs = self._usual_costs if costs is None else costs
        while True:
            if resend_of is None:
                self.nonces.reserve_ahead()
            with self._changed, self._looking():
                now = self._clock()
                while True:
                    if self._closed:
                        raise LimiterClosed(self.name)
                    if self._paused_by and (resend_of is None and not settling
                                            or not self._paused_by <= _SETTLING_PASSES):
                        raise KeyPaused(self.name)
                    with self._shared_locked():
                        delay = self._delay_until_free(now, costs, resend_of is not None)
                        permit = self._take(now, resend_of, costs) if delay <= 0 else None
                        # The lower bound only decides a finite deadline: no need for it otherwise.
                        least_delay = self._least_delay(now, costs) if delay > 0 and deadline < math.inf else 0.0
                    if delay <= 0:
                        if permit is not None:
                            return permit
                        break  # the reserved block ran out meanwhile: reserve the next one, without the lock
                    if now >= deadline or now + least_delay > deadline:
                        raise LimiterTimeout(self.name, delay)
                    now = self._wait(delay, deadline, now)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until a send would be allowed at once (True) or ``timeout`` seconds pass (False);
        raises LimiterClosed if the limiter is or gets closed, or stops taking work. A paused key is
        not ready until it is resumed.

        Workers ask this before they take a request: a key that cannot send (held after a
        Retry-After or a strike, every slot in flight) takes no work it could only hand back,
        and none of its threads spins through the queue meanwhile.
        """
        with self._changed, self._looking():
            now = self._clock()
            deadline = math.inf if timeout is None else now + timeout
            while True:
                if self._closed or not self._taking:
                    raise LimiterClosed(self.name)
                if self._paused_by:
                    delay = math.inf  # only a resume (notified) or a close ends it
                else:
                    with self._shared_locked():
                        delay = self._delay_until_free(now, self._usual_costs)
                if delay <= 0:
                    return True
                if now >= deadline:
                    return False
                now = self._wait(delay, deadline, now)

    def _wait(self, delay: float, deadline: float, now: float) -> float:
        """Wait until ``delay`` has passed, the deadline comes or a change is notified; returns the
        time then. Called with the lock held (released while waiting)."""
        wait = min(delay, deadline - now)
        self._changed.wait(None if wait == math.inf else wait)
        return self._clock()

    def release(self, permit: Permit, answered_at: float | None, accepted: bool = False) -> None:
        """Give back a permit: ``answered_at`` is when its answer arrived, None if none did.

        ``accepted``: the answer accepted the request, so the key's nonces are in step with the
        server (the skip-ahead starts small again). A first send is told to the order rule (a
        cancelled one never is: it never left), with its round trip if it was answered.
        """
        with self._changed:
            self._told_sent(permit)
            if accepted:
                self._nonce_skip = _FIRST_NONCE_SKIP
            if answered_at is None:
                stamped_by = self._clock() + self._unanswered_hold
                self._note_unanswered(stamped_by, permit.units)
                self._settle(permit, stamped_by)
                self._no_answer_coming(permit, stamped_by)
            else:
                self._settle(permit, answered_at)
                if permit.sequence == self._sequence:
                    self._order_open_at = min(self._order_open_at, answered_at)
                    self._last_answered = True
                if self._order_rule is not None and not permit.resend:
                    self._order_rule.answered(answered_at - permit.sent_at)
            # A waiter may have seen this slot in flight (no known free time): let it look again.
            self._changed.notify_all()
        self._wake_sharers()

    def release_late(self, permit: Permit, sign_seen: bool) -> None:
        """Give back the permit of a send that got no answer in time, once the server showed it had
        read the request (``sign_seen``: a late answer's first byte, or the connection's end, just
        now): it counts as stamped now, by this limiter's clock. False: no sign came within the
        watch's cap, and it keeps the unanswered hold from now. The order rule learns nothing from it
        (no round trip was timed)."""
        if not sign_seen:
            self.release(permit, None)
            return
        with self._changed:
            self._told_sent(permit)
            now = self._clock()
            self._settle(permit, now)
            self._no_answer_coming(permit, now)
            self._changed.notify_all()
        self._wake_sharers()

    def _no_answer_coming(self, permit: Permit, stamped_by: float) -> None:
        """``permit``'s send gets no answer, and is stamped by ``stamped_by`` if ever: past that, a later nonce can
        no longer overtake it, so the order gate waits for it no longer (else a key whose order rule still waits for
        every answer would never send again). Not with one send in flight (exactly-once): that gate is the settle's
        to open, since a 400 to the same nonce proves the first copy accepted only while no later nonce followed.
        Called with the lock held."""
        if permit.sequence == self._sequence and math.isfinite(self._order_latency):
            self._order_open_at = min(self._order_open_at, stamped_by)

    def _told_sent(self, permit: Permit) -> None:
        """Tell the order rule that ``permit``'s first send left. Called with the lock held."""
        if self._order_rule is not None and not permit.resend:
            self._order_rule.sent(permit.after_unanswered)

    def cancel(self, permit: Permit) -> None:
        """Give back a permit whose request surely never reached the server (connection refused):
        nothing of any rule was spent and, if it was the last send, the order gate opens (not for a
        resend: the copy before it may still arrive). The order rule never hears of it."""
        with self._changed:
            self._settle(permit, None)
            if permit.sequence == self._sequence and not permit.resend:
                self._order_open_at = -math.inf
                self._last_answered = True
            self._changed.notify_all()
        self._wake_sharers()

    def give_up_order(self, permit: Permit) -> None:
        """The send of ``permit`` gets no answer this run (a settle cut short): the order gate stops
        waiting on it, so the key can send again; what it spent keeps its unanswered hold."""
        with self._changed:
            if permit.sequence == self._sequence:
                self._order_open_at = min(self._order_open_at, self._clock())
            self._changed.notify_all()

    def note_rate_limited(self) -> float:
        """A 429 arrived although the rules forbid it (a strike): hold the key back until every stamp
        it may have left in the server's states is forgotten (the longest rule's memory plus the
        unanswered hold), and make every rule a little more careful. Returns the first rule's new pace."""
        with self._changed, self._shared_locked():
            memory = max(state.forget_after for state, _ in self._rules)
            self._held_until = max(self._held_until, self._clock() + memory + self._unanswered_hold)
            for state, _ in self._rules:
                state.widen()
            return self._rules[0][0].pace

    def note_invalid_nonce(self) -> float:
        """A 400 invalid nonce: tell the order rule, and push the nonces ahead, twice as far each
        time until an accept, so a server far ahead of this key's nonces is caught up in a few
        steps. Returns the order gap now."""
        with self._changed:
            if self._order_rule is not None:
                self._order_rule.refused()
            self.nonces.skip_ahead(self._nonce_skip)
            self._nonce_skip = min(self._nonce_skip * 2, _MAX_NONCE_SKIP)
            return self._gap()

    def _gap(self) -> float:
        return self._order_rule.gap if self._order_rule is not None else self._order_latency

    def in_doubt(self) -> tuple[int | None, float]:
        """What the sends that may still be stamped weigh, in usual sends (``Permit.units``): those in flight, and
        those given back unanswered (or an earlier run's, expected); None if one spent of a rule the usual send does
        not. And until when at the latest one given back may be stamped (this limiter's clock; -inf: none may; one
        in flight is its caller's to bound). What may yet weigh in the server's limits: a stop records it."""
        with self._lock:
            self._unanswered = [(until, units) for until, units in self._unanswered if until > self._clock()]
            latest = max((until for until, _ in self._unanswered), default=-math.inf)
            if self._unknown_out or any(units is None for _, units in self._unanswered):
                return None, latest
            return self._units_out + sum(units for _, units in self._unanswered), latest

    def _note_unanswered(self, stamped_by: float, units: int | None = 1) -> None:
        """Called with the lock held."""
        now = self._clock()
        self._unanswered = [(until, weight) for until, weight in self._unanswered if until > now]
        self._unanswered.append((stamped_by, units))

    def expect_late_stamps(self, units: int, stamped_by: float) -> bool:
        """``units`` sends of an earlier run or owner of the key, unanswered, may still be stamped by the server
        at any instant until ``stamped_by`` (this limiter's clock): each rule counts each as a send of the usual
        cost stamped then at the latest, and the key sends with the rest of its budget meanwhile (a key of 20 per
        window with 6 such sends sends 14 per window until they are past), where a hold would send nothing.
        False if the rules could not take them all now (the caller holds the key instead; those taken stay
        counted, the safe side)."""
        with self._changed, self._shared_locked():
            now = self._clock()
            for _ in range(units):
                if any(cost and state.ready_at(now, cost) > now
                       for (state, _), cost in zip(self._rules, self._usual_costs)):
                    return False
                for (state, _), cost in zip(self._rules, self._usual_costs):
                    if cost:
                        state.settle(state.take(now, cost), max(now, stamped_by))
                self._note_unanswered(stamped_by)
        return True

    def hold(self, seconds: float) -> None:
        """Allow no send for ``seconds`` from now (e.g. a window at start-up, for the stamps
        a previous run of the client may have left in the server's ring)."""
        with self._changed:
            self._held_until = max(self._held_until, self._clock() + seconds)

    @property
    def paused_by(self) -> frozenset[PausedBy]:
        with self._lock:
            return frozenset(self._paused_by)

    def pause(self, by: PausedBy) -> None:
        """Give out no fresh permit until ``resume(by)`` (a parked key none at all): the key's workers take no work
        meanwhile, and one that holds a request hands it back (KeyPaused), one waiting for its permit at once; what is
        in flight finishes. Idempotent."""
        with self._changed:
            self._paused_by.add(by)
            self._changed.notify_all()

    def resume(self, by: PausedBy) -> None:
        """Lift ``by``'s pause; the key sends again once no other pause holds it. Idempotent."""
        with self._changed:
            self._paused_by.discard(by)
            self._changed.notify_all()

    def stop_taking(self) -> None:
        """The daemon stops: ``wait_ready`` raises LimiterClosed from now on and every worker waiting
        in it wakes, while a request already taken may still get its permit (and settle) in the
        shutdown's grace. Idempotent."""
        with self._changed:
            self._taking = False
            self._changed.notify_all()

    def close(self) -> None:
        """Refuse every further acquire and wake every waiter with LimiterClosed. Idempotent."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def state(self) -> LimiterState:
        with self._lock, self._shared_locked():
            now = self._clock()
            return LimiterState(
                in_flight=self._out,
                ready_in=self._delay_until_free(now, self._usual_costs),
                window=self._rules[0][0].pace,
                order_latency=self._gap(),
                held=self._held_until > now,
                closed=self._closed,
                remaining=tuple((rule.name, state.available(now)) for state, rule in self._rules),
                held_for=max(0.0, self._held_until - now),
                paused_by=frozenset(self._paused_by),
            )
