"""The worker's hardest paths, driven through a scripted transport instead of a server: an ambiguous
attempt settled with its own nonce (exactly-once) or retried under a fresh one (at-least-once), the
resend after a stale connection and the later send that forbids it, a key retired mid-request.

The parts are the daemon's own (queues, limiter, key, policy, outage gate, metrics); only the exchange
is scripted. The clock is the real one: the limiter's holds and the policy's backoffs are real waits
of about a millisecond, and nothing is asserted about time. Nonces come from a frozen wall clock, so
each fresh nonce is exactly the last one plus one (or pushed ahead after an invalid nonce).
"""

from __future__ import annotations

import math
import random
import socket
import threading
import time
from typing import Callable, Iterable

import pytest

from conftest import FakeClock, wait_for
from full_disk import FillingDisk
from fakes import (
    Call, Connect, ScriptedTransport, Step, answer, blocked, invalid_nonce, ok, rate_limited, server_error, unavailable,
)
from thread_client.cluster.keyspace import Keyspace
from thread_client.cluster.leases import KeyLease
from thread_client.delivery import AT_LEAST_ONCE, EXACTLY_ONCE, Delivery
from thread_client.exits import StopReason
from thread_client.errors import (
    AnswerTimedOut, ConnectFailed, EntryTakenOver, LimiterTimeout, RequestNotBuilt, SendFenced, StaleConnection, StoreUnavailable,
)
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.flow.worker import Worker
from thread_client.io.graveyard import Graveyard
from thread_client.io.late_answers import LateAnswers
from thread_client.io.resume import SendJournal
from thread_client.limits.keys import ApiKey, RetireReason
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.limits.nonces import NonceGenerator, Reserve
from thread_client.observe.metrics import Metrics
from thread_client.parts import Answer, Journal
from thread_client.policy.answers import AnswerTable, Outcome
from thread_client.policy.order_status import StatusTable
from thread_client.policy.retry import RetryPolicy
from thread_client.profile import read_profile
from thread_client.request import Request

SECRET = "UT4NHL1J796WCHULA1750MXYF9F5JYA6"
WALL = 1_700_000_000_000_000  # the frozen wall clock of the nonces, in microseconds
FIRST = WALL  # the first nonce a fresh key draws
BOUND = 5.0  # seconds any one step of a test may take before it counts as hung (it takes milliseconds)


class Rig:
    """One key with one worker, wired as the daemon wires them, around a scripted transport.

    Exactly-once builds the limiter as the command line does (an infinite order latency: one send in
    flight per key); at-least-once with no order latency, so a test can let another send leave at once.
    ``earlier_send``: (request, nonce) an earlier run sent last on the key, unanswered (adopted as the
    daemon does, and settled first by the worker's thread). ``account`` is the key's; ``key_of`` finds the
    daemon's other keys by id. ``answers`` and ``status``: a profile's answer
    and order-status tables (the reference's answers, no status endpoint, by default).
    """

    def __init__(
        self, *steps: Step, delivery: Delivery = AT_LEAST_ONCE, earlier_send: tuple[Request, int] | None = None,
        metrics: Metrics | None = None, remember_strikes: Callable[[int], int] = lambda total: total,
        journal: Journal | None = None, epoch: Callable[[], object] = lambda: None,
        late_answers: LateAnswers | None = None, reserve: Reserve | None = None, connects: Iterable[Connect] = (),
        nonce_refused_again: bool = True, answers: AnswerTable | None = None, status: StatusTable | None = None,
        on_ban: Callable[[float | None], float] = lambda retry_after: 0.0, account: str = "",
        key_of: Callable[[str], ApiKey | None] = lambda key_id: None,
    ) -> None:
        order_latency = math.inf if delivery.one_in_flight else 0.0
        nonces = NonceGenerator(clock=lambda: WALL, reserve=reserve)
        # Short windows and holds: a strike's hold (a window and the unanswered hold) lasts milliseconds here.
        limiter = ThreadSafeRateLimiter(20, name="UT4N", window=0.05, unanswered_hold=0.01,
                                        order_latency=order_latency, nonces=nonces)
        self.key = ApiKey(SECRET, limiter, remember_strikes=remember_strikes, epoch=epoch, account=account)
        self.queues = QueueManager(Graveyard(None), queue_size=10, ttl=60.0)  # no request expires under a slow machine
        self.transport = ScriptedTransport(steps, connects)
        self.metrics = metrics or Metrics()
        self.stop = threading.Event()
        self.retired: list[str] = []
        self.stopped: list[StopReason] = []  # the reasons the worker asked the daemon to stop for
        self.other_nonces: list[int] = []
        self._policy = policy = RetryPolicy(max_retries=3, backoff_base=0.001, backoff_cap=0.001, rng=random.Random(1))
        self.worker = Worker(
            self.key, self.queues, self.transport, policy, OutageGate(), self.stop, listener=self.metrics,
            delivery=delivery, on_key_retired=lambda key, detail: self.retired.append(detail), journal=journal,
            on_stop=lambda reason, message: self.stopped.append(reason),
            late_answers=late_answers, nonce_refused_again=nonce_refused_again, answers=answers, status=status,
            on_ban=on_ban, earlier_send=earlier_send and (self.queues.adopt(earlier_send[0]), earlier_send[1]),
            key_of=key_of,
        )

    def another_worker(self, transport: ScriptedTransport) -> Worker:
        """A second thread of the key, at least once, with a connection of its own."""
        return Worker(self.key, self.queues, transport, self._policy, OutageGate(), self.stop, listener=self.metrics,
                      index=1)

    # -- races forced from a callable step, between this send and the next -------------------

    def another_send_leaves(self, then: Step) -> Step:
        """Another thread of the key takes a permit (a later nonce, kept in ``other_nonces``) and is
        answered, while this send is out; this send then gets ``then``."""
        permit = self.key.limiter.acquire(timeout=0)
        self.key.limiter.release(permit, time.monotonic(), accepted=True)
        self.other_nonces.append(permit.nonce)
        return then

    def key_retired(self, then: Step) -> Step:
        """Another thread of the key retires it (its 429 blocked) while this send is out; this send
        then gets ``then``."""
        assert self.key.retire(RetireReason.KEY_BLOCKED)
        return then

    # -- driving the worker -----------------------------------------------------------------

    def submit(self, req_id: str = "r1") -> Request:
        request = Request(req_id, time.monotonic())
        assert self.queues.submit(request)
        return request

    def handle_next(self) -> Request:
        """Take the next request (a retry back from the DLQ first, if the main queue is empty) and
        let the worker handle it once, as its loop would."""
        if self.queues.sizes()[0] == 0:
            assert self.queues.requeue_ready(timeout=BOUND), "no request came back from the DLQ"
        request = self.queues.take(BOUND)
        assert request is not None
        bounded(lambda: self.worker._handle(request), on_hang=self.key.limiter.close)
        return request

    def stop_taking(self) -> None:
        """Stop as the daemon does: no more work taken, every wait woken at once."""
        self.stop.set()
        self.queues.close()
        self.key.limiter.stop_taking()

    def run_until(self, done: Callable[[], bool]) -> None:
        """Let the worker's own loop (and its guard against bugs) run until ``done``; then stop it as the daemon
        does and see it end."""
        self.worker.start()
        try:
            wait_for(done, timeout=BOUND)
        finally:
            self.stop_taking()
            self.worker.join(BOUND)
        assert not self.worker.is_alive()

    def assert_clean(self) -> None:
        """What holds after every scenario: the script was played, nothing more was sent, every permit
        was given back, and the queues account for every request."""
        self.transport.assert_played()
        assert self.key.limiter.state().in_flight == 0
        assert self.queues.counts().balanced, self.queues.counts().identity()


