"""The daemon: builds every part from a Config, starts every thread, and shuts down in order."""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from .api_key import ApiKey, mask
from .clock import Clock, monotonic
from .config import Config
from .errors import ConfigError
from .graveyard import Graveyard
from .metrics import Metrics
from .nonce import NonceGenerator
from .producer import Producer
from .prometheus import MetricsServer
from .queue_manager import QueueManager
from .rate_limiter import ThreadSafeRateLimiter
from .reporting import MetricsReporter, QueueMonitor
from .requeue import Requeuer
from .summary import Summary
from .threads import ManagedThread
from .transport import Transport
from .worker import Worker

__all__ = ["Daemon"]

log = logging.getLogger(__name__)

ALL_KEYS_BLOCKED = "all keys blocked"


class Daemon:
    """Owns the queues, the keys and every thread; a context manager.

    ``run()`` starts everything, waits until ``request_stop()`` (a signal, the end
    of ``duration``, or every key retired), then ``shutdown()``s.
    """

    def __init__(self, config: Config, *, clock: Clock = monotonic) -> None:
        self.config = config
        self._clock = clock
        self._stop_requested = threading.Event()
        self._stop_reason = "stopped"
        # Each stage of the shutdown has its own event, set in dependency order.
        self._stop_producer = threading.Event()
        self._stop_requeue = threading.Event()
        self._stop_workers = threading.Event()
        self._stop_reports = threading.Event()
        self.graveyard = Graveyard(config.graveyard)
        self.queues = QueueManager(
            self.graveyard, queue_size=config.queue_size, max_retries=config.max_retries, ttl=config.ttl, clock=clock
        )
        self.metrics = Metrics(clock)
        self.keys = [
            ApiKey(
                secret,
                ThreadSafeRateLimiter(
                    config.rate, name=mask(secret), window=config.window, order_latency=config.order_latency,
                    unanswered_hold=config.http_timeout, nonces=NonceGenerator(), clock=clock,
                ),
            )
            for secret in config.keys
        ]
        self.producer = Producer(self.queues, self._stop_producer, load=config.load, clock=clock)
        self.requeuer = Requeuer(self.queues, self._stop_requeue)
        self.workers = [
            Worker(
                key, self.queues, self.metrics, Transport(config.url, key.secret, config.http_timeout), self._stop_workers,
                index=index, on_key_retired=self._on_key_retired, clock=clock,
            )
            for key in self.keys
            for index in range(config.threads_per_key)
        ]
        self.reporters: list[ManagedThread] = [
            MetricsReporter(self.metrics, self.queues, config.metrics_interval, self._stop_reports),
            QueueMonitor(self.queues, self._stop_reports),
        ]
        self.metrics_server: MetricsServer | None = None
        self._started_at: float | None = None
        self._summary: Summary | None = None
        self._shutdown_lock = threading.Lock()

    def __repr__(self) -> str:
        active = sum(1 for key in self.keys if key.retired_because is None)
        return f"<Daemon keys={active}/{len(self.keys)} {self.queues.counts().identity()}>"

    def __enter__(self) -> "Daemon":
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    @property
    def threads(self) -> list[ManagedThread]:
        return [self.producer, self.requeuer, *self.workers, *self.reporters]

    def start(self) -> None:
        """Start every thread. The keys are held back one window first: a previous run of the
        client may have left stamps in the server's rings. Raises ConfigError, with nothing
        started, if the metrics port cannot be served."""
        for key in self.keys:
            key.limiter.hold(self.config.window)
        self._started_at = self._clock()
        if self.config.metrics_port is not None:
            try:
                self.metrics_server = MetricsServer(self, self.config.metrics_port)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on port {self.config.metrics_port}: {exc.strerror}") from exc
            log.info("Prometheus metrics on http://127.0.0.1:%d/metrics", self.metrics_server.port)
        for thread in [*self.reporters, *self.workers, self.requeuer, self.producer]:
            thread.start()
        log.info(
            "thread_client started: %d keys x %d threads against %s, load %s",
            len(self.keys), self.config.threads_per_key, self.config.url, self.config.load,
        )

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask ``run()`` to shut down; safe from any thread and from a signal handler."""
        if not self._stop_requested.is_set():
            self._stop_reason = reason
            self._stop_requested.set()

    def run(self) -> Summary:
        """Run until stopped (or for ``config.duration`` seconds if set) and return the summary."""
        if self._started_at is None:
            self.start()
        finished = self._stop_requested.wait(self.config.duration or None)
        if not finished:
            self.request_stop("duration reached")
        return self.shutdown()

    def _on_key_retired(self, key: ApiKey) -> None:
        if all(k.retired_because is not None for k in self.keys):
            log.error("every API key is retired (%s): nothing can be sent any more", ALL_KEYS_BLOCKED)
            self.request_stop(ALL_KEYS_BLOCKED)

    def shutdown(self, join_timeout: float | None = None) -> Summary:
        """Stop in dependency order and return the summary; idempotent.

        The producer stops first; requests in flight get up to the HTTP timeout to
        finish; everything still queued (and anything waiting for a slot) is buried
        with the stop reason. Nothing is lost: a thread that does not join in time is
        named in the summary, and so is the request it still holds (in flight).
        """
        with self._shutdown_lock:
            if self._summary is not None:
                return self._summary
            self.request_stop()
            timeout = join_timeout if join_timeout is not None else self.config.http_timeout + 2.0
            drain_reason = self._stop_reason if self._stop_reason == ALL_KEYS_BLOCKED else "shutdown"
            self._stop_producer.set()
            self._join([self.producer], timeout)
            self._stop_requeue.set()
            self._join([self.requeuer], timeout)
            self._stop_workers.set()
            for key in self.keys:
                key.limiter.close()
            self._join(self.workers, timeout)
            buried = self.queues.drain(drain_reason)
            if buried:
                log.warning("%d queued requests buried in the graveyard (%s)", buried, drain_reason)
            self._stop_reports.set()
            self._join(self.reporters, timeout)
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.graveyard.close()
            started = self._started_at if self._started_at is not None else self._clock()
            self._summary = Summary(
                counts=self.queues.counts(),
                metrics=self.metrics.snapshot(),
                duration_s=self._clock() - started,
                stop_reason=self._stop_reason,
                retired_keys={k.name: k.retired_because for k in self.keys if k.retired_because is not None},
                graveyard_by_reason=self.graveyard.by_reason(),
                threads_died=[t.name for t in self.threads if t.failure is not None],
                threads_alive=[t.name for t in self.threads if t.is_alive()],
            )
            return self._summary

    @staticmethod
    def _join(threads: list[ManagedThread], timeout: float) -> None:
        for thread in threads:
            if thread.ident is not None:
                thread.join(timeout)
                if thread.is_alive():
                    log.error("thread %s did not stop within %.1f s", thread.name, timeout)
