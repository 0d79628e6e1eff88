"""A worker survives an unexpected exception: traceback logged, slot given back, request retried."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable

import pytest
from conftest import FakeClock, wait_for
from thread_client.limits.rules import LimitRule
from thread_client.limits.scopes import RuleScopes
from thread_client.limits.keys import ApiKey
from thread_client.io.graveyard import Graveyard
from thread_client.observe.metrics import Metrics
from thread_client.policy.retry import RetryPolicy
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.request import Request
from thread_client.parts import Answer
from thread_client.flow.requeue import Requeuer
from thread_client.flow.worker import Worker


class FlakyTransport:
    """Raises a bug-like exception on the first call, answers 200 OK after."""

    def __init__(self) -> None:
        self.calls = 0

    def connect(self) -> None:
        """Nothing to open."""

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("bug in the transport")
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def stop_all(queues: QueueManager, key: ApiKey, *threads: threading.Thread) -> None:
    """Stop as the daemon does: no more work taken (each waiter wakes at once), then join with a timeout."""
    queues.close()
    key.limiter.stop_taking()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


def started(*threads: threading.Thread) -> tuple[threading.Thread, ...]:
    for thread in threads:
        thread.start()
    return threads


def new_key() -> ApiKey:
    return ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0))


def test_worker_survives_an_unexpected_exception(caplog):
    queues = QueueManager(Graveyard(None), queue_size=10)
    key = new_key()
    transport = FlakyTransport()
    worker = Worker(key, queues, transport, RetryPolicy(max_retries=3, backoff_base=0.01), OutageGate(),
                    threading.Event())
    for req_id in (1, 2, 3):
        queues.submit(Request(str(req_id), time.monotonic()))
    with caplog.at_level(logging.ERROR):
        threads = started(worker, Requeuer(queues))
        wait_for(lambda: queues.counts().accepted == 3, timeout=20)
        stop_all(queues, key, *threads)
    assert worker.failure is None
    counts = queues.counts()
    assert (counts.accepted, counts.graveyard, counts.in_flight, counts.balanced) == (3, 0, 0, True)
    assert transport.calls == 4
    assert key.limiter.state().in_flight == 0  # the slot of the failed send was given back
    error = next(r for r in caplog.records if "the transport failed" in r.getMessage())
    assert error.exc_info is not None and "bug in the transport" in str(error.exc_info[1])


class BrokenMetrics(Metrics):
    """Fails once right after a request was accepted, i.e. after it was routed."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def accepted(self, end_to_end: float) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("bug after the request was routed")
        super().accepted(end_to_end)


class AlwaysOk:
    def connect(self) -> None:
        """Nothing to open."""

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def test_an_error_after_a_request_was_routed_does_not_route_it_again():
    queues = QueueManager(Graveyard(None), queue_size=10)
    key = new_key()
    metrics = BrokenMetrics()
    worker = Worker(key, queues, AlwaysOk(), RetryPolicy(), OutageGate(), threading.Event(), listener=metrics)
    for req_id in ("1", "2"):
        queues.submit(Request(req_id, time.monotonic()))
    threads = started(worker, Requeuer(queues))
    wait_for(lambda: queues.counts().accepted == 2, timeout=20)
    stop_all(queues, key, *threads)
    assert metrics.failed
    counts = queues.counts()
    assert (counts.created, counts.accepted, counts.graveyard, counts.in_flight, counts.dlq) == (2, 2, 0, 0, 0)
    assert counts.balanced


class WatchedLimiter(ThreadSafeRateLimiter):
    """A limiter that tells when a thread first sleeps in it (waiting for the key to be able to send)."""

    def __init__(self) -> None:
        super().__init__(20, order_latency=0.0)
        self.slept = threading.Event()

    def _wait(self, delay: float, deadline: float, now: float) -> float:
        self.slept.set()
        return super()._wait(delay, deadline, now)


def worker_on_a_held_key(hold: float) -> tuple[QueueManager, ApiKey, Metrics, tuple[threading.Thread, ...]]:
    """A worker and the requeue thread running, for a key held ``hold`` seconds and one request waiting."""
    queues = QueueManager(Graveyard(None), queue_size=10, ttl=0.05)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", WatchedLimiter())
    key.limiter.hold(hold)
    metrics = Metrics()
    worker = Worker(key, queues, AlwaysOk(), RetryPolicy(), OutageGate(), threading.Event(), listener=metrics)
    queues.submit(Request("1", time.monotonic()))
    return queues, key, metrics, started(worker, Requeuer(queues))


