"""QueueManager, DelayQueue and Graveyard: retries first, nothing lost, records on disk."""

from __future__ import annotations

import json
import queue
import threading

import pytest

from conftest import wait_for

from thread_client.flow.delay_queue import DelayQueue
from thread_client.io.graveyard import Graveyard
from thread_client.io.results import Results
from thread_client.flow.queues import QueueManager
from thread_client.errors import QueueClosed
from thread_client.policy.answers import Outcome
from thread_client.request import FinalOutcome, Request


def new_request(req_id: int, clock) -> Request:
    return Request(str(req_id), clock())


@pytest.fixture
def manager(tmp_path, clock):
    graveyard = Graveyard(tmp_path / "graveyard.jsonl")
    yield QueueManager(graveyard, queue_size=4, ttl=1.0, clock=clock)
    graveyard.close()


def test_delay_queue_releases_earliest_ready_first(clock):
    dlq = DelayQueue(clock)
    dlq.put_at("late", clock() + 2)
    dlq.put_at("soon", clock() + 1)
    with pytest.raises(queue.Empty):
        dlq.get(block=False)
    clock.advance(1)
    assert dlq.get(block=False) == "soon"
    clock.advance(1)
    assert dlq.get(timeout=0) == "late"


def test_delay_queue_put_of_an_earlier_item_wakes_a_waiting_get():
    dlq = DelayQueue()
    dlq.put_at("far", float("inf"))
    got = []
    waiter = threading.Thread(target=lambda: got.append(dlq.get(timeout=10)))
    waiter.start()
    dlq.put_at("now", 0.0)
    waiter.join(10)
    assert not waiter.is_alive() and got == ["now"]
    assert dlq.drain() == ["far"]


def test_retries_are_served_before_new_requests(manager, clock):
    for req_id in (1, 2):
        assert manager.submit(new_request(req_id, clock))
    first = manager.take(timeout=0)
    assert first.req_id == "1"
    manager.retry(first, Outcome.TIMEOUT, delay=0.1)
    assert not manager.requeue_ready(timeout=0)  # still backing off
    clock.advance(0.1)
    assert manager.requeue_ready(timeout=0)
    assert manager.submit(new_request(3, clock))
    assert [manager.take(timeout=0).req_id for _ in range(3)] == ["1", "2", "3"]
    assert first.deadline == pytest.approx(clock() + 1.0)  # taken again: a fresh TTL


def test_a_burial_after_retries_lands_in_the_graveyard_file_with_every_attempt(manager, clock, tmp_path):
    manager.submit(new_request(7, clock))
    request = manager.take(timeout=0)
    for attempt in range(2):
        manager.retry(request, Outcome.SERVER_ERROR, delay=1.0)
        clock.advance(1.0)
        assert manager.requeue_ready(timeout=0)
        request = manager.take(timeout=0)
    request.note_attempt("UT4N...JYA6", 3, None, b"")
    manager.bury(request, FinalOutcome.RETRIES_EXHAUSTED, "timeout", failure=Outcome.TIMEOUT)
    counts = manager.counts()
    assert (counts.created, counts.graveyard, counts.in_flight, counts.balanced) == (1, 1, 0, True)
    manager.graveyard.close()
    records = [json.loads(line) for line in (tmp_path / "graveyard.jsonl").read_text().splitlines()]
    assert len(records) == 1
    assert records[0]["req_id"] == "7"
    assert (records[0]["reason"], records[0]["last_failure"]) == ("retries exhausted: timeout", "timeout")
    assert (records[0]["outcome"], records[0]["attempts"]) == ("retries_exhausted", 1)  # as in the results
    assert records[0]["buried"] >= records[0]["created"] > 0


