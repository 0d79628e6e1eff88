"""A send in doubt settled by asking the exchange's order-status endpoint ([settle]), driven through the
scripted transport: found is accepted, not found is sent again under the same client id (only then), an
answer that says neither is asked again after a backoff until the settle's budget is spent; never a second
order. The profile is the reference exchange's order mode (examples/profiles/reference-orders.toml)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from conftest import ROOT
from fakes import Call, answer, ok, server_error
from test_worker_paths import FIRST, RecordingJournal, Rig
from thread_client.delivery import AT_LEAST_ONCE, EXACTLY_ONCE, Delivery
from thread_client.errors import AnswerTimedOut, ResetAfterSend
from thread_client.limits.keys import ApiKey, RetireReason
from thread_client.limits.limiter import PausedBy, ThreadSafeRateLimiter
from thread_client.policy.answers import AnswerTable
from thread_client.policy.order_status import Finding, StatusTable
from thread_client.profile import load_profile
from thread_client.request import Request

# The reference server's order mode with no engine lag: how long a copy stays in doubt is the test's own (DOUBT).
ORDERS = load_profile(str(ROOT / "examples" / "profiles" / "reference-orders.toml"))
PROFILE = dataclasses.replace(ORDERS, settle=dataclasses.replace(ORDERS.settle, lag_ms=0))

# The reference server's order mode, written out from docs/reference/server.md.
EXECUTION_UNKNOWN = answer(500, {"status": "error", "error_msg": "execution status unknown", "code": -1007})
DUPLICATE = answer(400, {"status": "error", "error_msg": "duplicate order sent", "code": -2010})
NOT_FOUND = answer(400, {"status": "error", "error_msg": "order does not exist", "code": -2013})


def found(client_id: str) -> object:
    return answer(200, {"status": "FOUND", "client_id": client_id})


def asked(client_id: str, nonce: int) -> Call:
    """The status ask about ``client_id``: no req_id of its own, the client id in the [settle] param."""
    return Call(nonce, "", {"clientId": client_id}, "GET", "/api/order")


#: How long a copy may be accepted after its send ended (the reference profile has no receive window: the HTTP
#: timeout): short here, so a not-found is trusted after a short wait.
DOUBT = 0.01


def rig(*steps, delivery: Delivery = AT_LEAST_ONCE) -> Rig:
    return Rig(*steps, delivery=delivery, answers=AnswerTable(PROFILE), status=StatusTable(PROFILE, DOUBT))


def orders(calls: list[Call]) -> list[Call]:
    return [call for call in calls if call.path != "/api/order"]


@pytest.mark.parametrize("delivery", [AT_LEAST_ONCE, EXACTLY_ONCE], ids=str)
@pytest.mark.parametrize("doubt", [EXECUTION_UNKNOWN, DUPLICATE, AnswerTimedOut("timed out"),
                                   ResetAfterSend("reset after the send")],
                         ids=["execution-unknown", "duplicate", "timeout", "lost-answer"])
def test_a_send_in_doubt_that_the_exchange_has_is_accepted_with_one_order(doubt, delivery):
    r = rig(doubt, found("r1"), delivery=delivery)
    r.submit("r1")
    request = r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1)]  # asked with a fresh nonce
    counts = r.queues.counts()
    assert (counts.accepted, counts.graveyard, counts.dlq, request.failures) == (1, 0, 0, 0)
    assert r.metrics.snapshot().outcomes["accepted"] == 1  # the send in doubt counted as it came, then settled
    r.assert_clean()


def test_a_send_the_exchange_does_not_have_is_sent_again_once_under_the_same_client_id():
    r = rig(AnswerTimedOut("timed out"), NOT_FOUND, NOT_FOUND, ok("r1"))
    r.submit("r1")
    r.handle_next()
    assert r.queues.counts().dlq == 1  # retried as the timeout it was, now that the exchange says it has none
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1), asked("r1", FIRST + 2),
                                 Call(FIRST + 3, "r1")]  # none found twice, the last once no copy could be taken
    counts = r.queues.counts()
    assert (counts.accepted, counts.graveyard) == (1, 0)
    r.assert_clean()


def test_a_duplicate_the_status_does_not_find_yet_is_asked_again_never_sent_again():
    """The exchange said it has this client id: a status that lags behind it is asked again, not resent."""
    r = rig(DUPLICATE, NOT_FOUND, found("r1"))
    r.submit("r1")
    r.handle_next()
    assert orders(r.transport.calls) == [Call(FIRST, "r1")]
    assert r.transport.calls[1:] == [asked("r1", FIRST + 1), asked("r1", FIRST + 2)]
    assert r.queues.counts().accepted == 1
    r.assert_clean()


@pytest.mark.parametrize("delivery", [AT_LEAST_ONCE, EXACTLY_ONCE], ids=str)
@pytest.mark.parametrize("unknown", [server_error(), AnswerTimedOut("the status answer is late"),
                                     ResetAfterSend("the status answer was lost"), found("another-id")],
                         ids=["unknown", "late", "lost", "echoes-another-id"])
def test_a_status_answer_that_says_neither_is_asked_again_after_a_backoff(unknown, delivery):
    """Exactly-once too, where the order gate waits on a send until its answer (one in flight): an ask left
    unanswered is never settled, so the next ask does not wait on it (it did, for ever: campaign seed 1022)."""
    r = rig(EXECUTION_UNKNOWN, unknown, found("r1"), delivery=delivery)
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls[1:] == [asked("r1", FIRST + 1), asked("r1", FIRST + 2)]
    assert r.queues.counts().accepted == 1
    r.assert_clean()


def test_once_the_settle_budget_is_spent_the_request_ends_unknown_and_no_second_order_leaves():
    # The rig's policy allows 3 retries: the fourth status answer that says nothing spends the budget.
    r = rig(EXECUTION_UNKNOWN, *[server_error()] * 4)
    r.submit("r1")
    r.handle_next()
    assert orders(r.transport.calls) == [Call(FIRST, "r1")]
    assert len(r.transport.calls) == 5
    assert r.queues.graveyard.by_outcome() == {"unknown": 1}
    r.assert_clean()


def test_a_profile_without_a_settle_endpoint_retries_an_ambiguous_send_as_before():
    r = Rig(EXECUTION_UNKNOWN, answers=AnswerTable(PROFILE))
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1")] and r.queues.counts().dlq == 1


def test_the_status_table_reads_found_not_found_and_unknown_by_the_profile_rules():
    table = StatusTable(PROFILE)
    assert table.read(200, found("r1").body, "r1")[0] is Finding.FOUND
    assert table.read(200, found("r2").body, "r1")[0] is Finding.UNKNOWN  # the echo names another order
    assert table.read(400, NOT_FOUND.body, "r1")[0] is Finding.NOT_FOUND
    assert table.read(503, b"<html>busy</html>", "r1")[0] is Finding.UNKNOWN


def test_after_a_restart_the_earlier_runs_last_send_is_settled_by_asking_not_by_its_nonce():
    journaled = FIRST - 5
    earlier = Request("r1", time.monotonic(), resumed=True)
    r = Rig(found("r1"), ok("r2"), delivery=EXACTLY_ONCE, earlier_send=(earlier, journaled),
            answers=AnswerTable(PROFILE), status=StatusTable(PROFILE))
    r.submit("r2")
    r.run_until(lambda: r.queues.counts().accepted == 2)
    assert r.worker.failure is None
    assert r.transport.calls == [asked("r1", FIRST), Call(FIRST + 1, "r2")]  # never the journaled nonce again
    assert (earlier.ambiguous, earlier.failures) == (1, 0)
    r.assert_clean()


def another_key(account: str = "desk-a") -> ApiKey:
    """A second key of the daemon, of ``account``: the one that placed a resumed order before the crash."""
    return ApiKey("K2K2K2K2K2K2K2K2K2K2", ThreadSafeRateLimiter(20, name="K2K2"), account=account)


def resumed(sent_on: ApiKey) -> Request:
    return Request("r1", time.monotonic(), resumed=True, sent_on=sent_on.id)


def test_an_order_resumed_after_a_crash_goes_to_the_key_that_placed_it_to_be_asked_about():
    """This key's account cannot see desk-a's order: its ask would answer "not found" and the order would be
    placed twice. The request goes to desk-a's key, sending nothing here."""
    placed_by = another_key()
    r = Rig(status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-b",
            key_of={placed_by.id: placed_by}.get)
    request = resumed(placed_by)
    assert r.queues.submit(request)
    r.handle_next()
    assert r.transport.calls == []
    assert r.queues.take(timeout=0, key=r.key.id) is None  # handed to desk-a's key alone
    assert r.queues.take(timeout=0, key=placed_by.id) is request
    assert r.queues.counts().in_flight == 1


