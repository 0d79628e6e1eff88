"""When a status ask may be trusted, and what it costs: a resumed request is asked about before it is sent again,
none found is trusted only once no copy could still be accepted, a ban answered to an ask holds the host, and
refusals that cost nothing cannot ask for ever. Driven through the scripted transport."""

from __future__ import annotations

import dataclasses
import time

from conftest import ROOT
from fakes import Call, answer, invalid_nonce, ok
from test_worker_paths import FIRST, Rig
from thread_client.errors import AnswerTimedOut
from thread_client.limits.timestamps import DRIFT
from thread_client.policy.answers import AnswerTable
from thread_client.policy.order_status import StatusTable
from thread_client.profile import load_profile
from thread_client.request import Request

ORDERS = load_profile(str(ROOT / "examples" / "profiles" / "reference-orders.toml"))
# Its engine placing orders at once: how long a copy stays in doubt is the test's own (DOUBT).
REFERENCE = dataclasses.replace(ORDERS, settle=dataclasses.replace(ORDERS.settle, lag_ms=0))
BINANCE = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml"))
EXECUTION_UNKNOWN = answer(500, {"status": "error", "error_msg": "execution status unknown", "code": -1007})
NOT_FOUND = answer(400, {"status": "error", "error_msg": "order does not exist", "code": -2013})
DOUBT = 0.01  # the reference profile has no receive window: the HTTP timeout bounds a copy's doubt; short here


def found(client_id: str) -> object:
    return answer(200, {"status": "FOUND", "client_id": client_id})


def asked(client_id: str, nonce: int) -> Call:
    return Call(nonce, "", {"clientId": client_id}, "GET", "/api/order")


def reference_rig(*steps: object, doubt: float = DOUBT) -> Rig:
    return Rig(*steps, answers=AnswerTable(REFERENCE), status=StatusTable(REFERENCE, doubt))


def test_a_resumed_request_is_asked_about_before_it_is_sent_again():
    """At-least-once after a crash: the earlier run sent it and its answer was lost; the exchange may have the order."""
    r = reference_rig(found("r1"))
    r.queues.submit(Request("r1", time.monotonic(), resumed=True))
    r.handle_next()
    assert r.transport.calls == [asked("r1", FIRST)]
    assert (r.queues.counts().accepted, r.queues.graveyard.by_outcome()) == (1, {})
    r.assert_clean()


def test_a_resumed_request_the_exchange_does_not_have_is_sent_once_none_is_found_for_sure():
    r = reference_rig(NOT_FOUND, NOT_FOUND, ok("r1"))
    r.queues.submit(Request("r1", time.monotonic(), resumed=True))
    r.handle_next()
    assert r.transport.calls == [asked("r1", FIRST), asked("r1", FIRST + 1), Call(FIRST + 2, "r1")]
    assert r.queues.counts().accepted == 1
    r.assert_clean()


def test_none_found_while_a_copy_may_still_be_accepted_is_asked_again_never_resent():
    """Binance checks a client id among open orders only: a first copy still on its way (or filled) is not found,
    and a resend then doubles the order. The ask that finds it after the doubt has passed settles it."""
    r = reference_rig(AnswerTimedOut("timed out"), NOT_FOUND, found("r1"))
    r.submit("r1")
    r.handle_next()
    assert r.transport.calls == [Call(FIRST, "r1"), asked("r1", FIRST + 1), asked("r1", FIRST + 2)]
    assert (r.queues.counts().accepted, r.queues.counts().dlq) == (1, 0)
    r.assert_clean()


def test_a_copys_doubt_lasts_twice_the_receive_window_else_the_http_timeout():
    """A stamp is taken at most a window old and at most a window ahead of the server's clock."""
    assert StatusTable(BINANCE, http_timeout=3.0).doubt_lasts == 2 * 5.0 * (1 + DRIFT)
    assert StatusTable(REFERENCE, http_timeout=3.0).doubt_lasts == 3.0


def test_a_ban_answered_to_a_status_ask_holds_the_host_as_any_ban_does():
    unknown = answer(500, {"code": -1007, "msg": "Timeout waiting for response from backend server."})
    banned = answer(418, {"code": -1003, "msg": "Way too much request weight used; IP banned"}, retry_after=120.0)
    bans: list[float | None] = []
    r = Rig(unknown, banned, answer(200, {"clientOrderId": "r1", "status": "FILLED"}), answers=AnswerTable(BINANCE),
            status=StatusTable(BINANCE), on_ban=lambda retry_after: bans.append(retry_after) or 0.0)
    r.submit("r1")
    r.handle_next()
    assert bans == [120.0]
    assert r.queues.counts().accepted == 1


def test_status_asks_refused_for_free_run_out_of_budget_and_end_unknown():
    """Every ask refused as an invalid nonce (the order rule's bet lost, at no cost): past the free ones, the settle's
    budget is spent, so the key is not held asking for ever."""
    r = reference_rig(EXECUTION_UNKNOWN, *[invalid_nonce()] * 40, found("r1"))
    r.submit("r1")
    r.handle_next()
    assert r.queues.graveyard.by_outcome() == {"unknown": 1}
    assert len(r.transport.calls) < 41
