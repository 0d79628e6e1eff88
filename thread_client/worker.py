"""Worker threads: take a request, wait for the key's limiter, send it, and route the outcome."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .api_key import ApiKey
from .clock import Clock, monotonic
from .errors import LimiterClosed, LimiterTimeout, TransportError
from .metrics import Metrics
from .outcome import Outcome, classify
from .queue_manager import QueueManager
from .request import Request
from .threads import ManagedThread
from .transport import Transport

__all__ = ["Worker"]

log = logging.getLogger(__name__)

_TRANSPORT_OUTCOMES = {"timeout": Outcome.TIMEOUT, "refused": Outcome.CONNECTION_ERROR, "connection": Outcome.CONNECTION_ERROR}


class Worker(ManagedThread):
    """One of the threads of an API key, with its own keep-alive connection.

    Nothing is logged and dropped: every request taken ends accepted, in the DLQ,
    handed back (its key retired), or in the graveyard. An unexpected exception
    while handling a request is logged with its traceback, the request is failed
    into the DLQ, and the worker goes on.
    """

    def __init__(
        self,
        key: ApiKey,
        queues: QueueManager,
        metrics: Metrics,
        transport: Transport,
        stop: threading.Event,
        *,
        index: int = 0,
        on_key_retired: Callable[[ApiKey], None] = lambda key: None,
        clock: Clock = monotonic,
        poll: float = 0.25,
    ) -> None:
        super().__init__(f"worker-{key.secret[:4]}-{index}")
        self.key = key
        self._queues = queues
        self._metrics = metrics
        self._transport = transport
        self._stopping = stop
        self._on_key_retired = on_key_retired
        self._clock = clock
        self._poll = poll

    def work(self) -> None:
        try:
            while not self._stopping.is_set() and self.key.retired_because is None:
                request = self._queues.take(self._poll)
                if request is None:
                    continue
                try:
                    self._handle(request)
                except Exception:
                    log.exception("%s: unexpected error on request %s; it goes to the DLQ", self.name, request.req_id)
                    self._queues.fail(request, "internal error")
        finally:
            self._transport.close()

    def _handle(self, request: Request) -> None:
        limiter = self.key.limiter
        try:
            remaining = request.deadline - self._clock()
            if remaining <= 0:
                raise LimiterTimeout(self.key.name, 0.0)
            permit = limiter.acquire(timeout=remaining)
        except LimiterTimeout:
            self._metrics.record_attempt(self.key.name, Outcome.EXPIRED)
            self._retry(request, Outcome.EXPIRED)
            return
        except LimiterClosed:
            # Key retired or shutting down: another key takes it, or the shutdown drain buries it.
            self._queues.hand_back(request)
            return

        sent_at = self._clock()
        try:
            answer = self._transport.send(permit.nonce, request.req_id)
        except TransportError as exc:
            finished_at = self._clock()
            if exc.kind == "refused":
                limiter.cancel(permit)
            else:
                limiter.release(permit, answered_at=None)
            outcome, retry_after = _TRANSPORT_OUTCOMES[exc.kind], None
        except BaseException:
            limiter.release(permit, answered_at=None)  # never leave a slot marked in flight
            raise
        else:
            finished_at = self._clock()
            limiter.release(permit, finished_at)
            outcome, retry_after = classify(answer.status, answer.body, str(request.req_id)), answer.retry_after
        round_trip = finished_at - sent_at
        self._metrics.record_attempt(self.key.name, outcome, round_trip)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request %s nonce %s on %s: %s in %.1f ms (attempt %d)", request.req_id, permit.nonce,
                      self.key.name, outcome.value, 1000 * round_trip, request.failures + 1)

        if outcome is Outcome.ACCEPTED:
            self._queues.accept(request)
            self._metrics.record_accepted(finished_at - request.created_at)
            return
        if outcome is Outcome.RATE_LIMITED:
            window = limiter.note_rate_limited()
            log.error(
                "%s: 429 rate limited although the window rule forbids it; key held back a window,"
                " window widened to %.3f s", self.key.name, window,
            )
        elif outcome is Outcome.INVALID_NONCE:
            order_latency = limiter.note_invalid_nonce()
            log.warning("%s: 400 invalid nonce; order latency widened to %.1f ms", self.key.name, 1000 * order_latency)
        elif outcome.retires_key and self.key.retire(outcome.value):
            log.error("%s: key %s (%s); it is retired, the other keys carry its work", self.name, outcome.value, self.key.name)
            self._on_key_retired(self.key)
        self._retry(request, outcome, retry_after)

    def _retry(self, request: Request, outcome: Outcome, retry_after: float | None = None) -> None:
        if self._queues.fail(request, outcome.value, retry_after):
            self._metrics.record_retry()
