"""A worker survives an unexpected exception: traceback logged, slot given back, request retried."""

from __future__ import annotations

import logging
import threading
import time

from thread_client.limits.keys import ApiKey
from thread_client.io.graveyard import Graveyard
from thread_client.observe.metrics import Metrics
from thread_client.policy.retry import RetryPolicy
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.request import Request
from thread_client.parts import Answer
from thread_client.flow.worker import Worker


class FlakyTransport:
    """Raises a bug-like exception on the first call, answers 200 OK after."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, nonce: int, req_id: str, params: dict[str, str] | None = None) -> Answer:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("bug in the transport")
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def test_worker_survives_an_unexpected_exception(caplog):
    queues = QueueManager(Graveyard(None), queue_size=10)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0))
    stop = threading.Event()
    transport = FlakyTransport()
    worker = Worker(key, queues, transport, RetryPolicy(max_retries=3, backoff_base=0.01), OutageGate(), stop,
                    poll=0.05)
    for req_id in (1, 2, 3):
        now = time.monotonic()
        queues.submit(Request(str(req_id), now), stop)
    with caplog.at_level(logging.ERROR):
        worker.start()
        deadline = time.monotonic() + 20
        while queues.counts().accepted < 3 and time.monotonic() < deadline:
            queues.requeue_ready(stop, timeout=0.05)  # plays the DLQ-requeue thread
        stop.set()
        worker.join(5)
    assert not worker.is_alive() and worker.failure is None
    counts = queues.counts()
    assert (counts.accepted, counts.graveyard, counts.in_flight, counts.balanced) == (3, 0, 0, True)
    assert transport.calls == 4
    assert key.limiter.state().in_flight == 0  # the slot of the failed send was given back
    error = next(r for r in caplog.records if "unexpected error" in r.getMessage())
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
    def send(self, nonce: int, req_id: str, params: dict[str, str] | None = None) -> Answer:
        return Answer(200, f'{{"status": "OK", "req_id": "{req_id}"}}'.encode(), None)

    def close(self) -> None:
        pass


def test_an_error_after_a_request_was_routed_does_not_route_it_again():
    queues = QueueManager(Graveyard(None), queue_size=10)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0))
    stop = threading.Event()
    metrics = BrokenMetrics()
    worker = Worker(key, queues, AlwaysOk(), RetryPolicy(), OutageGate(), stop, listener=metrics, poll=0.05)
    for req_id in ("1", "2"):
        queues.submit(Request(req_id, time.monotonic()), stop)
    worker.start()
    deadline = time.monotonic() + 20
    while queues.counts().accepted < 2 and time.monotonic() < deadline:
        queues.requeue_ready(stop, timeout=0.05)
    stop.set()
    worker.join(5)
    assert not worker.is_alive() and metrics.failed
    counts = queues.counts()
    assert (counts.created, counts.accepted, counts.graveyard, counts.in_flight, counts.dlq) == (2, 2, 0, 0, 0)
    assert counts.balanced


def test_a_held_key_takes_no_work_and_nothing_expires_while_it_waits():
    # A key held far longer than a request's time-to-live (a Retry-After, the hold after a strike) used to
    # take the request, find at once that no slot could free in time, count it expired and take it again,
    # thousands of times a second. Now its worker takes nothing until the key can send.
    queues = QueueManager(Graveyard(None), queue_size=10, ttl=0.05)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0))
    key.limiter.hold(60)
    stop = threading.Event()
    metrics = Metrics()
    transport = AlwaysOk()
    worker = Worker(key, queues, transport, RetryPolicy(), OutageGate(), stop, listener=metrics, poll=0.05)
    queues.submit(Request("1", time.monotonic()), stop)
    worker.start()
    requeuer = threading.Thread(target=lambda: [queues.requeue_ready(stop, timeout=0.05) for _ in iter(stop.is_set, True)])
    requeuer.start()
    time.sleep(0.3)  # six of the worker's polls: the old worker spun through the queue thousands of times by now
    counts, snapshot = queues.counts(), metrics.snapshot()
    stop.set()
    worker.join(5)
    requeuer.join(5)
    assert not worker.is_alive() and not requeuer.is_alive()
    assert snapshot.expired == 0 and snapshot.outcomes == {}
    assert (counts.main_queue, counts.in_flight, counts.dlq) == (1, 0, 0)  # never taken: it waits for a key that can send


def test_a_key_whose_hold_ends_takes_the_waiting_work_and_sends_it():
    queues = QueueManager(Graveyard(None), queue_size=10, ttl=0.05)
    key = ApiKey("UT4NHL1J796WCHULA1750MXYF9F5JYA6", ThreadSafeRateLimiter(20, order_latency=0.0))
    key.limiter.hold(0.2)
    stop = threading.Event()
    metrics = Metrics()
    worker = Worker(key, queues, AlwaysOk(), RetryPolicy(), OutageGate(), stop, listener=metrics, poll=0.05)
    queues.submit(Request("1", time.monotonic()), stop)
    worker.start()
    deadline = time.monotonic() + 10
    while queues.counts().accepted < 1 and time.monotonic() < deadline:
        queues.requeue_ready(stop, timeout=0.05)
    stop.set()
    worker.join(5)
    assert not worker.is_alive()
    assert queues.counts().accepted == 1 and metrics.snapshot().expired == 0