def bounded(action: Callable[[], None], on_hang: Callable[[], None]) -> None:
    """Run ``action`` on a thread of its own and re-raise what it raised; fail (after ``on_hang``, which
    must free it) instead of hanging the suite if it has not returned within BOUND seconds."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, name="test-worker-step", daemon=True)
    thread.start()
    thread.join(BOUND)
    if thread.is_alive():
        on_hang()
        thread.join(BOUND)
        raise AssertionError(f"the worker did not finish its step within {BOUND} s")
    if raised:
        raise raised[0]


# -- exactly-once: an ambiguous attempt is settled with its own nonce ----------------------------


def test_exactly_once_a_timeout_then_invalid_nonce_on_the_same_nonce_is_accepted_by_the_first_copy():
    rig = Rig(AnswerTimedOut("timed out"), invalid_nonce(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]  # asked again with the same nonce
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq) == (1, 0, 0)
    assert (request.ambiguous, request.failures) == (1, 0)
    snapshot = rig.metrics.snapshot()
    assert snapshot.outcomes == {"timeout": 1, "accepted": 1} and snapshot.retried == 0
    rig.assert_clean()


def test_exactly_once_a_400_after_the_key_changed_hands_proves_nothing_and_the_request_ends_unknown():
    """A shared key's lease lost and taken again between the first copy and the settle: another owner's
    nonces may have followed the first copy, so its 400 says nothing of it."""
    fence = [1]

    def lease_taken_again(call):
        fence[0] = 2
        return invalid_nonce()

    rig = Rig(AnswerTimedOut("timed out"), lease_taken_again, delivery=EXACTLY_ONCE, epoch=lambda: fence[0])
    rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard) == (0, 1)
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1}
    rig.assert_clean()


class LeaseGranted:
    """The store's side of a shared key's lease, granted at once (fence 7, no earlier owner): a ``Scripts`` stand-in."""

    def acquire_lease(self, *, keys: list[str], args: list[object]) -> list[int]:
        return [7, 0, 0, 0]  # fence, quiet period ends, now, strikes: nothing before


def test_exactly_once_a_400_read_after_the_lease_s_own_deadline_proves_nothing_though_the_fence_is_the_same():
    """The store cannot be reached, so the fence stays what it was; but past the lease's deadline by this
    member's clock, another member may have taken the key and sent later nonces: the 400 is no proof."""
    clock = FakeClock()
    lease = KeyLease(LeaseGranted(), Keyspace().key(SECRET), "m1", ttl=3.0, quiet=0.0, margin=0.3, clock=clock)
    assert lease.acquire() is not None and lease.may_send()

    def answered_past_the_lease(call):
        clock.advance(3.0)  # the lease ran out while the second copy was out; no renewal reached the store
        return invalid_nonce()

    rig = Rig(AnswerTimedOut("timed out"), answered_past_the_lease, delivery=EXACTLY_ONCE, epoch=lease.epoch)
    rig.submit("r1")
    rig.handle_next()
    assert lease.fence == 7 and rig.transport.nonces == [FIRST, FIRST]
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1} and rig.queues.counts().accepted == 0
    rig.assert_clean()


@pytest.mark.parametrize("delivery", [AT_LEAST_ONCE, EXACTLY_ONCE], ids=["at-least-once", "exactly-once"])
def test_a_send_fenced_off_at_its_last_step_is_handed_back_at_no_cost(delivery):
    """The lease's deadline came between the worker's check and the bytes leaving: nothing left, so the
    request goes back to the queue untouched, its slot is free and nothing is in doubt."""
    rig = Rig(SendFenced("the key's lease ended before the request could leave"), delivery=delivery)
    rig.submit("r1")
    request = rig.handle_next()
    counts = rig.queues.counts()
    assert (counts.dlq, counts.graveyard, counts.accepted) == (1, 0, 0)  # handed back, to be sent again
    assert (request.failures, request.ambiguous, request.attempts) == (0, 0, 0)
    assert rig.metrics.snapshot().outcomes == {} and rig.key.limiter.state().ready_in == 0
    rig.assert_clean()


