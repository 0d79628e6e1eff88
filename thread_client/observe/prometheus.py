"""Prometheus text exposition of the daemon's metrics, read at scrape time (nothing on the request path)."""

from __future__ import annotations

from typing import Iterator, Sequence
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

from ..threads import LoopThread, ManagedThread
from .status import StatusReader

__all__ = ["LATENCY_BUCKETS", "DaemonCollector", "MetricsServer"]

#: Bucket upper bounds in seconds: 10 ms steps where the latencies live, coarser beyond.
LATENCY_BUCKETS = (
    [0.001, 0.002, 0.005]
    + [ms / 1000 for ms in range(10, 200, 10)]
    + [ms / 1000 for ms in range(200, 1000, 50)]
    + [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0]
)


class DaemonCollector(Collector):
    """Builds every metric family from one status snapshot when Prometheus scrapes."""

    def __init__(self, read_status: StatusReader) -> None:
        self._read_status = read_status

    def collect(self) -> Iterator[Metric]:
        status = self._read_status(LATENCY_BUCKETS)
        counts, snapshot = status.counts, status.metrics
        for name, value, text in [
            ("created", counts.created, "Requests created by the producer."),
            ("accepted", counts.accepted, "Requests accepted by the exchange."),
            ("retried", snapshot.retried, "Failed attempts sent to the dead letter queue for a retry."),
            ("expired", snapshot.expired, "Attempts whose time-to-live passed before a rate-limit slot was free."),
            ("graveyard", counts.graveyard, "Requests buried in the graveyard (never to be accepted)."),
        ]:
            yield CounterMetricFamily(f"thread_client_{name}", text, value=value)

        answers = CounterMetricFamily(
            "thread_client_attempts", "Attempts by outcome and API key (masked).", labels=["key", "outcome"]
        )
        for key, outcomes in sorted(snapshot.per_key.items()):
            for outcome, value in sorted(outcomes.items()):
                answers.add_metric([key, outcome], value)
        yield answers

        queues = GaugeMetricFamily("thread_client_queue_size", "Requests waiting in a queue.", labels=["queue"])
        queues.add_metric(["main"], counts.main_queue)
        queues.add_metric(["dlq"], counts.dlq)
        yield queues
        yield GaugeMetricFamily("thread_client_in_flight", "Requests held by a thread.", value=counts.in_flight)
        yield GaugeMetricFamily(
            "thread_client_outage", "1 while the exchange answers nobody (no work taken, probes only).",
            value=int(status.outage.active),
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

        window = GaugeMetricFamily("thread_client_limiter_window_seconds", "Slot reuse delay after an answer.", labels=["key"])
        order = GaugeMetricFamily(
            "thread_client_limiter_order_latency_seconds", "Order-rule latency between sends.", labels=["key"]
        )
        retired = GaugeMetricFamily("thread_client_key_retired", "1 if the key is retired (blocked or invalid).", labels=["key"])
        for key in status.keys:
            window.add_metric([key.name], key.window)
            order.add_metric([key.name], key.order_latency)
            retired.add_metric([key.name], int(key.retired))
        yield window
        yield order
        yield retired
        yield GaugeMetricFamily(
            "thread_client_blocked_keys", "API keys retired so far.", value=sum(key.retired for key in status.keys)
        )

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
        self._thread = LoopThread("metrics-server", self._server.serve_forever)

    def threads(self) -> Sequence[ManagedThread]:
        return [self._thread]

    def close(self) -> None:
        """Stop serving (the thread then ends) and close the port; returns at once if it is not serving."""
        if self._thread.is_alive():  # shutdown() waits for a serving loop: it would wait for ever without one
            self._server.shutdown()
        self._server.server_close()