def test_an_order_whose_send_went_unanswered_is_sent_again_only_in_the_account_that_may_hold_it():
    """The ask found no order, but a status index may lag the book: sent again on desk-a's key, the exchange itself
    refuses the client id if the first copy was placed; on desk-b's, it would be a second order."""
    placed_by = another_key()
    r = Rig(status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-b",
            key_of={placed_by.id: placed_by}.get)
    request = Request("r1", time.monotonic(), sent_on=placed_by.id, placed_maybe=True, ambiguous=0)
    assert r.queues.submit(request)
    r.handle_next()
    assert r.transport.calls == []
    assert r.queues.take(timeout=0, key=placed_by.id) is request


def test_a_send_in_doubt_marks_its_request_as_maybe_placed_in_its_key_s_account():
    r = rig(EXECUTION_UNKNOWN, NOT_FOUND, NOT_FOUND, ok("r1"))
    request = r.submit("r1")
    r.handle_next()
    assert (request.placed_maybe, request.sent_on, request.ambiguous) == (True, r.key.id, 0)  # not found: no doubt
    r.handle_next()  # sent again on its own key
    assert r.queues.counts().accepted == 1


def test_an_order_resumed_after_a_crash_is_asked_about_by_any_key_of_the_account_that_placed_it():
    placed_by = another_key(account="desk-a")
    r = Rig(found("r1"), status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-a",
            key_of={placed_by.id: placed_by}.get)
    assert r.queues.submit(resumed(placed_by))
    r.handle_next()
    assert r.transport.calls == [asked("r1", FIRST)]
    assert r.queues.counts().accepted == 1
    r.assert_clean()


