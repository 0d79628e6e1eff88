"""The control surface's pieces: a key's pause in its limiter, the console's feed, the routes (auth, errors, static
files), the dead letters' pages, the token file, the paused state in the status and in Prometheus, and a requeue
in flight at a crash settled by the next exactly-once run."""

from __future__ import annotations

import json
import stat
import threading
from types import SimpleNamespace

import pytest

from conftest import FakeClock
from thread_client.config import Config
from thread_client.control import console
from thread_client.control.dead import DeadLetters, Page
from thread_client.control.feed import RECENT_ERRORS, ConsoleFeed
from thread_client.control.routes import NoResults, Router
from thread_client.control.token import control_token
from thread_client.delivery import EXACTLY_ONCE
from thread_client.errors import ConfigError, KeyCommandRefused, KeyPaused, RequeueRefused
from thread_client.exits import StopReason
from thread_client.flow.listener import Listener, Listeners
from thread_client.io.resume import ResumePoint
from thread_client.limits.keys import RetireReason
from thread_client.limits.limiter import PausedBy, ThreadSafeRateLimiter
from thread_client.limits.nonces import NonceGenerator
from thread_client.observe.status import KeyCondition
from thread_client.policy.answers import Outcome
from thread_client.request import FinalOutcome
from thread_client.requeue import DEAD, REQUEUABLE
from thread_client.stop_latch import StopLatch
from thread_client.threads import ManagedThread

TOKEN = "s3cret-token"


def limiter(clock) -> ThreadSafeRateLimiter:
    return ThreadSafeRateLimiter(5, clock=clock, order_latency=0.0, nonces=NonceGenerator(clock=lambda: 0))


def test_a_paused_key_gives_no_fresh_permit_and_takes_no_work_until_each_pause_is_lifted(clock):
    lim = limiter(clock)
    first = lim.acquire(0)
    lim.pause(PausedBy.OPERATOR)
    lim.pause(PausedBy.DAEMON)
    with pytest.raises(KeyPaused):
        lim.acquire(0)
    assert lim.wait_ready(0) is False
    lim.release(first, answered_at=None)  # what was in flight finishes
    assert lim.acquire(0, resend_of=first).resend  # a send in doubt is still settled
    lim.resume(PausedBy.DAEMON)
    assert lim.paused_by == {PausedBy.OPERATOR} and lim.wait_ready(0) is False  # the operator's pause holds
    lim.resume(PausedBy.OPERATOR)
    assert lim.wait_ready(0) is True and lim.acquire(0).nonce > first.nonce


def test_a_worker_waiting_on_a_paused_key_wakes_when_it_is_resumed(clock):
    lim = limiter(clock)
    lim.pause(PausedBy.OPERATOR)
    ready: list[bool] = []
    waiter = threading.Thread(target=lambda: ready.append(lim.wait_ready(timeout=None)))
    waiter.start()
    waiter.join(0.05)
    assert waiter.is_alive()  # paused: it waits
    lim.resume(PausedBy.OPERATOR)
    waiter.join(5)
    assert not waiter.is_alive() and ready == [True]


def test_a_key_s_condition_shows_the_operator_s_pause_after_a_retirement_and_before_a_ban():
    assert KeyCondition.of(None, True, True, paused=True) is KeyCondition.PAUSED
    assert KeyCondition.of(RetireReason.KEY_BLOCKED, False, False, paused=True) is KeyCondition.BLOCKED
    assert KeyCondition.of(None, False, False, owned=False, paused=True) is KeyCondition.NOT_OWNED


