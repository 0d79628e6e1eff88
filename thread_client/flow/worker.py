"""Worker threads: take a request, wait for the key's limiter, send it, and carry out what the retry policy says."""

from __future__ import annotations

import logging
import socket
import threading
from functools import partial
from typing import Callable

from .. import defaults
from ..clock import Clock, monotonic
from ..delivery import AT_LEAST_ONCE, Delivery
from ..errors import (
    AnswerTimedOut, ConnectFailed, EntryTakenOver, KeyNotHeld, KeyPaused, LimiterClosed, LimiterTimeout, QueueClosed,
    RequestNotBuilt, SendFenced, SendOvertaken, StateNotWritten, StaleConnection, StoreUnavailable, TransportError,
)
from ..exits import StopReason
from ..io.late_answers import LateAnswers
from ..limits.keys import ApiKey, RetireReason
from ..limits.limiter import Permit
from ..limits.rate_limit_scope import RateLimitScope
from ..parts import Answer, Journal, Transport
from ..policy.answers import AnswerTable, Outcome, Reading, reference_table
from ..policy.order_status import Finding, StatusTable
from ..policy.retry import Action, KeyStep, RequestStep, RetryPolicy
from ..request import Request
from ..threads import ManagedThread
from .listener import Listener
from .outage import OutageGate
from .queues import QueueManager

__all__ = ["Worker"]

log = logging.getLogger(__name__)

# What a first send over a kept connection the server had closed reads as: ambiguous, and at-least-once
# sends it once more with the same nonce.
_STALE = Reading(Outcome.CONNECTION_RESET, "kept connection closed under the request")
# What a request ends with once a late answer to an earlier send of it accepted it (``QueueManager.placed_late``).
_PLACED_LATE = Reading(Outcome.ACCEPTED, "accepted by a late answer to an earlier send")
# What a duplicate reads as under exactly-once with no status endpoint to ask (``_duplicate_accepted``).
_EARLIER_COPY = Reading(Outcome.ACCEPTED, "accepted by an earlier copy (the exchange has its client id)")
# Settling gives up (the request ends unknown) after this many sends in a row the transport failed on
# with an error of no known kind: a bug that repeats would otherwise hold the key for as long as it lasts.
_BUGS_BEFORE_GIVING_UP = 3


#: How often a request waits to be asked about by a key the operator paused (``Worker._sends_here``).
_PAUSED_SENDER_RECHECK = 1.0
#: Answers that leave a send's fate open, though they are no ambiguous reading: a duplicate (the first copy exists,
#: or says it does), a 5xx or a status no rule reads (Binance: "the execution status is UNKNOWN and could have been a
#: success"). Where the profile can ask ([settle]), each is settled by asking before any resend. An answer the
#: profile reads as "unavailable" (a 503 to try later, a firewall's refusal) says the request was not taken.
_FATE_UNREAD = frozenset({Outcome.DUPLICATE, Outcome.SERVER_ERROR})


def _retry_after(reading: Reading, answer: Answer) -> float | None:
    """When to try again: the time the answer's rule read (a body field), else the answer's Retry-After."""
    return answer.retry_after if reading.retry_after is None else reading.retry_after