@pytest.mark.parametrize("gone", ["retired", "not-driven"])
def test_an_order_resumed_after_a_crash_whose_key_can_no_longer_ask_ends_unknown_never_sent_again(gone):
    placed_by = another_key()
    if gone == "retired":
        placed_by.retire(RetireReason.INVALID_KEY)
    r = Rig(status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-b",
            key_of={placed_by.id: placed_by}.get if gone == "retired" else lambda key_id: None)
    assert r.queues.submit(resumed(placed_by))
    r.handle_next()
    assert r.transport.calls == []
    assert r.queues.graveyard.by_outcome() == {"unknown": 1}
    r.assert_clean()


#: The operator's commands that stop a key's new work while a send on it may be in doubt.
STOPS_NEW_WORK = {
    "key-paused": lambda key: key.pause(),
    "daemon-paused": lambda key: key.limiter.pause(PausedBy.DAEMON),
    "key-retired": lambda key: key.retire(RetireReason.OPERATOR),
}


@pytest.mark.parametrize("command", STOPS_NEW_WORK.values(), ids=STOPS_NEW_WORK.keys())
def test_a_pause_or_a_retirement_while_a_send_is_in_doubt_lets_its_status_asks_through(command):
    """The operator's pause or retirement stops new work, never the settling of a send already out: the order
    may have been placed, and only the asks can tell (ending it ``unknown`` left a possible order unaccounted
    for)."""
    def paused_while_out(*_: object) -> object:
        command(r.key)  # the operator pauses the key (or the daemon), or retires the key, while this send is out
        return EXECUTION_UNKNOWN

    r = rig(paused_while_out, found("r1"), delivery=EXACTLY_ONCE)
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1)]
    assert (r.queues.counts().accepted, r.queues.graveyard.by_outcome()) == (1, {})
    r.assert_clean()


def test_a_key_parked_while_a_send_is_in_doubt_sends_no_status_ask_and_the_request_ends_unknown():
    """Parked (another thread's strikes), the key sends nothing at all, not even an ask: as a retired key did."""
    def parked_while_out(*_: object) -> object:
        assert r.key.retire(RetireReason.PARKED)
        return EXECUTION_UNKNOWN

    r = rig(parked_while_out, delivery=EXACTLY_ONCE)
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1")]
    assert r.queues.graveyard.by_outcome() == {"unknown": 1}
    r.assert_clean()


def test_the_earlier_runs_send_is_settled_by_asking_on_a_key_paused_before_it_starts():
    """A pause taken before the worker settles the earlier run's send holds back new work only."""
    earlier = Request("r1", time.monotonic(), resumed=True)
    r = Rig(found("r1"), delivery=EXACTLY_ONCE, earlier_send=(earlier, FIRST - 5),
            answers=AnswerTable(PROFILE), status=StatusTable(PROFILE))
    r.key.limiter.pause(PausedBy.DAEMON)
    r.run_until(lambda: r.queues.counts().accepted + r.queues.counts().graveyard == 1)
    assert r.worker.failure is None
    assert r.transport.calls == [asked("r1", FIRST)]
    assert (r.queues.counts().accepted, r.queues.graveyard.by_outcome()) == (1, {})