class RecordingJournal:
    """A send journal that keeps its lines in a list."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, int]] = []

    def sending(self, request: Request, key: str, nonce: int) -> None:
        self.lines.append(("sending", request.req_id, nonce))

    def answered(self, request: Request, key: str, nonce: int) -> None:
        self.lines.append(("answered", request.req_id, nonce))

    def notify_write_errors(self, callback) -> None:
        pass

    def unwritten(self) -> list[str]:
        return []

    def close(self) -> None:
        pass


def test_exactly_once_a_send_fenced_off_after_its_journal_line_is_written_down_as_never_sent():
    """Its line said it left: the entry's next holder (or a restart) took it for a send in doubt and recorded
    the request unknown, though nothing had left. Now the journal says it was answered without an accept."""
    journal = RecordingJournal()
    rig = Rig(SendFenced("the key's lease ended before the request could leave"), delivery=EXACTLY_ONCE,
              journal=journal)
    rig.submit("r1")
    rig.handle_next()
    assert journal.lines == [("sending", "r1", FIRST), ("answered", "r1", FIRST)]
    assert rig.queues.counts().dlq == 1
    rig.assert_clean()


def test_exactly_once_a_resend_fenced_off_at_its_last_step_ends_unknown_as_a_lease_ended(caplog):
    rig = Rig(AnswerTimedOut("timed out"), SendFenced("the key's lease ended"), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1} and request.attempts == 1
    assert not [record for record in caplog.records if record.exc_info]  # an end foreseen, not a failure
    rig.assert_clean()


def test_exactly_once_a_timeout_then_ok_on_the_same_nonce_is_accepted():
    rig = Rig(AnswerTimedOut("timed out"), ok("r1"), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    assert rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 0)
    rig.assert_clean()


def test_exactly_once_answers_that_settle_nothing_are_asked_again_with_the_same_nonce_and_nothing_else_leaves():
    rig = Rig(AnswerTimedOut("timed out"), unavailable(), server_error(), ok("r1"), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST] * 4  # every send on the key meanwhile was this nonce
    assert rig.key.limiter.nonces.last == FIRST  # and no other nonce was drawn for the key
    assert rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 0)
    snapshot = rig.metrics.snapshot()
    assert snapshot.outcomes == {"timeout": 1, "unavailable": 1, "server_error": 1, "accepted": 1}
    rig.assert_clean()


def maintenance_page() -> Answer:
    """A 200 that no answer rule reads: a proxy's maintenance page, say."""
    return Answer(200, b"<html><body>Down for maintenance</body></html>", None, False)


def test_exactly_once_a_settle_answered_only_by_unreadable_pages_ends_unknown_and_the_key_goes_on():
    # It used to ask the same nonce again every few seconds for as long as the pages came, and send nothing else.
    # Each ask that says nothing spends one of the settle's retries (the rig's policy allows 3); then it gives up.
    rig = Rig(AnswerTimedOut("timed out"), *[maintenance_page()] * 4, ok("r2"), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] * 5  # the send, then four asks: the first and three retries
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1}
    rig.submit("r2")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] * 5 + [FIRST + 1] and rig.queues.counts().accepted == 1
    rig.assert_clean()


def test_exactly_once_a_stale_connection_is_settled_with_the_same_nonce():
    rig = Rig(StaleConnection("closed under the request"), invalid_nonce(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    assert rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 0)
    snapshot = rig.metrics.snapshot()
    assert snapshot.stale_connections == 1 and snapshot.outcomes == {"connection_reset": 1, "accepted": 1}
    rig.assert_clean()


def test_exactly_once_a_strike_while_settling_holds_the_key_and_the_same_nonce_is_asked_again():
    # A 429 while asking again is a strike like any other (another client may be on the key): counted, the key
    # held back; the fate of the first copy is still asked with its own nonce, never a fresh one.
    rig = Rig(AnswerTimedOut("timed out"), rate_limited(retry_after=0.01), invalid_nonce(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST, FIRST]
    assert rig.key.strikes == 1 and rig.key.limiter.state().window > 0.05  # the strike was taken as one
    assert rig.queues.counts().accepted == 1 and request.failures == 0
    rig.assert_clean()


def test_exactly_once_a_key_blocked_while_settling_ends_unknown_and_never_sends_a_fresh_nonce():
    # Asking again used to loop forever on a block, a 401 or a 403: the key was never retired.
    rig = Rig(AnswerTimedOut("timed out"), blocked(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    assert rig.key.retired_because is RetireReason.KEY_BLOCKED and rig.retired
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard) == (0, 1) and request.last_failure is Outcome.UNKNOWN
    rig.assert_clean()


def test_exactly_once_a_settle_cut_short_lets_the_key_send_again():
    # The order gate waits on the first copy's answer; a settle that gives up (here: its lease ended) must
    # stop that wait, or the key never sends again in this run.
    answers = iter([True, True, False])  # held for the first send; gone before the second ask
    rig = Rig(AnswerTimedOut("timed out"), delivery=EXACTLY_ONCE)
    rig.key.may_send = lambda: next(answers, True)
    rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] and rig.queues.counts().graveyard == 1  # unknown, not resent
    assert rig.key.limiter.wait_ready(timeout=BOUND)  # the key may send again
    rig.assert_clean()


def test_exactly_once_the_earlier_runs_last_send_is_settled_with_its_nonce_before_anything_else_leaves():
    # A restart: the earlier run's last send on this key went unanswered. The worker's thread settles
    # it with its journaled nonce first, and only then takes new work, under a fresh nonce.
    journaled = FIRST - 5
    earlier = Request("r1", time.monotonic(), resumed=True)
    rig = Rig(invalid_nonce(), ok("r2"), delivery=EXACTLY_ONCE, earlier_send=(earlier, journaled))
    rig.submit("r2")
    rig.run_until(lambda: rig.queues.counts().accepted == 2)
    assert rig.worker.failure is None
    assert rig.transport.calls == [Call(journaled, "r1"), Call(FIRST, "r2")]
    assert (earlier.ambiguous, earlier.failures) == (1, 0)
    rig.assert_clean()


def test_exactly_once_a_key_retired_during_the_send_leaves_it_unknown_and_never_sends_it_again():
    # Another thread's 429 blocked retires the key while this send is out; the send times out. Its
    # nonce can no longer be asked on this key, and another key could not tell: unknown, never resent.
    rig = Rig(lambda call: rig.key_retired(then=AnswerTimedOut("timed out")), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST]
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq, counts.main_queue) == (0, 1, 0, 0)
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1} and request.ambiguous == 1
    rig.assert_clean()