def test_backpressure_and_shutdown_account_for_everything(manager, clock):
    for req_id in range(4):
        manager.submit(new_request(req_id, clock))
    taken = manager.take(timeout=0)
    manager.retry(taken, Outcome.TIMEOUT, delay=5.0)
    manager.accept(manager.take(timeout=0))
    for req_id in (4, 5):
        manager.submit(new_request(req_id, clock))  # full again: 4 in the main queue, 1 in the DLQ
    blocked = Waiter(lambda: manager.submit(new_request(99, clock)))  # the producer, waiting for room
    wait_for(lambda: len(manager._main.not_full._waiters) == 1, timeout=5)
    manager.close()  # the stop: the waiting producer wakes at once, its request buried, not lost
    blocked.join(5)
    assert not blocked.is_alive() and blocked.result is False
    assert manager.drain() == 5
    counts = manager.counts()
    assert counts.balanced and (counts.created, counts.accepted, counts.graveyard) == (7, 1, 6)
    assert manager.graveyard.by_outcome() == {"shutdown": 6}
    assert "created 7 == accepted 1 + graveyard 6" in counts.identity()


class Waiter(threading.Thread):
    """Runs ``call`` (one that blocks) on a thread of its own; ``result`` is what it returned, or the
    exception it raised."""

    def __init__(self, call) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.result: object = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self._call()
        except Exception as exc:
            self.result = exc


def test_closing_wakes_every_thread_blocked_on_the_queues_at_once(manager, clock):
    manager.submit(new_request(1, clock))
    manager.retry(manager.take(timeout=0), Outcome.TIMEOUT, delay=3600)  # in the DLQ for an hour
    waiting = {
        "worker": Waiter(manager.take),  # the main queue is empty
        "requeue": Waiter(manager.requeue_ready),  # nothing ready for an hour
        "producer at the end of its input": Waiter(manager.wait_until_settled),
    }
    # Each is blocked in its wait before the close (CPython keeps a condition's waiters in _waiters).
    for condition in (manager._main.not_empty, manager._dlq.not_empty, manager._settled_all):
        wait_for(lambda: len(condition._waiters) == 1, timeout=5)
    manager.close()
    for thread in waiting.values():
        thread.join(5)
        assert not thread.is_alive()
    assert isinstance(waiting["worker"].result, QueueClosed)
    assert isinstance(waiting["requeue"].result, QueueClosed)
    assert waiting["producer at the end of its input"].result is False
    assert manager.drain() == 1 and manager.counts().balanced  # the request in the DLQ is still there


def test_hand_back_costs_no_attempt(manager, clock):
    manager.submit(new_request(1, clock))
    request = manager.take(timeout=0)
    manager.hand_back(request)
    assert manager.requeue_ready(timeout=0)
    assert manager.take(timeout=0).failures == 0


