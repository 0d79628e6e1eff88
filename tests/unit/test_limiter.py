"""ThreadSafeRateLimiter: the window rule never admits what the server would refuse; the order rule holds."""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from typing import Callable

import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import FakeClock
from thread_client.errors import KeyPaused, LimiterClosed, LimiterTimeout
from thread_client.limits.order_rule import InvalidNonceCost, OrderRule
from thread_client.limits.limiter import PausedBy, ThreadSafeRateLimiter
from thread_client.limits.nonces import NonceGenerator
from thread_client.limits.rules import LimitRule


def limiter(clock, rate=20, **kwargs) -> ThreadSafeRateLimiter:
    kwargs.setdefault("order_latency", 0.0)
    return ThreadSafeRateLimiter(rate, clock=clock, nonces=NonceGenerator(clock=lambda: 0), **kwargs)


def delay_of(lim: ThreadSafeRateLimiter) -> float:
    """Seconds until the limiter allows the next send, read from its public state."""
    return lim.state().ready_in


def waiting(call, probe: "WaitProbe") -> tuple[threading.Thread, list]:
    """``waiting_for`` until ``call`` waits in the limiter."""
    return waiting_for(call, probe.read_elsewhere)


class WaitProbe:
    """A real monotonic clock that tells when a thread other than the test's has read it.

    The limiter reads its clock with its lock held and keeps the lock until it
    waits on its condition, so once ``read_elsewhere`` is set, any call that takes
    the lock (``close``, ``release``) runs only after that thread is waiting.
    """

    def __init__(self) -> None:
        self.read_elsewhere = threading.Event()
        self._main = threading.get_ident()

    def __call__(self) -> float:
        if threading.get_ident() != self._main:
            self.read_elsewhere.set()
        return time.monotonic()


def test_rate_sends_then_the_deadline_is_known_to_pass_at_once(clock):
    lim = limiter(clock)
    permits = [lim.acquire(timeout=0) for _ in range(20)]
    assert len({p.nonce for p in permits}) == 20 and lim.state().in_flight == 20
    with pytest.raises(LimiterTimeout):
        lim.acquire(timeout=0.9)  # every slot is in flight: none can free before answer + 1.001 s


def test_slot_frees_one_window_after_the_answer(clock):
    lim = limiter(clock, rate=1)
    permit = lim.acquire(timeout=0)
    clock.advance(0.080)
    lim.release(permit, answered_at=clock())
    clock.advance(1.000)
    # The window (1.001 s), and a microsecond that keeps the float sum on the safe side of the server's millisecond.
    assert delay_of(lim) == pytest.approx(0.001001)
    with pytest.raises(LimiterTimeout) as refused:
        lim.acquire(timeout=0)
    assert refused.value.delay == pytest.approx(0.001001)
    clock.advance(0.001001)
    assert lim.acquire(timeout=0).nonce > permit.nonce


def test_unanswered_request_holds_its_slot_longer(clock):
    lim = limiter(clock, rate=1, unanswered_hold=1.0)
    lim.release(lim.acquire(timeout=0), answered_at=None)
    assert delay_of(lim) == pytest.approx(2.001)


def test_the_limiter_knows_until_when_the_sends_it_took_back_unanswered_may_be_stamped(clock):
    """What weighs in the server's limits beyond the sends in flight, which a stop must record: the latest
    unanswered hold; an answer or a cancel sets none."""
    lim = limiter(clock, unanswered_hold=1.0)
    assert lim.in_doubt() == (0, -math.inf)
    reset, answered = lim.acquire(timeout=0), lim.acquire(timeout=0)
    lim.release(reset, answered_at=None)
    clock.advance(0.5)
    lim.release(answered, answered_at=clock())
    lim.cancel(lim.acquire(timeout=0))
    assert lim.in_doubt() == (1, clock() - 0.5 + 1.0)
    clock.advance(0.5)
    assert lim.in_doubt() == (0, -math.inf)  # past: it can no longer be stamped