@pytest.mark.parametrize("command", ["pause", "retire"])
def test_exactly_once_the_operator_s_pause_or_retirement_during_the_send_lets_it_be_settled(command):
    """The send times out and the operator pauses (or retires) the key meanwhile: what the key has in flight
    finishes, so its nonce is sent again and the 400 proves the first copy accepted (a retirement that cut the
    settle left it ``unknown``: a dead letter only requeued at the risk of a double)."""
    def operator(call):
        if command == "pause":
            rig.key.pause()
        else:
            assert rig.key.retire(RetireReason.OPERATOR)
        return AnswerTimedOut("timed out")

    rig = Rig(operator, invalid_nonce(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST], "the send in doubt was never asked again"
    assert rig.queues.graveyard.by_outcome() == {} and rig.queues.counts().accepted == 1
    rig.assert_clean()


# -- at-least-once: a stale connection resends its nonce once, anything else takes a fresh one ----


def test_at_least_once_a_stale_connection_resends_the_same_nonce_and_its_ok_spends_no_retry():
    rig = Rig(StaleConnection("closed under the request"), ok("r1"))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    assert rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (0, 0)
    snapshot = rig.metrics.snapshot()
    assert (snapshot.retried, snapshot.stale_connections, snapshot.outcomes) == (0, 1, {"accepted": 1})
    rig.assert_clean()


def test_at_least_once_invalid_nonce_on_the_stale_resend_is_ambiguous_and_retried_under_a_fresh_nonce():
    rig = Rig(StaleConnection("closed under the request"), invalid_nonce(), ok("r1"))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]
    assert (rig.queues.counts().accepted, rig.queues.counts().dlq, request.ambiguous) == (0, 1, 1)
    rig.handle_next()
    first, resend, fresh = rig.transport.nonces
    assert first == resend < fresh
    assert rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 1)
    snapshot = rig.metrics.snapshot()
    assert snapshot.ambiguous == 1 and snapshot.retried == 1
    assert snapshot.outcomes == {"connection_reset": 1, "accepted": 1}
    rig.assert_clean()


@pytest.mark.parametrize("resend", [ConnectFailed("connection refused"), server_error(), rate_limited()],
                         ids=["refused", "500", "429"])
def test_at_least_once_a_stale_resend_that_settles_nothing_leaves_the_first_copy_ambiguous(resend):
    """Campaign seed 5006 (a proxy cutting every connection, then refusing new ones): the first copy over the
    kept connection had been accepted, the resend met a refused connect, and the retry under a fresh nonce was
    accepted again: the record said ambiguous_attempts 0. Only a 200 or a 400 to the resend tells its fate."""
    rig = Rig(StaleConnection("closed under the request"), resend, ok("r1"))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces[:2] == [FIRST, FIRST] and request.ambiguous == 1
    while rig.queues.counts().accepted == 0:
        rig.handle_next()
    assert request.ambiguous == 1  # the record says the request may have been accepted twice


def test_under_a_timestamp_a_stale_send_is_never_sent_again_as_it_was_but_counted_ambiguous_and_retried():
    """Campaign seed 6012 (signed-post-json, a proxy half-closing connections): the same timestamp sent again
    was accepted a second time (a timestamp is no nonce the API refuses once taken), and the 200 was read as
    "the first copy was not accepted": 31 ids accepted twice, their records saying ambiguous_attempts 0."""
    rig = Rig(StaleConnection("closed under the request"), ok("r1"), nonce_refused_again=False)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST] and request.ambiguous == 1  # not sent again as it was
    rig.handle_next()
    first, fresh = rig.transport.nonces
    assert fresh > first and rig.queues.counts().accepted == 1 and request.ambiguous == 1
    rig.assert_clean()


def test_at_least_once_a_stale_send_overtaken_by_a_later_one_is_not_resent_but_retried_under_a_fresh_nonce():
    # Another send on the key leaves right after this one: repeating this nonce now could only be
    # refused, and the refusal would prove nothing (the limiter raises SendOvertaken).
    rig = Rig(lambda call: rig.another_send_leaves(then=StaleConnection("closed under the request")), ok("r1"))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST]  # not resent
    assert (rig.queues.counts().dlq, request.ambiguous, request.failures) == (1, 1, 1)
    rig.handle_next()
    [other] = rig.other_nonces
    assert rig.transport.nonces == [FIRST, other + 1]  # retried above the send that overtook it
    assert rig.queues.counts().accepted == 1
    snapshot = rig.metrics.snapshot()
    assert snapshot.ambiguous == 1 and snapshot.stale_connections == 1
    rig.assert_clean()


def test_at_least_once_a_timeout_is_retried_under_a_fresh_larger_nonce():
    rig = Rig(AnswerTimedOut("timed out"), ok("r1"))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST]
    assert (rig.queues.counts().dlq, request.ambiguous, request.failures) == (1, 1, 1)
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST + 1]
    assert rig.queues.counts().accepted == 1
    snapshot = rig.metrics.snapshot()
    assert snapshot.outcomes == {"timeout": 1, "accepted": 1} and snapshot.retried == 1
    rig.assert_clean()


def test_at_least_once_a_stale_send_on_a_key_retired_meanwhile_is_not_resent_and_goes_to_another_key():
    rig = Rig(lambda call: rig.key_retired(then=StaleConnection("closed under the request")))
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST]  # the closed limiter gave no slot for the resend
    assert (rig.queues.counts().dlq, request.ambiguous) == (1, 1)
    assert rig.key.limiter.state().closed
    rig.assert_clean()


# -- every fresh send of a key draws a larger nonce --------------------------------------------


