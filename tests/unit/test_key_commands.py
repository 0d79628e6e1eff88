"""The operator's commands on one key, below the HTTP routes: a park the operator can undo (nothing at all leaves a
parked key, not even a send in doubt; un-parked, it waits out the strike's hold and its nonces go on, and a strike
counted before the un-park parks nothing), un-parking only where the lifetime strike count allows (a key past it is
``blocked``), and retiring a key for good, the last one only when the operator says so (its queued work then
recorded as the operator's stop)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from conftest import FakeClock, wait_for
from fakes import ScriptedTransport, ok, rate_limited
from test_daemon_control import daemon_of
from test_worker_paths import bounded
from thread_client.control.feed import ConsoleFeed
from thread_client.control.panel import SHORT_ID, DaemonPanel
from thread_client.errors import KeyCommandRefused, KeyPaused, LimiterClosed
from thread_client.exits import StopReason
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.flow.requeue import Requeuer
from thread_client.flow.worker import Worker
from thread_client.io.graveyard import Graveyard
from thread_client.limits.keys import ApiKey, RetireReason, Strike
from thread_client.limits.limiter import PausedBy, ThreadSafeRateLimiter
from thread_client.limits.nonces import NonceGenerator
from thread_client.observe.status import KeyCondition
from thread_client.policy.retry import RetryPolicy
from thread_client.request import FinalOutcome, Request

SECRET = "UT4NHL1J796WCHULA1750MXYF9F5JYA6"
WALL = 1_700_000_000_000_000  # a frozen wall clock of the nonces: each fresh one is the last plus one
BOUND = 5.0


def key_on(clock, rate: int = 5, window: float = 1.0, **limits) -> ApiKey:
    limiter = ThreadSafeRateLimiter(rate, window=window, unanswered_hold=0.5, order_latency=0.0,
                                    nonces=NonceGenerator(clock=lambda: WALL), clock=clock, **limits)
    return ApiKey(SECRET, limiter)


def test_a_parked_key_sends_nothing_at_all_until_it_is_unparked(clock):
    key = key_on(clock)
    out = key.limiter.acquire(0)
    assert key.retire(RetireReason.PARKED) and key.retired_because is RetireReason.PARKED
    state = key.limiter.state()
    assert not state.closed and PausedBy.PARKED in state.paused_by  # parked, not closed: it can be undone
    for asked in ({}, {"settling": True}, {"resend_of": out}):  # not even a send in doubt, as an operator's pause lets
        with pytest.raises(KeyPaused):
            key.limiter.acquire(0, **asked)
    assert key.limiter.wait_ready(0) is False
    key.limiter.release(out, clock())  # what was in flight finishes
    assert key.retire(RetireReason.PARKED) is False  # parked once: a later strike's park changes nothing
    assert key.unpark() and key.retired_because is None and key.limiter.wait_ready(0)


def test_a_parked_key_may_be_retired_for_good_and_a_key_retired_for_good_stays_so(clock):
    key = key_on(clock)
    assert key.retire(RetireReason.PARKED) and key.retire(RetireReason.STRIKE_BUDGET_SPENT)
    assert key.retired_because is RetireReason.STRIKE_BUDGET_SPENT and key.limiter.state().closed
    assert not (key.unpark() or key.retire(RetireReason.PARKED) or key.retire(RetireReason.OPERATOR))
    with pytest.raises(LimiterClosed):
        key.limiter.acquire(0)


def test_an_unparked_key_waits_out_the_hold_of_the_strike_that_parked_it_and_its_nonces_go_on(clock):
    key = key_on(clock)
    key.carry_strikes(4)  # earlier runs' strikes
    before = key.limiter.acquire(0)
    key.limiter.release(before, clock())
    key.limiter.note_rate_limited()  # the strike: no send until the server may have forgotten this key's stamps
    assert key.strike() == Strike(1, 5, unparks=0) and key.retire(RetireReason.PARKED)
    clock.advance(0.1)
    assert key.unpark() and (key.strikes, key.lifetime_strikes) == (0, 5)  # a fresh budget this run; the life's stays
    assert key.limiter.state().held and key.limiter.wait_ready(0) is False  # never into the window it came from
    clock.advance(key.limiter.state().held_for)
    after = key.limiter.acquire(0)
    assert after.nonce > before.nonce


def test_a_park_for_a_strike_counted_before_an_unpark_is_refused_a_retirement_for_good_is_not(clock):
    key = key_on(clock)
    stale = key.strike()
    assert key.retire(RetireReason.PARKED, stale) and key.unpark()
    assert not key.retire(RetireReason.PARKED, stale) and key.retired_because is None  # its budget was replaced
    fresh = key.strike()
    assert fresh == Strike(1, 2, unparks=1) and key.retire(RetireReason.PARKED, fresh)
    assert key.retire(RetireReason.STRIKE_BUDGET_SPENT, stale)  # all runs' strikes count whenever they came


def test_no_permit_is_given_once_a_park_has_returned_however_the_key_s_threads_race_it():
    """Eight threads ask for permits as fast as they can, fresh ones and ones settling a send (which an
    operator's pause lets through); the key is parked among them. Every ask that began after the park returned
    is refused, and each thread goes on until it has been refused a few times."""
    key = key_on(time.monotonic, rate=100, window=0.01)
    parked = threading.Event()
    late_permits: list[int] = []
    refused = [0] * 8
    start = threading.Barrier(9)

    def hammer(index: int) -> None:
        start.wait(BOUND)
        while refused[index] < 3 and not late_permits:  # a late permit ends the race: it failed
            after_park = parked.is_set()
            try:
                permit = key.limiter.acquire(BOUND, settling=index % 2 == 1)  # waits for a slot, never for a park
            except KeyPaused:
                refused[index] += after_park
                continue
            if after_park:
                late_permits.append(permit.nonce)
            key.limiter.release(permit, time.monotonic())

    threads = [threading.Thread(target=hammer, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    start.wait(BOUND)
    assert key.retire(RetireReason.PARKED)
    parked.set()
    for thread in threads:
        thread.join(BOUND)
        assert not thread.is_alive()
    assert late_permits == [] and key.limiter.state().in_flight == 0


def test_a_worker_waits_on_its_parked_key_and_sends_again_once_it_is_unparked():
    """A strike parks the key (one is enough here): its worker neither ends nor takes work; un-parked, it sends
    what waited, after the strike's hold, with nonces above the one the strike came to."""
    limiter = ThreadSafeRateLimiter(20, window=0.05, unanswered_hold=0.01, order_latency=0.0,
                                    nonces=NonceGenerator(clock=lambda: WALL))
    key = ApiKey(SECRET, limiter)
    queues = QueueManager(Graveyard(None), queue_size=10, ttl=60.0)
    transport = ScriptedTransport([rate_limited(), ok("r1"), ok("r2")])
    parked: list[str] = []
    policy = RetryPolicy(max_retries=3, backoff_base=0.001, backoff_cap=0.001, max_strikes=1, rng=random.Random(1))
    stop = threading.Event()
    worker = Worker(key, queues, transport, policy, OutageGate(), stop,
                    on_key_retired=lambda retired, detail: parked.append(detail))
    requeuer = Requeuer(queues)
    for thread in (worker, requeuer):
        thread.start()
    try:
        assert queues.submit(Request("r1", time.monotonic()))
        wait_for(lambda: key.retired_because is RetireReason.PARKED, timeout=BOUND)
        assert queues.submit(Request("r2", time.monotonic()))
        wait_for(lambda: queues.sizes()[0] == 2, timeout=BOUND)  # r1 back from its retry: neither is taken
        assert worker.is_alive() and len(transport.calls) == 1 and len(parked) == 1
        assert key.unpark()
        wait_for(lambda: queues.counts().accepted == 2, timeout=BOUND)
    finally:
        stop.set()
        queues.close()
        limiter.stop_taking()
        for thread in (worker, requeuer):
            thread.join(BOUND)
    assert not worker.is_alive() and worker.failure is None
    nonces = transport.nonces
    assert nonces == sorted(set(nonces)) and (key.strikes, key.lifetime_strikes) == (0, 1)
    transport.assert_played()


def test_a_strike_counted_before_an_unpark_does_not_park_the_key_again(tmp_path):
    """The key is parked (one strike is enough here); a send that left before the park reads a 429. While that
    strike is written down (the state file's fsync), the operator's un-park lands: a fresh budget, strikes 0.
    The strike was counted against the budget the un-park replaced: it parks nothing (the key's next strike
    does), or the command would answer ``sending`` and the key sit parked with 0 strikes."""
    daemon = daemon_of(tmp_path)
    daemon.policy = policy = RetryPolicy(max_strikes=1, strike_budget=4, backoff_base=0.001, backoff_cap=0.001,
                                         rng=random.Random(1))
    armed = threading.Event()

    def remember(total: int) -> int:  # the durable write of a strike: the operator's un-park lands meanwhile
        if armed.is_set():
            armed.clear()
            daemon.unpark_key(key)
        return total

    limiter = ThreadSafeRateLimiter(20, window=0.05, unanswered_hold=0.01, order_latency=0.0,
                                    nonces=NonceGenerator(clock=lambda: WALL))
    key = ApiKey(SECRET, limiter, remember_strikes=remember)

    def parked_by_another_thread(call):
        key.strike()  # another thread of the key read a 429 first: the key is parked
        assert key.retire(RetireReason.PARKED)
        armed.set()
        return rate_limited()  # ... and this send, out before the park, reads one too

    queues = QueueManager(Graveyard(None), queue_size=10, ttl=60.0)
    worker = Worker(key, queues, ScriptedTransport([parked_by_another_thread]), policy, OutageGate(),
                    threading.Event(), on_key_retired=lambda retired, detail: None)
    assert queues.submit(Request("r1", time.monotonic()))
    request = queues.take(5.0)
    bounded(lambda: worker._handle(request), on_hang=limiter.close)
    assert not armed.is_set(), "the un-park never ran"
    assert key.retired_because is None, (
        f"un-parked while the strike was written down, then parked again by that same strike: "
        f"{key.retired_because}, with {key.strikes} strikes this run")
    assert (key.strikes, key.lifetime_strikes) == (0, 2)  # the strike still counts in the key's life


# -- the daemon's side ---------------------------------------------------------------------------------------------


def test_the_operator_retires_keys_and_the_last_one_only_when_saying_so(tmp_path):
    daemon = daemon_of(tmp_path)
    *others, last = list(daemon.keys)
    for key in others:
        daemon.retire_key(key)
        assert key.retired_because is RetireReason.OPERATOR and not key.limiter.state().closed  # settles what is out
    with pytest.raises(KeyCommandRefused, match="already"):
        daemon.retire_key(others[0])
    others[0].resume()
    daemon.pause()
    daemon.resume()
    with pytest.raises(KeyPaused):  # no resume lifts a retirement
        others[0].limiter.acquire(0)
    with pytest.raises(KeyCommandRefused, match='"last": true'):
        daemon.retire_key(last)
    assert last.retired_because is None and daemon.stop_latch.reason is None
    daemon.retire_key(last, last=True)
    assert daemon.stop_latch.reason is StopReason.LAST_KEY_RETIRED and StopReason.LAST_KEY_RETIRED.exit_code == 3
    assert KeyCondition.of(last.retired_because, False, False) is KeyCondition.RETIRED


def test_a_parked_key_counts_as_not_sending_when_the_last_one_is_retired_and_may_be_retired_itself(tmp_path):
    daemon = daemon_of(tmp_path)
    first, second, *rest = list(daemon.keys)
    for key in rest:
        key.retire(RetireReason.KEY_BLOCKED)
    first.retire(RetireReason.PARKED)
    with pytest.raises(KeyCommandRefused, match="last key"):
        daemon.retire_key(second)
    daemon.retire_key(first)  # parked, then retired for good: the operator's
    assert first.retired_because is RetireReason.OPERATOR
    assert first.limiter.paused_by == {PausedBy.PARKED, PausedBy.RETIRED}  # still nothing at all leaves it


def test_only_a_key_parked_for_this_run_s_strikes_is_unparked_and_only_below_its_lifetime_budget(tmp_path):
    daemon = daemon_of(tmp_path)
    parked, sending, blocked, spent, retired = list(daemon.keys)
    parked.carry_strikes(daemon.policy.strike_budget - 1)
    parked.retire(RetireReason.PARKED)
    blocked.retire(RetireReason.KEY_BLOCKED)
    spent.carry_strikes(daemon.policy.strike_budget)
    spent.retire(RetireReason.PARKED)  # parked here, while another member's strikes spent its budget
    daemon.retire_key(retired)
    daemon.unpark_key(parked)
    assert parked.retired_because is None and PausedBy.PARKED not in parked.limiter.paused_by
    for key, why in ((sending, "not parked"), (blocked, "key_blocked"), (retired, "retired by the operator"),
                     (spent, "strike budget")):
        with pytest.raises(KeyCommandRefused, match=why):
            daemon.unpark_key(key)
    assert spent.retired_because is RetireReason.PARKED and blocked.retired_because is RetireReason.KEY_BLOCKED


def test_a_key_is_not_unparked_while_the_daemon_stops(tmp_path):
    daemon = daemon_of(tmp_path)
    key = next(iter(daemon.keys))
    key.retire(RetireReason.PARKED)
    daemon.request_stop(StopReason.DRAINED)
    with pytest.raises(KeyCommandRefused, match="stopping"):
        daemon.unpark_key(key)


def test_the_panel_answers_each_command_with_the_key_s_state_then(tmp_path):
    daemon = daemon_of(tmp_path)
    panel = DaemonPanel(daemon, ConsoleFeed(FakeClock()), None)
    first, second, *_ = list(daemon.keys)
    first.retire(RetireReason.PARKED)
    assert panel.unpark_key(first.id[:SHORT_ID]) in ("sending", "held")
    assert panel.retire_key(second.id[:SHORT_ID], last=False) == "retired"
    assert panel.retire_key("0" * SHORT_ID, last=False) is None and panel.unpark_key("0" * SHORT_ID) is None


def test_a_key_whose_lifetime_budget_is_spent_shows_blocked_and_no_command_is_offered_on_it(tmp_path):
    """Retired for good: ``blocked`` (its alert fires as for a key the server blocked), never ``parked``, whose
    row offers Un-park and Retire, both refused (409) every time."""
    daemon = daemon_of(tmp_path)
    panel = DaemonPanel(daemon, ConsoleFeed(FakeClock()), None)
    key = next(iter(daemon.keys))
    key.carry_strikes(daemon.policy.strike_budget)
    assert key.retire(RetireReason.STRIKE_BUDGET_SPENT)
    short = key.id[:SHORT_ID]
    for command in (panel.unpark_key, lambda short_id: panel.retire_key(short_id, last=False)):
        with pytest.raises(KeyCommandRefused):
            command(short)
    assert next(row["state"] for row in panel.status()["keys"] if row["id"] == short) == "blocked"


@pytest.mark.parametrize("by_operator, recorded", [(True, FinalOutcome.SHUTDOWN), (False, FinalOutcome.KEY_BLOCKED)],
                         ids=["operator", "server"])
def test_the_queued_work_is_recorded_shutdown_when_the_operator_retired_the_last_key(tmp_path, by_operator, recorded):
    """Every key retired stops the daemon (exit code 3) either way; what it had not sent is the server's doing
    (``key_blocked``) only when the server refused the last key, the operator's stop (``shutdown``) when the
    operator retired it."""
    daemon = daemon_of(tmp_path)
    *others, last = list(daemon.keys)
    for key in others:
        daemon.retire_key(key)
    assert daemon.queues.submit(Request("r1", time.monotonic()))
    if by_operator:
        daemon.retire_key(last, last=True)
    else:
        assert last.retire(RetireReason.KEY_BLOCKED)
        daemon._on_key_retired(last, "too many rate limit errors: blocked")
    summary = daemon.shutdown(join_timeout=BOUND)
    assert daemon.queues.graveyard.by_outcome() == {recorded.value: 1}
    assert summary.exit_code == 3