def test_sends_an_earlier_run_left_in_doubt_are_counted_until_they_can_land_and_the_key_sends_with_the_rest(clock):
    """A key of 20 a window with 6 sends of its last run in doubt sends 14 a window until they are past (it once
    sent nothing until then); more than its rules can take now, and the caller holds it instead."""
    lim = limiter(clock, rate=20, window=1.0)
    assert lim.expect_late_stamps(6, clock() + 30.0)
    assert lim.in_doubt() == (6, clock() + 30.0)
    sent = 0
    while lim.wait_ready(timeout=0):
        lim.release(lim.acquire(timeout=0), clock(), accepted=True)
        sent += 1
    assert sent == 14
    clock.advance(30.0 + 1.0 + 0.01)
    assert lim.state().remaining == (("--rate per --window-ms", 20),)
    assert not limiter(clock, rate=5, window=1.0).expect_late_stamps(6, clock() + 30.0)


def test_order_rule_waits_for_the_answer_or_the_order_latency(clock):
    lim = limiter(clock, order_latency=0.055)
    first = lim.acquire(timeout=0)
    assert delay_of(lim) == pytest.approx(0.055)
    with pytest.raises(LimiterTimeout):  # only the order gate blocks: a zero timeout is refused, not spun on
        lim.acquire(timeout=0)
    clock.advance(0.020)
    lim.release(first, answered_at=clock())  # answered: the next may go at once
    second = lim.acquire(timeout=0)
    assert second.nonce > first.nonce and second.sequence == first.sequence + 1
    clock.advance(0.055)  # unanswered, but the order latency has passed
    assert lim.acquire(timeout=0).sequence == 3


def test_an_older_answer_does_not_open_the_order_gate(clock):
    lim = limiter(clock, order_latency=0.055)
    first = lim.acquire(timeout=0)
    clock.advance(0.055)
    lim.acquire(timeout=0)
    lim.release(first, answered_at=clock())
    assert delay_of(lim) == pytest.approx(0.055)


class CountingRule(OrderRule):
    def __init__(self) -> None:
        super().__init__(0.05)
        self.refusals = 0

    def refused(self) -> None:
        self.refusals += 1
        super().refused()


def test_an_invalid_nonce_skips_nonces_ahead_and_is_told_to_the_order_rule(clock):
    rule = CountingRule()
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.05, order_rule=rule,
                                nonces=NonceGenerator(clock=lambda: 100))
    last = lim.acquire(timeout=0).nonce
    assert lim.note_invalid_nonce() == lim.note_invalid_nonce() == 0.05  # the gap is the rule's, not widened
    assert rule.refusals == 2
    clock.advance(1)
    assert lim.acquire(timeout=0).nonce > last + 1000 + 2000


def test_a_strike_holds_the_key_a_window_plus_the_unanswered_hold_and_widens_it(clock):
    lim = limiter(clock, unanswered_hold=0.5)
    window = lim.note_rate_limited()
    assert window > 1.001
    assert delay_of(lim) == pytest.approx(1.001 + 0.5)
    assert lim.state().held


def test_accepted_answers_reset_the_skip_ahead(clock):
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.05, nonces=NonceGenerator(clock=lambda: 100))
    for _ in range(3):
        lim.note_invalid_nonce()
    before = lim.acquire(timeout=0)
    lim.release(before, answered_at=clock(), accepted=True)  # in step again: the next skip is small
    lim.note_invalid_nonce()
    clock.advance(2)
    after_skip = lim.acquire(timeout=0)
    assert after_skip.nonce - before.nonce < 2_000  # a 1 ms skip again, not the 8 ms of a fourth doubling


def test_the_order_gap_is_the_rules_and_each_answered_first_send_teaches_it(clock):
    rule = OrderRule(0.2, warm_up=4, every=4)
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.2, order_rule=rule)
    for _ in range(8):  # answers 10 ms after each send: nothing can overtake a send more than 10 ms later
        permit = lim.acquire(timeout=0)
        clock.advance(0.010)
        lim.release(permit, answered_at=clock(), accepted=True)
        clock.advance(0.5)
    # Learnt: no longer than the slots' pace (20 per 1.011 s), where the start was four times that.
    assert rule.gap <= 1.011 / 20 + 0.001 and lim.state().order_latency == rule.gap
    first = lim.acquire(timeout=0)
    assert delay_of(lim) == pytest.approx(rule.gap)
    resend = lim.acquire(timeout=0, resend_of=first)
    lim.release(resend, answered_at=clock() + 5)  # a resend's round trip says nothing of the host's latency
    assert rule.samples == 8