def test_nonces_strictly_increase_across_every_fresh_send_of_a_key():
    rig = Rig(
        ok("r1"),
        AnswerTimedOut("timed out"), server_error(), ok("r2"),  # r2: retried twice, each under a fresh nonce
        invalid_nonce(),  # r3: refused; the key's nonces are pushed ahead
        StaleConnection("closed under the request"), ok("r3"),  # r3's retry, and its one resend
    )
    for req_id, sends in (("r1", 1), ("r2", 3), ("r3", 2)):  # one request at a time: the script's order is theirs
        rig.submit(req_id)
        for _ in range(sends):
            rig.handle_next()
    assert rig.queues.counts().accepted == 3
    calls = rig.transport.calls
    resends = [i for i in range(1, len(calls)) if calls[i] == calls[i - 1]]
    assert resends == [6]  # the stale connection's resend is the only repeat
    fresh = [call.nonce for i, call in enumerate(calls) if i not in resends]
    assert all(a < b for a, b in zip(fresh, fresh[1:])), fresh
    assert fresh[5] > fresh[4] + 1  # pushed ahead after the invalid nonce
    rig.assert_clean()


# -- strikes remembered across runs ------------------------------------------------------------


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     StoreUnavailable("the store does not answer")], ids=["full disk", "store away"])
def test_a_strike_that_cannot_be_written_down_retires_the_key_after_holding_it(failure):
    def unwritable(total: int) -> int:
        raise failure

    rig = Rig(rate_limited(), remember_strikes=unwritable)
    rig.submit("r1")
    rig.handle_next()
    assert rig.key.retired_because is RetireReason.OUTPUT_FAILED and rig.key.limiter.state().closed
    assert rig.retired and "strike could not be written down" in rig.retired[0]
    counts = rig.queues.counts()
    assert counts.dlq == 1 and counts.graveyard == 0  # the request itself goes on, on another key
    rig.assert_clean()


def test_strikes_remembered_at_once_by_two_threads_end_with_the_larger_count():
    remembered: list[int] = []
    second_counted = threading.Event()

    def slow_disk(total: int) -> int:
        if total == 1:  # the first writer is still writing when the second strike is counted
            second_counted.wait(BOUND)
        remembered.append(total)
        return total

    key = ApiKey(SECRET, ThreadSafeRateLimiter(20), remember_strikes=slow_disk)
    first = threading.Thread(target=key.strike)
    first.start()
    wait_for(lambda: key.lifetime_strikes == 1, timeout=BOUND)
    second = threading.Thread(target=key.strike)
    second.start()
    wait_for(lambda: key.lifetime_strikes == 2, timeout=BOUND)
    second_counted.set()
    first.join(BOUND)
    second.join(BOUND)
    assert remembered[-1] == 2, remembered  # a count written last is never the smaller one


# -- a bug in the client after a send ----------------------------------------------------------


