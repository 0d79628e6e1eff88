"""A request's own endpoint and weight, end to end without a server: checked against the profile as its line
is read, costed by the key's limits once per request, built and signed for its endpoint, journaled for a
restart, and sent (and sent again) where it was meant to go."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from conftest import FakeClock
from fakes import Call, ScriptedTransport, ok
from thread_client.delivery import AT_LEAST_ONCE, EXACTLY_ONCE, Delivery
from thread_client.errors import AnswerTimedOut, LimiterTimeout, StaleConnection
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.flow.worker import Worker
from thread_client.io.graveyard import Graveyard
from thread_client.io.request_writer import RequestWriter
from thread_client.io.resume import EarlierSend, ResumePoint, SendJournal, line_digest
from thread_client.io.sources import JsonLinesSource
from thread_client.limits.keys import ApiKey
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.limits.nonces import NonceGenerator
from thread_client.limits.rules import LimitRule
from thread_client.policy.retry import RetryPolicy
from thread_client.profile import Secret, SignedParts, Signer, Signing, read_profile
from thread_client.profile.endpoints import Endpoints
from thread_client.request import InvalidInput, Request, Work, parse_line

PROFILE = read_profile("""
name = "orders"

[request]
endpoints = ["POST /api/order", "GET /api/ticker"]

[[limit]]
name = "request weight"
algorithm = "rolling-window"
limit = 20
period_ms = 1000
cost = { "GET /api/request" = 1, "POST /api/order" = 4 }