@pytest.mark.parametrize("lost", ["no-answer", "late-sign", "no-sign"])
def test_a_send_whose_answer_never_comes_holds_the_order_gate_no_longer_than_its_hold(clock, lost):
    """At-least-once under an order rule that waits for every answer (invalid nonces counted, not yet learnt: the
    Kraken-like example): a send whose answer is lost is stamped by the end of its hold if ever, and no later
    nonce can overtake it after that. The gate opened then; it stayed shut for good before."""
    rule = OrderRule(0.2, cost=InvalidNonceCost.COUNTED)
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.2, order_rule=rule, unanswered_hold=1.0)
    assert rule.gap == math.inf
    permit = lim.acquire(timeout=0)
    if lost == "no-answer":  # the connection closed after the bytes left
        lim.release(permit, answered_at=None)
    else:  # a timeout, then the watch's end: a sign of the server's read, or none within its cap
        lim.release_late(permit, sign_seen=lost == "late-sign")
    assert delay_of(lim) <= 1.0
    clock.advance(1.0)
    assert lim.wait_ready(timeout=0) and lim.acquire(timeout=0) is not None


def test_one_request_in_flight_per_key_ignores_the_rule(clock):
    rule = OrderRule(0.001, warm_up=1, every=1)
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=math.inf, order_rule=rule)
    lim.acquire(timeout=0)
    assert delay_of(lim) == math.inf


def test_timeout_is_raised_when_the_deadline_passes_while_waiting():
    lim = ThreadSafeRateLimiter(1, window=0.5, order_latency=0.0)
    lim.release(lim.acquire(), answered_at=time.monotonic())
    with pytest.raises(LimiterTimeout):
        lim.acquire(timeout=0.05)


def test_close_wakes_waiters_and_refuses_new_ones():
    probe = WaitProbe()
    lim = ThreadSafeRateLimiter(1, window=60, order_latency=0.0, clock=probe)
    lim.release(lim.acquire(), answered_at=probe())
    waiter, outcome = waiting(lim.acquire, probe)
    assert waiter.is_alive() and outcome == []  # blocked: the only slot is 60 s away
    lim.close()
    waiter.join(5)
    assert not waiter.is_alive() and len(outcome) == 1 and isinstance(outcome[0], LimiterClosed)
    with pytest.raises(LimiterClosed):
        lim.acquire(timeout=0)


def test_a_pause_hands_back_at_once_what_a_waiter_for_a_fresh_permit_holds():
    """A worker waiting in ``acquire`` holds its request: the pause must send it back to the queue now (KeyPaused,
    the other keys take it), not once the slot it waits for frees (here a minute away)."""
    probe = WaitProbe()
    lim = ThreadSafeRateLimiter(1, window=60, order_latency=0.0, clock=probe)
    lim.release(lim.acquire(), answered_at=probe())
    waiter, outcome = waiting(lim.acquire, probe)
    assert waiter.is_alive() and outcome == []  # blocked: the only slot is 60 s away
    lim.pause(PausedBy.OPERATOR)
    waiter.join(5)
    still_waiting = waiter.is_alive()
    lim.close()  # frees the waiter if the pause did not
    waiter.join(5)
    assert not still_waiting, "the pause left the waiter waiting for its slot"
    assert len(outcome) == 1 and isinstance(outcome[0], KeyPaused)


def test_a_waiting_key_never_stalls_another_key():
    probe = WaitProbe()
    busy = ThreadSafeRateLimiter(1, window=60, order_latency=0.0, name="busy", clock=probe)
    free = ThreadSafeRateLimiter(1, window=60, order_latency=0.0, name="free")
    busy.release(busy.acquire(), answered_at=probe())
    waiter, outcome = waiting(busy.acquire, probe)
    assert free.acquire(timeout=0).sequence == 1  # would raise LimiterTimeout if a lock were held across the wait
    busy.close()
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], LimiterClosed)


def test_waiter_is_woken_by_a_release():
    probe = WaitProbe()
    lim = ThreadSafeRateLimiter(2, window=0.2, order_latency=10.0, clock=probe)
    first = lim.acquire()
    waiter, got = waiting(lambda: lim.acquire(timeout=5), probe)
    assert got == []  # blocked on the order gate, 10 s away
    lim.release(first, answered_at=probe())  # opens the order gate early
    waiter.join(5)
    assert not waiter.is_alive() and got[0].sequence == 2