def test_events_reach_every_subscriber_and_the_feed_keeps_rates_and_the_latest_errors():
    clock = FakeClock()
    feed, counted = ConsoleFeed(clock, wall=lambda: 1_700_000_000.0), []

    class Counting(Listener):
        def attempted(self, key, outcome, round_trip=None):
            counted.append(outcome)

    events = Listeners(Counting())
    events.subscribe(feed)
    for _ in range(30):
        events.attempted("A", Outcome.ACCEPTED, 0.01)
        clock.advance(0.5)  # 30 accepts over 15 s: the ten whole seconds up to now (the 10th just begun) hold 18
    events.attempted("B", Outcome.RATE_LIMITED)
    assert len(counted) == 31
    assert feed.accepted_per_s() == {"A": 1.8}
    for n in range(RECENT_ERRORS + 5):
        events.failed("B", f"r-{n}", Outcome.TIMEOUT, "no answer")
    errors = feed.recent_errors()
    assert len(errors) == RECENT_ERRORS and errors[0].request == f"r-{RECENT_ERRORS + 4}"
    assert (errors[0].key, errors[0].outcome, errors[0].at) == ("B", "timeout", 1_700_000_000.0)
    clock.advance(60)
    assert feed.accepted_per_s() == {"A": 0.0}


class FakePanel:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def status(self) -> dict:
        return {"version": 1}

    def pause_key(self, key, paused):
        self.calls.append(("key", key, paused))
        return ("paused" if paused else "sending") if key == "abc" else None

    def retire_key(self, key, last):
        self.calls.append(("retire", key, last))
        if key == "last" and not last:
            raise KeyCommandRefused("key last is the last key that may send")
        return "retired" if key in ("abc", "last") else None

    def unpark_key(self, key):
        self.calls.append(("unpark", key))
        if key == "spent":
            raise KeyCommandRefused("key spent has had 4 rate-limit strikes in all runs")
        return "held" if key in ("abc", "spent") else None

    def pause(self, paused):
        self.calls.append(("daemon", paused))
        return paused

    def drain(self):
        self.calls.append(("drain",))

    def dead(self, chosen, limit, after):
        self.calls.append(("dead", chosen, limit, after))
        if after == "bad":
            raise ValueError("not a cursor")
        return Page([{"id": "x"}], None)

    def requeue(self, ids, chosen, may_double):
        self.calls.append(("requeue", ids, chosen))
        if ids == ["none"]:
            raise NoResults("no results file")
        if ids and "full" in ids:
            raise RequeueRefused(ids[:ids.index("full")])
        if ids and "placed-maybe" in ids and not may_double:
            return [one for one in ids if one != "placed-maybe"], ["placed-maybe"]
        return ids or ["x"], []


def ask(router, method, target, body=b"", token=TOKEN):
    reply = router.route(method, target, None if token is None else f"Bearer {token}", body)
    return reply.status, json.loads(reply.body) if reply.content_type == "application/json" else reply.body


@pytest.fixture
def router(tmp_path):
    """Over a static folder with a file beside it (``secret.txt``), for a path that climbs out to reach."""
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<h1>console</h1>")
    (static / "console.js").write_text("let x;")
    (tmp_path / "secret.txt").write_text("not the page's")
    return Router(FakePanel(), TOKEN, static=static)


def test_every_command_needs_the_token_and_reads_need_none(router, caplog):
    for token in (None, "wrong", ""):
        status, answer = ask(router, "POST", "/api/v1/keys/abc/pause", token=token)
        assert status == 401 and TOKEN not in answer["error"]
    assert router.route("POST", "/api/v1/drain", "Basic " + TOKEN, b"").status == 401
    assert "refused" in caplog.text and TOKEN not in caplog.text
    assert router._panel.calls == []
    assert ask(router, "GET", "/api/v1/status", token=None) == (200, {"version": 1})
    assert ask(router, "POST", "/api/v1/keys/abc/pause") == (200, {"key": "abc", "state": "paused"})
    assert ask(router, "POST", "/api/v1/keys/abc/resume") == (200, {"key": "abc", "state": "sending"})
    assert ask(router, "POST", "/api/v1/pause") == (200, {"paused": True})
    assert ask(router, "POST", "/api/v1/resume") == (200, {"paused": False})
    assert ask(router, "POST", "/api/v1/drain") == (200, {"draining": True})