def test_a_held_key_takes_no_work_and_nothing_expires_while_it_waits():
    # A key held far longer than a request's time-to-live (a Retry-After, the hold after a strike) used to
    # take the request, find at once that no slot could free in time, count it expired and take it again,
    # thousands of times a second. Now its worker takes nothing until the key can send.
    queues, key, metrics, threads = worker_on_a_held_key(60)
    # The old worker never slept in the limiter: it raised at once, counted an expiry and took the request again.
    slept = key.limiter.slept.wait(10)
    counts, snapshot = queues.counts(), metrics.snapshot()
    stop_all(queues, key, *threads)
    assert slept and snapshot.expired == 0 and snapshot.outcomes == {}
    assert (counts.main_queue, counts.in_flight, counts.dlq) == (1, 0, 0)  # never taken: it waits for a key that can send


def test_a_key_whose_hold_ends_takes_the_waiting_work_and_sends_it():
    queues, key, metrics, threads = worker_on_a_held_key(0.2)
    wait_for(lambda: queues.counts().accepted == 1, timeout=10)
    stop_all(queues, key, *threads)
    assert metrics.snapshot().expired == 0


class NestedBody:
    """Answers 200 with a body nested so deep that a JSON parser gives up, then the contract's OK."""

    def __init__(self) -> None:
        self.calls = 0

    def connect(self) -> None:
        """Nothing to open."""

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        self.calls += 1
        if self.calls == 1:
            return Answer(200, b"[" * 100_000, None)
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


class FailingJournal:
    """A send journal whose first write fails (a full disk, a store that refuses writes)."""

    def __init__(self) -> None:
        self.lines = 0

    def sending(self, request: Request, key: str, nonce: int) -> None:
        self.lines += 1
        if self.lines == 1:
            raise OSError(28, "No space left on device")


@pytest.mark.parametrize("transport, journal", [(NestedBody(), None), (AlwaysOk(), FailingJournal())],
                         ids=["a body nested too deep to parse", "a journal write that fails"])
def test_every_permit_is_given_back_whatever_raises_after_it_was_taken(transport, journal):
    queues = QueueManager(Graveyard(None), queue_size=10)
    key = new_key()
    worker = Worker(key, queues, transport, RetryPolicy(backoff_base=0.01), OutageGate(), threading.Event(),
                    journal=journal)
    queues.submit(Request("1", time.monotonic()))
    threads = started(worker, Requeuer(queues))
    wait_for(lambda: queues.counts().accepted == 1, timeout=10)
    stop_all(queues, key, *threads)
    assert worker.failure is None and queues.counts().balanced
    assert key.limiter.state().in_flight == 0  # the slot of the attempt that raised was given back


def test_a_lease_that_ends_after_the_permit_was_taken_stops_the_send_before_its_bytes_leave():
    answers = iter([True, False])  # held when the permit came; gone by the time the bytes would leave

    def may_send() -> bool:
        return next(answers, False)

    queues = QueueManager(Graveyard(None), queue_size=10)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0), may_send)
    transport = FlakyTransport()
    worker = Worker(key, queues, transport, RetryPolicy(), OutageGate(), threading.Event())
    queues.submit(Request("1", time.monotonic()))
    request = queues.take(timeout=0)
    worker._handle(request)  # on this thread: the one send, decided step by step
    assert transport.calls == 0 and key.limiter.state().in_flight == 0
    counts = queues.counts()
    assert (counts.dlq, counts.in_flight, counts.accepted) == (1, 0, 0)  # handed back, at no cost