def test_many_threads_on_one_limiter_never_overfill_the_window():
    """Real threads, real clock: the stamps a server would take never break its ring rule."""
    rate, window, threads, per_thread = 5, 0.02, 8, 15
    lim = ThreadSafeRateLimiter(rate, window=window, order_latency=0.0)
    stamps: list[float] = []
    stamps_lock = threading.Lock()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(per_thread):
            permit = lim.acquire(timeout=10)
            stamp = time.monotonic()  # the server stamps between send and answer
            with stamps_lock:
                stamps.append(stamp)
            for _ in range(rng.randint(0, 200)):  # a little work between send and answer, varied per thread
                pass
            lim.release(permit, answered_at=time.monotonic())

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
        assert not worker.is_alive()
    assert len(stamps) == threads * per_thread
    assert lim.state().in_flight == 0
    stamps.sort()
    for i in range(rate, len(stamps)):
        assert stamps[i] - stamps[i - rate] >= window


def server_refusals(stamps_ms: list[int], rate: int) -> int:
    """The reference server's ring rule, replayed over its stamps in the order it took them."""
    ring, index, refused = [0] * rate, 0, 0
    for now in sorted(stamps_ms):
        if now - ring[index] > 1000:
            ring[index] = now
            index = (index + 1) % rate
        else:
            refused += 1
    return refused


# Latencies lean to the extremes: the worst cases (an answer with no outgoing delay followed by a
# send with no incoming one; a slow request followed by a fast one) live there.
latency_ms = st.one_of(st.sampled_from([0, 50, 56]), st.integers(0, 56))


@settings(max_examples=80, deadline=None)
@given(
    rate=st.integers(1, 20),
    concurrency=st.integers(1, 3),
    epoch_fraction=st.floats(0, 0.999),
    latencies=st.lists(st.tuples(latency_ms, latency_ms, st.floats(0, 0.0009)), min_size=1, max_size=120),
    learnt=st.booleans(),
)
def test_admitted_stream_never_breaks_the_server_rule(rate, concurrency, epoch_fraction, latencies, learnt):
    """Virtual time: each send is stamped after an incoming delay (worst case up to 56 ms, more than the
    contract's 50) and answered after an outgoing one; the server's integer-ms ring never refuses, and
    nonces leave in the order they are drawn. With a fixed order latency above the largest incoming
    delay the stamps also come in send (= nonce) order; a learnt gap may bet on that, never on the ring."""
    clock = FakeClock(start=50.0)
    rule = OrderRule(0.057, warm_up=4, every=4) if learnt else None
    lim = ThreadSafeRateLimiter(rate, clock=clock, order_latency=0.057, order_rule=rule,
                                nonces=NonceGenerator(clock=lambda: 0))
    in_flight: list[tuple[float, object]] = []
    stamps: list[tuple[float, int]] = []
    for incoming, outgoing, jitter in latencies:
        while True:
            in_flight.sort(key=lambda item: item[0])
            while in_flight and in_flight[0][0] <= clock():
                answered_at, permit = in_flight.pop(0)
                lim.release(permit, answered_at)
            delay = delay_of(lim)
            if len(in_flight) < concurrency and delay == 0:
                break
            candidates = [in_flight[0][0]] if in_flight else []
            if len(in_flight) < concurrency and delay != float("inf"):
                candidates.append(clock() + delay)
            clock.now = min(candidates)
        permit = lim.acquire(timeout=0)
        stamp = clock() + incoming / 1000 + jitter
        stamps.append((stamp, permit.nonce))
        in_flight.append((stamp + outgoing / 1000, permit))
    stamps_ms = [int((stamp + epoch_fraction) * 1000) for stamp, _ in stamps]
    assert server_refusals(stamps_ms, rate) == 0
    nonces_by_send = [nonce for _, nonce in stamps]
    assert all(a < b for a, b in zip(nonces_by_send, nonces_by_send[1:]))
    if not learnt:
        nonces_by_arrival = [nonce for _, nonce in sorted(stamps)]
        assert nonces_by_arrival == sorted(nonces_by_arrival)


