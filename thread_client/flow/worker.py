"""Worker threads: take a request, wait for the key's limiter, send it, and carry out what the retry policy says."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..limits.keys import ApiKey
from ..clock import Clock, monotonic
from ..errors import LimiterClosed, LimiterTimeout, TransportError
from ..observe.metrics import Metrics
from ..policy.answers import Outcome, classify
from ..policy.retry import Action, KeyStep, RequestStep, RetryPolicy
from .queues import QueueManager
from .request import Request
from ..threads import ManagedThread
from ..io.transport import Transport

__all__ = ["Worker"]

log = logging.getLogger(__name__)

_TRANSPORT_OUTCOMES = {"timeout": Outcome.TIMEOUT, "refused": Outcome.CONNECTION_ERROR, "connection": Outcome.CONNECTION_ERROR}


class Worker(ManagedThread):
    """One of the threads of an API key, with its own keep-alive connection.

    Nothing is logged and dropped: every request taken ends accepted, in the DLQ,
    handed back (its key retired), or in the graveyard, as ``policy`` decides.
    An unexpected exception while handling a request is logged with its
    traceback, it counts as a failed attempt (retried or buried, as the policy
    says), and the worker goes on.
    """

    def __init__(
        self,
        key: ApiKey,
        queues: QueueManager,
        metrics: Metrics,
        transport: Transport,
        policy: RetryPolicy,
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
        self._policy = policy
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
                    log.exception("%s: unexpected error on request %s", self.name, request.req_id)
                    failure = Outcome.INTERNAL_ERROR
                    self._carry_out(request, failure, self._policy.decide(failure, request.failures))
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
            self._carry_out(request, Outcome.EXPIRED, self._policy.decide(Outcome.EXPIRED, request.failures))
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

        action = self._policy.decide(outcome, request.failures, retry_after)
        if action.request is RequestStep.ACCEPT:
            self._queues.accept(request)
            self._metrics.record_accepted(finished_at - request.created_at)
            return
        self._carry_out(request, outcome, action)

    def _carry_out(self, request: Request, outcome: Outcome, action: Action) -> None:
        """Apply a failed attempt's action: first to the key (so no other send slips in), then to the request."""
        limiter = self.key.limiter
        if action.key is KeyStep.HOLD:
            window = limiter.note_rate_limited()
            log.error(
                "%s: 429 rate limited although the window rule forbids it; key held back a window,"
                " window widened to %.3f s", self.key.name, window,
            )
        elif action.key is KeyStep.RESYNC:
            order_latency = limiter.note_invalid_nonce()
            log.warning("%s: 400 invalid nonce; order latency widened to %.1f ms", self.key.name, 1000 * order_latency)
        elif action.key is KeyStep.RETIRE and self.key.retire(action.reason):
            log.error("%s: key %s (%s); it is retired, the other keys carry its work", self.name, action.reason, self.key.name)
            self._on_key_retired(self.key)

        if action.request is RequestStep.RETRY:
            self._queues.retry(request, outcome.value, action.delay)
            self._metrics.record_retry()
        elif action.request is RequestStep.HAND_BACK:
            self._queues.hand_back(request)
        else:
            self._queues.bury(request, action.reason, failure=outcome.value)