class CountingFailsOnce(Metrics):
    """Metrics whose first count of an attempt raises, as a listener with a bug would."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def attempted(self, key: str, outcome, round_trip: float | None = None) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a listener with a bug")
        super().attempted(key, outcome, round_trip)


def test_exactly_once_a_transport_that_raises_a_bug_is_a_send_in_doubt_settled_with_the_same_nonce():
    def bug(call: Call) -> Step:
        raise RuntimeError("a transport with a bug")

    rig = Rig(bug, invalid_nonce(), delivery=EXACTLY_ONCE)
    rig.submit("r1")
    request = rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST]  # asked again with its own nonce, never a fresh one
    assert rig.queues.counts().accepted == 1 and request.failures == 0
    rig.assert_clean()


def test_exactly_once_a_transport_bug_that_repeats_ends_the_settling_unknown():
    def bug(call: Call) -> Step:
        raise RuntimeError("a transport with a bug")

    rig = Rig(bug, bug, bug, delivery=EXACTLY_ONCE)
    rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] * 3  # asked with its own nonce, then given up on: never a fresh one
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1}
    rig.assert_clean()


class StaleCountFails(Metrics):
    """Metrics that fail with an OSError (a socket-based listener) when told of a replaced connection."""

    def stale_connection(self) -> None:
        raise OSError(32, "Broken pipe")


def run_until_routed(rig: Rig) -> None:
    """Let the worker's own loop (and its guard against bugs) take the one request submitted, until it is
    routed somewhere; then stop the worker."""
    rig.run_until(lambda: (lambda c: c.accepted + c.graveyard + c.dlq)(rig.queues.counts()) == 1)


@pytest.mark.parametrize("delivery", [AT_LEAST_ONCE, EXACTLY_ONCE])
def test_a_listener_failing_after_a_200_leaves_the_request_accepted_once(delivery):
    # The hook raises after the exchange accepted: retried under a fresh nonce, it would be accepted twice.
    rig = Rig(ok("r1", replaced_stale=True), delivery=delivery, metrics=StaleCountFails())
    rig.submit("r1")
    run_until_routed(rig)
    assert rig.transport.nonces == [FIRST]
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq) == (1, 0, 0)
    rig.assert_clean()


def test_exactly_once_a_listener_failing_after_the_settling_200_leaves_the_request_accepted():
    rig = Rig(AnswerTimedOut("timed out"), ok("r1", replaced_stale=True), delivery=EXACTLY_ONCE,
              metrics=StaleCountFails())
    rig.submit("r1")
    run_until_routed(rig)
    assert rig.transport.nonces == [FIRST, FIRST]
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq) == (1, 0, 0)
    rig.assert_clean()


def test_exactly_once_a_bug_after_a_send_ends_the_request_unknown_and_the_key_sends_again():
    rig = Rig(AnswerTimedOut("timed out"), ok("r2"), delivery=EXACTLY_ONCE, metrics=CountingFailsOnce())
    rig.submit("r1")
    rig.submit("r2")
    rig.worker.start()  # the listener raises while r1's timeout is counted, before settling
    try:
        wait_for(lambda: rig.queues.counts().accepted == 1, timeout=BOUND)  # r2 left: the gate no longer waits on r1
    finally:
        rig.stop_taking()
        rig.worker.join(BOUND)
    assert rig.transport.nonces == [FIRST, FIRST + 1]  # r1 never sent again under a fresh nonce
    counts = rig.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq) == (1, 1, 0)
    assert rig.queues.graveyard.by_outcome() == {"unknown": 1}
    rig.assert_clean()


# -- a key retired mid-request -----------------------------------------------------------------


def test_a_key_blocked_mid_request_hands_the_request_back_and_its_worker_ends():
    rig = Rig(blocked())
    request = rig.submit("r1")
    rig.submit("r2")
    rig.worker.start()
    rig.worker.join(BOUND)  # it ends by itself: its key is retired
    alive = rig.worker.is_alive()
    rig.stop_taking()
    rig.worker.join(BOUND)
    assert not alive and not rig.worker.is_alive() and rig.worker.failure is None
    assert rig.key.retired_because is RetireReason.KEY_BLOCKED and rig.key.limiter.state().closed
    assert rig.retired == ["too many rate limit errors: blocked"]
    counts = rig.queues.counts()
    # r1 handed back (to another key, at no cost), r2 never taken
    assert (counts.accepted, counts.graveyard, counts.dlq, counts.main_queue, counts.in_flight) == (0, 0, 1, 1, 0)
    assert (request.failures, request.unsent, request.ambiguous) == (0, 0, 0)
    assert rig.metrics.snapshot().retried == 0
    assert rig.transport.closed
    rig.assert_clean()


class TakenOverJournal(RecordingJournal):
    """The journal of a member whose work entries another member has taken over (the store's answer)."""

    def sending(self, request: Request, key: str, nonce: int) -> None:
        raise EntryTakenOver(request.receipt or request.req_id)

    def answered(self, request: Request, key: str, nonce: int) -> None:
        raise AssertionError("nothing was sent, so nothing can be answered")


def test_a_request_whose_work_entry_was_taken_over_is_let_go_unsent_and_without_a_record():
    """Its new holder sends and records it: here nothing leaves, its slot is free again, the books balance."""
    for delivery in (AT_LEAST_ONCE, EXACTLY_ONCE):
        rig = Rig(delivery=delivery, journal=TakenOverJournal())  # no step: any send fails the test
        rig.submit("r1")
        rig.handle_next()
        counts = rig.queues.counts()
        assert counts.taken_over == 1 and counts.graveyard == 0 and counts.accepted == 0
        assert rig.worker._holding is None
        rig.assert_clean()


def test_a_timed_out_send_holds_its_slot_until_its_connection_shows_the_server_read_it():
    """The worker hands the open connection of a send that timed out to the watcher: the slot stays in flight
    (a frozen server may stamp it at any moment) until a byte of the late answer comes on it."""
    late_answers = LateAnswers(cap=60)
    [watcher] = late_answers.threads()
    watcher.start()
    client_end, server_end = socket.socketpair()
    metrics = Metrics()
    rig = Rig(AnswerTimedOut("timed out", client_end), ok("r1"), late_answers=late_answers, metrics=metrics)
    rig.submit("r1")
    rig.handle_next()  # the timeout: retried under a fresh nonce (at-least-once), after its backoff
    rig.handle_next()  # accepted in another slot
    assert rig.key.limiter.state().in_flight == 1  # the timed-out send's slot waits for the server's sign
    server_end.sendall(b"HTTP/1.1 200 OK\r\n")  # the server thaws and answers it late
    wait_for(lambda: rig.key.limiter.state().in_flight == 0, timeout=BOUND)
    assert client_end.fileno() == -1 and metrics.snapshot().late_answers == 1
    rig.assert_clean()
    late_answers.close()
    watcher.join(BOUND)
    server_end.close()


def test_the_key_knows_its_sends_watched_for_a_late_answer_until_the_server_s_sign():
    """What a shared key's keeper keeps with the key in the store (the next owner waits it out): when the
    latest send still watched timed out; nothing once its watch ended."""
    late_answers = LateAnswers(cap=60)
    [watcher] = late_answers.threads()
    watcher.start()
    client_end, server_end = socket.socketpair()
    rig = Rig(AnswerTimedOut("timed out", client_end), ok("r1"), late_answers=late_answers)
    rig.submit("r1")
    before = time.monotonic()
    rig.handle_next()  # the timeout: watched
    rig.handle_next()
    assert before <= rig.key.watched_since() <= time.monotonic()
    server_end.sendall(b"HTTP/1.1 200 OK\r\n")
    wait_for(lambda: rig.key.limiter.state().in_flight == 0, timeout=BOUND)
    assert rig.key.watched_since() is None
    rig.assert_clean()
    late_answers.close()
    watcher.join(BOUND)
    server_end.close()


def test_a_late_429_to_a_send_that_timed_out_counts_as_a_strike():
    """The server counted that refusal when it thawed: the key's remembered strikes must count it too."""
    late_answers = LateAnswers(cap=60)
    [watcher] = late_answers.threads()
    watcher.start()
    client_end, server_end = socket.socketpair()
    remembered: list[int] = []
    rig = Rig(AnswerTimedOut("timed out", client_end), ok("r1"), late_answers=late_answers,
              remember_strikes=lambda total: remembered.append(total) or total)
    rig.submit("r1")
    rig.handle_next()  # the timeout: retried under a fresh nonce
    rig.handle_next()
    refusal = rate_limited().body
    server_end.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n%s" % (len(refusal), refusal))
    wait_for(lambda: rig.key.limiter.state().in_flight == 0, timeout=BOUND)  # the strike is counted before
    assert (rig.key.strikes, remembered) == (1, [1])
    rig.assert_clean()
    late_answers.close()
    watcher.join(BOUND)
    server_end.close()


def test_a_request_that_could_not_be_built_is_retried_with_nothing_sent_and_its_slot_free():
    # A signing hook that fails: nothing left, so the request is no ambiguous attempt; retried (it may get past
    # it), not buried as the server's refusal. (A param named as the profile's own never gets here: it is
    # invalid_input as its line is read.)
    rig = Rig(RequestNotBuilt("signing failed (RuntimeError)"), ok("r2"))
    second = rig.submit("r2")
    rig.handle_next()
    rig.handle_next()
    rig.assert_clean()
    assert second.ambiguous == 0 and second.attempts == 1 and rig.queues.counts().accepted == 1
    assert rig.metrics.snapshot().outcomes == {"internal_error": 1, "accepted": 1}


def test_a_ban_answer_holds_the_key_before_its_slot_frees():
    bans: list[float | None] = []
    in_flight_at_ban: list[int] = []

    def ban(retry_after: float | None) -> float:
        bans.append(retry_after)
        in_flight_at_ban.append(rig.key.limiter.state().in_flight)  # the answer's own slot not yet free
        rig.key.limiter.hold(30)  # as the daemon's HostBan does, for every key
        return 30.0

    rig = Rig(answer(418, {"status": "error", "error_msg": "banned"}, retry_after=30))
    rig.worker = Worker(rig.key, rig.queues, rig.transport, RetryPolicy(), OutageGate(), rig.stop, listener=rig.metrics,
                        on_ban=ban, answers=AnswerTable(read_profile(
                            '[[answers.rule]]\nstatus = 418\noutcome = "banned"\n'
                            '[[answers.rule]]\nstatus = 200\noutcome = "accepted"\n', "ban.toml")))
    rig.submit()
    rig.handle_next()
    rig.assert_clean()
    assert bans == [30] and in_flight_at_ban == [1] and rig.queues.sizes() == (0, 1)  # handed back, for free
    with pytest.raises(LimiterTimeout):
        rig.key.limiter.acquire(timeout=0)  # no slot while the ban lasts


# -- a full disk under the send journal -------------------------------------------------------------


@pytest.mark.parametrize("delivery", [AT_LEAST_ONCE, EXACTLY_ONCE])
def test_a_send_whose_journal_line_the_disk_refused_never_leaves_and_its_request_waits(tmp_path, delivery):
    # At-least-once too: a send that left with no journal line would be sent again by the rerun, unmarked.
    journal = SendJournal(str(tmp_path / "results.jsonl"), delivery=delivery, write=FillingDisk(room=0))
    rig = Rig(delivery=delivery, journal=journal)  # no step: any send fails the test
    rig.submit()
    rig.handle_next()
    journal.close()
    rig.assert_clean()
    counts = rig.queues.counts()
    assert counts.dlq == 1 and counts.graveyard == 0  # handed back, for the next run if the daemon stops


def test_a_nonce_mark_the_state_dir_refuses_stops_the_daemon_with_the_request_left_unsent():
    # It used to raise out of the acquire as a bug: retried under fresh nonces, each refused the same way, the
    # whole input was buried as retries_exhausted within seconds.
    def full_disk(wanted: int) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    rig = Rig(reserve=full_disk)  # no step: any send fails the test
    request = rig.submit()
    rig.handle_next()
    rig.assert_clean()
    counts = rig.queues.counts()
    assert counts.dlq == 1 and counts.graveyard == 0 and request.failures == 0  # handed back at no cost
    assert rig.stopped == [StopReason.OUTPUT_FAILED] and rig.retired == []


def test_a_slow_connect_lets_no_later_nonce_of_the_key_leave_first():
    """The connection is opened before the nonce is drawn: a thread held up by a reconnect (a slow TLS
    handshake) draws its nonce after the other thread's send, so the two leave in the nonces' order."""
    wire: list[int] = []  # the nonces of both threads' sends, in the order they left

    def leaves(call: Call) -> Step:
        wire.append(call.nonce)
        return ok(call.req_id)

    connecting, connected = threading.Event(), threading.Event()

    def slow_handshake() -> None:
        connecting.set()
        assert connected.wait(30)  # set by the test, or its own bound has long failed it

    rig = Rig(leaves, connects=[slow_handshake])
    other = rig.another_worker(ScriptedTransport([leaves]))
    rig.submit("r1")
    rig.submit("r2")
    slow = threading.Thread(target=lambda: rig.worker._handle(rig.queues.take(BOUND)))
    slow.start()
    try:
        assert connecting.wait(BOUND)
        fast = threading.Thread(target=lambda: other._handle(rig.queues.take(BOUND)))
        fast.start()
        fast.join(BOUND)
        assert not fast.is_alive()
    finally:
        connected.set()
    slow.join(BOUND)
    assert not slow.is_alive()
    assert wire == [FIRST, FIRST + 1]
    assert rig.queues.counts().accepted == 2
    rig.assert_clean()


def test_a_connection_refused_before_the_permit_draws_no_nonce_and_is_retried_for_free():
    rig = Rig(ok("r1"), connects=[ConnectFailed("connection refused")])
    request = rig.submit()
    rig.handle_next()
    assert rig.transport.nonces == [] and rig.key.limiter.nonces.last == 0  # no permit, no nonce drawn
    assert request.failures == 0 and request.unsent == 1  # unreachable: nothing was sent
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] and rig.queues.counts().accepted == 1
    rig.assert_clean()