def test_not_found_is_trusted_only_once_the_exchange_s_lag_has_passed_not_after_the_http_timeout():
    """With no receive window, a copy is taken within the HTTP timeout, but an engine may place it, or a status
    index show it, up to the profile's lag_ms later: the doubt lasts that long (once it was the 1 s timeout)."""
    assert StatusTable(ORDERS, http_timeout=1.0).doubt_lasts == 1.5
    assert StatusTable(PROFILE, http_timeout=1.0).doubt_lasts == 1.0
    unknown_lag = dataclasses.replace(ORDERS, settle=dataclasses.replace(ORDERS.settle, lag_ms=10_000))
    assert StatusTable(unknown_lag, http_timeout=1.0).doubt_lasts == 10.0


@pytest.mark.parametrize("unread", [server_error(), answer(409, {"what": "?"})], ids=["5xx", "a-status-no-rule-reads"])
def test_an_answer_that_leaves_the_fate_open_is_asked_about_before_any_resend(unread):
    """Binance: a 5xx's "execution status is UNKNOWN and could have been a success". Sent again blindly, such an
    order was placed twice where the first had executed."""
    r = rig(unread, found("r1"))
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1)]
    assert r.queues.counts().accepted == 1
    r.assert_clean()


class FailingOnce(AnswerTable):
    """The reference orders' answers, read by a client that fails once after a send's bytes left (a bug)."""

    def __init__(self) -> None:
        super().__init__(PROFILE)
        self.failed = False

    def classify(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug while reading the answer")
        return super().classify(*args, **kwargs)


def test_a_send_the_client_failed_on_after_its_bytes_left_is_asked_about_before_it_is_sent_again():
    r = Rig(ok("r1"), found("r1"), answers=FailingOnce(), status=StatusTable(PROFILE, DOUBT))
    request = r.submit("r1")
    taken = r.queues.take(timeout=0)
    r.worker._guarded(taken, lambda: r.worker._handle(taken))  # the worker loop's guard: an internal error, retried
    assert (request.ambiguous, request.unsettled) == (1, True)
    r.handle_next()  # the retry asks first: found, accepted, never placed twice
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1)]
    assert r.queues.counts().accepted == 1


@pytest.mark.parametrize("out_of_service", ["parked", "retired-by-the-operator"])
def test_an_order_whose_key_takes_no_more_work_is_never_stranded_with_that_key(out_of_service):
    """A lane nobody takes from would hold the request for good (a file run that never ends): a parked key, or
    one the operator retired, is no key to hand it to. Never asked about, it ends unknown."""
    placed_by = another_key()
    placed_by.retire(RetireReason.PARKED if out_of_service == "parked" else RetireReason.OPERATOR)
    r = Rig(status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-b",
            key_of={placed_by.id: placed_by}.get)
    assert r.queues.submit(resumed(placed_by))
    r.handle_next()
    assert r.transport.calls == [] and r.queues.graveyard.by_outcome() == {"unknown": 1}
    r.assert_clean()


def test_an_order_whose_key_the_operator_paused_waits_for_it_at_no_cost():
    placed_by = another_key()
    placed_by.pause()
    r = Rig(status=StatusTable(PROFILE, DOUBT), answers=AnswerTable(PROFILE), account="desk-b",
            key_of={placed_by.id: placed_by}.get)
    request = resumed(placed_by)
    assert r.queues.submit(request)
    r.handle_next()
    assert r.transport.calls == [] and r.queues.sizes() == (0, 1)  # back in the DLQ, to look again in a second
    assert (request.failures, request.unsent) == (0, 0)


def test_under_a_settle_a_5xx_is_not_written_down_as_answered_before_it_is_asked_about():
    """A line dropped as answered tells whoever holds the entry next (a member taking it over) that nothing of it
    is in doubt: it would ask from any key, another account's, and send again."""
    journal = RecordingJournal()
    r = Rig(server_error(), found("r1"), delivery=EXACTLY_ONCE, answers=AnswerTable(PROFILE),
            status=StatusTable(PROFILE, DOUBT), journal=journal)
    r.submit("r1")
    r.handle_next()
    assert [line[0] for line in journal.lines] == ["sending"] and r.queues.counts().accepted == 1