def test_graveyard_lines_stay_whole_under_threads(tmp_path, clock):
    graveyard = Graveyard(tmp_path / "g.jsonl")
    threads = [
        threading.Thread(target=lambda n=n: [graveyard.bury(new_request(n * 1000 + i, clock), FinalOutcome.SHUTDOWN) for i in range(200)])
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    graveyard.close()
    lines = (tmp_path / "g.jsonl").read_text().splitlines()
    assert len(lines) == 800 and len({json.loads(line)["req_id"] for line in lines}) == 800
    assert len(graveyard) == 800 and graveyard.by_outcome() == {"shutdown": 800}


def test_a_request_refused_after_close_is_buried_as_the_drain_buries_the_rest(tmp_path):
    # The producer's put can lose the race with a stop for a wrong endpoint: its request must say why, as the
    # drained ones do, not a bare "shutdown".
    manager = QueueManager(Graveyard(tmp_path / "graveyard.jsonl"), queue_size=1)
    manager.close(FinalOutcome.SHUTDOWN, "endpoint not found")
    assert not manager.submit(Request("late", 0.0))
    manager.graveyard.close()
    (record,) = (json.loads(line) for line in (tmp_path / "graveyard.jsonl").read_text().splitlines())
    assert record["reason"] == "shutdown: endpoint not found"


def test_a_requeue_left_unsent_at_a_stop_gets_a_final_record_where_new_work_waits_for_the_next_run(tmp_path):
    """The next run skips an id by its dead record: a requeue the API acknowledged and the stop left unsent
    would vanish there. It is recorded (the drain's outcome, its requeue's number) instead: that record
    supersedes the dead one and is a dead letter again; the input's own unsent work still waits."""
    results = tmp_path / "results.jsonl"
    manager = QueueManager(Graveyard(None), queue_size=4, results=Results(str(results)), keep_unsent=True)
    assert manager.submit(Request("new", 0.0)) and manager.submit(Request("x", 0.0, requeue=2, where="requeue 2"))
    manager.close()
    assert not manager.submit(Request("y", 0.0, requeue=1, where="requeue 1"))  # lost the race with the stop
    assert manager.drain() == 2
    manager.results.close()
    counts = manager.counts()
    assert (counts.left_for_next_run, counts.graveyard, counts.balanced) == (1, 2, True)
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted((r["id"], r["outcome"], r["requeue"]) for r in records) == [("x", "shutdown", 2),
                                                                               ("y", "shutdown", 1)]


def test_a_submit_that_may_not_wait_refuses_a_full_queue_and_counts_nothing(manager, clock):
    """A requeue from the control API never holds its HTTP handler on a full queue (a paused daemon)."""
    for n in range(4):
        assert manager.submit(new_request(n, clock))
    with pytest.raises(queue.Full):
        manager.submit(new_request(9, clock), timeout=0)
    assert manager.counts().created == 4 and manager.counts().balanced
    manager.take()
    assert manager.submit(new_request(9, clock), timeout=0)


def test_a_request_handed_to_a_key_is_taken_by_that_key_alone_first_and_by_any_once_released(manager, clock):
    manager.submit(new_request(1, clock))
    manager.submit(new_request(2, clock))
    handed = manager.take()
    manager.hand_to(handed, "k1")
    assert manager.take(timeout=0, key="k2").req_id == "2"  # k2 never sees what k1 was handed
    assert manager.take(timeout=0, key="k2") is None
    assert manager.counts().balanced and manager.sizes() == (1, 0)
    assert manager.release_handed("k1") == 1
    assert manager.take(timeout=0, key="k2") is handed


def test_a_request_handed_to_a_key_that_never_takes_it_is_drained_at_the_stop(manager, clock):
    manager.submit(new_request(1, clock))
    manager.hand_to(manager.take(), "k1")
    manager.close()
    assert manager.drain() == 1
    assert manager.counts().balanced and manager.graveyard.by_outcome() == {"shutdown": 1}


def test_a_hand_over_after_the_stop_lands_in_the_dlq_for_the_drain(manager, clock):
    manager.submit(new_request(1, clock))
    request = manager.take()
    manager.close()
    manager.hand_to(request, "k1")
    assert manager.sizes() == (0, 1) and manager.drain() == 1 and manager.counts().balanced


def test_a_worker_waiting_for_work_wakes_for_a_request_handed_to_its_key(manager, clock):
    manager.submit(new_request(1, clock))
    request = manager.take()
    taken: list[Request] = []
    waiter = threading.Thread(target=lambda: taken.append(manager.take(timeout=5, key="k1")))
    waiter.start()
    manager.hand_to(request, "k1")
    waiter.join(5)
    assert taken == [request]


def test_a_late_answer_counts_only_for_a_live_request_and_a_drain_ends_one_it_accepted_as_accepted(manager, clock):
    """Noted for a request that has ended, a late 200 would linger for good, and make a later request of the same id
    accepted with nothing sent; one that waits in a queue at the stop is accepted, neither buried nor left."""
    manager.submit(new_request(1, clock))
    ended = manager.take()
    manager.watch_late(ended)
    manager.bury(ended, FinalOutcome.RETRIES_EXHAUSTED)
    manager.note_placed_late("1")  # after its request ended: nothing
    assert not manager.placed_late(new_request(1, clock))
    manager.submit(new_request(2, clock))
    waiting = manager.take()
    manager.watch_late(waiting)
    manager.retry(waiting, Outcome.TIMEOUT, delay=60.0)
    manager.note_placed_late("2")
    manager.close()
    assert manager.drain() == 0  # none left nor buried: accepted
    counts = manager.counts()
    assert counts.accepted == 1 and counts.balanced and manager.graveyard.by_outcome() == {"retries_exhausted": 1}
    assert manager._late == {}  # nothing left behind