# -- answers that say the exchange does not know, or has the order already ------------------------------------

# The reference contract's answers, and three an exchange adds: 504 "execution status unknown", 409 "this client id
# was seen", and a 503 that names its retry time in the body or a header.
ORDERS = AnswerTable(read_profile("""
[[answers.rule]]
status = 200
field = "status"
equals = "OK"
echo_id = "req_id"
outcome = "accepted"
[[answers.rule]]
status = 400
field = "error_msg"
equals = "invalid nonce"
outcome = "invalid_nonce"
[[answers.rule]]
status = 504
field = "error_msg"
one_of = ["execution status unknown"]
outcome = "ambiguous"
[[answers.rule]]
status = 409
field = "error_msg"
equals = "duplicate client id"
outcome = "duplicate"
[[answers.rule]]
status = 503
header = "X-Busy-For"
retry_after_header = "X-Busy-For"
retry_after_unit = "ms"
outcome = "unavailable"
[[answers.rule]]
status = 503
retry_after_field = "error_msg"
retry_after_match = 'again in (\\d+) ms'
retry_after_unit = "ms"
outcome = "unavailable"
""", "orders.toml"))


def execution_unknown() -> Answer:
    return answer(504, {"status": "error", "error_msg": "execution status unknown"})


def duplicate_id() -> Answer:
    return answer(409, {"status": "error", "error_msg": "duplicate client id"})