def test_a_resend_reuses_its_nonce_and_place_and_passes_only_its_own_order_gate(clock):
    lim = limiter(clock, rate=2, order_latency=float("inf"))  # one send in flight: the gate opens on an answer only
    first = lim.acquire(timeout=0)
    lim.release(first, answered_at=None)  # no answer: its fate is unknown, the gate stays shut
    with pytest.raises(LimiterTimeout):
        lim.acquire(timeout=0)
    again = lim.acquire(timeout=0, resend_of=first)
    assert (again.nonce, again.sequence, again.resend) == (first.nonce, first.sequence, True)
    with pytest.raises(LimiterTimeout):  # the first copy may have spent its slot: it stays held, the resend the other
        lim.acquire(timeout=0, resend_of=first)
    lim.cancel(again)  # the resend never left (refused): the gate still waits on the first copy
    with pytest.raises(LimiterTimeout):
        lim.acquire(timeout=0)
    settled = lim.acquire(timeout=0, resend_of=first)
    lim.release(settled, answered_at=clock(), accepted=True)  # a definite answer opens the gate
    clock.advance(1.002)  # and its slot frees a window later
    assert lim.acquire(timeout=0).nonce > first.nonce


@settings(max_examples=60, deadline=None)
@given(
    rate=st.integers(1, 20),
    concurrency=st.integers(1, 3),
    epoch_fraction=st.floats(0, 0.999),
    sends=st.lists(st.tuples(latency_ms, latency_ms, st.none() | st.floats(0, 10)), min_size=1, max_size=120),
)
# A fresh clone's CI run drew it: the window summed to a float one ulp short of the server's whole millisecond.
@example(rate=2, concurrency=1, epoch_fraction=0.0, sends=[(0, 0, None), (50, 0, None), (0, 0, None), (0, 0, None)])
def test_sends_unanswered_in_time_and_stamped_at_any_thaw_never_break_the_server_rule(
        rate, concurrency, epoch_fraction, sends):
    """A send with a thaw (None: answered in time) meets a frozen server: no answer within the timeout, the
    worker moves on, and the server stamps the request whenever it thaws, ``thaw`` seconds after the timeout;
    the first byte of its late answer then comes on its connection, the one sign the slot waits for
    (``release_late``). The ring never refuses, however the thaws fall."""
    timeout = 1.0
    clock = FakeClock(start=50.0)
    lim = ThreadSafeRateLimiter(rate, clock=clock, order_latency=0.057, unanswered_hold=timeout,
                                nonces=NonceGenerator(clock=lambda: 0))
    due: list[tuple[float, int, Callable[[], None]]] = []  # (when, order, what the client learns then)
    busy: list[float] = []  # when each busy worker is free again
    stamps: list[float] = []
    for order, (incoming, outgoing, thaw) in enumerate(sends):
        while True:
            due.sort(key=lambda event: event[:2])
            while due and due[0][0] <= clock():
                due.pop(0)[2]()
            busy = [until for until in busy if until > clock()]
            delay = delay_of(lim)
            if len(busy) < concurrency and delay == 0:
                break
            candidates = [due[0][0]] if due else []
            candidates += [min(busy)] if busy else []
            if len(busy) < concurrency and delay != float("inf"):
                candidates.append(clock() + delay)
            clock.now = min(candidates)
        permit = lim.acquire(timeout=0)
        sent = clock()
        if thaw is None:
            stamp = sent + incoming / 1000
            answered = stamp + outgoing / 1000
            due.append((answered, order, lambda permit=permit, at=answered: lim.release(permit, at)))
            busy.append(answered)
        else:
            stamp = sent + timeout + thaw
            sign = stamp + outgoing / 1000
            due.append((sign, order, lambda permit=permit: lim.release_late(permit, sign_seen=True)))
            busy.append(sent + timeout)  # the worker gives up and takes the next request
        stamps.append(stamp)
    assert server_refusals([int((stamp + epoch_fraction) * 1000) for stamp in stamps], rate) == 0