class GatedTransport:
    """Each send waits until the test opens the gate; counts the sends in flight at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self._lock = threading.Lock()
        self.active = self.most_active = self.returned = 0

    def connect(self) -> None:
        """Nothing to open."""

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        if on_sent is not None:
            on_sent()
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.gate.wait(10)
        with self._lock:
            self.active -= 1
            self.returned += 1
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def _where(thread: threading.Thread) -> set[str]:
    """The names of the functions ``thread`` is in now, innermost first."""
    frame, names = sys._current_frames().get(thread.ident), set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names


def test_a_key_s_threads_take_turns_one_waits_for_the_next_send_the_others_send_or_park():
    """Four threads on a key that may send at once all get their sends in flight (each passes the turn on with
    its permit); once the key is held, one of them waits in its limiter and the other three are parked on the
    turn, where no change of the limiter wakes them."""
    queues = QueueManager(Graveyard(None), queue_size=20)
    key, transport, stopping = new_key(), GatedTransport(), threading.Event()
    workers = [Worker(key, queues, transport, RetryPolicy(), OutageGate(), stopping, index=n)
               for n in range(4)]
    for req_id in range(8):
        queues.submit(Request(str(req_id), time.monotonic()))
    started(*workers)
    wait_for(lambda: transport.active == 4)
    key.limiter.hold(60)  # nothing more may leave: the next send's waiter waits in the limiter
    transport.gate.set()
    wait_for(lambda: transport.returned == 4 and all(
        {"_take_turn", "wait_ready"} & _where(worker) for worker in workers))
    places = [_where(worker) for worker in workers]
    assert sum("wait_ready" in place for place in places) == 1
    assert sum("_take_turn" in place for place in places) == 3
    assert transport.most_active == 4
    stop_all(queues, key, *workers)
    assert queues.counts().accepted == 4


class AcceptingTransport(FlakyTransport):
    """Answers every send 200 OK."""

    def send(self, nonce: int, req_id: str, params=None, method: str = "", path: str = "", on_sent=None) -> Answer:
        self.calls += 1
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)


def test_a_request_costlier_than_the_usual_one_waits_in_the_dlq_for_room_not_in_a_loop_of_takes():
    """The key is ready for a usual send (it costs nothing of the orders limit) but an order finds no room
    within its time-to-live: it waits in the DLQ until the room may come back, and the key's worker does not
    take it again and again meanwhile (a fresh-context review measured 70000 takes in 3 s). Time stands still
    here, so only a loop of takes could make more than one try of the second order."""
    clock = FakeClock(start=100.0)
    orders = LimitRule("orders", "rolling-window", limit=2, period_ms=60_000, cost=(("POST /api/order", 2),))
    scopes = RuleScopes((orders,), endpoint="GET /api/request", endpoints=("POST /api/order",))
    limiter = ThreadSafeRateLimiter(name="key", rules=scopes.states_of(), order_latency=0.0,
                                    endpoint="GET /api/request", clock=clock)
    tries = []
    acquire = limiter.acquire
    limiter.acquire = lambda *args, **kwargs: tries.append(1) or acquire(*args, **kwargs)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", limiter)
    queues = QueueManager(Graveyard(None), queue_size=10, clock=clock)
    transport = AcceptingTransport()
    worker = Worker(key, queues, transport, RetryPolicy(), OutageGate(), threading.Event(), clock=clock)
    for req_id in ("order-1", "order-2"):
        queues.submit(Request(req_id, clock(), method="POST", path="/api/order"))
    threads = started(worker, Requeuer(queues))
    wait_for(lambda: transport.calls == 1 and queues.counts().dlq == 1)
    stop_all(queues, key, *threads)
    assert len(tries) == 2  # the first order, and one try of the second


class SpiedTurn:
    """A key's turn that tells when a thread has to wait for it (another holds it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waited = threading.Event()

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self._lock.acquire()
        return True

    def release(self) -> None:
        self._lock.release()


class SlowFirstBuild:
    """A transport whose first request takes long to build (a slow signing hook, a preempted thread): it is
    built only once the key's second request has left or is waiting for the key's turn. Records the nonces
    in the order their bytes left, across the key's threads."""

    def __init__(self, turn: SpiedTurn) -> None:
        self._turn = turn
        self.left: list[int] = []
        self._second_left = threading.Event()

    def connect(self) -> None:
        """Nothing to open."""

    def send(self, nonce: int, req_id: str, params=None, method: str = "", path: str = "", on_sent=None) -> Answer:
        if req_id == "first":
            wait_for(lambda: self._second_left.is_set() or self._turn.waited.is_set())
        self.left.append(nonce)
        if req_id != "first":
            self._second_left.set()
        if on_sent is not None:
            on_sent()
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def test_a_later_nonce_of_the_key_never_leaves_before_an_earlier_one_built_slowly():
    """Two threads of a key, no gap between sends: the first request's build is slow. Its nonce was drawn
    first, so its bytes must leave first: the key's turn passes on only once they left (before, another
    thread's later nonce left first and the server refused the earlier one)."""
    queues = QueueManager(Graveyard(None), queue_size=10)
    key, stopping = new_key(), threading.Event()
    key.turn = turn = SpiedTurn()
    transport = SlowFirstBuild(turn)
    workers = [Worker(key, queues, transport, RetryPolicy(), OutageGate(), stopping, index=n) for n in range(2)]
    for req_id in ("first", "second"):
        queues.submit(Request(req_id, time.monotonic()))
    started(*workers)
    wait_for(lambda: queues.counts().accepted == 2)
    stop_all(queues, key, *workers)
    assert transport.left == sorted(transport.left) and len(transport.left) == 2
