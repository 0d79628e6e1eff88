"""The request queues and the accounting identity that says nothing was lost.

    created == accepted + buried + left for the next run + taken over + in main queue + in DLQ + in flight

Every request enters through ``submit()`` and leaves through exactly one of
``accept()``, the graveyard, or (never sent) the next run or another member; in
between it is in the main queue, in the dead letter queue, or in the hands of one
thread ("in flight").
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass

from .. import defaults
from ..clock import Clock, monotonic
from ..errors import QueueClosed
from .closable import ClosablePriorityQueue
from .delay_queue import DelayQueue
from ..io.graveyard import Graveyard
from ..parts import ResultSink
from ..policy.answers import Outcome
from ..request import FinalOutcome, Request

__all__ = ["QueueCounts", "QueueManager"]

_RETRY_LANE = 0  # served before new requests
_NEW_LANE = 1


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """A snapshot of the accounting. Live snapshots are approximate (a request moving
    between a queue and a thread can be missed for an instant); once every thread
    is joined the identity is exact."""

    created: int
    accepted: int
    graveyard: int
    main_queue: int
    dlq: int
    in_flight: int
    left_for_next_run: int = 0  # taken in but not final at a stop: the next run of the same input takes them up
    taken_over: int = 0  # work entries another member took over before they were sent here: it records them

    @property
    def balanced(self) -> bool:
        return self.created == (
            self.accepted + self.graveyard + self.left_for_next_run + self.taken_over + self.main_queue + self.dlq
            + self.in_flight
        )

    def identity(self) -> str:
        sign = "==" if self.balanced else "!="
        left = f" + left for the next run {self.left_for_next_run}" if self.left_for_next_run else ""
        left += f" + taken over by another member {self.taken_over}" if self.taken_over else ""
        return (
            f"created {self.created} {sign} accepted {self.accepted} + graveyard {self.graveyard}{left}"
            f" + main queue {self.main_queue} + dlq {self.dlq} + in flight {self.in_flight}"
        )


class QueueManager:
    """Main queue (bounded, retries first), dead letter queue and graveyard, shared by all threads.

    The main queue is a priority queue: the producer blocks on it when it is full
    (backpressure) and retries jump ahead of new requests. Failed requests wait out
    their backoff in the DLQ until the requeue thread moves them back. How long, and
    whether at all, is the retry policy's decision, not this class's. ``close()``
    (the stop) wakes every thread blocked on either queue or on the settling at once.
    """

    def __init__(
        self,
        graveyard: Graveyard,
        *,
        queue_size: int = defaults.QUEUE_SIZE,
        ttl: float = defaults.TTL,
        results: ResultSink | None = None,
        keep_unsent: bool = False,
        clock: Clock = monotonic,
    ) -> None:
        if queue_size < 1 or ttl <= 0:
            raise ValueError("queue_size must be >= 1 and ttl > 0")
        self.graveyard = graveyard
        self.results = results
        # A stop leaves what was not sent for the next run (the user's resumable input) instead of burying it.
        self._keep_unsent = keep_unsent
        self.ttl = ttl
        self.queue_size = queue_size
        self._clock = clock
        self._main = ClosablePriorityQueue(queue_size)
        self._dlq = DelayQueue(clock)
        self._order = itertools.count()
        # Guards the counters below; never held across a blocking queue call. `_settled_all` is
        # notified when every request created has reached its final state, and on close.
        self._lock = threading.Lock()
        self._settled_all = threading.Condition(self._lock)
        self._created = 0
        self._accepted = 0
        self._finished = 0  # accepted, buried or left for the next run
        self._left = 0
        self._taken_over = 0
        self._in_flight = 0
        self._closed = False
        self._refused_as: tuple[FinalOutcome, str] = (FinalOutcome.SHUTDOWN, "")  # for a submit after close()
        # Ids of live requests with a send that timed out and is watched for its late answer, each True once that
        # answer accepted it: the request then ends accepted when next taken (or drained), never sent again. Each
        # goes when its request ends: one entry per live request with a watched send.
        self._late: dict[str, bool] = {}

    def __repr__(self) -> str:
        return f"<QueueManager {self.counts().identity()}>"

    # -- producer ------------------------------------------------------------

    def submit(self, request: Request, timeout: float | None = None) -> bool:
        """Count ``request`` as created and queue it, blocking while the main queue is full, for up to ``timeout``
        seconds (None: as long as it takes); then raises queue.Full, with nothing counted (as ``Queue.put``).

        Returns False if the queues are or get closed first; the request is then buried as
        ``shutdown``, or left for the next run if unsent requests are kept (``_keeps``).
        """
        with self._lock:
            self._created += 1
        try:
            self._main.put((_NEW_LANE, next(self._order), request), timeout=timeout)
            return True
        except queue.Full:
            with self._lock:
                self._created -= 1
            raise
        except QueueClosed:
            pass
        if self._keeps(request):
            self._leave(1)
        else:
            with self._lock:
                outcome, detail = self._refused_as
            self._record_burial_unsent(request, outcome, detail)
            with self._lock:
                self._count_finished()
        return False

    def adopt(self, request: Request) -> Request:
        """Count a request as created and in flight at once: one an earlier run left on the wire,
        which its key's worker settles before anything else (it never waits in a queue)."""
        with self._lock:
            self._created += 1
            self._in_flight += 1
        return request

    # -- workers -------------------------------------------------------------

    def take(self, timeout: float | None = None, key: str | None = None) -> Request | None:
        """The next request (those handed to ``key``, a key's id, first; then retries), now in flight with a
        fresh time-to-live for its wait for a rate-limit slot; None if none came within ``timeout`` (None: wait
        for one). Raises QueueClosed once the queues are closed."""
        try:
            request = self._main.get(timeout=timeout, lane=key)[2]
        except queue.Empty:
            return None
        request.renew(self._clock(), self.ttl)
        with self._lock:
            self._in_flight += 1
        return request

    def watch_late(self, request: Request) -> None:
        """A send of the in-flight ``request`` timed out and is watched for its late answer (``note_placed_late``)."""
        with self._lock:
            self._late.setdefault(request.req_id, False)

    def note_placed_late(self, req_id: str) -> None:
        """A late answer to a send of ``req_id`` that timed out accepted it: the request, retried meanwhile, ends
        accepted when next taken (``placed_late``) or drained, never sent again. Nothing if it has ended."""
        with self._lock:
            if req_id in self._late:
                self._late[req_id] = True

    def placed_late(self, request: Request) -> bool:
        """Whether a late answer showed ``request`` accepted (``note_placed_late``). Asked on every send: one read of
        the dict, without the lock (a lookup is atomic; a note made just after it is seen at the next look)."""
        return self._late.get(request.req_id, False)

    def accept(self, request: Request) -> None:
        """An in-flight request was accepted: its journey ends. It is counted so even if its durable
        record cannot be written; the OSError is then raised (the record is kept in memory and
        reported), and the caller must stop the key before its next send."""
        try:
            if self.results is not None:
                self.results.record(request, FinalOutcome.ACCEPTED)
        finally:
            self._count_accepted(request)

    def _count_accepted(self, request: Request) -> None:
        with self._lock:
            self._late.pop(request.req_id, None)
            self._accepted += 1
            self._in_flight -= 1
            self._count_finished()

    def retry(self, request: Request, failure: Outcome, delay: float, spend: bool = True) -> None:
        """An in-flight attempt failed (as ``failure``) and is to be tried again: it waits ``delay`` seconds in
        the DLQ (``spend``: the attempt counts against its retry budget)."""
        request.note_failure(failure, spend)
        self._dlq.put_at(request, self._clock() + delay)
        with self._lock:
            self._in_flight -= 1

    def hand_back(self, request: Request, after: float = 0.0) -> None:
        """An in-flight request that was never tried (its key retired, no room for it yet): retry it at no
        cost, at once or ``after`` seconds from now."""
        self._dlq.put_at(request, self._clock() + after)
        with self._lock:
            self._in_flight -= 1

    def hand_to(self, request: Request, key: str) -> None:
        """An in-flight request only the key whose id is ``key`` may take on (it asks the exchange about the
        order that key sent before a crash): the next one that key's workers take. Once the queues are closed it
        goes to the DLQ, for the shutdown drain."""
        try:
            self._main.put_for(key, (_RETRY_LANE, next(self._order), request))
        except QueueClosed:
            self.hand_back(request)
            return
        with self._lock:
            self._in_flight -= 1

    def release_handed(self, key: str) -> int:
        """The key whose id is ``key`` takes no more work (retired): what was handed to it goes back to every
        key's workers; how many requests."""
        return self._main.release(key)

    def let_go(self, request: Request) -> None:
        """An in-flight request, never sent, is no longer this daemon's: another member took its work
        entry over and writes its record. It ends here with none."""
        with self._lock:
            self._late.pop(request.req_id, None)
            self._taken_over += 1
            self._in_flight -= 1
            self._count_finished()

    def bury(self, request: Request, outcome: FinalOutcome, detail: str = "", failure: Outcome | None = None) -> None:
        """An in-flight request ends in the graveyard with ``outcome``; ``failure`` is what the attempt that
        failed last came to, if the burial follows one. A durable record that cannot be written raises
        OSError, as ``accept``, once the request is counted."""
        if failure is not None:
            request.note_failure(failure)
        try:
            self._record_burial(request, outcome, detail)
        finally:
            with self._lock:
                self._late.pop(request.req_id, None)
                self._in_flight -= 1
                self._count_finished()

    def reject(self, request: Request, outcome: FinalOutcome, detail: str) -> None:
        """A request that ends before this run could send it (a line that is no request, a send of
        an earlier run on a key this run does not drive): created and buried at once."""
        self._record_burial_unsent(request, outcome, detail)
        with self._lock:
            self._created += 1
            self._count_finished()

    def wait_until_settled(self) -> bool:
        """Block until every request created has its final outcome (True), or the queues are closed (False)."""
        with self._settled_all:
            while self._finished < self._created:
                if self._closed:
                    return False
                self._settled_all.wait()
            return True

    def _record_burial(self, request: Request, outcome: FinalOutcome, detail: str = "") -> None:
        """The final record of a request never accepted: the graveyard, and the results if kept.
        Raises OSError if a durable record cannot be written."""
        self.graveyard.bury(request, outcome, detail)
        if self.results is not None:
            self.results.record(request, outcome, detail)

    def _record_burial_unsent(self, request: Request, outcome: FinalOutcome, detail: str = "") -> None:
        """``_record_burial`` for a request this run never sent: a record that cannot be written is kept
        in memory and reported (the daemon stops on it), and no key has anything to stop for."""
        try:
            self._record_burial(request, outcome, detail)
        except OSError:
            pass

    def _accept_unsent(self, request: Request) -> None:
        """A request waiting in a queue that a late answer showed accepted: its record (one that cannot be written is
        kept in memory and reported, as ``_record_burial_unsent``'s), and counted."""
        try:
            if self.results is not None:
                self.results.record(request, FinalOutcome.ACCEPTED)
        except OSError:
            pass
        with self._lock:
            self._accepted += 1
            self._count_finished()

    def _count_finished(self, requests: int = 1) -> None:
        """Called with the lock held."""
        self._finished += requests
        if self._finished == self._created:
            self._settled_all.notify_all()

    # -- requeue thread ------------------------------------------------------

    def requeue_ready(self, timeout: float | None = None) -> bool:
        """Move one request whose backoff is over from the DLQ to the front of the main queue,
        waiting for one and for room. Returns False if none was ready within ``timeout`` (None:
        wait for one); raises QueueClosed once the queues are closed (a request on its way back
        goes to the DLQ again, for the shutdown drain)."""
        try:
            request = self._dlq.get(timeout=timeout)
        except queue.Empty:
            return False
        with self._lock:
            self._in_flight += 1  # in this thread's hands between the two queues
        try:
            self._main.put((_RETRY_LANE, next(self._order), request))
        except QueueClosed:
            self.hand_back(request)  # back to the DLQ, for the shutdown drain
            raise
        with self._lock:
            self._in_flight -= 1
        return True

    # -- shutdown and metrics -------------------------------------------------

    def close(self, outcome: FinalOutcome = FinalOutcome.SHUTDOWN, detail: str = "") -> None:
        """Stop: every thread blocked on the main queue (producer, workers), the DLQ (the requeue
        thread) or the settling (the producer at the end of its input) wakes at once, and no more
        work is put or taken; retries and hand-backs still land in the DLQ, for ``drain()``. A
        request ``submit`` is refused from now on is buried with ``outcome`` and ``detail``, as
        the drain buries the others (unless unsent requests are kept)."""
        with self._lock:
            self._closed = True
            self._refused_as = (outcome, detail)
            self._settled_all.notify_all()
        self._main.close()
        self._dlq.close()

    def drain(self, outcome: FinalOutcome = FinalOutcome.SHUTDOWN, detail: str = "") -> int:
        """Empty the main queue and the DLQ; returns how many were left or buried (one a late answer showed accepted
        ends accepted). If unsent requests are kept (the
        user's resumable input), they are left for the next run whatever stopped this one (a
        signal, every key retired, a wrong endpoint): no final record, so a rerun of the same
        input after the cause is fixed sends them (those sent once marked as resumed). A local
        decision never buries the user's work. Otherwise they are buried with ``outcome``, and so is an
        operator's requeue in any case (``_keeps``).

        Call once the threads that put into the queues are stopped (after ``close()``), or more may arrive.
        """
        drained = [entry[2] for entry in self._main.drain()] + self._dlq.drain()
        with self._lock:
            placed = [self._late.pop(request.req_id, False) for request in drained]
        requests = [request for request, was_placed in zip(drained, placed) if not was_placed]
        for request, was_placed in zip(drained, placed):
            if was_placed:  # a late answer accepted it while it waited: accepted, neither left nor buried
                self._accept_unsent(request)
        buried = [request for request in requests if not self._keeps(request)]
        self._leave(len(requests) - len(buried))
        for request in buried:
            self._record_burial_unsent(request, outcome, detail)
        with self._lock:
            self._count_finished(len(buried))
        return len(requests)

    @property
    def keeps_unsent(self) -> bool:
        """Whether a stop leaves the requests not yet sent for the next run instead of burying them."""
        return self._keep_unsent

    def _keeps(self, request: Request) -> bool:
        """Whether a stop leaves ``request`` for the next run. Never an operator's requeue: the next run skips
        its id by its dead record, so it is recorded with the stop's outcome instead (that record supersedes the
        dead one, and is a dead letter to requeue again)."""
        return self._keep_unsent and not request.requeue

    def _leave(self, requests: int) -> None:
        with self._lock:
            self._left += requests
            self._count_finished(requests)

    def sizes(self) -> tuple[int, int]:
        """(main queue, DLQ) sizes; approximate while threads run."""
        return self._main.qsize(), self._dlq.qsize()

    def oldest_ages(self) -> tuple[float, float]:
        """Seconds the oldest request waiting in the main queue, and in the DLQ, has lived since it was created
        (0: that queue is empty); approximate while threads run. Copies both queues: for metrics, not for the
        request path."""
        now = self._clock()
        main, dlq = (max((now - entry[-1].created_at for entry in waiting.snapshot()), default=0.0)
                     for waiting in (self._main, self._dlq))
        return main, dlq

    def counts(self) -> QueueCounts:
        main_queue, dlq = self.sizes()
        graveyard = len(self.graveyard)
        with self._lock:
            return QueueCounts(self._created, self._accepted, graveyard, main_queue, dlq, self._in_flight, self._left,
                               self._taken_over)