def test_a_key_is_retired_and_unparked_and_a_command_its_state_refuses_is_a_conflict(router):
    assert ask(router, "POST", "/api/v1/keys/abc/retire", token=None)[0] == 401
    assert ask(router, "POST", "/api/v1/keys/abc/retire") == (200, {"key": "abc", "state": "retired"})
    assert ask(router, "POST", "/api/v1/keys/last/retire", b'{"last": false}') == (
        409, {"error": "key last is the last key that may send"})
    assert ask(router, "POST", "/api/v1/keys/last/retire", b'{"last": true}') == (
        200, {"key": "last", "state": "retired"})
    assert ask(router, "POST", "/api/v1/keys/abc/retire", b'{"last": "yes"}')[0] == 400
    assert ask(router, "POST", "/api/v1/keys/abc/unpark") == (200, {"key": "abc", "state": "held"})
    assert ask(router, "POST", "/api/v1/keys/spent/unpark") == (
        409, {"error": "key spent has had 4 rate-limit strikes in all runs"})
    for verb in ("retire", "unpark"):
        assert ask(router, "POST", f"/api/v1/keys/nope/{verb}")[0] == 404
    assert ask(router, "GET", "/api/v1/keys/abc/retire")[0] == 405
    assert router._panel.calls[:3] == [("retire", "abc", False), ("retire", "last", False), ("retire", "last", True)]


def test_unknown_paths_keys_and_methods_and_bad_queries_are_json_errors(router):
    assert ask(router, "POST", "/api/v1/keys/nope/pause")[0] == 404
    assert ask(router, "GET", "/api/v1/nothing")[0] == 404
    assert ask(router, "POST", "/api/v1/nothing")[0] == 404
    assert ask(router, "GET", "/api/v1/drain")[0] == 405
    assert ask(router, "POST", "/api/v1/status")[0] == 405
    assert ask(router, "DELETE", "/api/v1/status")[0] == 405
    assert ask(router, "GET", "/api/v1/dead?outcome=accepted")[0] == 400  # no dead letter
    assert ask(router, "GET", "/api/v1/dead?outcome=nonsense")[0] == 400
    assert ask(router, "GET", "/api/v1/dead?limit=ten")[0] == 400
    assert ask(router, "GET", "/api/v1/dead?after=bad")[0] == 400
    assert ask(router, "POST", "/api/v1/dead/requeue", b"[1]")[0] == 400
    assert ask(router, "POST", "/api/v1/dead/requeue", b"{}")[0] == 400
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": [1]}')[0] == 400
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["none"]}')[0] == 404


def test_dead_letters_and_requeues_pass_their_filters_on(router):
    assert ask(router, "GET", "/api/v1/dead?outcome=rejected,unknown&limit=7&after=c") == (
        200, {"items": [{"id": "x"}], "next": None})
    assert router._panel.calls[-1] == ("dead", {FinalOutcome.REJECTED, FinalOutcome.UNKNOWN}, 7, "c")
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"outcome": "rejected"}') == (
        200, {"requeued": 1, "ids": ["x"]})
    assert router._panel.calls[-1] == ("requeue", None, {FinalOutcome.REJECTED})


def test_unknown_and_duplicate_are_listed_but_requeued_only_with_the_risk_taken(router):
    """Their order may be at the exchange already: never in the default set, named only with "may_double"."""
    status, answer = ask(router, "POST", "/api/v1/dead/requeue", b'{"outcome": "rejected,unknown"}')
    assert status == 400 and "placed twice" in answer["error"] and "may_double" in answer["error"]
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"outcome": "duplicate", "may_double": true}')[0] == 200
    assert router._panel.calls[-1] == ("requeue", None, {FinalOutcome.DUPLICATE})
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["a"]}')[0] == 200
    assert FinalOutcome.UNKNOWN not in router._panel.calls[-1][2]  # by id: a risky one is left out...
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["a"], "may_double": true}')[0] == 200
    assert router._panel.calls[-1][2] >= {FinalOutcome.UNKNOWN, FinalOutcome.DUPLICATE}  # ...unless the risk is taken
    assert ask(router, "GET", "/api/v1/dead?outcome=unknown")[0] == 200  # listing them is harmless
    ask(router, "GET", "/api/v1/dead")
    assert router._panel.calls[-1][1] == set(REQUEUABLE) and FinalOutcome.UNKNOWN not in REQUEUABLE