def test_at_least_once_an_answer_that_says_execution_is_unknown_is_an_ambiguous_attempt_retried():
    rig = Rig(execution_unknown(), ok("r1"), answers=ORDERS)
    request = rig.submit("r1")
    rig.handle_next()
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST + 1] and rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 1)
    assert rig.metrics.snapshot().outcomes == {"ambiguous": 1, "accepted": 1}
    rig.assert_clean()


def test_exactly_once_an_answer_that_says_execution_is_unknown_is_settled_with_its_own_nonce():
    rig = Rig(execution_unknown(), invalid_nonce(), delivery=EXACTLY_ONCE, answers=ORDERS)
    request = rig.submit("r1")
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST] and rig.queues.counts().accepted == 1
    assert (request.ambiguous, request.failures) == (1, 0)
    rig.assert_clean()


def test_at_least_once_a_duplicate_is_recorded_as_one_never_as_rejected_nor_sent_again():
    rig = Rig(execution_unknown(), duplicate_id(), answers=ORDERS)
    rig.submit("r1")
    rig.handle_next()
    rig.handle_next()
    assert rig.transport.nonces == [FIRST, FIRST + 1]
    assert rig.queues.graveyard.by_outcome() == {"duplicate": 1} and rig.queues.counts().accepted == 0
    rig.assert_clean()


def test_exactly_once_a_duplicate_after_an_earlier_send_of_its_own_is_that_copy_accepted():
    """Exactly-once sends one copy at a time, journaled: an exchange that has this request's client id after a send
    of it went unanswered has the copy that send placed."""
    rig = Rig(AnswerTimedOut("timed out"), duplicate_id(), delivery=EXACTLY_ONCE, answers=ORDERS)
    rig.submit("r1")
    rig.handle_next()
    assert rig.queues.counts().accepted == 1 and rig.queues.graveyard.by_outcome() == {}
    rig.assert_clean()


@pytest.mark.parametrize("before", [(), (invalid_nonce(),)], ids=["first send", "after a send plainly refused"])
def test_exactly_once_a_duplicate_with_no_earlier_send_of_its_own_in_doubt_is_recorded_as_the_duplicate_it_is(before):
    """Nothing of this request left before, or only sends the exchange plainly refused: the order it holds under its
    client id is another's (a line of an earlier input, another client's). Once read as this request's own,
    accepted: it never was."""
    rig = Rig(*before, duplicate_id(), delivery=EXACTLY_ONCE, answers=ORDERS)
    rig.submit("r1")
    for _ in range(len(before) + 1):
        rig.handle_next()
    assert rig.queues.counts().accepted == 0 and rig.queues.graveyard.by_outcome() == {"duplicate": 1}
    rig.assert_clean()


@pytest.mark.parametrize("busy", [
    Answer(503, b"{}", None, headers={"x-busy-for": "1"}),
    answer(503, {"status": "error", "error_msg": "busy: try again in 1 ms"}),
], ids=["header", "body"])
def test_a_retry_time_read_from_the_answer_pauses_the_key_and_hands_the_request_back_for_free(busy):
    rig = Rig(busy, ok("r1"), answers=ORDERS)
    request = rig.submit("r1")
    rig.handle_next()
    assert request.failures == 0 and rig.queues.counts().dlq == 1  # handed back: the server named its pause
    rig.handle_next()
    assert rig.queues.counts().accepted == 1
    rig.assert_clean()


def test_a_retry_time_the_answer_does_not_hold_leaves_an_ordinary_retry():
    rig = Rig(answer(503, {"status": "error", "error_msg": "busy"}), ok("r1"), answers=ORDERS)
    request = rig.submit("r1")
    rig.handle_next()
    rig.handle_next()
    assert request.failures == 1 and rig.queues.counts().accepted == 1
    rig.assert_clean()


def test_a_late_answer_that_accepted_a_send_ends_its_retry_accepted_never_sent_again():
    """At-least-once: the send timed out and its retry waits in the DLQ when the first copy's 200 arrives on the
    watched connection. The retry once went out under a fresh nonce: a second order."""
    rig = Rig(AnswerTimedOut("timed out"))
    request = rig.submit("r1")
    rig.handle_next()  # timed out: retried
    permit = rig.key.limiter.acquire(timeout=0)  # the watched send's slot, as the worker keeps it
    rig.queues.watch_late(request)  # as the worker does when it hands the connection to the watch
    rig.key.watch_started(time.monotonic())
    rig.worker._freed_late(permit, "r1", time.monotonic(), time.monotonic(), ok("r1"))
    rig.handle_next()
    assert rig.transport.nonces == [FIRST] and rig.queues.counts().accepted == 1
    assert request.attempts == 1
    rig.assert_clean()


def test_a_late_answer_that_comes_while_the_retry_is_out_ends_the_request_accepted_whatever_the_retry_met():
    """The first send timed out; its 200 comes while the retry is out, and the retry is answered "duplicate" (the
    first copy's client id). Recorded duplicate, the request hid the order the exchange placed."""
    def the_first_copy_s_answer_comes(call: Call) -> Answer:
        rig.queues.note_placed_late("r1")
        return duplicate_id()

    rig = Rig(AnswerTimedOut("timed out"), the_first_copy_s_answer_comes, answers=ORDERS)
    request = rig.submit("r1")
    rig.handle_next()  # timed out: retried
    rig.queues.watch_late(request)  # as the worker does when it hands the connection to the watch
    rig.handle_next()
    assert rig.queues.counts().accepted == 1 and rig.queues.graveyard.by_outcome() == {}