[[limit]]
name = "heavy"
algorithm = "rolling-window"
limit = 10
period_ms = 1000
cost = "weight"
""", "orders.toml")
ORDER = LimitRule("request weight", "rolling-window", limit=20, period_ms=50,
                  cost=(("GET /api/request", 1), ("POST /api/order", 4)))


def admit(work: Work) -> Work | InvalidInput:
    return Endpoints(PROFILE.request, PROFILE.limits, PROFILE.own_params).admit(work)


def test_a_request_of_the_profile_s_own_endpoint_at_weight_1_passes_as_it_is():
    work = Work("a", {"x": "1"}, where="line 1")
    assert admit(work) is work


def test_a_line_s_endpoint_is_completed_from_the_profile_and_its_own_is_left_to_the_profile():
    assert admit(Work("b", where="line 2", path="/api/ticker")) == Work("b", where="line 2", method="GET",
                                                                        path="/api/ticker")
    assert admit(Work("c", where="line 3", method="GET", path="/api/request", weight=3)) == Work(
        "c", where="line 3", weight=3)
    assert admit(Work("d", where="line 4", method="POST", path="/api/order")) == Work(
        "d", where="line 4", method="POST", path="/api/order")


@pytest.mark.parametrize("work, words", [
    (Work("e", where="line 5", method="DELETE", path="/api/order"), "'DELETE /api/order' is not an endpoint"),
    (Work("f", where="line 6", path="/api/nope"), "'GET /api/nope' is not an endpoint"),
    (Work("f2", where="line 6", path="/api/order"), "'GET /api/order' is not an endpoint"),  # the profile's method
    (Work("g", where="line 7", method="POST"), "'POST /api/request' is not an endpoint"),
    (Work("h", where="line 8", weight=11), "weight 11: a send of cost 11 can never fit limit 'heavy' (at most 10)"),
])
def test_an_endpoint_the_profile_does_not_allow_or_a_weight_no_limit_can_hold_is_invalid_input(work, words):
    refused = admit(work)
    assert isinstance(refused, InvalidInput) and (refused.where, refused.id) == (work.where, work.id)
    assert words in refused.reason, refused.reason
    if "endpoint" in words:
        assert "allowed: GET /api/request, GET /api/ticker, POST /api/order" in refused.reason


def test_the_check_is_made_as_the_line_is_read_so_a_refused_line_keeps_its_receipt_and_digest(tmp_path):
    assert parse_line(b'{"id": "s", "path": "/x"}', "entry 1-0", receipt="1-0", admit=admit).receipt == "1-0"
    source = tmp_path / "in.jsonl"
    line = b'{"id": "o", "method": "PUT", "path": "/api/order"}'
    source.write_bytes(b'{"id": "p", "method": "POST", "path": "/api/order", "weight": 2}\n' + line + b"\n")
    items = list(JsonLinesSource(str(source), state_dir=str(tmp_path), admit=admit).read(threading.Event()))
    assert items[0] == Work("p", where="line 1", method="POST", path="/api/order", weight=2)
    assert isinstance(items[1], InvalidInput) and items[1].digest == line_digest(line)  # a rerun knows it


def test_a_work_entry_is_written_as_the_line_it_was_read_from():
    """``submit`` puts each line's request into the work stream as a line of its own: the endpoint and weight
    go with it, and a line that names neither is written as it always was."""
    named = Work("o", {"q": "1"}, method="POST", path="/api/order", weight=4)
    assert parse_line(named.as_line(), "entry 1") == Work("o", {"q": "1"}, where="entry 1", method="POST",
                                                          path="/api/order", weight=4)
    assert json.loads(Work("p", {"q": "1"}).as_line()) == {"id": "p", "params": {"q": "1"}}


def test_a_cost_table_that_names_the_profile_s_own_endpoint_costs_its_usual_sends(clock: FakeClock):
    """A send of the profile's own endpoint at weight 1 (``costs=None``) spends what the table says of that
    endpoint, not nothing: the table names it by its method and path."""
    rule = LimitRule("weight", "rolling-window", limit=4, period_ms=1000,
                     cost=(("GET /api/request", 2), ("POST /api/order", 4)))
    limiter = ThreadSafeRateLimiter(rules=[(rule.new_state(), rule)], endpoint="GET /api/request", order_latency=0.0,
                                    clock=clock, nonces=NonceGenerator(clock=lambda: 0))
    assert limiter.costs_of("", 1) == (2,) and limiter.costs_of("POST /api/order", 1) == (4,)
    limiter.acquire(0)
    limiter.acquire(0)
    with pytest.raises(LimiterTimeout):
        limiter.acquire(0)


def test_a_request_is_built_and_signed_for_its_own_endpoint():
    request = PROFILE.request
    signing = Signing(message="{method} {path}?{query}")
    writer = RequestWriter("/pre", "KEY", request, PROFILE.nonce, signing, Signer(signing, Secret("s")))
    method, target, body, headers = writer.write(7, "r", {"a": "1"}, "POST", "/api/order")
    query, _, signature = target.partition("?")[2].rpartition("&signature=")
    assert (method, target.partition("?")[0], body) == ("POST", "/pre/api/order", None)
    assert signature == Signer(signing, Secret("s")).sign(SignedParts("POST", "/pre/api/order", query, "", "7", "",
                                                                       "KEY", ""))
    method, target, _, _ = writer.write(7, "r", {"a": "1"})  # the profile's own
    assert (method, target.partition("?")[0]) == ("GET", "/pre/api/request")


def test_the_journal_keeps_a_send_s_endpoint_and_weight_so_a_restart_settles_it_where_it_went(tmp_path):
    results = tmp_path / "results.jsonl"
    journal = SendJournal(str(results), delivery=EXACTLY_ONCE)
    journal.sending(Request("usual", 0.0, {"q": "1"}), "k1", 5)
    journal.sending(Request("order", 0.0, method="POST", path="/api/order", weight=3), "k2", 9)
    journal.close()
    usual, order = [json.loads(line) for line in (tmp_path / "results.jsonl.sent").read_text().splitlines()]
    assert set(usual) == {"id", "key", "nonce", "params", "once"}  # a usual send's line is what it always was
    assert (order["method"], order["path"], order["weight"]) == ("POST", "/api/order", 3)
    resume = ResumePoint(str(results), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert resume.unsettled == {"k1": EarlierSend("usual", "k1", 5, {"q": "1"}),
                                    "k2": EarlierSend("order", "k2", 9, {}, "POST", "/api/order", 3)}
    finally:
        resume.close()


class SpyLimiter(ThreadSafeRateLimiter):
    """A key's limiter that notes the costs of every acquire, and how often a request's costs are worked out."""

    def __init__(self, *args, **kwargs) -> None:
        self.costed = 0
        super().__init__(*args, **kwargs)
        self.costs: list[tuple[int, ...] | None] = []
        self.costed = 0  # not the limiter's own usual costs, worked out once as it is made

    def acquire(self, timeout=None, *, resend_of=None, costs=None):
        self.costs.append(costs)
        return super().acquire(timeout, resend_of=resend_of, costs=costs)

    def costs_of(self, endpoint: str, weight: int) -> tuple[int, ...]:
        self.costed += 1
        return super().costs_of(endpoint, weight)


def rig(delivery: Delivery, *steps, earlier_send=None) -> tuple[Worker, SpyLimiter, ScriptedTransport, QueueManager]:
    limiter = SpyLimiter(rules=[(ORDER.new_state(), ORDER)], endpoint="GET /api/request", name="UT4N",
                         order_latency=math.inf if delivery.one_in_flight else 0.0, unanswered_hold=0.01,
                         nonces=NonceGenerator(clock=lambda: 1_700_000_000_000_000))
    queues = QueueManager(Graveyard(None), queue_size=10, ttl=60.0)
    transport = ScriptedTransport(steps)
    worker = Worker(ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", limiter), queues, transport,
                    RetryPolicy(max_retries=3, backoff_base=0.001, backoff_cap=0.001), OutageGate(), threading.Event(),
                    delivery=delivery, earlier_send=earlier_send and (queues.adopt(earlier_send[0]), earlier_send[1]))
    return worker, limiter, transport, queues


def handle(worker: Worker, queues: QueueManager, request: Request) -> None:
    assert queues.submit(request)
    taken = queues.take(5.0)
    worker._guarded(taken, lambda: worker._handle(taken))


@pytest.mark.parametrize("delivery, first", [(AT_LEAST_ONCE, StaleConnection("closed under the request")),
                                             (EXACTLY_ONCE, AnswerTimedOut("timed out"))],
                         ids=["at-least-once-stale-resend", "exactly-once-settle"])
def test_every_send_of_a_request_goes_to_its_endpoint_at_its_cost_worked_out_once(delivery, first):
    worker, limiter, transport, queues = rig(delivery, first, ok("o1"))
    handle(worker, queues, Request("o1", time.monotonic(), method="POST", path="/api/order"))
    assert queues.counts().accepted == 1
    nonce = transport.nonces[0]
    assert transport.calls == [Call(nonce, "o1", {}, "POST", "/api/order")] * 2  # the same send, sent again
    assert limiter.costs == [(4,), (4,)] and limiter.costed == 1


def test_a_request_of_the_profile_s_own_endpoint_at_weight_1_costs_nothing_to_work_out():
    worker, limiter, transport, queues = rig(AT_LEAST_ONCE, ok("r1"))
    handle(worker, queues, Request("r1", time.monotonic()))
    assert transport.calls == [Call(transport.nonces[0], "r1", {}, "", "")]
    assert limiter.costs == [None] and limiter.costed == 0


def test_the_earlier_run_s_last_send_is_settled_at_its_own_endpoint_and_cost():
    earlier = Request("o2", time.monotonic(), method="POST", path="/api/order", resumed=True)
    worker, limiter, transport, queues = rig(EXACTLY_ONCE, ok("o2"), earlier_send=(earlier, 1_600_000_000_000_000))
    worker._guarded(earlier, lambda: worker._settle_earlier_send(earlier, 1_600_000_000_000_000))
    assert transport.calls == [Call(1_600_000_000_000_000, "o2", {}, "POST", "/api/order")]
    assert limiter.costs == [(4,)] and queues.counts().accepted == 1


def test_a_line_without_the_profile_s_client_id_param_is_sent_with_its_id_there():
    """The exchange knows the order by its client id: every send of a line that names none (a retry, a send after
    a restart) must carry the same one, the request's id, so the profile's param is added as the line is read."""
    profile = read_profile('[request]\nclient_id = "clOrd"\n', "orders.toml")
    endpoints = Endpoints(profile.request, profile.limits, profile.own_params)
    assert endpoints.admit(Work("a", {"x": "1"}, where="line 1")) == Work("a", {"x": "1", "clOrd": "a"}, where="line 1")
    assert endpoints.admit(Work("b", {"clOrd": "C-7"}, where="line 2")) == Work("b", {"clOrd": "C-7"}, where="line 2")


KEY_ID = "0123456789abcdef"


@pytest.mark.parametrize("sent_on", ['""', '"no-such-key"', '"\\ud800"', "7", '"0123456789ABCDEF"'])
def test_a_sent_on_that_is_no_key_id_is_invalid_input(sent_on):
    item = parse_line(f'{{"id": "a", "sent_on": {sent_on}}}', "line 1")
    assert isinstance(item, InvalidInput) and "is not the id of a key" in item.reason


def test_a_line_requeued_in_doubt_is_asked_about_first_only_where_the_profile_can_ask():
    """Sent again where nothing asks first, its order may be placed twice: invalid_input, saying how to take that
    risk instead (requeue with --may-double)."""
    line = f'{{"id": "a", "sent_on": "{KEY_ID}"}}'
    refused = parse_line(line, "line 1", admit=Endpoints(PROFILE.request, PROFILE.limits, PROFILE.own_params).admit)
    assert isinstance(refused, InvalidInput) and "--may-double" in refused.reason and KEY_ID in refused.reason
    asked = parse_line(line, "line 1", admit=Endpoints(PROFILE.request, PROFILE.limits, PROFILE.own_params,
                                                       can_ask=True).admit)
    assert isinstance(asked, Work) and (asked.resumed, asked.sent_on) == (True, KEY_ID)