def test_a_requeue_that_finds_the_main_queue_full_is_refused_at_once_with_what_went_in(router):
    assert ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["a", "full"]}') == (
        503, {"error": "the main queue is full (a paused daemon fills it): try again once it has room",
              "requeued": 1, "ids": ["a"]})


def test_a_requeue_names_the_dead_letters_it_refused_as_maybe_placed_and_why(router):
    status, answer = ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["a", "placed-maybe"]}')
    assert status == 200 and answer["ids"] == ["a"] and answer["refused"] == ["placed-maybe"]
    assert "[settle]" in answer["refused_because"] and "may_double" in answer["refused_because"]
    status, answer = ask(router, "POST", "/api/v1/dead/requeue", b'{"ids": ["a", "placed-maybe"], "may_double": true}')
    assert status == 200 and answer == {"requeued": 2, "ids": ["a", "placed-maybe"]}


def test_only_the_page_s_own_files_are_served(router):
    assert ask(router, "GET", "/", token=None)[1] == b"<h1>console</h1>"
    reply = router.route("GET", "/static/console.js", None, b"")
    assert reply.status == 200 and reply.body == b"let x;" and "javascript" in reply.content_type
    for path in ("/static/../secret.txt", "/static/%2e%2e/secret.txt", "/static/..%2fsecret.txt",
                 "/static/%2e%2e%2fsecret.txt", "/static/", "/static/.hidden", "/static/nope.js", "/index.html/..",
                 "/../secret.txt", "/../../etc/passwd"):
        assert router.route("GET", path, None, b"").status == 404, path


def write_records(path, records) -> None:
    with path.open("a") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)


def test_dead_letters_come_a_page_at_a_time_each_id_by_its_last_record(tmp_path):
    results = tmp_path / "results.jsonl"
    write_records(results, [{"id": f"d{n}", "outcome": "rejected", "reason": "no", "finished": float(n), "key": "K"}
                             for n in range(5)] + [{"id": "ok", "outcome": "accepted", "finished": 5.0}])
    dead = DeadLetters(str(results))
    first = dead.page(limit=2)
    assert [item["id"] for item in first.items] == ["d0", "d1"] and first.items[0] == {
        "id": "d0", "outcome": "rejected", "detail": "no", "at": 0.0, "key": "K", "requeue": 0, "in_doubt": False}
    # d1 sent again and accepted, d3 sent again and refused again: the cursor still finds its place.
    write_records(results, [{"id": "d1", "outcome": "accepted", "finished": 6.0},
                            {"id": "d3", "outcome": "retries_exhausted", "finished": 7.0}])
    second = dead.page(limit=2, after=first.next)
    assert [item["id"] for item in second.items] == ["d2", "d4"]
    third = dead.page(limit=2, after=second.next)
    assert [item["id"] for item in third.items] == ["d3"] and third.next is None
    assert [item["id"] for item in dead.page(frozenset({FinalOutcome.RETRIES_EXHAUSTED})).items] == ["d3"]
    with pytest.raises(ValueError):
        dead.page(limit=501)
    with pytest.raises(ValueError):
        dead.page(after="not-a-cursor")
    assert DeadLetters(str(tmp_path / "none.jsonl")).page() == Page([], None)


def test_a_page_reads_only_the_bytes_added_since_the_last_and_a_line_once_it_is_whole(tmp_path):
    """The page is polled by every open console: reading the whole results file each time cost 0.64 s of CPU per
    200k records. The index reads what was added (here: a record changed in place, which only a read of the
    whole file would see, stays as first read)."""
    results = tmp_path / "results.jsonl"
    write_records(results, [{"id": "a", "outcome": "rejected", "finished": 1.0},
                            {"id": "b", "outcome": "rejected", "finished": 2.0}])
    dead = DeadLetters(str(results))
    assert [item["id"] for item in dead.page().items] == ["a", "b"]
    with results.open("r+b") as file:  # the same bytes' length, in place: never read again
        file.write(json.dumps({"id": "a", "outcome": "accepted", "finished": 1.0}).encode().ljust(
            len(json.dumps({"id": "a", "outcome": "rejected", "finished": 1.0}))))
    with results.open("a") as file:
        file.write(json.dumps({"id": "b", "outcome": "accepted", "finished": 3.0}) + "\n")
        file.write('{"id": "c", "outcome": "rejec')  # being written
    assert [item["id"] for item in dead.page().items] == ["a"]
    with results.open("a") as file:
        file.write('ted", "finished": 4.0}\n')
    assert [item["id"] for item in dead.page().items] == ["a", "c"]
    results.unlink()  # a new file: read from its start
    write_records(results, [{"id": "z", "outcome": "unknown", "finished": 5.0}])
    assert dead.page().items == [] and [item["id"] for item in dead.page(frozenset(DEAD)).items] == ["z"]