class Worker(ManagedThread):
    """One of the threads of an API key, with its own keep-alive connection.

    Nothing is logged and dropped: every request taken ends accepted, in the DLQ,
    handed back, or in the graveyard, as ``policy`` decides. An unexpected
    exception while handling a request is logged with its traceback, it counts
    as a failed attempt (retried or buried, as the policy says) unless the
    exchange had accepted the request (it then ends accepted), and the worker
    goes on.
    """

    def __init__(
        self,
        key: ApiKey,
        queues: QueueManager,
        transport: Transport,
        policy: RetryPolicy,
        outage: OutageGate,
        stop: threading.Event,
        *,
        listener: Listener = Listener(),
        delivery: Delivery = AT_LEAST_ONCE,
        index: int = 0,
        on_key_retired: Callable[[ApiKey, str], None] = lambda key, detail: None,
        on_stop: Callable[[StopReason, str], None] = lambda reason, message: None,
        on_ban: Callable[[float | None], float] = lambda retry_after: 0.0,
        rate_limited: RateLimitScope = RateLimitScope(),
        journal: Journal | None = None,
        late_answers: LateAnswers | None = None,
        answers: AnswerTable | None = None,
        status: StatusTable | None = None,
        earlier_send: tuple[Request, int] | None = None,
        key_of: Callable[[str], ApiKey | None] = lambda key_id: None,
        clock: Clock = monotonic,
        lease_poll: float = 0.25,
        nonce_refused_again: bool = True,
    ) -> None:
        super().__init__(f"worker-{key.id[:6]}-{index}")  # the key's id, never a piece of the secret
        self.key = key
        self._queues = queues
        self._listener = listener
        self._transport = transport
        self._policy = policy
        self._outage = outage
        self._stopping = stop
        self._on_key_retired = on_key_retired
        self._on_stop = on_stop
        self._on_ban = on_ban
        self._ban_pause = 0.0  # the pause the latest ban answer this worker read started (0: one known already)
        self._rate_limited = rate_limited  # whose keys a 429 holds, and whether it is a strike
        # What an ambiguous attempt leads to is the delivery promise's one decision in the worker.
        self._settles = delivery.settles_ambiguous
        self._after_ambiguous = self._settle_ambiguous if self._settles else self._retry_ambiguous
        # The API refuses a nonce it has taken (an ordered nonce): the same nonce sent again over a fresh
        # connection tells a stale send's fate. A timestamp it would take twice: the send stays ambiguous.
        self._resends_stale = nonce_refused_again
        self._journal = journal
        # Where the connection of a send that timed out goes, so its slot waits for the server's sign.
        self._late_answers = late_answers
        # The profile's answer rules, compiled: how an answer reads.
        self._classify = (answers or reference_table()).classify
        # The profile's order-status endpoint ([settle]): a send in doubt is settled by asking it, at its own cost.
        self._status = status
        # Exactly-once with no status endpoint to ask: an exchange that says it has this request's client id has the
        # copy an earlier send of it placed (one copy at a time, journaled), if there was one: accepted by it. With
        # none, the id is another order's (a line of an earlier input, another client): recorded as the duplicate.
        self._duplicate_accepted = self._settles and status is None
        self._status_costs = key.limiter.costs_of(status.endpoint, 1) if status is not None else None
        # Exactly-once after a crash: (request, nonce) the earlier run sent last on this key, unanswered.
        self._earlier_send = earlier_send
        self._key_of = key_of  # the daemon's keys by id: the one a resumed request's order was sent on
        self._clock = clock
        self._lease_poll = lease_poll
        # The request taken and not yet routed (touched only by this thread), handed back if it dies.
        self._holding: Request | None = None
        # The permit of the held request's latest send, once its bytes may have left, until an answer
        # settles it (this thread only).
        self._in_doubt: Permit | None = None
        self._doubt_epoch: object = None  # the key's epoch when that send first left
        # The exchange read the held request's latest send accepted (this thread only): whatever raises
        # afterwards (a listener, a callback), it ends accepted, never sent again under a fresh nonce.
        self._accepted = False
        # What each send of the held request spends of the key's limits, worked out once when it is taken
        # (this thread only); None: the usual request, the profile's endpoint at weight 1.
        self._costs: tuple[int, ...] | None = None
        self._transport_bugs = 0  # sends in a row the transport failed on with an error of no known kind
        self._has_turn = False  # this thread holds the key's turn (``_take_turn``)

    def work(self) -> None:
        """The worker loop. If anything escapes it, the request held is handed back first, so the
        thread can die (and be restarted) without losing it."""
        try:
            if self._earlier_send is not None:
                (request, nonce), self._earlier_send = self._earlier_send, None
                self._guarded(request, lambda: self._settle_earlier_send(request, nonce))
            while True:
                self._take_turn()
                if (request := self._next_request()) is None:
                    break
                self._guarded(request, lambda: self._handle(request))
                self._pass_turn()  # the request was routed before a permit came
        finally:
            self._pass_turn()
            if self._holding is not None:
                self._hand_back(self._holding)
            self._transport.close()

    def _take_turn(self) -> None:
        """Wait until no other worker of the key is waiting for its next send or sending it: one at a time
        waits, the others are in an exchange or parked here. A key then has as many sends in flight as its
        limits and round trips allow, up to its threads, and a parked thread costs nothing: no limiter wakes
        it. The turn is held from the permit until the bytes left, so the key's nonces leave in the order
        they were drawn, however long a journal line or a signing hook takes."""
        self.key.turn.acquire()
        self._has_turn = True

    def _pass_turn(self) -> None:
        """Let the next worker of the key wait for a send: this one's bytes have left (or never will), or it
        has no request. Idempotent."""
        if self._has_turn:
            self._has_turn = False
            self.key.turn.release()

    def _guarded(self, request: Request, handle: Callable[[], None]) -> None:
        """Run ``handle`` for ``request``; if a bug escapes it before the request was routed, route it
        once as a failure, unless the exchange had accepted it: then it ends accepted. A send that
        may have left is never followed by a fresh nonce in exactly-once: the request then ends
        ``unknown`` and the key's order gate stops waiting on it; at-least-once counts it ambiguous, and
        asks the exchange about it before any resend where the profile can ask."""
        self._holding, self._in_doubt, self._accepted = request, None, False
        try:
            handle()
        except Exception:
            log.exception("%s: unexpected error on request %s", self.name, request.req_id)
            if self._holding is None:
                return
            if self._accepted:
                self._holding = None
                self._recording(self._queues.accept, request)
                return
            doubt = self._in_doubt
            if doubt is not None and self._settles:
                self.key.limiter.give_up_order(doubt)
                reading = Reading(Outcome.UNKNOWN, f"the client failed after nonce {doubt.nonce} was sent on "
                                                   f"{self.key.name}")
            else:
                if doubt is not None:  # the bytes may have left: asked about first where it can be, and marked
                    request.ambiguous += 1
                    request.placed_maybe = request.unsettled = True
                reading = Reading(Outcome.INTERNAL_ERROR)
            self._carry_out(request, reading, self._policy.decide(reading.outcome, request.failures,
                                                                  detail=reading.detail))

    def _next_request(self) -> Request | None:
        """Block until this key can send and a request is there; None once there will be none: the key's
        limiter is closed (retired by the client or the server) or the daemon stops (the queues, the outage gate and the
        limiter each wake their waiters at once). A key that cannot send (held, paused, parked, retired by the
        operator) takes no work meanwhile."""
        try:
            while not self._stopping.is_set():
                if not self.key.may_send():  # a shared key this daemon does not hold now: what it was handed goes
                    self._queues.release_handed(self.key.id)
                    self._stopping.wait(self._lease_poll)
                elif not self._outage.may_take(self.key.name):  # closed: the daemon stops
                    return None
                elif self.key.limiter.wait_ready():
                    return self._queues.take(key=self.key.id)
        except (LimiterClosed, QueueClosed):
            pass
        return None

    def _handle(self, request: Request) -> None:
        if self._queues.placed_late(request):  # a late answer to its earlier send accepted it: never sent again
            self._conclude(request, _PLACED_LATE, None, self._clock())
            return
        self._costs = self._costs_of(request)
        if request.sent_on and request.placed_maybe and not self._sends_here(request):
            return
        if request.unsettled and self._status is not None and not self._not_placed(request):
            return
        if not self._connect(request):
            return
        permit = self._acquire(request)
        if permit is None:
            return
        if not self.key.may_send():  # the lease ran out (or is being handed over) while the permit was awaited
            self.key.limiter.cancel(permit)
            self._hand_back(request)
            return
        if self._queues.placed_late(request):  # its earlier send's late answer came while the permit was awaited
            self.key.limiter.cancel(permit)
            self._conclude(request, _PLACED_LATE, None, self._clock())
            return
        sent_at = self._clock()
        try:
            reading, retry_after = self._exchange(permit, request)
        except KeyNotHeld:  # the journal could not be written, or the lease ended: nothing left, another try later
            self._hand_back(request)
            return
        except EntryTakenOver:  # nothing left: another member holds the request now, and records it
            log.info("%s: request %s not sent: its work entry was taken over", self.key.name, request.req_id)
            self._queues.let_go(request)
            self._holding = None
            return
        fate_open = reading.outcome.ambiguous or reading.outcome in _FATE_UNREAD
        if fate_open:
            request.placed_maybe = True  # its order may be in this key's account: asked and sent again only there
        asked_first = fate_open and self._status is not None
        # Answered, and not taken: a send whose fate is left open is not, where it is asked about first.
        if reading.outcome is not Outcome.ACCEPTED and not reading.outcome.ambiguous and not asked_first:
            self._in_doubt = None  # whatever raises from here on, the send was surely not accepted
            if self._settles:
                self._note_answered(request, permit)
        elif reading is _STALE:
            self._listener.stale_connection()
        if asked_first:
            reading, retry_after = self._settle_by_asking(permit, request, reading, sent_at), None
        elif reading.outcome.ambiguous:
            reading, retry_after = self._after_ambiguous(permit, request, reading, retry_after, sent_at)
        self._conclude(request, reading, retry_after, sent_at)

    def _connect(self, request: Request) -> bool:
        """Open the connection before the permit draws the nonce, so only the journal's line and the
        signing come between the draw and the send: a reconnect after the draw (a TLS handshake) would
        hold the key's turn, and shorten the gap the server sees to the key's next send. False once the
        request has been routed: unreachable, nothing sent."""
        try:
            self._transport.connect()
        except ConnectFailed as exc:
            self._outage.failed(exc.detail)
            self._conclude(request, Reading(Outcome.UNREACHABLE, exc.detail), None, self._clock())
            return False
        return True

    def _note_answered(self, request: Request, permit: Permit) -> None:
        """Exactly-once: write down that this send was answered without being accepted, so a restart
        does not settle it. If that cannot be written, the key sends nothing more (its last line then
        stays this send, which a restart settles: the only doubt left is a 400 read as an accept)."""
        if self._journal is None:
            return
        try:
            self._journal.answered(request, self.key.id, permit.nonce)
        except (KeyNotHeld, OSError) as exc:
            self._retire_for_output(f"the answer to request {request.req_id} could not be written down", exc)

    def _never_left(self, request: Request, permit: Permit) -> None:
        """A send written down, then stopped before any byte left: its line must not make a restart, or the
        entry's next holder, settle it as a send in doubt (it would end ``unknown``). A resend is left alone:
        the send it repeats may have left."""
        if not permit.resend:
            self._note_answered(request, permit)

    def _retire_for_output(self, what: str, exc: Exception) -> None:
        """Something the key's next restart relies on could not be written: the key sends nothing more."""
        if self.key.retire(RetireReason.OUTPUT_FAILED):
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            self._on_key_retired(self.key, f"{what} ({why}): no more sends on this key")

    def _retry_ambiguous(
        self, first: Permit, request: Request, reading: Reading, retry_after: float | None, sent_at: float
    ) -> tuple[Reading, float | None]:
        """At-least-once: a kept connection closed under the request is sent once more with the same
        nonce (where the API refuses a nonce it has taken); any other ambiguous attempt stays what it is,
        and the policy retries it under a fresh one."""
        if reading is _STALE and self._resends_stale:
            reading, retry_after = self._resend_after_stale(first, request)
            if reading.outcome is not Outcome.ACCEPTED and not reading.outcome.ambiguous:
                # Only a 200 or a 400 to the same nonce tells the first copy's fate: a refused connect, a 5xx, a
                # 429 to the resend leave it open, and the retry under a fresh nonce may be accepted a second time.
                request.ambiguous += 1
        if reading.outcome.ambiguous:
            request.ambiguous += 1
        return reading, retry_after

    def _settle_ambiguous(
        self, first: Permit, request: Request, reading: Reading, retry_after: float | None, sent_at: float
    ) -> tuple[Reading, float | None]:
        """Exactly-once: the first copy may have been accepted; the attempt is counted as it came, and
        the same nonce is asked again until the answer settles it (``_settle``)."""
        request.ambiguous += 1
        self._listener.attempted(self.key.name, reading.outcome, self._clock() - sent_at)
        return self._settle(first, request), None

    def _settle_earlier_send(self, request: Request, nonce: int) -> None:
        """Exactly-once, first thing after a restart: the earlier run's last send on this key went
        unanswered. Settle it with its own nonce, before this key sends anything else; or, where the profile
        names an order-status endpoint, by asking it (the nonce proves nothing where a [settle] is needed)."""
        log.info("%s: settling request %s, sent with nonce %d before the restart", self.key.name, request.req_id, nonce)
        request.key, request.nonce = self.key.name, nonce  # what its record names if it cannot be settled
        sent_at, self._in_doubt, self._doubt_epoch = self._clock(), Permit.of_earlier_run(nonce), self.key.epoch()
        self._costs = self._costs_of(request)  # in doubt already: if it raises, the request ends unknown
        if self._status is not None:
            unanswered = Reading(Outcome.CONNECTION_RESET, "sent before the restart, unanswered")
            self._conclude(request, self._settle_by_asking(self._in_doubt, request, unanswered, sent_at), None, sent_at)
            return
        request.ambiguous += 1
        self._conclude(request, self._settle(self._in_doubt, request), None, sent_at)

    def _conclude(self, request: Request, reading: Reading, retry_after: float | None, sent_at: float) -> None:
        """Count the attempt sent at ``sent_at`` and route its request as the retry policy decides; a request an
        earlier send's late answer accepted meanwhile ends accepted, whatever this attempt came to."""
        if reading.outcome is not Outcome.ACCEPTED and self._queues.placed_late(request):
            reading, retry_after = _PLACED_LATE, None
        finished_at = self._clock()
        outcome = reading.outcome
        round_trip = finished_at - sent_at
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request %s nonce %s on %s: %s in %.1f ms (attempt %d)", request.req_id, request.nonce,
                      self.key.name, outcome.value, 1000 * round_trip, request.failures + 1)
        action = self._policy.decide(
            outcome, request.failures, retry_after, detail=reading.detail, unsent=request.unsent,
            during_outage=self._outage.active,
        )
        # The request is routed before anything is counted: a failing listener cannot leave it unrouted.
        if action.request is RequestStep.ACCEPT:
            self._holding = None  # final from here on, whether or not its record can be written
            self._recording(self._queues.accept, request)
        else:
            self._carry_out(request, reading, action, retry_after)
        self._listener.attempted(self.key.name, outcome, round_trip)
        if action.request is RequestStep.ACCEPT:
            self._listener.accepted(finished_at - request.created_at)
        else:
            self._listener.failed(self.key.name, request.req_id, outcome, reading.detail)

    def _recording(self, finish: Callable[..., None], request: Request, *args: object) -> None:
        """End ``request`` with ``finish`` (accept or bury). If its durable record cannot be written,
        the key sends nothing more: a restart then finds that send as the key's last and settles it
        with its own nonce, where a later send would have hidden it (and a fresh nonce could be
        accepted a second time)."""
        try:
            finish(request, *args)
        except Exception as exc:
            if not isinstance(exc, OSError):
                log.exception("%s: the final record of request %s failed", self.key.name, request.req_id)
            self._retire_for_output(f"the final record of request {request.req_id} could not be made durable", exc)

    def _settle(self, first: Permit, request: Request) -> Reading:
        """Exactly-once: the first copy may have been accepted. Ask again with the same nonce, on this
        key only (no other send on it meanwhile), until the exchange's answer settles it:

        * 200: accepted now (a late first copy can only be refused: its nonce is spent);
        * 400 invalid nonce: the first copy was accepted, since no later nonce was sent on this key
          (unless the key's epoch changed meanwhile: a shared key's lease was lost and taken again, or
          ran out by this member's clock, and another owner may have sent; then ``unknown``);
        * anything else says nothing of the first copy. What it says of the key is carried out as
          for any answer (a strike holds the key, a Retry-After pauses it, a block, 401 or 403
          retires it, a wrong endpoint stops the daemon); unless the key is gone, the same nonce
          is asked again after a backoff (the key sends nothing else meanwhile). These asks have a
          retry budget of their own, charged as the policy charges a request's (a pause the server
          named, or an outage, costs nothing): an answer no rule reads (a maintenance page served
          as 200) may come for ever, and would hold the key for as long. Once it is spent, ``unknown``.

        A stop lets this finish (the daemon's shutdown grace), and so do the operator's pause and
        retirement. It ends ``unknown``, never with a fresh nonce, when the key's limiter closes (retired
        by the client or the server), it is parked, its lease ends, or anything raises first; the key's
        order gate then stops waiting on the first copy, so the key can send again (a later nonce can
        only make a late first copy be refused). What raises after an answer read accepted (a
        listener, a callback) still ends it accepted.
        """
        try:
            reading = self._ask_until_settled(first, request)
        except Exception:
            log.exception("%s: settling nonce %d failed", self.key.name, first.nonce)
            reading = Reading(Outcome.ACCEPTED) if self._accepted else Reading(
                Outcome.UNKNOWN, f"settling nonce {first.nonce} on {self.key.name} failed")
        if reading.outcome is Outcome.UNKNOWN:
            self.key.limiter.give_up_order(first)
        return reading

    def _ask_until_settled(self, first: Permit, request: Request) -> Reading:
        """The loop of ``_settle``: the reading that settles the first copy, or an ``unknown`` one."""
        limiter = self.key.limiter
        asked = spent = 0  # asks made; asks that spent the settle's retry budget
        while True:
            if asked:
                limiter.hold(self._policy.backoff(asked))
            asked += 1
            try:
                permit = limiter.acquire(resend_of=first, costs=self._costs)
            except (LimiterClosed, KeyPaused, SendOvertaken):  # retired, parked, stopped: no send may leave it
                return Reading(Outcome.UNKNOWN, f"stopped before nonce {first.nonce} on {self.key.name} was settled")
            try:
                reading, retry_after = self._exchange(permit, request)
            except KeyNotHeld:  # a shared key's lease is gone, nothing sent: another owner's nonces may follow
                return Reading(Outcome.UNKNOWN, f"the lease of {self.key.name} ended before nonce {first.nonce} "
                                                "was settled")
            if self._transport_bugs >= _BUGS_BEFORE_GIVING_UP:
                return Reading(Outcome.UNKNOWN, f"the transport kept failing before nonce {first.nonce} on "
                                                f"{self.key.name} was settled")
            if reading.outcome is Outcome.ACCEPTED:
                return reading
            if reading.outcome is Outcome.INVALID_NONCE and self.key.epoch() != self._doubt_epoch:
                return Reading(Outcome.UNKNOWN, f"the lease of {self.key.name} changed hands or ran out after nonce "
                                                f"{first.nonce} was sent: another owner's nonces may have followed it")
            if reading.outcome is Outcome.INVALID_NONCE:
                return Reading(Outcome.ACCEPTED, "accepted by an earlier copy (its nonce is spent)")
            self._listener.attempted(self.key.name, reading.outcome)
            if reading.outcome.ambiguous:
                request.ambiguous += 1
            # Spends the settle's own budget, never the request's retries.
            action = self._policy.decide(reading.outcome, spent, retry_after, detail=reading.detail,
                                         during_outage=self._outage.active)
            if action.request is RequestStep.RETRY and action.spend:
                spent += 1
            self._apply_to_key(reading, action, retry_after)
            if action.key is KeyStep.RETIRE or action.stop is not None or action.request is RequestStep.BURY:
                return Reading(Outcome.UNKNOWN, f"{reading.detail or reading.outcome.value} before nonce "
                                                f"{first.nonce} on {self.key.name} was settled")

    def _settle_by_asking(self, sent: Permit, request: Request, reading: Reading, sent_at: float) -> Reading:
        """The send of ``sent`` may have placed the order (``reading`` is ambiguous) or the exchange says its
        client id was seen (duplicate): ask the profile's order-status endpoint, never send the order blindly
        again. Found: accepted (the first copy exists). Not found: ``reading`` as it came, which the policy
        retries under the same client id (a duplicate that is not found is asked again: the exchange said
        it has it). Unknown: asked again after a backoff, within a budget of its own (``_ask_until_known``);
        then ``unknown``, as when the key's limiter closes, its lease ends or anything raises first.

        Each ask is a send of its own: a permit of the key's limiter at the status endpoint's cost, and a fresh
        nonce, past the order gate that waited on ``sent`` (a later nonce can only make a late copy refused).
        Unless it was not found (then its reading is concluded as it came), the send is counted as it came and
        the request concludes with what the asks settled."""
        self.key.limiter.give_up_order(sent)
        client_id = self._status.client_id(request)
        finding, words = self._ask_safely(request, client_id, duplicate=reading.outcome is Outcome.DUPLICATE)
        if finding is not Finding.NOT_FOUND:
            if reading.outcome.ambiguous:
                request.ambiguous += 1
            self._listener.attempted(self.key.name, reading.outcome, self._clock() - sent_at)
        if finding is Finding.FOUND:
            return Reading(Outcome.ACCEPTED, f"found at the exchange by client id {client_id}")
        if finding is Finding.NOT_FOUND:
            self._in_doubt = None  # the exchange has no such order: whatever raises now, it was not accepted
            if self._settles:
                self._note_answered(request, sent)
            return Reading(reading.outcome, f"{reading.detail}; not found at the exchange by client id {client_id}"
                                            .lstrip("; "))
        return Reading(Outcome.UNKNOWN, f"{words} before client id {client_id} was settled")

    def _sends_here(self, request: Request) -> bool:
        """A request whose order may be at the exchange already (resumed after a crash, or an attempt went
        unanswered) is asked about, and sent again, only in the account of the key its latest send went on
        (``sent_on``): an exchange finds an order, and refuses its client id again, only in the account that
        placed it; another account's ask answers "not found", and its send places a second order. True if this
        key may (that key, or a key of its account). Else the request goes to that key's workers while they take
        work; while the operator pauses it, it waits (a second at a time, at no cost). Where that key takes no
        more work this run (retired, parked, another member's), a request never asked about ends ``unknown`` (no
        key here can ask its account), and one whose earlier copies were asked about goes out here."""
        sender = self._key_of(request.sent_on)
        if request.sent_on == self.key.id or (
                sender is not None and sender.account and sender.account == self.key.account):
            return True
        if sender is not None and sender.retired_because is None and sender.may_send():
            if sender.limiter.paused_by:  # by the operator, or the whole daemon: it comes back
                self._hand_back(request, after=_PAUSED_SENDER_RECHECK)
                return False
            self._queues.hand_to(request, sender.id)
            self._holding = None
            if sender.retired_because is not None:  # retired meanwhile, after it gave back what it was handed
                self._queues.release_handed(sender.id)
            return False
        if not (request.unsettled and self._status is not None):
            return True
        why = "sends no more this run" if sender is not None else "is not among this run's keys"
        self._conclude(request, Reading(Outcome.UNKNOWN, f"its order was sent on key {request.sent_on}, which {why}: "
                                                          "no key here can ask its account, and sent again it may "
                                                          "be placed twice"), None, self._clock())
        return False

    def _not_placed(self, request: Request) -> bool:
        """``request``'s latest send was never settled (sent by the earlier run, whose crash lost its answer; or the
        client failed after its bytes left). Ask the exchange before any resend: True if it has no such order (send it); else the request is
        concluded, accepted if found, ``unknown`` if the asks could not tell."""
        client_id = self._status.client_id(request)
        asked_at = self._clock()
        finding, words = self._ask_safely(request, client_id, duplicate=False)
        if finding is Finding.NOT_FOUND:
            request.unsettled = False
            return True
        reading = Reading(Outcome.ACCEPTED, f"found at the exchange by client id {client_id}") if (
            finding is Finding.FOUND) else Reading(Outcome.UNKNOWN, f"{words} before client id {client_id} was settled")
        self._conclude(request, reading, None, asked_at)
        return False

    def _ask_safely(self, request: Request, client_id: str, duplicate: bool) -> tuple[Finding, str]:
        """``_ask_until_known`` about a send of ``request`` that ended now; ``unknown`` if anything raises."""
        try:
            return self._ask_until_known(request, duplicate, self._clock() + self._status.doubt_lasts)
        except Exception:
            log.exception("%s: settling request %s by asking for client id %s failed", self.key.name,
                          request.req_id, client_id)
            return Finding.UNKNOWN, f"asking for client id {client_id} failed"

    def _ask_until_known(self, request: Request, duplicate: bool, doubt_ends: float) -> tuple[Finding, str]:
        """The loop of ``_settle_by_asking``: ask until the status answer finds the order or finds none (for
        a ``duplicate``, until it is found), and return the finding with its words. None found is trusted only
        from an ask that left once the send's copy can no longer be accepted (``doubt_ends``, on this worker's
        clock), after an earlier ask found none too (docs/api/settle.md); until then the order is asked about
        again at that time, at no cost. An answer that says neither is read as any answer is, for what it says
        of the key (a ban holds the host, a strike holds it, a Retry-After pauses it, 401 or 403 retires it),
        and asked again after a backoff; these asks spend a retry budget of their own, charged as the policy
        charges a request's (refusals that cost nothing, a lost nonce bet say, count as its unsent attempts).
        ``unknown`` once it is spent, or if a stop comes while waiting for ``doubt_ends``."""
        asked = spent = free = none_found = 0  # asks made; that spent the budget; that cost nothing; found none
        while True:
            if asked:
                self.key.limiter.hold(self._policy.backoff(asked))
            asked += 1
            asked_at = self._clock()
            finding, reading, retry_after = self._ask_status(request)
            if finding is Finding.NOT_FOUND and not duplicate:
                if none_found and asked_at >= doubt_ends:
                    return finding, reading.detail
                none_found += 1
                if self._stopping.wait(max(0.0, doubt_ends - self._clock())):
                    return Finding.UNKNOWN, "stopped while a copy could still be accepted"
                continue
            if finding is Finding.FOUND:
                return finding, reading.detail
            if reading.outcome is Outcome.UNKNOWN:  # stopped: the limiter closed, the lease ended
                return Finding.UNKNOWN, reading.detail
            if finding is Finding.NOT_FOUND or reading.outcome is Outcome.ACCEPTED:  # says nothing of the key
                reading = Reading(Outcome.BAD_ANSWER, f"the status answer said {finding.value}")
            action = self._policy.decide(reading.outcome, spent, retry_after, detail=reading.detail, unsent=free,
                                         during_outage=self._outage.active)
            if action.request is RequestStep.RETRY and action.spend:
                spent += 1
            else:
                free += 1
            self._apply_to_key(reading, action, retry_after)
            if action.key is KeyStep.RETIRE or action.stop is not None or action.request is RequestStep.BURY:
                return Finding.UNKNOWN, reading.detail or reading.outcome.value

    def _ask_status(self, request: Request) -> tuple[Finding, Reading, float | None]:
        """Ask the status endpoint once about ``request``'s order, with a permit of its own: the finding, the answer
        as the answer table reads it (a send that got none: timeout, connection reset, unreachable; ``unknown``
        if the key can send no more), and its Retry-After. A send in doubt asks outside the key's turn, which a
        worker waiting for work may hold: a later nonce that leaves first costs the ask a 400, and it is asked
        again. A request resumed after a crash asks in its turn, before it takes a permit (``_not_placed``): its
        key sends nothing else meanwhile, one resumed request at a time."""
        limiter = self.key.limiter
        try:
            permit = limiter.acquire(costs=self._status_costs, settling=True)
        except (LimiterClosed, KeyNotHeld, KeyPaused):  # retired, parked, stopped, or the lease gone
            return Finding.UNKNOWN, Reading(Outcome.UNKNOWN, f"{self.key.name} stopped sending"), None
        status = self._status
        client_id = status.client_id(request)
        try:
            answer = self._transport.send(permit.nonce, "", status.params(request), status.method, status.path)
        except (SendFenced, RequestNotBuilt) as exc:  # nothing left, and no ask can leave now
            limiter.cancel(permit)
            return Finding.UNKNOWN, Reading(Outcome.UNKNOWN, exc.detail), None
        except ConnectFailed as exc:
            limiter.cancel(permit)
            self._outage.failed(exc.detail)
            return Finding.UNKNOWN, Reading(Outcome.UNREACHABLE, exc.detail), None
        except BaseException as exc:
            # No answer: an ask is never settled (a late copy of it can only be refused), so the key's next send
            # does not wait on it. With one send in flight, the order gate would otherwise never open again.
            limiter.give_up_order(permit)
            if isinstance(exc, AnswerTimedOut):
                self._wait_for_late_answer(permit, None, exc.connection)
                self._outage.failed("timeouts")
                return Finding.UNKNOWN, Reading(Outcome.TIMEOUT, exc.detail), None
            limiter.release(permit, answered_at=None)
            if not isinstance(exc, TransportError):
                raise
            self._outage.failed("connections reset")
            return Finding.UNKNOWN, Reading(Outcome.CONNECTION_RESET, exc.detail), None
        self._outage.answered()
        finding = Finding.UNKNOWN
        try:
            finding, reading = status.read(answer.status, answer.body, client_id, answer.headers)
            if finding is Finding.UNKNOWN:
                reading = self._classify(answer.status, answer.body, "", answer.headers)
            retry_after = _retry_after(reading, answer)
            if reading.outcome is Outcome.BANNED:  # every key held before this slot frees, as for any send
                self._ban_pause = self._on_ban(retry_after)
        finally:
            limiter.release(permit, self._clock(), accepted=finding is not Finding.UNKNOWN)
        return finding, reading, retry_after

    def _resend_after_stale(self, first: Permit, request: Request) -> tuple[Reading, float | None]:
        """At-least-once, a kept connection the server had closed under the request: send the same
        nonce once more, on a fresh connection, in a slot of its own (the first copy may have spent
        one), while the key has sent nothing after it. A 400 invalid nonce then says the first copy
        was accepted, unless another thread's later nonce overtook the resend (the order rule's bet):
        ambiguous, as the first attempt stays if no slot comes within the request's time-to-live
        or a later send left first. The resend is not an attempt of its own."""
        try:
            permit = self.key.limiter.acquire(max(0.0, request.deadline - self._clock()), resend_of=first,
                                              costs=self._costs)
        except (LimiterTimeout, LimiterClosed, SendOvertaken, KeyNotHeld, KeyPaused):
            return _STALE, None
        try:
            reading, retry_after = self._exchange(permit, request)
        except KeyNotHeld:  # the lease ended before the resend could leave: the first attempt stays ambiguous
            return _STALE, None
        if reading.outcome is Outcome.INVALID_NONCE:
            return Reading(Outcome.CONNECTION_RESET, "the first copy over the closed connection may have been accepted"), None
        return reading, retry_after

    def _strike(self, reading: Reading, pause: float, named: bool) -> None:
        """An unexplained 429: hold the key back (and longer if the server ``named`` a pause), and with it
        every key the profile says shares the refused limit (its account's, the host's); unless the profile
        says a 429 is no strike, count one, and park the key for the rest of the run once it has had too
        many, long before the server would block it."""
        limiter = self.key.limiter
        window = limiter.note_rate_limited()  # held first: nothing else leaves while the strike is written down
        limiter.hold(pause)
        shared = self._rate_limited.hold_sharers(self.key, pause if named else None)
        held = "" if not shared else (f"; every key held {shared:.1f} s" if self._rate_limited.holds == "host" else
                                      f"; every key of account {self.key.account} held {shared:.1f} s")
        if not self._rate_limited.strikes:
            log.warning("%s: 429 rate limited (%s), not a strike (the profile's rate_limited_strikes is false); key "
                        "held back, its limits made more careful (first: %.3f s)%s", self.key.name, reading.detail,
                        window, held)
            return
        try:
            strike = self.key.strike()
        except (OSError, StoreUnavailable) as exc:  # a strike not remembered would give the next owner a fresh budget
            self._retire_for_output("a rate-limit strike could not be written down", exc)
            return
        log.error("%s: 429 rate limited although the limits forbid it (%s): strike %d of %d this run, %d of %d"
                  " in all runs; key held back, its limits made more careful (first: %.3f s)%s", self.key.name,
                  reading.detail, strike.this_run, self._policy.max_strikes, strike.lifetime,
                  self._policy.strike_budget, window, held)
        why = self._policy.parks(strike.this_run, strike.lifetime)
        # A park for a strike counted before the operator's un-park is refused: the un-park gave a fresh budget.
        if why is not None and self.key.retire(why, strike):
            self._on_key_retired(
                self.key, f"{strike.this_run} rate-limit strikes this run, {strike.lifetime} in all: another client is"
                " likely using this key, or the profile's limits (or --rate/--window-ms) are above what the server"
                " enforces",
            )

    def _acquire(self, request: Request) -> Permit | None:
        """A permit within the request's time-to-live, or None once the request has been routed:
        expired if it waited its whole time-to-live, handed back at once (no cost, not expired)
        if the key surely cannot send within it (another thread of the key took the last slot,
        or the key was held meanwhile), or if no nonce could be reserved for it: then the daemon stops."""
        try:
            remaining = request.deadline - self._clock()
            if remaining <= 0:
                raise LimiterTimeout(self.key.name, 0.0)
            return self.key.limiter.acquire(timeout=remaining, costs=self._costs)
        except LimiterTimeout as exc:
            if self._clock() < request.deadline:
                # A costlier request than the usual one: its key was ready for a usual send, not for this one.
                # It waits in the DLQ until it may fit (at no cost), not in a loop of takes and hand-backs.
                self._hand_back(request, after=0.0 if self._costs is None else min(exc.delay, defaults.TTL))
                return None
            self._listener.attempted(self.key.name, Outcome.EXPIRED)
            expired = Reading(Outcome.EXPIRED)
            self._carry_out(request, expired, self._policy.decide(Outcome.EXPIRED, request.failures))
        except (LimiterClosed, KeyNotHeld, KeyPaused):
            # Key retired, paused, shutting down, or its lease lost: another key takes it, or the shutdown drain
            # buries it.
            self._hand_back(request)
        except StateNotWritten as exc:  # the state dir is failing: the request waits for the next run, at no cost
            self._hand_back(request)
            self._on_stop(StopReason.OUTPUT_FAILED, f"{self.key.name}: {exc}")
        return None

    def _costs_of(self, request: Request) -> tuple[int, ...] | None:
        """What each send of ``request`` spends of the key's limits (``costs_of``); None for the usual
        request, whose costs the limiter knows already (the hot path works nothing out)."""
        if not request.path and request.weight == 1:
            return None
        return self.key.limiter.costs_of(f"{request.method} {request.path}" if request.path else "", request.weight)

    def _hand_back(self, request: Request, after: float = 0.0) -> None:
        """Give a request that was not sent back to the queues, at no cost (to be taken again at once, or
        ``after`` seconds from now); this worker holds nothing then."""
        self._queues.hand_back(request, after)
        self._holding = None

    def _exchange(self, permit: Permit, request: Request) -> tuple[Reading, float | None]:
        """Send ``permit``'s nonce once and give the permit back as the outcome allows, whatever
        raises on the way (a journal that cannot be written, a bug): a slot is never left marked in
        flight. Returns the reading and the Retry-After; ``_STALE`` for a first send over a stale
        connection. Raises KeyNotHeld, with nothing sent, if the key may not send now."""
        limiter = self.key.limiter
        if self._journal is not None and not permit.resend:  # a resend repeats a send already written down
            try:
                self._journal.sending(request, self.key.id, permit.nonce)
            except OSError as exc:  # a full disk: nothing was sent, and nothing may be until it is written down
                limiter.cancel(permit)
                raise KeyNotHeld(self.key.name) from exc
            except BaseException:
                limiter.cancel(permit)  # nothing was sent
                raise
        if not self.key.may_send():  # a shared key's lease, checked right before the bytes leave (every send)
            limiter.cancel(permit)
            self._never_left(request, permit)
            raise KeyNotHeld(self.key.name)
        if self._settles and not permit.resend:  # only a settle reads it: nothing more on the at-least-once path
            self._doubt_epoch = self.key.epoch()
        request.sent_on = self.key.id  # where its order is, if this send placed it
        doubt, self._in_doubt = self._in_doubt, permit
        try:
            answer = self._transport.send(permit.nonce, request.req_id, request.params, request.method, request.path,
                                          on_sent=self._pass_turn)
        except TransportError as exc:
            if isinstance(exc, SendFenced):  # the lease ended after the check above, before any byte left
                self._in_doubt = doubt
                limiter.cancel(permit)
                self._never_left(request, permit)
                raise KeyNotHeld(self.key.name) from exc
            if isinstance(exc, RequestNotBuilt):  # nothing left: the slot is free at once
                limiter.cancel(permit)
                return Reading(Outcome.INTERNAL_ERROR, exc.detail), None
            request.note_attempt(self.key.name, permit.nonce, None, b"")
            if isinstance(exc, ConnectFailed):
                limiter.cancel(permit)  # surely never arrived: the slot is free at once
                self._outage.failed(exc.detail)
                return Reading(Outcome.UNREACHABLE, exc.detail), None
            if isinstance(exc, AnswerTimedOut):
                self._wait_for_late_answer(permit, request, exc.connection)
                self._outage.failed("timeouts")
                return Reading(Outcome.TIMEOUT, exc.detail), None
            limiter.release(permit, answered_at=None)
            if isinstance(exc, StaleConnection) and not permit.resend:
                return _STALE, None
            self._outage.failed("connections reset")
            return Reading(Outcome.CONNECTION_RESET, exc.detail), None
        except Exception as exc:  # a bug in the transport: the bytes may have left, so the fate is unknown
            log.exception("%s: the transport failed sending nonce %d", self.key.name, permit.nonce)
            request.note_attempt(self.key.name, permit.nonce, None, b"")
            limiter.release(permit, answered_at=None)
            self._transport.close()  # it may be left mid-request: the next send starts on a fresh connection
            self._transport_bugs += 1
            return Reading(Outcome.CONNECTION_RESET, f"the transport failed: {exc!r}"), None
        except BaseException:
            limiter.release(permit, answered_at=None)
            raise
        finally:
            self._pass_turn()  # the bytes left (or never will): the key's next send may be drawn
        answered_at, accepted = self._clock(), False
        self._transport_bugs = 0
        try:
            request.note_attempt(self.key.name, permit.nonce, answer.status, answer.body)
            reading = self._classify(answer.status, answer.body, request.req_id, answer.headers)
            if reading.outcome is Outcome.DUPLICATE and self._duplicate_accepted and (
                    request.placed_maybe or request.resumed or request.requeue):
                reading = _EARLIER_COPY  # the copy placed is one of this request's own earlier sends
            accepted = self._accepted = reading.outcome is Outcome.ACCEPTED
            if reading.unmatched:
                self._listener.unmatched_answer(answer.status)
            retry_after = _retry_after(reading, answer)
            if reading.outcome is Outcome.BANNED:  # every key held before this slot frees: nothing slips in
                self._ban_pause = self._on_ban(retry_after)
        finally:
            limiter.release(permit, answered_at, accepted=accepted)
        self._outage.answered()
        if answer.replaced_stale:
            self._listener.stale_connection()
        return reading, retry_after

    def _wait_for_late_answer(self, permit: Permit, request: Request | None, connection: socket.socket | None) -> None:
        """A send timed out: its slot waits for the server to show, on the connection it went out on,
        that it read the request. With no connection (or no watcher) it keeps the unanswered hold."""
        if connection is None or self._late_answers is None:
            if connection is not None:
                connection.close()
            self.key.limiter.release(permit, answered_at=None)
            return
        if request is not None:  # an order's send, not a status ask's: a late 200 ends its request accepted
            self._queues.watch_late(request)
        req_id = "" if request is None else request.req_id
        timed_out_at = self._clock()
        self.key.watch_started(timed_out_at)  # a shared key's next owner waits until it can no longer be stamped
        self._late_answers.watch(connection, partial(self._freed_late, permit, req_id, timed_out_at))

    def _freed_late(
        self, permit: Permit, req_id: str, timed_out_at: float, seen_at: float | None, answer: Answer | None
    ) -> None:
        """The watch of a send that timed out ended (called from the watching thread): its slot frees a
        window after the server's sign, or after the unanswered hold if none came within the cap. A late
        rate-limit refusal is a strike the server counted: it is counted here too, before the slot frees."""
        try:
            if answer is not None:
                reading = self._classify(answer.status, answer.body, req_id, answer.headers)
                if reading.outcome is Outcome.ACCEPTED and req_id:  # the order is placed: it is not sent again
                    self._queues.note_placed_late(req_id)
                if reading.outcome is Outcome.RATE_LIMITED:
                    retry_after = _retry_after(reading, answer)
                    action = self._policy.decide(reading.outcome, 0, retry_after)
                    self._strike(Reading(reading.outcome, f"{reading.detail}, a late answer to a send that timed out"),
                                 action.key_delay, named=retry_after is not None)
        finally:
            self.key.watch_ended(timed_out_at)
            self.key.limiter.release_late(permit, sign_seen=seen_at is not None)
        self._listener.late_answer(None if seen_at is None else max(0.0, seen_at - timed_out_at))

    def _carry_out(self, request: Request, reading: Reading, action: Action, retry_after: float | None = None) -> None:
        """Apply a failed attempt's action: first to the key (so no other send slips in), then to the request."""
        self._apply_to_key(reading, action, retry_after)
        outcome = reading.outcome
        if action.request is RequestStep.RETRY:
            self._queues.retry(request, outcome, action.delay, spend=action.spend)
        elif action.request is RequestStep.HAND_BACK:
            self._queues.hand_back(request)
        else:
            self._holding = None
            self._recording(self._queues.bury, request, action.final, action.detail, outcome)
        self._holding = None
        if action.request is RequestStep.RETRY and action.spend:
            self._listener.retried()

    def _apply_to_key(self, reading: Reading, action: Action, retry_after: float | None) -> None:
        """What an answer says about the key that sent it: hold, pause, resync, retire, or stop the daemon."""
        limiter = self.key.limiter
        if action.key is KeyStep.HOLD:
            self._strike(reading, action.key_delay, named=retry_after is not None)
        elif action.key is KeyStep.PAUSE:
            limiter.hold(action.key_delay)
            capped = f" (it asked for {retry_after:.0f} s, more than --max-retry-after)" if (
                retry_after is not None and retry_after > action.key_delay) else ""
            log.log(logging.WARNING if action.key_delay >= 1 else logging.DEBUG,
                    "%s: the server asked for a pause: no send on this key for %.1f s%s",
                    self.key.name, action.key_delay, capped)
        elif action.key is KeyStep.BAN and self._ban_pause:  # held already, when the answer was read
            log.warning("%s: the host is banned (%s): no key sends for %.1f s", self.key.name, reading.detail,
                        self._ban_pause)
        elif action.key is KeyStep.RESYNC:
            gap = limiter.note_invalid_nonce()  # the order rule's bet lost: it costs the slot, nothing more
            log.debug("%s: 400 invalid nonce; order gap %.1f ms", self.key.name, 1000 * gap)
        elif action.key is KeyStep.RETIRE and self.key.retire(action.retire):
            self._on_key_retired(self.key, reading.detail)
        if action.stop is not None:
            self._on_stop(action.stop, f"{self._transport.endpoint} answered {reading.detail}: "
                                       "the endpoint is wrong (check --url)")