class GatedReserve:
    """A nonce block reservation that blocks until ``go`` is set once it has been asked for ``gated_from`` or
    above (as a mark on a slow disk does); ``durable`` lists the marks made, in order."""

    def __init__(self, gated_from: int, size: int = 100) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.durable: list[int] = []
        self._gated_from = gated_from
        self._size = size

    def __call__(self, wanted: int) -> tuple[int, int]:
        if wanted >= self._gated_from:
            self.entered.set()
            assert self.go.wait(30)  # set by the test, or its own bound (5 s) has long failed it
        self.durable.append(wanted + self._size)
        return wanted, wanted + self._size


def test_a_nonce_block_is_reserved_outside_the_limiters_lock(clock):
    wall = [1_000]
    reserve = GatedReserve(gated_from=1_101)
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.0,
                                nonces=NonceGenerator(clock=lambda: wall[0], reserve=reserve))
    first = lim.acquire(timeout=0)
    assert first.nonce == 1_000 and reserve.durable == [1_100]
    wall[0] = 1_500  # past the block: the next nonce needs a mark first, and the disk is slow
    drawing, drawn = waiting_for(lambda: lim.acquire(timeout=5), reserve.entered)
    try:
        others = threading.Thread(target=lambda: (lim.release(first, answered_at=clock()), lim.state()))
        others.start()
        others.join(5)
        assert not others.is_alive()  # a release and a status read pass while the mark is written
        assert drawn == [] and lim.state().in_flight == 0  # and nothing was handed out before it is durable
    finally:
        reserve.go.set()
    drawing.join(5)
    assert not drawing.is_alive()
    [second] = drawn
    assert second.nonce == 1_500 and second.nonce <= reserve.durable[-1]


def waiting_for(call, entered: threading.Event) -> tuple[threading.Thread, list]:
    """Run ``call`` in a thread that records what it returns or raises; return once ``entered`` is set."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(5)
    return thread, outcome


class SendCountingRule(OrderRule):
    """An order rule that keeps every send it is told of (what ``sent`` was called with)."""

    def __init__(self) -> None:
        super().__init__(0.05)
        self.sends: list[float | None] = []

    def sent(self, after_unanswered: float | None) -> None:
        self.sends.append(after_unanswered)
        super().sent(after_unanswered)


def test_a_cancelled_permit_is_no_send_to_the_order_rule(clock):
    rule = SendCountingRule()
    lim = ThreadSafeRateLimiter(20, clock=clock, order_latency=0.05, order_rule=rule,
                                nonces=NonceGenerator(clock=lambda: 100))
    lim.cancel(lim.acquire(timeout=0))  # never left (connection refused, the journal failed)
    assert rule.sends == []
    first = lim.acquire(timeout=0)
    clock.advance(rule.gap)
    second = lim.acquire(timeout=0)  # the first one still unanswered
    lim.release(second, answered_at=clock())
    lim.release(first, answered_at=None)
    assert rule.sends == [pytest.approx(rule.gap), None]  # each counted once given back: it surely left


def test_sends_in_doubt_are_counted_in_usual_sends_by_what_they_weigh(clock):
    """Three sends of weight 5 in doubt weigh 15 of a ring of 20: counted as three usual sends, the next run would
    send 17 at once (32 of 20). Each counts as the usual sends it weighs at most in any rule; one that spends of a
    rule the usual send does not (a status endpoint's own limit) is no count of usual sends at all: the next run
    holds the key instead."""
    rule = dataclasses.replace(LimitRule.ring(20, 1.0), cost="weight")
    asks = LimitRule("status asks", "rolling-window", limit=5, period_ms=1000, cost=(("GET /api/order", 1),))
    lim = ThreadSafeRateLimiter(rules=[(rule.new_state(), rule), (asks.new_state(), asks)], clock=clock,
                                unanswered_hold=1.0, order_latency=0.0, nonces=NonceGenerator(clock=lambda: 0),
                                endpoint="GET /api/request")
    lim.release(lim.acquire(timeout=0, costs=lim.costs_of("", 5)), answered_at=None)
    assert lim.in_doubt()[0] == 5
    lim.acquire(timeout=0, costs=lim.costs_of("", 3))  # in flight at the stop
    assert lim.in_doubt()[0] == 8
    clock.advance(1.01)
    assert lim.in_doubt() == (3, -math.inf)
    lim.acquire(timeout=0, costs=lim.costs_of("GET /api/order", 1))
    assert lim.in_doubt()[0] is None