def test_a_requeue_finds_each_dead_letter_s_request_as_it_was_sent(tmp_path):
    results = tmp_path / "results.jsonl"
    write_records(results, [{"id": "a", "outcome": "rejected"}, {"id": "b", "outcome": "retries_exhausted"},
                            {"id": "c", "outcome": "accepted"}])
    write_records(tmp_path / "results.jsonl.sent", [{"id": "a", "key": "k", "nonce": 1, "params": {"n": 1}},
                                                    {"id": "b", "key": "k", "nonce": 2, "params": {"n": 2}}])
    works, dead = DeadLetters(str(results)).requests(["b", "c", "missing"])
    assert [(work.id, str(work.params["n"])) for work in works] == [("b", "2")] and list(dead) == ["b"]


def test_the_token_file_is_made_for_its_owner_alone_and_read_again(tmp_path):
    path = tmp_path / "token"
    token, made = control_token(str(path))
    assert made and len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert control_token(str(path)) == (token, False)
    path.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        control_token(str(path))


def test_an_exactly_once_requeue_in_flight_at_a_crash_is_settled_despite_the_id_s_dead_record(tmp_path):
    results = tmp_path / "results.jsonl"
    write_records(results, [{"id": "a", "outcome": "rejected"}, {"id": "b", "outcome": "rejected"},
                            {"id": "b", "outcome": "rejected", "requeued": True, "requeue": 1}])
    write_records(tmp_path / "results.jsonl.sent", [
        {"id": "a", "key": "k1", "nonce": 1, "params": {}, "once": True, "answered": True},
        {"id": "a", "key": "k1", "nonce": 5, "params": {"n": 1}, "once": True, "requeue": 1},  # no record yet
        {"id": "b", "key": "k2", "nonce": 7, "params": {}, "once": True, "requeue": 1},  # its record ends it
    ])
    point = ResumePoint(str(results), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert {key: (send.id, send.nonce, send.requeue) for key, send in point.unsettled.items()} == {
            "k1": ("a", 5, 1)}
    finally:
        point.close()


def test_a_control_host_other_machines_reach_is_refused_without_a_token_file_before_anything_is_made(tmp_path):
    """A setting, refused where settings are checked: before the daemon makes a token file in its state dir."""
    with pytest.raises(ConfigError, match="reachable from other machines"):
        Config(url="http://127.0.0.1:9", control_port=0, control_host="0.0.0.0", state_dir=str(tmp_path / "state"))
    assert not (tmp_path / "state").exists()
    Config(url="http://127.0.0.1:9", control_port=0, control_host="0.0.0.0", control_token_file=str(tmp_path / "t"))


def test_the_cluster_console_stops_for_a_thread_that_kept_dying_when_its_server_dies_for_good(monkeypatch):
    """Its serving thread dies past its restarts: the console stops with that reason (exit 1), a ``StopReason``
    like every other stop."""
    requested: list[object] = []

    class Latch(StopLatch):
        def catch_signals(self, *signals: object) -> None:  # the test's process keeps its own handlers
            pass

        def request(self, reason: StopReason) -> bool:
            requested.append(reason)
            return super().request(reason)

    class Dying(ManagedThread):
        def work(self) -> None:
            raise RuntimeError("the server's loop broke")

    thread = Dying("control-http")
    monkeypatch.setattr(console, "StopLatch", Latch)
    assert console._serve(SimpleNamespace(threads=lambda: [thread], close=lambda: None), "console", "started") == 1
    thread.join(5)
    assert not thread.is_alive() and requested == [StopReason.THREAD_FAILED]
