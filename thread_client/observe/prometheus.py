"""Prometheus text exposition of the daemon's metrics, read at scrape time (nothing on the request path)."""

from __future__ import annotations

import time
from functools import partial
from typing import Callable, Iterator, Sequence
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector, CollectorRegistry

from ..policy.answers import Outcome
from ..threads import SHUTDOWN_POLL, LoopThread, ManagedThread
from .status import DaemonStatus, KeyCondition, StatusReader

__all__ = ["LATENCY_BUCKETS", "DaemonCollector", "MetricsServer"]

#: Bucket upper bounds in seconds: 10 ms steps where the latencies live, coarser beyond.
LATENCY_BUCKETS = (
    [0.001, 0.002, 0.005]
    + [ms / 1000 for ms in range(10, 200, 10)]
    + [ms / 1000 for ms in range(200, 1000, 50)]
    + [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0]
)


class DaemonCollector(Collector):
    """Builds every metric family from one status snapshot when Prometheus scrapes.

    Names follow Prometheus's conventions: the ``thread_client_`` prefix, base units (``_seconds``), counters
    ending in ``_total`` (``CounterMetricFamily`` appends it). Every series a key or an outcome can have is
    served from the first scrape, at zero, so ``rate()`` and ``increase()`` see its first change. ``wall``
    turns the status's monotonic ages into timestamps.
    """

    def __init__(self, read_status: StatusReader, wall: Callable[[], float] = time.time) -> None:
        self._read_status = read_status
        self._wall = wall

    def collect(self) -> Iterator[Metric]:
        status = self._read_status(LATENCY_BUCKETS)
        yield from self._requests(status)
        yield from self._answers(status)
        yield from self._keys(status)
        yield from self._latencies(status)

    def _requests(self, status: DaemonStatus) -> Iterator[Metric]:
        """The requests' counts, queues and ages."""
        counts, snapshot = status.counts, status.metrics
        for name, value, text in [
            ("created", counts.created, "Requests created by the producer."),
            ("accepted", counts.accepted, "Requests accepted by the exchange."),
            ("retries", snapshot.retried, "Failed attempts sent to the dead letter queue for a retry."),
            ("expired", snapshot.expired, "Attempts whose time-to-live passed before a rate-limit slot was free."),
            ("dead_letters", counts.graveyard, "Requests buried in the graveyard: final, never to be accepted."),
        ]:
            yield CounterMetricFamily(f"thread_client_{name}", text, value=value)
        ago = snapshot.last_accepted_ago
        yield GaugeMetricFamily(
            "thread_client_last_accepted_timestamp_seconds", "When the latest request was accepted (Unix time; 0: none yet).",
            value=0.0 if ago is None else self._wall() - ago,
        )
        queues = GaugeMetricFamily("thread_client_queued_requests", "Requests waiting in a queue.", labels=["queue"])
        ages = GaugeMetricFamily(
            "thread_client_queue_oldest_age_seconds", "Age of the oldest request waiting in a queue (0: empty).",
            labels=["queue"],
        )
        for queue, size, age in zip(("main", "dlq"), (counts.main_queue, counts.dlq), status.oldest_ages):
            queues.add_metric([queue], size)
            ages.add_metric([queue], age)
        yield queues
        yield ages
        yield GaugeMetricFamily("thread_client_in_flight_requests", "Requests held by a thread.", value=counts.in_flight)

    def _answers(self, status: DaemonStatus) -> Iterator[Metric]:
        """What the exchange answered, and how the connections fared."""
        snapshot = status.metrics
        attempts = CounterMetricFamily(
            "thread_client_attempts", "Attempts by outcome and API key (masked).", labels=["key", "outcome"]
        )
        for key in sorted({key.name for key in status.keys} | set(snapshot.per_key)):
            outcomes = snapshot.per_key.get(key, {})
            for outcome in Outcome:
                attempts.add_metric([key, outcome.value], outcomes.get(outcome.value, 0))
        yield attempts
        yield GaugeMetricFamily(
            "thread_client_outage", "1 while the exchange answers nobody (no work taken, probes only).",
            value=int(status.outage.active),
        )
        yield GaugeMetricFamily(
            "thread_client_paused", "1 while the daemon is paused from the control API (no key takes work).",
            value=int(status.paused),
        )
        yield CounterMetricFamily(
            "thread_client_stale_connections", "Kept connections the server had closed, replaced before or by a resend.",
            value=snapshot.stale_connections,
        )
        yield CounterMetricFamily(
            "thread_client_late_answers", "Sends that timed out and that the server showed later it had read.",
            value=snapshot.late_answers,
        )
        yield CounterMetricFamily(
            "thread_client_late_answer_caps", "Sends that timed out and showed nothing within the cap.",
            value=snapshot.late_answer_caps,
        )
        unmatched = CounterMetricFamily(
            "thread_client_unmatched_answers", "Answers no rule of the profile's answer table read, by status.",
            labels=["status"],
        )
        for code, count in sorted(snapshot.unmatched.items()):
            unmatched.add_metric([str(code)], count)
        yield unmatched

    def _keys(self, status: DaemonStatus) -> Iterator[Metric]:
        """Each key's condition, strikes, limiter and budget left; the host's bans; the leases taken."""
        condition = GaugeMetricFamily(
            "thread_client_key_state", "1 for the state each API key is in now, 0 for the others.", labels=["key", "state"]
        )
        strikes = CounterMetricFamily(
            "thread_client_strikes", "Rate-limit strikes (429s the limits did not explain) in this run.", labels=["key"]
        )
        window = GaugeMetricFamily("thread_client_limiter_window_seconds", "Slot reuse delay after an answer.", labels=["key"])
        order = GaugeMetricFamily(
            "thread_client_limiter_order_latency_seconds", "Order-rule latency between sends.", labels=["key"]
        )
        remaining = GaugeMetricFamily(
            "thread_client_limit_remaining", "Units of each limit rule a send on the key could spend now.",
            labels=["key", "rule"],
        )
        for key in status.keys:
            for state in KeyCondition:
                condition.add_metric([key.name, state.value], int(key.condition is state))
            strikes.add_metric([key.name], key.strikes)
            window.add_metric([key.name], key.window)
            order.add_metric([key.name], key.order_latency)
            for rule, units in key.remaining:
                remaining.add_metric([key.name, rule], units)
        yield from (condition, strikes, window, order, remaining)
        yield CounterMetricFamily("thread_client_bans", "Bans of the whole host (a 418) so far.", value=status.bans)
        takes = CounterMetricFamily(
            "thread_client_lease_takes", "Times this member took a key's lease (cluster mode): the key changed hands.",
            labels=["key"],
        )
        for key, count in sorted(status.lease_takes.items()):
            takes.add_metric([key], count)
        yield takes

    def _latencies(self, status: DaemonStatus) -> Iterator[Metric]:
        for name, (cumulative, count, total) in status.histograms.items():
            buckets = [(repr(bound), value) for bound, value in zip(LATENCY_BUCKETS, cumulative)]
            buckets.append(("+Inf", count))
            text = "End-to-end latency of accepted requests." if name == "end_to_end" else "HTTP round trip of attempts."
            yield HistogramMetricFamily(f"thread_client_{name}_latency_seconds", text, buckets=buckets, sum_value=total)


class _Quiet(WSGIRequestHandler):
    """Logs no scrape (one every few seconds would flood the log)."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class MetricsServer:
    """Serves ``/metrics`` on 127.0.0.1:``port`` (0 picks one), bound at once; its serving thread is made here
    and never started (``OwnsThreads``): the daemon supervises, starts and joins it as its own, so a death is
    logged and restarted, or stops the daemon, instead of leaving the port silent for the rest of the run."""

    def __init__(self, read_status: StatusReader, port: int, host: str = "127.0.0.1") -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(DaemonCollector(read_status))
        self._server = make_server(host, port, make_wsgi_app(registry), ThreadingWSGIServer, handler_class=_Quiet)
        self.port: int = self._server.server_port
        self._thread = LoopThread("metrics-server", partial(self._server.serve_forever, poll_interval=SHUTDOWN_POLL))

    def threads(self) -> Sequence[ManagedThread]:
        return [self._thread]

    def close(self) -> None:
        """Stop serving (the thread then ends) and close the port; returns at once if it is not serving."""
        if self._thread.is_alive():  # shutdown() waits for a serving loop: it would wait for ever without one
            self._server.shutdown()
        self._server.server_close()
